"""The status wait of one submitted chat request.

A waiter reads ``GET /v2/generate/chat/status/{id}`` until the request is terminal. A Redis signal on
``horde:chat:signals`` wakes it early; without one it re-reads every ``signal_recheck_seconds``, so the front is correct
without Redis. Reference sections: "No eligible worker", "Completion without a generation", "Stream errors".

Every refusal raises :class:`chat.errors.OpenAIError`; the caller cancels the native request whenever it leaves
before :attr:`ChatWaiter.terminal` is true.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from chat import errors
from chat.errors import OpenAIError
from chat.horde_client import HordeRefusal, HordeUnreachable, NativeStatus

MAX_CONSECUTIVE_READ_FAILURES: Final[int] = 3
"""Status reads that may fail in a row (unreachable Horde, 5xx) before the wait ends with ``HordeUnavailable``."""

DECLARATION_GAP: Final[str] = "declaration_gap"
"""The ``impossible_reason.kind`` of a request no online worker's declarations can serve."""


def has_started(status: NativeStatus) -> bool:
    """Whether a worker processes or finished the request."""
    return status.processing > 0 or status.finished > 0 or bool(status.generations)


def is_terminal(status: NativeStatus) -> bool:
    """Whether the request needs no cancel: faulted, or done with a finished generation."""
    return status.faulted or (status.done and status.finished_generation is not None)


class ChatWaiter:
    """Waits for one native request.

    Args:
        runtime: The process's chat.runtime.FrontRuntime (Horde client, signals, settings).
        request_id: The native request id.
        apikey: The client's key, sent on every read.
        timeout_seconds: The request's budget (``nonstream_timeout_seconds`` or ``stream_timeout_seconds``).
        clock: ``time.monotonic``-like, injectable for tests.
    """

    def __init__(
        self,
        runtime: Any,
        request_id: str,
        apikey: str | None,
        *,
        timeout_seconds: float,
        clock=time.monotonic,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.request_id = request_id
        self.apikey = apikey
        self.clock = clock
        self.started_at = clock()
        self.deadline = self.started_at + timeout_seconds
        self.timeout_seconds = timeout_seconds
        self.terminal = False
        self.last_status: NativeStatus | None = None
        self.impossible_since: float | None = None
        self.wakes = 0
        self.woke_by: str | None = None
        self.cancelled_signal = False
        self._read_failures = 0
        self._signal_queue: asyncio.Queue[str] | None = None
        if runtime.signals is not None:
            self._signal_queue = runtime.signals.register(request_id)

    def close(self) -> None:
        """Stop listening for this request's signals."""
        if self._signal_queue is not None:
            self.runtime.signals.unregister(self.request_id)
            self._signal_queue = None

    @property
    def remaining_seconds(self) -> float:
        """Seconds left of the budget."""
        return max(0.0, self.deadline - self.clock())

    def timeout_error(self) -> OpenAIError:
        """408 ``ChatRequestTimeout``."""
        return OpenAIError(
            status=408,
            message=(
                f"No worker finished the request within {self.timeout_seconds:g} seconds. "
                "The request was cancelled."
            ),
            code=errors.CHAT_REQUEST_TIMEOUT,
            metadata={"request_id": self.request_id},
        )

    async def read(self) -> NativeStatus | None:
        """One status read; None for a failure that may pass. Raises OpenAIError for a refusal or repeated failure."""
        try:
            status = await self.runtime.horde.status(self.request_id, self.apikey)
        except HordeRefusal as refusal:
            if refusal.status >= 500:
                return self._failed_read(f"{refusal.status} {refusal.rc}")
            raise errors.error_from_refusal(refusal) from None
        except HordeUnreachable as exc:
            return self._failed_read(str(exc))
        self._read_failures = 0
        self.last_status = status
        self.terminal = is_terminal(status)
        return status

    def _failed_read(self, detail: str) -> None:
        self._read_failures += 1
        if self._read_failures >= MAX_CONSECUTIVE_READ_FAILURES:
            raise errors.horde_unavailable(detail)
        return None

    async def sleep_until_wake(self, seconds: float | None = None) -> None:
        """Sleep until a signal for this request arrives or ``seconds`` (default ``signal_recheck_seconds``) pass."""
        delay = self.settings.signal_recheck_seconds if seconds is None else seconds
        delay = max(0.0, min(delay, self.remaining_seconds))
        self.wakes += 1
        if self._signal_queue is None:
            await asyncio.sleep(delay)
            self.woke_by = "timer"
            return
        try:
            event = await asyncio.wait_for(self._signal_queue.get(), delay)
        except TimeoutError:
            self.woke_by = "timer"
            return
        self.woke_by = "signal"
        if event == "cancelled":
            self.cancelled_signal = True

    def check(self, status: NativeStatus) -> None:
        """Apply the rules that refuse a request on a status read (No eligible worker), raising OpenAIError."""
        reason = status.impossible_reason
        if not status.is_possible and not has_started(status):
            if isinstance(reason, dict) and reason.get("kind") == DECLARATION_GAP:
                raise declaration_gap_error(reason, self.request_id)
            now = self.clock()
            if self.impossible_since is None:
                self.impossible_since = now
            if now - self.impossible_since >= self.settings.fail_fast_grace_seconds:
                raise errors.no_eligible_worker(
                    "No online worker can serve this request now. The request was cancelled.",
                    metadata={
                        "request_id": self.request_id,
                        "retry_after": errors.NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS,
                    },
                )
        else:
            self.impossible_since = None
        if status.faulted:
            raise OpenAIError(
                status=502,
                message=f"The worker faulted the request ({status.fault_reason or 'no reason given'}).",
                code=errors.CHAT_REQUEST_FAULTED,
                metadata={"request_id": self.request_id, "fault_reason": status.fault_reason},
            )

    async def first_read(self) -> NativeStatus:
        """The first successful status read, checked (the streamed response's admission decision)."""
        while True:
            if self.remaining_seconds <= 0:
                raise self.timeout_error()
            status = await self.read()
            if status is not None:
                self.check(status)
                return status
            await self.sleep_until_wake()

    async def wait_done(self, status: NativeStatus | None = None) -> NativeStatus:
        """Wait until the request has a finished generation; return that status.

        A status that is done, not faulted and without a finished generation is unfinished while it still reports a
        job waiting or processing. Otherwise it is read again after ``signal_recheck_seconds``; when that recheck
        still shows it, or a cancelled signal came, the wait ends with 502 ``ChatRequestNoGeneration``.
        """
        no_generation_reads = 0
        while True:
            if status is not None:
                self.check(status)
                if status.done and status.finished_generation is not None:
                    return status
                if status.done and status.waiting == 0 and status.processing == 0:
                    no_generation_reads += 1
                    if no_generation_reads >= 2 or self.cancelled_signal:
                        raise OpenAIError(
                            status=502,
                            message="The Horde finished the request without a generation. The request was cancelled.",
                            code=errors.CHAT_REQUEST_NO_GENERATION,
                            metadata={"request_id": self.request_id},
                        )
                else:
                    no_generation_reads = 0
            if self.remaining_seconds <= 0:
                raise self.timeout_error()
            await self.sleep_until_wake()
            status = await self.read()


def declaration_gap_error(reason: dict[str, Any], request_id: str | None) -> OpenAIError:
    """404 ``no_worker_supports_features`` for a declaration gap (reference: Declaration gaps)."""
    missing = [str(item) for item in reason.get("missing_declarations") or []]
    exceeded = [str(item) for item in reason.get("exceeded_limits") or []]
    parts = []
    if missing:
        parts.append("no online worker serving the model declares " + ", ".join(missing))
    if exceeded:
        parts.append("the request exceeds the declared limit " + ", ".join(exceeded))
    message = "No worker can serve this request: " + "; ".join(parts or ["no online worker declares what it needs"])
    message += "."
    metadata = None
    if request_id is not None:
        message += " The request was cancelled."
        metadata = {"request_id": request_id}
    return OpenAIError(
        status=404, message=message, code=errors.NO_WORKER_SUPPORTS_FEATURES, param=None, metadata=metadata
    )
