"""Cancelling native requests the front abandons, with retries (reference: Cancel outcomes).

Nothing is left running for nobody: a client that disconnects, a timeout or a refusal after submit cancels the native
request (``DELETE /v2/generate/chat/status/{id}``). A cancel runs as its own task, so the cancelled view that asked
for it does not cancel the cancel.

Each attempt ends in one :data:`CancelOutcome`. Attempts ending in ``failed``, ``timed_out`` or ``not_started``
(:data:`RETRIED_OUTCOMES`) are retried every ``HORDE_OAI_CANCEL_RETRY_SECONDS`` and once more at shutdown
(:meth:`CancelQueue.aclose`). Retries stop 20 minutes after submit (``HORDE_CHAT_REQUEST_EXPIRY_SECONDS``), when the
Horde has forgotten the request anyway. At most :data:`MAX_FAILED_CANCELS` requests wait in the retry queue; the
oldest (by submit time) are dropped first. :attr:`CancelQueue.attempts` and :attr:`CancelQueue.outcome_counts` count
every attempt, retries and shutdown attempts included (``horde.oai.cancels``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from loguru import logger

from chat.horde.client_address import CLIENT_ADDRESS, serving_client
from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.horde.ports import HordeCanceller
from chat.limits import HORDE_CHAT_REQUEST_EXPIRY_SECONDS
from chat.metrics import front_metrics

MAX_FAILED_CANCELS: Final[int] = 1000
"""The most requests whose cancel is waiting for a retry; beyond it the oldest are dropped (Cancel outcomes)."""

CancelOutcome = Literal["cancelled", "not_found", "failed", "timed_out", "not_started"]
"""The outcome of one cancel attempt: ``cancelled`` (the Horde answered with the status), ``not_found`` (404: the
request expired or never existed), ``failed`` (unreachable Horde or another refusal), ``timed_out`` (no answer
within the attempt timeout), ``not_started`` (the attempt was interrupted before an answer, such as by shutdown)."""

RETRIED_OUTCOMES: Final[frozenset[str]] = frozenset({"failed", "timed_out", "not_started"})
"""The outcomes whose request goes to the retry queue (reference: Cancel outcomes)."""


@dataclass
class PendingCancel:
    """A request to cancel.

    Attributes:
        request_id: The native request id.
        apikey: The client's key (a cancel needs the submitting key).
        submitted_at: The submit time on the queue's clock (Unix seconds by default).
        due_at: When the next retry is due, on the same clock.
        client_address: The client's address, by default the one being served when the cancel was asked for.
    """

    request_id: str
    apikey: str | None
    submitted_at: float
    due_at: float = 0.0
    client_address: str | None = field(default_factory=CLIENT_ADDRESS.get)
    """The address of the client whose request it was (chat.horde.client_address), sent as ``Proxied-For`` by every
    attempt, retries included."""


class CancelQueue:
    """Cancels abandoned native requests and retries failed cancels.

    Args:
        horde: The native client (``cancel(request_id, apikey)``, chat.horde.native.HordeClient).
        retry_seconds: The retry interval (``HORDE_OAI_CANCEL_RETRY_SECONDS``).
        attempt_timeout: Seconds one attempt may take before it counts as ``timed_out``.
        max_failed: The retry queue's bound (:data:`MAX_FAILED_CANCELS`).
        clock: ``time.time``-like seconds; injectable for tests.
        sleep: ``asyncio.sleep``-like; injectable for tests.
        expiry_seconds: Seconds after submit when retries stop (``HORDE_CHAT_REQUEST_EXPIRY_SECONDS``).
    """

    def __init__(  # noqa: PLR0913, PLR0917 - the Horde and its two timings, then the limits and test seams, each defaulted
        self,
        horde: HordeCanceller,
        retry_seconds: float,
        attempt_timeout: float,
        max_failed: int = MAX_FAILED_CANCELS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        expiry_seconds: float = HORDE_CHAT_REQUEST_EXPIRY_SECONDS,
    ) -> None:
        self.horde = horde
        self.retry_seconds = retry_seconds
        self.attempt_timeout = attempt_timeout
        self.max_failed = max_failed
        self.clock = clock
        self._sleep = sleep
        self.expiry_seconds = expiry_seconds
        self.pending: OrderedDict[str, PendingCancel] = OrderedDict()
        """The retry queue, by request id."""
        self.attempts = 0
        """Every cancel attempt made, retries and shutdown attempts included."""
        self.outcome_counts: Counter[str] = Counter()
        """Attempts by outcome."""
        self.dropped = 0
        """Requests dropped from the retry queue by its bound."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retry_task: asyncio.Task[None] | None = None
        self._closing = False

    def is_expired(self, entry: PendingCancel, now: float | None = None) -> bool:
        """Whether retries for ``entry`` have stopped: ``expiry_seconds`` or more after its submit."""
        return (self.clock() if now is None else now) - entry.submitted_at >= self.expiry_seconds

    def cancel_soon(self, request_id: str, apikey: str | None, submitted_at: float) -> asyncio.Task[CancelOutcome]:
        """Start cancelling ``request_id`` in its own task and return it (the caller need not await it)."""
        task = asyncio.get_running_loop().create_task(
            self.attempt(PendingCancel(request_id, apikey, submitted_at)), name=f"cancel {request_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def attempt(self, entry: PendingCancel) -> CancelOutcome:
        """Make one cancel attempt and return its outcome; a retried outcome puts ``entry`` in the retry queue."""
        self.attempts += 1
        outcome: CancelOutcome
        try:
            with serving_client(entry.client_address):
                await asyncio.wait_for(self.horde.cancel(entry.request_id, entry.apikey), self.attempt_timeout)
            outcome = "cancelled"
        except TimeoutError:
            outcome = "timed_out"
        except HordeRefusal as refusal:
            outcome = "not_found" if refusal.status == 404 else "failed"
        except HordeUnreachable:
            outcome = "failed"
        except asyncio.CancelledError:
            self._record(entry, "not_started")
            raise
        except Exception:  # noqa: BLE001 - a background cancel must never die silently
            logger.opt(exception=True).warning("Cancel of chat request {} raised", entry.request_id)
            outcome = "failed"
        self._record(entry, outcome)
        return outcome

    def _record(self, entry: PendingCancel, outcome: CancelOutcome) -> None:
        self.outcome_counts[outcome] += 1
        front_metrics().cancels.add(1, {"horde.outcome": outcome})
        logger.info("Cancel of chat request {} ended: {}", entry.request_id, outcome)
        if outcome in RETRIED_OUTCOMES:
            self._remember(entry)
        else:
            self.pending.pop(entry.request_id, None)

    def _remember(self, entry: PendingCancel) -> None:
        now = self.clock()
        if self.is_expired(entry, now):
            self.pending.pop(entry.request_id, None)
            return
        entry.due_at = now + self.retry_seconds
        self.pending[entry.request_id] = entry
        while len(self.pending) > self.max_failed:
            oldest = min(self.pending.values(), key=lambda pending: pending.submitted_at)
            del self.pending[oldest.request_id]
            self.dropped += 1
            logger.warning("Cancel retry queue full: dropped chat request {}", oldest.request_id)
        self._ensure_retry_loop()

    def _ensure_retry_loop(self) -> None:
        if self._closing or (self._retry_task is not None and not self._retry_task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._retry_task = loop.create_task(self._retry_loop(), name="cancel retries")

    async def _retry_loop(self) -> None:
        while self.pending and not self._closing:
            next_due = min(entry.due_at for entry in self.pending.values())
            await self._sleep(max(0.0, next_due - self.clock()))
            if not self._closing:  # aclose() may have begun during the sleep
                await self.retry_due()

    async def retry_due(self, *, everything: bool = False) -> list[CancelOutcome]:
        """Retry each pending cancel whose retry is due (every one with ``everything``), once; return the outcomes.

        Entries past the request expiry are dropped without an attempt.
        """
        now = self.clock()
        due = []
        for request_id, entry in list(self.pending.items()):
            if self.is_expired(entry, now):
                del self.pending[request_id]
            elif everything or entry.due_at <= now:
                del self.pending[request_id]
                due.append(entry)
        if not due:
            return []
        return list(await asyncio.gather(*(self.attempt(entry) for entry in due)))

    async def aclose(self) -> None:
        """At shutdown: let running attempts finish, retry every pending cancel once more, stop retrying."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._closing = True
        if self._retry_task is not None and not self._retry_task.done():
            self._retry_task.cancel()
            await asyncio.gather(self._retry_task, return_exceptions=True)
        if self.pending:
            await self.retry_due(everything=True)
