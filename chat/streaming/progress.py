"""What a stream sends when it has had nothing to send for a keepalive interval: a comment or a progress chunk.

The rule (issues 25 and 26), decided at each keepalive tick (``HORDE_OAI_KEEPALIVE_SECONDS`` without an event):

- ``horde.progress: false``: ``: keepalive``, as before (the reference's event order, nothing else).
- Otherwise, when no data event went out for ``HORDE_OAI_PROGRESS_CHUNK_SECONDS`` (60 s; 0 turns this off), or, with
  ``horde.progress: true``, when the place changed since the last progress chunk: a progress chunk
  (chat.rendering.progress.progress_chunk: ``choices: []`` and ``x_horde.queue``), which clients skip as they skip
  the usage chunk, and which clients with a chunk timeout (LangChain's ``astream``, 120 s) count as a chunk.
- Else the comment of the waiter's last read (``: queue position 3, estimated wait 12 s``, ``: processing``), or
  ``: keepalive`` before any read. A comment replaces a keepalive comment one for one: a client that ignores
  ``: keepalive`` ignores it too.

A stream that starts within the chunk time (and without ``horde.progress: true``) therefore sends exactly the
reference's chunks. chat.rendering.responses_events turns a progress chunk into a repeated ``response.in_progress``.
"""

from __future__ import annotations

from typing import Any

from chat.protocol.legacy_completion import CompletionRequest
from chat.rendering.completion import completion_id
from chat.rendering.progress import WAITING, QueueProgress, progress_chunk
from chat.rendering.sse import KEEPALIVE_COMMENT, data_event
from chat.waiting.waiter import ChatWaiter


class StreamProgress:
    """The keepalive frames of one stream (see the module docstring).

    Args:
        request: The validated request (``progress_option``; a legacy ``CompletionRequest`` gets ``text_completion``
            progress chunks, any other request ``chat.completion.chunk`` ones).
        waiter: The request's waiter; its :attr:`~chat.waiting.waiter.ChatWaiter.progress` is the last read's place.
        created: The chunks' ``created``.
        now: The stream's clock at its start (the event loop's ``time``), the start of the first chunk time.
    """

    def __init__(self, request: Any, waiter: ChatWaiter, created: int, now: float) -> None:
        self.option: bool | None = getattr(request, "progress_option", None)
        self.waiter = waiter
        self.created = created
        self.chunk_after = waiter.settings.progress_chunk_seconds
        self.last_data_at = now
        self.chunked: QueueProgress | None = None
        """The place the last progress chunk carried."""
        self.chunks_sent = 0
        if isinstance(request, CompletionRequest):
            self.object_type = "text_completion"
            self.chunk_id = f"cmpl-{waiter.request_id}"
        else:
            self.object_type = "chat.completion.chunk"
            self.chunk_id = completion_id(waiter.request_id)
        models = getattr(request, "requested_models", None) or [""]
        self.model = str(models[0])

    def sent_data(self, now: float) -> None:
        """A data event went out at ``now``: the chunk time starts again."""
        self.last_data_at = now

    def keepalive(self, now: float) -> bytes:
        """The frame of a keepalive tick at ``now``: a progress chunk, a progress comment or ``: keepalive``."""
        progress = self.waiter.progress
        if self.option is False:
            return KEEPALIVE_COMMENT
        long_quiet = self.chunk_after > 0 and now - self.last_data_at >= self.chunk_after
        changed = self.option is True and progress is not None and progress != self.chunked
        if long_quiet or changed:
            shown = progress if progress is not None else QueueProgress(WAITING, 0, 0, 0, 0)
            self.chunked = shown
            self.chunks_sent += 1
            self.last_data_at = now
            return data_event(
                progress_chunk(
                    shown, object_type=self.object_type, chunk_id=self.chunk_id, created=self.created, model=self.model
                )
            )
        return KEEPALIVE_COMMENT if progress is None else progress.comment()
