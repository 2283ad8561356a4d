"""Cancelling native requests the front abandons, with retries (reference: Cancel outcomes).

Nothing is lost: a client that disconnects, a timeout or a refusal after submit cancels the native request. A cancel
runs as its own task, so the cancelled view that asked for it does not cancel the cancel. Attempts ending in
``failed``, ``timed_out`` or ``not_started`` are retried every ``HORDE_OAI_CANCEL_RETRY_SECONDS`` and once more at
shutdown, until 20 minutes after submit (``HORDE_CHAT_REQUEST_EXPIRY_SECONDS``); at most ``MAX_FAILED_CANCELS``
requests wait in the retry queue, the oldest dropped first.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Literal

from loguru import logger

from chat.horde_client import HordeClient, HordeRefusal, HordeUnreachable
from chat.limits import HORDE_CHAT_REQUEST_EXPIRY_SECONDS

MAX_FAILED_CANCELS: Final[int] = 1000
"""The most requests whose cancel failed that wait for a retry; the oldest are dropped first."""

CancelOutcome = Literal["cancelled", "not_found", "failed", "timed_out", "not_started"]
"""The outcome of one cancel attempt; the last three are retried."""

RETRIED_OUTCOMES: Final[frozenset[str]] = frozenset({"failed", "timed_out", "not_started"})


@dataclass
class PendingCancel:
    """A request whose cancel is to be retried."""

    request_id: str
    apikey: str | None
    submitted_at: float


class CancelQueue:
    """Cancels abandoned native requests and retries failed cancels.

    Args:
        horde: The native client.
        retry_seconds: The retry interval (``HORDE_OAI_CANCEL_RETRY_SECONDS``).
        attempt_timeout: Seconds one attempt may take before it counts as ``timed_out``.
        max_failed: The retry queue's bound (:data:`MAX_FAILED_CANCELS`).
        clock: ``time.time``-like; injectable for tests.
    """

    def __init__(
        self,
        horde: HordeClient,
        retry_seconds: float,
        attempt_timeout: float,
        max_failed: int = MAX_FAILED_CANCELS,
        clock=time.time,
    ) -> None:
        self.horde = horde
        self.retry_seconds = retry_seconds
        self.attempt_timeout = attempt_timeout
        self.max_failed = max_failed
        self.clock = clock
        self.pending: OrderedDict[str, PendingCancel] = OrderedDict()
        self.outcomes: list[tuple[str, CancelOutcome]] = []
        self._tasks: set[asyncio.Task[CancelOutcome]] = set()
        self._retry_task: asyncio.Task[None] | None = None
        self._closing = False

    def cancel_soon(self, request_id: str, apikey: str | None, submitted_at: float) -> asyncio.Task[CancelOutcome]:
        """Start cancelling ``request_id`` in its own task and return it (the caller need not await it)."""
        task = asyncio.get_running_loop().create_task(
            self._attempt(PendingCancel(request_id, apikey, submitted_at)), name=f"cancel {request_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _attempt(self, entry: PendingCancel) -> CancelOutcome:
        outcome: CancelOutcome
        if self.clock() - entry.submitted_at >= HORDE_CHAT_REQUEST_EXPIRY_SECONDS:
            self.pending.pop(entry.request_id, None)
            return "not_found"
        try:
            await asyncio.wait_for(self.horde.cancel(entry.request_id, entry.apikey), self.attempt_timeout)
            outcome = "cancelled"
        except TimeoutError:
            outcome = "timed_out"
        except HordeRefusal as refusal:
            outcome = "not_found" if refusal.status == 404 else "failed"
        except HordeUnreachable:
            outcome = "failed"
        except asyncio.CancelledError:
            self._remember(entry)
            raise
        self.outcomes.append((entry.request_id, outcome))
        logger.info("Cancel of chat request {} ended: {}", entry.request_id, outcome)
        if outcome in RETRIED_OUTCOMES:
            self._remember(entry)
        else:
            self.pending.pop(entry.request_id, None)
        return outcome

    def _remember(self, entry: PendingCancel) -> None:
        self.pending[entry.request_id] = entry
        self.pending.move_to_end(entry.request_id)
        while len(self.pending) > self.max_failed:
            self.pending.popitem(last=False)
        if not self._closing and (self._retry_task is None or self._retry_task.done()):
            self._retry_task = asyncio.get_running_loop().create_task(self._retry_loop(), name="cancel retries")

    async def _retry_loop(self) -> None:
        while self.pending and not self._closing:
            await asyncio.sleep(self.retry_seconds)
            await self.retry_pending()

    async def retry_pending(self) -> None:
        """Retry every pending cancel once (entries past the request expiry are dropped)."""
        entries = list(self.pending.values())
        self.pending.clear()
        await asyncio.gather(*(self._attempt(entry) for entry in entries))

    async def aclose(self) -> None:
        """At shutdown: let running attempts finish, retry the pending ones once more, stop retrying."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._closing = True
        if self._retry_task is not None:
            self._retry_task.cancel()
        if self.pending:
            await self.retry_pending()
