"""What a waiting request's status says of its place at the Horde, in each form a client can see (issues 25, 26).

A native status read carries ``queue_position``, ``wait_time`` (seconds), ``waiting`` and ``processing``
(native-horde-chat.md "Status"). :class:`QueueProgress` keeps those of one read; the forms below render it, no I/O:

- :meth:`QueueProgress.comment`: the SSE comment a waiting stream sends instead of ``: keepalive``:
  ``: queue position 3, estimated wait 12 s``, ``: estimated wait 12 s`` (no position yet), ``: waiting for a
  worker`` (neither yet: the Horde refreshes them about every 2 seconds), ``: processing`` (a worker took it), with
  ``, no online worker can serve it now`` while the status says ``is_possible: false``;
- :meth:`QueueProgress.x_horde`: ``{"queue": {"state", "queue_position", "wait_time", "waiting", "processing",
  "is_possible"}}``,
  the ``x_horde`` of a progress chunk and of a Responses ``response.in_progress`` event;
- :func:`progress_chunk`: a chunk with ``choices: []`` (like the usage chunk, which clients skip) carrying that
  ``x_horde``: ``chat.completion.chunk`` for chat completions, ``text_completion`` for legacy completions;
- :meth:`QueueProgress.headers`: ``x-horde-queue-position`` and ``x-horde-wait-time`` of a response (none before
  the Horde has placed the request; chat.errors names them and lists them in ``Access-Control-Expose-Headers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from chat.errors import QUEUE_POSITION_HEADER, WAIT_TIME_HEADER
from chat.horde.native import NativeStatus

WAITING: Final[str] = "waiting"
"""``x_horde.queue.state`` of a request no worker has taken yet."""

PROCESSING: Final[str] = "processing"
"""``x_horde.queue.state`` of a request a worker is generating (or has finished)."""


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """The place of a request at one status read."""

    state: str
    """:data:`WAITING` or :data:`PROCESSING`."""
    queue_position: int
    wait_time: int
    """Seconds, the Horde's estimate."""
    waiting: int
    processing: int
    is_possible: bool = True
    """False while no online worker can serve the request (the front waits ``HORDE_OAI_FAIL_FAST_GRACE_SECONDS`` for
    one, then refuses it with ``no_eligible_worker``)."""

    @classmethod
    def of(cls, status: NativeStatus) -> QueueProgress:
        """The progress a status read reports; :data:`PROCESSING` once a worker took a job or finished one."""
        started = status.processing > 0 or status.finished > 0 or bool(status.generations)
        return cls(
            state=PROCESSING if started else WAITING,
            queue_position=max(0, status.queue_position),
            wait_time=max(0, status.wait_time),
            waiting=status.waiting,
            processing=status.processing,
            is_possible=started or status.is_possible,
        )

    @property
    def text(self) -> str:
        """``queue position 3, estimated wait 12 s``, ``estimated wait 12 s``, ``queue position 3``, ``waiting for
        a worker`` or ``processing``.
        """
        if self.state == PROCESSING:
            return "processing"
        parts = []
        if self.queue_position > 0:
            parts.append(f"queue position {self.queue_position}")
        if self.wait_time > 0:
            parts.append(f"estimated wait {self.wait_time} s")
        text = ", ".join(parts) or "waiting for a worker"
        return text if self.is_possible else f"{text}, no online worker can serve it now"

    def comment(self) -> bytes:
        """The SSE comment of :attr:`text` (``: <text>`` and the blank line that ends it)."""
        return b": " + self.text.encode() + b"\n\n"

    def x_horde(self) -> dict[str, Any]:
        """``{"queue": {"state", "queue_position", "wait_time", "waiting", "processing", "is_possible"}}``."""
        return {
            "queue": {
                "state": self.state,
                "queue_position": self.queue_position,
                "wait_time": self.wait_time,
                "waiting": self.waiting,
                "processing": self.processing,
                "is_possible": self.is_possible,
            }
        }

    @property
    def placed(self) -> bool:
        """Whether the read says anything of the place: a position or a wait, or a worker took the request (a newly
        submitted request reads 0 and 0 until the Horde refreshes its cached positions, about every 2 seconds).
        """
        return self.state == PROCESSING or self.queue_position > 0 or self.wait_time > 0

    def headers(self) -> dict[str, str]:
        """``x-horde-queue-position`` and ``x-horde-wait-time``, as decimal strings; none when not :attr:`placed`."""
        if not self.placed:
            return {}
        return {QUEUE_POSITION_HEADER: str(self.queue_position), WAIT_TIME_HEADER: str(self.wait_time)}


def progress_chunk(
    progress: QueueProgress, *, object_type: str, chunk_id: str, created: int, model: str
) -> dict[str, Any]:
    """A chunk without a choice that carries the progress: ``{"id", "object", "created", "model",
    "system_fingerprint": null, "choices": [], "x_horde": {"queue": ...}}`` (``object_type`` is
    ``chat.completion.chunk`` or ``text_completion``; ``system_fingerprint`` only for chat chunks).
    """
    chunk: dict[str, Any] = {"id": chunk_id, "object": object_type, "created": created, "model": model}
    if object_type == "chat.completion.chunk":
        chunk["system_fingerprint"] = None
    chunk["choices"] = []
    chunk["x_horde"] = progress.x_horde()
    return chunk


def is_progress_chunk(payload: Any) -> bool:
    """Whether a decoded ``data:`` payload is a :func:`progress_chunk` (no choice, no usage, ``x_horde.queue``)."""
    if not isinstance(payload, dict) or payload.get("choices") != [] or payload.get("usage") is not None:
        return False
    x_horde = payload.get("x_horde")
    return isinstance(x_horde, dict) and isinstance(x_horde.get("queue"), dict)
