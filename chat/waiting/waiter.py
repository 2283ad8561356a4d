"""The status wait of one submitted chat request (the refusals it raises are chat.waiting.availability's builders).

A waiter reads ``GET /v2/generate/chat/status/{id}`` until the request is terminal. A Redis signal on
``horde:chat:signals`` wakes it early; without one it re-reads on its own timer, so the front is correct without Redis.
When it reads next is chat.waiting.read_schedule's (the whole sleep policy: the backoff timer with a subscribed signal
listener, the queue's schedule and the process's read budget without one, for routes that publish no signals such as
the text API's too); the waiter asks it after each read (:meth:`ChatWaiter.recheck_delay`,
:meth:`ChatWaiter.note_wake`). The reference's timed rules keep their own times whatever the schedule: the positioned
re-reads of ``fail_fast`` every ``signal_recheck_seconds`` for :data:`POSITIONED_READ_WAIT_SECONDS`, the read when the
grace ends, and the full ``signal_recheck_seconds`` recheck of a completion without a generation.
Reference sections: "No eligible worker" (Model availability, Declaration gaps, Size limit gaps, Native admission
refusals), "Fail-fast admission", "Queue position refresh", "Stream errors", "Completion without a
generation" and the statuses of "Error attributes".

Every refusal raises :class:`chat.errors.OpenAIError`; the caller cancels the native request whenever it leaves
before :attr:`ChatWaiter.terminal` is true (chat.serving.service, chat.horde.cancels).

The rules, by status read:

- A status with an ``impossible_reason`` of kind ``declaration_gap`` (``horde_sdk``'s ``ChatServiceGapKind``) and
  no processing or finished generation refuses at once: 400 ``no_worker_supports_limit`` when the gap is only
  ``max_length`` / ``max_context_length`` (:func:`is_size_limit_gap`), else 404 ``no_worker_supports_features``
  (:func:`service_gap_error`). Another kind is ignored, so the grace below applies (``stream-errors.4``).
- ``is_possible: false`` without a processing or finished generation starts the grace: when a read
  ``fail_fast_grace_seconds`` later still shows it, 503 ``no_eligible_worker`` with ``Retry-After: 30``
  (``model-availability.8``).
- Under ``horde.availability_mode: "fail_fast"`` the first successful read of a request without a processing or
  finished generation decides admission (:meth:`ChatWaiter.first_read`, :func:`queue_refusal_reason`): zero
  eligible worker threads refuse at once, else the first status with queue information (re-read for at most
  :data:`POSITIONED_READ_WAIT_SECONDS`) is compared with the remaining budget; 503 ``queue_unavailable``.
- A faulted status is 502 ``ChatRequestFaulted``; the budget running out is 408 ``ChatRequestTimeout``; reads that
  keep failing (unreachable Horde, 5xx) are 502 ``HordeUnavailable``; a request done without a generation is 502
  ``ChatRequestNoGeneration`` (:meth:`ChatWaiter.wait_done`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final

from loguru import logger

from chat import errors
from chat.errors import OpenAIError
from chat.horde import refusals
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus
from chat.horde.ports import HordeApi, WaitedRequest, WaiterRuntime
from chat.rendering.progress import WAITING, QueueProgress
from chat.waiting.availability import (
    CANCELLED_SENTENCE,
    NO_ELIGIBLE_THREADS,
    faulted_error,
    grace_error,
    no_generation_error,
    queue_refusal_reason,
    queue_unavailable_error,
    service_gap_error_from_horde,
)
from chat.waiting.read_schedule import ReadBudget, ReadSchedule
from chat.waiting.status import (
    declaration_gap,
    has_queue_information,
    has_started,
    is_done_without_generation,
    is_terminal,
)

MAX_CONSECUTIVE_READ_FAILURES: Final[int] = 3
"""Status reads that may fail in a row (unreachable Horde, 5xx) before the wait ends with ``HordeUnavailable``."""

POSITIONED_READ_WAIT_SECONDS: Final[float] = 2.0
"""How long after the first status read a ``fail_fast`` request re-reads for a status with queue information
(reference: Queue position refresh); the Horde refreshes cached queue positions about every 2 seconds."""

FAIL_FAST: Final[str] = "fail_fast"
"""The ``horde.availability_mode`` that refuses at the first read instead of queueing."""

CHAT_QUEUE: Final[str] = "chat"
"""The queue a request waits in when its routes name none (``status_queue``; chat.horde.text.TextRoutes: ``text``):
the native chat queue (chat.waiting.read_schedule.QueueAdvance)."""

CANCELLED_SIGNAL: Final[str] = "cancelled"
"""The signal event of a request cancelled at the Horde (native contract, Signals)."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


# --- status predicates ------------------------------------------------------------------------------------------


class ChatWaiter:
    """Waits for one native request.

    Args:
        runtime: The process's chat.serving.runtime.FrontRuntime, or any :class:`chat.horde.ports.WaiterRuntime`
        (``horde``,
            ``signals``, ``settings``).
        request_id: The native request id.
        apikey: The client's key, sent on every read.
        timeout_seconds: The request's budget (``nonstream_timeout_seconds`` or ``stream_timeout_seconds``).
        request: The validated ``ChatCompletionRequest`` (``horde.availability_mode``, the requested models for the
            gap messages); None acts as a ``model`` request in ``wait`` mode.
        clock: ``time.monotonic``-like seconds, injectable for tests.
        sleep: ``asyncio.sleep``-like, injectable for tests (with ``clock``, time never passes for real).
        horde: The routes the status is read from (``status``, ``text_models``); default ``runtime.horde``, the
            native chat route. The text API path passes chat.horde.text's ``TextRoutes``, which publishes no signals
            (``publishes_signals`` false: the waiter does not register and never backs off).
    """

    def __init__(  # noqa: PLR0913 - keyword-only: the budget, the request, the routes and the test seams (clock, sleep)
        self,
        runtime: WaiterRuntime,
        request_id: str,
        apikey: str | None,
        *,
        timeout_seconds: float,
        request: WaitedRequest | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        horde: HordeApi | None = None,
    ) -> None:
        self.runtime = runtime
        self.horde = runtime.horde if horde is None else horde
        self.settings = runtime.settings
        self.request_id = request_id
        self.apikey = apikey
        self.clock = clock
        self._sleep = sleep
        self.started_at = clock()
        self.deadline = self.started_at + timeout_seconds
        self.timeout_seconds = timeout_seconds
        self.requested_models: list[str] = list(request.requested_models) if request is not None else []
        self.listed_models = request is not None and request.models is not None
        self.availability_mode: str = request.availability_mode if request is not None else "wait"
        self.terminal = False
        self.first_status: NativeStatus | None = None
        """The first successful status read (the finished log line's ``first_read_*``)."""
        self.last_status: NativeStatus | None = None
        self.impossible_since: float | None = None
        self.wakes = 0
        self.woke_by: str | None = None
        self.woke_at: float | None = None
        """Unix seconds of the last wake (the finished log line's ``woke_at``)."""
        self.started_seen_at: float | None = None
        """Unix seconds of the first read with a processing or finished generation (``horde.oai.request.queue_wait``).
        """
        self.progress: QueueProgress | None = None
        """The place the last successful read reported (chat.rendering.progress; the streams' progress comments)."""
        self.queued_progress: QueueProgress | None = None
        """The place the last read before a worker took the request reported (the ``x-horde-*`` headers)."""
        self.cancelled_signal = False
        self.done_without_generation_reads = 0
        self._read_failures = 0
        self._read_began: float | None = None
        # The process's read budget (chat.serving.runtime.FrontRuntime.read_budget); a runtime without one (a test's)
        # gives each waiter its own.
        budget = getattr(runtime, "read_budget", None)
        self.reads = ReadSchedule(
            self.settings,
            budget or ReadBudget(self.settings.signal_recheck_reads_per_second),
            clock,
            queue=getattr(self.horde, "status_queue", CHAT_QUEUE),
        )
        """When the next read comes (chat.waiting.read_schedule)."""
        self._signal_queue: asyncio.Queue[str] | None = None
        # Only routes that publish signals register (not the text API's, chat.horde.text.TextRoutes): a waiter with
        # no signals to wait for re-reads every signal_recheck_seconds instead of backing off.
        if runtime.signals is not None and getattr(self.horde, "publishes_signals", True):
            self._signal_queue = runtime.signals.register(request_id)

    def close(self) -> None:
        """Stop listening for this request's signals and leave the process's read budget."""
        self.reads.close()
        if self._signal_queue is not None and self.runtime.signals is not None:
            self.runtime.signals.unregister(self.request_id)
            self._signal_queue = None

    @property
    def remaining_seconds(self) -> float:
        """Seconds left of the budget."""
        return max(0.0, self.deadline - self.clock())

    def timeout_error(self) -> OpenAIError:
        """408 ``ChatRequestTimeout`` with ``x-should-retry: false``: the request already waited its whole budget, and
        a silent SDK retry (two by default) would triple the client's wait.
        """
        return errors.failure(
            errors.CHAT_REQUEST_TIMEOUT,
            f"No worker finished the request within {self.timeout_seconds:g} seconds." + CANCELLED_SENTENCE,
            metadata={"request_id": self.request_id},
        )

    # --- reads and sleeps ----------------------------------------------------------------------------------------

    async def read(self) -> NativeStatus | None:
        """One status read; None for a failure that may pass (a 429 is waited out for its ``Retry-After``).

        Raises OpenAIError for a refusal (such as 404 ``RequestNotFound`` or 401 ``InvalidAPIKey``, with the request's
        id as ``metadata.request_id``) or after :data:`MAX_CONSECUTIVE_READ_FAILURES` failures in a row (502
        ``HordeUnavailable``).
        """
        began = self.clock()
        try:
            status = await self.horde.status(self.request_id, self.apikey)
        except HordeRefusal as refusal:
            if refusal.status >= 500:
                detail = f"HTTP {refusal.status} {refusal.rc or 'without an error code'}: {refusal.message}"
                self._failed_read(detail, reached=True)
                return None
            if refusal.status == 429:
                # A rate-limited poll says nothing about the request: wait out its Retry-After (within the budget)
                # and read again; the request's own timeout bounds this.
                retry_after = refusals.error_from_refusal(refusal).retry_after or 0
                await self._sleep(min(float(retry_after), self.remaining_seconds))
                return None
            error = refusals.error_from_refusal(refusal)
            error.metadata = {**(error.metadata or {}), "request_id": self.request_id}
            raise error from None
        except HordeUnreachable as exc:
            self._failed_read(exc.detail, reached=exc.reached)
            return None
        self._read_failures = 0
        self._read_began = began
        self.last_status = status
        self._note_progress(status)
        if self.started_seen_at is None and has_started(status):
            self.started_seen_at = time.time()
        if self.first_status is None:
            self.first_status = status
        self.terminal = is_terminal(status)
        return status

    def _note_progress(self, status: NativeStatus) -> None:
        """Keep the read's place (:attr:`progress`, :attr:`queued_progress`); log it at DEBUG when it changed."""
        progress = QueueProgress.of(status)
        if progress.state == WAITING:
            self.queued_progress = progress
        if progress != self.progress:
            self.progress = progress
            logger.debug(
                "Chat request {} queue progress: {} (queue_position={} wait_time={} waiting={} processing={})",
                self.request_id,
                progress.text,
                progress.queue_position,
                progress.wait_time,
                progress.waiting,
                progress.processing,
            )

    def _failed_read(self, detail: str, *, reached: bool) -> None:
        self._read_failures += 1
        if self._read_failures >= MAX_CONSECUTIVE_READ_FAILURES:
            # The caller cancels the request when the wait ends here (chat.serving.service).
            raise errors.horde_unavailable(detail, reached=reached, request_id=self.request_id)

    async def _next_signal(self, seconds: float) -> str | None:
        """Wait up to ``seconds`` for this request's next signal; return its event, or None when the time passed."""
        queue = self._signal_queue
        if queue is not None and not queue.empty():
            return queue.get_nowait()
        if queue is None or seconds <= 0:
            await self._sleep(max(0.0, seconds))
            return None
        getter = asyncio.ensure_future(queue.get())
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({getter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        return None

    async def sleep_until_wake(self, seconds: float | None = None) -> None:
        """Sleep until a signal for this request arrives or ``seconds`` (default ``signal_recheck_seconds``) pass,
        never past the budget. A ``cancelled`` signal sets :attr:`cancelled_signal`.
        """
        delay = self.settings.signal_recheck_seconds if seconds is None else seconds
        delay = max(0.0, min(delay, self.remaining_seconds))
        self.wakes += 1
        event = await self._next_signal(delay)
        self.woke_at = time.time()
        if event is None:
            self.woke_by = "timer"
            return
        self.woke_by = "signal"
        if event == CANCELLED_SIGNAL:
            self.cancelled_signal = True

    async def sleep_full(self, seconds: float) -> None:
        """Sleep the whole ``seconds`` (never past the budget) whatever signals arrive, ending early only for a
        ``cancelled`` signal (reference: Completion without a generation: the recheck comes after
        ``signal_recheck_seconds``).
        """
        end = self.clock() + max(0.0, min(seconds, self.remaining_seconds))
        self.wakes += 1
        self.woke_by = "timer"
        while (left := end - self.clock()) > 0:
            event = await self._next_signal(left)
            if event == CANCELLED_SIGNAL:
                self.cancelled_signal = True
                self.woke_by = "signal"
                self.woke_at = time.time()
                return
        self.woke_at = time.time()

    @property
    def signals_subscribed(self) -> bool:
        """Whether this waiter listens for signals and the process's signal listener is subscribed now."""
        return self._signal_queue is not None and bool(getattr(self.runtime.signals, "subscribed", False))

    def recheck_delay(self, *, backoff: bool = True) -> float:
        """Seconds until the next timer re-read (chat.waiting.read_schedule.ReadSchedule.recheck_delay), shortened so
        a read comes when the grace ends. ``backoff`` false: ``signal_recheck_seconds`` (the positioned re-reads of
        "Queue position refresh").
        """
        grace_left: float | None = None
        if self.impossible_since is not None:
            grace_left = max(0.0, self.impossible_since + self.settings.fail_fast_grace_seconds - self.clock())
        status = self.last_status if self._read_failures == 0 else None
        began = self._read_began if status is not None else None
        return self.reads.recheck_delay(
            status,
            backoff=backoff,
            subscribed=self.signals_subscribed,
            ceiling=self.timer_ceiling(),
            cut=grace_left,
            elapsed=0.0 if began is None else max(0.0, self.clock() - began),
        )

    def timer_ceiling(self) -> float:
        """The most the timer waits between re-reads now (chat.waiting.read_schedule.ReadSchedule.ceiling): by the
        requests registered for signals in this process while the listener is subscribed, else by those waiting in it.
        """
        signals = self.runtime.signals
        registered = signals.registered if self.signals_subscribed and signals is not None else None
        return self.reads.ceiling(registered)

    def note_wake(self, status: NativeStatus | None) -> None:
        """Set the backoff timer after a wake and its read (chat.waiting.read_schedule.ReadSchedule.note_wake)."""
        self.reads.note_wake(
            status, by_timer=self.woke_by == "timer", subscribed=self.signals_subscribed, ceiling=self.timer_ceiling()
        )

    # --- rules ---------------------------------------------------------------------------------------------------

    async def check(self, status: NativeStatus) -> None:
        """Apply the rules that refuse a request on a status read (see the module docstring), raising OpenAIError."""
        if status.faulted:
            raise faulted_error(status, self.request_id)
        reason = declaration_gap(status)
        if reason is not None:
            raise await service_gap_error_from_horde(
                self.horde,
                reason,
                requested_models=self.requested_models,
                listed_models=self.listed_models,
                request_id=self.request_id,
            )
        if not status.is_possible and not has_started(status):
            now = self.clock()
            if self.impossible_since is None:
                self.impossible_since = now
            if now - self.impossible_since >= self.settings.fail_fast_grace_seconds:
                raise grace_error(self.settings.fail_fast_grace_seconds, self.request_id)
        else:
            self.impossible_since = None

    async def _read_checked(self) -> NativeStatus | None:
        status = await self.read()
        if status is not None:
            await self.check(status)
        return status

    async def first_read(self) -> NativeStatus:
        """The first successful status read, checked: the admission decision a streamed response opens after
        (reference: Buffered stream events, Stream errors).

        Under ``horde.availability_mode: "fail_fast"``, a request without a processing or finished generation is
        refused with 503 ``queue_unavailable`` when the read reports zero eligible worker threads, or else when the
        first status with queue information (re-read every ``signal_recheck_seconds`` for at most
        :data:`POSITIONED_READ_WAIT_SECONDS`, then the latest) reports a wait above the remaining budget. A
        declaration gap refuses first. Returns the latest status read.
        """
        while True:
            if self.remaining_seconds <= 0:
                raise self.timeout_error()
            status = await self._read_checked()
            if status is not None:
                break
            await self.sleep_until_wake()
        if self.availability_mode != FAIL_FAST or has_started(status):
            return status
        first_at = self.clock()
        if queue_refusal_reason(status, self.remaining_seconds) == NO_ELIGIBLE_THREADS:
            raise queue_unavailable_error(
                NO_ELIGIBLE_THREADS, status, remaining_seconds=self.remaining_seconds, request_id=self.request_id
            )
        while not has_queue_information(status):
            left = first_at + POSITIONED_READ_WAIT_SECONDS - self.clock()
            if left <= 0 or self.remaining_seconds <= 0:
                break
            await self.sleep_until_wake(min(self.recheck_delay(backoff=False), left))
            status = await self._read_checked() or status
        remaining = self.remaining_seconds
        refusal = queue_refusal_reason(status, remaining)
        if refusal is not None:
            raise queue_unavailable_error(refusal, status, remaining_seconds=remaining, request_id=self.request_id)
        return status

    async def wait_done(self, status: NativeStatus | None = None) -> NativeStatus:
        """Wait until the request has a finished generation; return that status.

        A status that is done, not faulted and without a finished generation is unfinished while it still reports a
        job waiting or processing. Otherwise it is read again after the full ``signal_recheck_seconds`` (other
        signals do not shorten it; a ``cancelled`` one does); when that recheck still shows it, or a cancelled
        signal came, the wait ends with 502 ``ChatRequestNoGeneration`` (reference: Completion without a
        generation). Raises the refusals of :meth:`check`, and 408 ``ChatRequestTimeout`` when the budget ends.
        """
        while True:
            if status is not None:
                await self.check(status)
                if status.done and status.finished_generation is not None:
                    return status
                if is_done_without_generation(status):
                    self.done_without_generation_reads += 1
                    if self.done_without_generation_reads >= 2 or self.cancelled_signal:
                        raise no_generation_error(self.request_id)
                    if self.remaining_seconds <= 0:
                        raise self.timeout_error()
                    await self.sleep_full(self.settings.signal_recheck_seconds)
                    if self.cancelled_signal:
                        raise no_generation_error(self.request_id)
                    status = await self.read()
                    continue
                self.done_without_generation_reads = 0
            if self.remaining_seconds <= 0:
                raise self.timeout_error()
            await self.sleep_until_wake(self.recheck_delay())
            status = await self.read()
            self.note_wake(status)
