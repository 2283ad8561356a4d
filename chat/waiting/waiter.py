"""The status wait of one submitted chat request, and the refusals a status read can bring.

A waiter reads ``GET /v2/generate/chat/status/{id}`` until the request is terminal. A Redis signal on
``horde:chat:signals`` wakes it early; without one it re-reads on its own timer, so the front is correct without Redis.
Without a subscribed signal listener that timer is ``signal_recheck_seconds``. With one, the signals carry every state
change (``processing``, ``done``, ``faulted``, ``cancelled``), so the waiter's timer backs off: each re-read the timer
brought doubles it, from ``signal_recheck_seconds`` up to ``signal_recheck_max_seconds``; a signal, a failed read or the
listener not being subscribed brings it back to ``signal_recheck_seconds`` (:meth:`ChatWaiter.recheck_delay`). With many
requests waiting the ceiling rises so that, once the timers have backed off, the process makes at most
``signal_recheck_reads_per_second`` timer re-reads a second in all (:func:`backoff_ceiling`). The reference's timed
rules keep their own times whatever the backoff: the positioned re-reads of ``fail_fast`` every
``signal_recheck_seconds`` for :data:`POSITIONED_READ_WAIT_SECONDS`, the read when the grace ends, and the full
``signal_recheck_seconds`` recheck of a completion without a generation.
Reference sections: "No eligible worker" (Model availability, Declaration gaps, Size limit gaps, Native admission
refusals), "Fail-fast admission", "Queue position refresh", "Stream errors", "Completion without a
generation" and the statuses of "Error attributes".

Every refusal raises :class:`chat.errors.OpenAIError`; the caller cancels the native request whenever it leaves
before :attr:`ChatWaiter.terminal` is true (chat.views.chat_completions, chat.horde.cancels).

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
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import ChatGuarantee, ChatLimitField, ChatServiceGapKind
from horde_sdk.worker.chat_declaration import ChatFaultReason

from chat import errors
from chat.errors import OpenAIError
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus
from chat.horde.ports import HordeApi, WaitedRequest, WaiterRuntime
from chat.protocol.chat_request import ChatCompletionRequest
from chat.settings import FrontSettings
from chat.waiting import refusals

MAX_CONSECUTIVE_READ_FAILURES: Final[int] = 3
"""Status reads that may fail in a row (unreachable Horde, 5xx) before the wait ends with ``HordeUnavailable``."""

DECLARATION_GAP: Final[str] = ChatServiceGapKind.DECLARATION_GAP.value
"""The ``impossible_reason.kind`` of a request no online worker's declarations can serve (reference: Declaration
gaps). Any other kind is ignored, so the grace applies (reference: Stream errors)."""

POSITIONED_READ_WAIT_SECONDS: Final[float] = 2.0
"""How long after the first status read a ``fail_fast`` request re-reads for a status with queue information
(reference: Queue position refresh); the Horde refreshes cached queue positions about every 2 seconds."""

QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS: Final[int] = 60
"""The largest ``Retry-After`` of a ``queue_unavailable`` refusal, in seconds: the online pool changes minute to
minute (reference: Fail-fast admission)."""

NO_ELIGIBLE_THREADS: Final[str] = "no_eligible_threads"
"""The ``queue_unavailable`` reason when no eligible worker thread is online (reference: Error attributes)."""

WAIT_EXCEEDS_BUDGET: Final[str] = "wait_exceeds_budget"
"""The ``queue_unavailable`` reason when the estimated wait exceeds the remaining budget (Error attributes)."""

FAIL_FAST: Final[str] = "fail_fast"
"""The ``horde.availability_mode`` that refuses at the first read instead of queueing."""

SIZE_LIMITS: Final[tuple[str, ...]] = (ChatLimitField.MAX_LENGTH.value, ChatLimitField.MAX_CONTEXT_LENGTH.value)
"""The limits of a size limit gap, in message order (reference: Size limit gaps)."""

SIZE_LIMIT_NOUNS: Final[Mapping[str, str]] = {
    ChatLimitField.MAX_LENGTH.value: "a completion limit",
    ChatLimitField.MAX_CONTEXT_LENGTH.value: "a context length",
}
"""How a size limit gap's sentence names each limit (reference: Size limit gaps)."""

UNRETRIABLE_FAULT_REASONS: Final[frozenset[str]] = frozenset({ChatFaultReason.PROMPT_OVERFLOW.value})
"""``fault_reason`` values of a 502 ``ChatRequestFaulted`` that set ``x-should-retry: false``: the same prompt
overflows again, so a silent SDK retry only repeats the wait."""

GUARANTEE_VALUES: Final[frozenset[str]] = frozenset(guarantee.value for guarantee in ChatGuarantee)
"""The declarations that are guarantees (``horde_sdk``'s ``ChatGuarantee``), not required under ``best_effort``."""

CANCELLED_SENTENCE: Final[str] = " The request was cancelled."
"""Appended to every refusal of a submitted request, which the front cancels (not to a refusal at submit)."""

CANCELLED_SIGNAL: Final[str] = "cancelled"
"""The signal event of a request cancelled at the Horde (native contract, Signals)."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


def backoff_ceiling(settings: FrontSettings, registered: int) -> float:
    """Seconds: the most a backed-off timer waits between re-reads with ``registered`` requests registered for
    signals in the process: ``signal_recheck_max_seconds`` (never below ``signal_recheck_seconds``), raised to
    ``registered / signal_recheck_reads_per_second``, so once the timers have backed off the process's timer re-reads
    stay within that rate however many requests wait (5,000 waiting at 25 a second: 200 s). Timers still ramping up
    (a new request, one a signal reset) re-read more often, and a change no signal carries (a worker going offline,
    which starts the ``fail_fast_grace_seconds`` grace) is seen up to one ceiling late.
    """
    return max(
        settings.signal_recheck_seconds,
        settings.signal_recheck_max_seconds,
        registered / settings.signal_recheck_reads_per_second,
    )


# --- status predicates ------------------------------------------------------------------------------------------


def has_started(status: NativeStatus) -> bool:
    """Whether the request has a processing or finished generation."""
    return status.processing > 0 or status.finished > 0 or bool(status.generations)


def is_terminal(status: NativeStatus) -> bool:
    """Whether the request needs no cancel: faulted, or done with a finished generation."""
    return status.faulted or (status.done and status.finished_generation is not None)


def is_done_without_generation(status: NativeStatus) -> bool:
    """Done, not faulted, no finished generation and no job waiting or processing (reference: Completion without a
    generation). A done status that still reports a job waiting or processing is unfinished.
    """
    return (
        status.done
        and not status.faulted
        and status.finished_generation is None
        and status.waiting == 0
        and status.processing == 0
    )


def has_queue_information(status: NativeStatus) -> bool:
    """A positive ``queue_position`` or ``wait_time``, or a processing or finished generation (reference: Queue
    position refresh): a newly submitted request may read 0 for both until the Horde refreshes its cache.
    """
    return status.queue_position > 0 or status.wait_time > 0 or has_started(status)


def declaration_gap(status: NativeStatus) -> dict[str, Any] | None:
    """The status's ``impossible_reason`` when it is a declaration gap of a request not yet started, else None.

    An ``impossible_reason`` of another kind, or not an object, is ignored (reference: Stream errors).
    """
    reason = status.impossible_reason
    if has_started(status) or not isinstance(reason, dict) or reason.get("kind") != DECLARATION_GAP:
        return None
    return reason


# --- messages ----------------------------------------------------------------------------------------------------


def join_names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _names(values: Any) -> list[str]:
    return [str(value) for value in values] if isinstance(values, list | tuple) else []


def is_size_limit_gap(reason: Mapping[str, Any]) -> bool:
    """Whether a declaration gap is only ``max_length`` and/or ``max_context_length`` in ``exceeded_limits``, with no
    missing declaration (reference: Size limit gaps); any other mix keeps the 404.
    """
    exceeded = _names(reason.get("exceeded_limits"))
    return (
        not _names(reason.get("missing_declarations"))
        and bool(exceeded)
        and all(limit in SIZE_LIMITS for limit in exceeded)
    )


def declaration_gap_message(reason: Mapping[str, Any], *, listed_models: bool, cancelled: bool) -> str:
    """The 404 ``no_worker_supports_features`` message (reference: Declaration gaps).

    ``No worker can serve this request: no online worker serving the model declares reasoning_effort. The request was
    cancelled.`` The missing declarations, then the exceeded limits (``the request exceeds the tools_max_temperature
    every online worker serving the model declares``); "the listed models" under ``models`` (``listed_models``).
    When a guarantee (``horde_sdk``'s ``ChatGuarantee``) is missing, a sentence adds that guarantees are not required
    under ``best_effort``. ``cancelled`` (a submitted request) adds "The request was cancelled."
    """
    subject = "the listed models" if listed_models else "the model"
    missing = _names(reason.get("missing_declarations"))
    exceeded = _names(reason.get("exceeded_limits"))
    parts = []
    if missing:
        parts.append(f"no online worker serving {subject} declares {join_names(missing)}")
    if exceeded:
        parts.append(f"the request exceeds the {join_names(exceeded)} every online worker serving {subject} declares")
    if not parts:
        parts.append(f"the online workers serving {subject} do not declare what it needs")
    message = "No worker can serve this request: " + "; ".join(parts) + "."
    guarantees = [name for name in missing if name in GUARANTEE_VALUES]
    if guarantees:
        noun = "a guarantee" if len(guarantees) == 1 else "guarantees"
        verb = "is" if len(guarantees) == 1 else "are"
        message += (
            f" {join_names(guarantees)} {verb} {noun}, and guarantees are not required under best_effort "
            '(horde.conformance: "best_effort").'
        )
    if cancelled:
        message += CANCELLED_SENTENCE
    return message


def largest_declared_limit(entries: Iterable[Mapping[str, Any]], models: Sequence[str], limit: str) -> int | None:
    """The largest ``chat.<limit>`` of the model list's entries for ``models`` (native ``GET /v2/status/models``), or
    None when no requested model has a chat entry with that limit (reference: Size limit gaps).
    """
    wanted = set(models)
    values = []
    for entry in entries:
        chat = entry.get("chat")
        if entry.get("name") in wanted and isinstance(chat, Mapping):
            value = chat.get(limit)
            if isinstance(value, int) and not isinstance(value, bool):
                values.append(value)
    return max(values) if values else None


def size_limit_gap_message(
    exceeded: Iterable[str], largest: Mapping[str, int | None], *, listed_models: bool, cancelled: bool
) -> str:
    """The 400 ``no_worker_supports_limit`` message: for each exceeded limit (``max_length`` first)
    ``No worker eligible for this request currently declares a completion limit that high. The largest any online
    worker for the model declares now is 1024 tokens.`` ("a context length" for ``max_context_length``; "for the
    listed models" under ``models``; the limit's name in place of the value when ``largest`` has none). ``cancelled``
    adds "The request was cancelled." (reference: Size limit gaps).
    """
    subject = "the listed models" if listed_models else "the model"
    exceeded = set(exceeded)
    sentences = []
    for limit in SIZE_LIMITS:
        if limit not in exceeded:
            continue
        value = largest.get(limit)
        stated = f"{value} tokens" if value is not None else limit
        sentences.append(
            f"No worker eligible for this request currently declares {SIZE_LIMIT_NOUNS[limit]} that high. "
            f"The largest any online worker for {subject} declares now is {stated}."
        )
    message = " ".join(sentences)
    if cancelled:
        message += CANCELLED_SENTENCE
    return message


def size_limit_parameter(exceeded: Iterable[str]) -> str:
    """``horde.max_context_length`` when only the context length is exceeded, else ``max_tokens``."""
    exceeded = set(exceeded)
    if exceeded == {ChatLimitField.MAX_CONTEXT_LENGTH.value}:
        return errors.NATIVE_FIELD_PARAMETERS[ChatLimitField.MAX_CONTEXT_LENGTH.value]
    return errors.NATIVE_FIELD_PARAMETERS[ChatLimitField.MAX_LENGTH.value]


def service_gap_error(
    reason: Mapping[str, Any],
    *,
    requested_models: Sequence[str],
    listed_models: bool,
    model_entries: Iterable[Mapping[str, Any]] | None,
    request_id: str | None,
) -> OpenAIError:
    """The refusal of a declaration gap (reference: Declaration gaps, Size limit gaps, Native admission refusals).

    Only ``max_length`` / ``max_context_length`` exceeded: 400 ``invalid_request_error`` ``no_worker_supports_limit``
    at ``max_tokens`` (or ``horde.max_context_length`` when only the context length is), with the largest declared
    limits from ``model_entries`` (the native model list; None when it could not be read). Any other gap: 404
    ``not_found_error`` ``no_worker_supports_features``, param null. Neither has ``Retry-After`` or ``x-should-retry``.
    ``request_id`` is the cancelled native request (``metadata.request_id`` and "The request was cancelled."); None
    for a refusal at submit, where the Horde created no request.
    """
    cancelled = request_id is not None
    metadata = {"request_id": request_id} if cancelled else None
    if is_size_limit_gap(reason):
        exceeded = _names(reason.get("exceeded_limits"))
        entries = list(model_entries or [])
        largest = {limit: largest_declared_limit(entries, requested_models, limit) for limit in exceeded}
        return OpenAIError(
            status=400,
            message=size_limit_gap_message(exceeded, largest, listed_models=listed_models, cancelled=cancelled),
            code=errors.NO_WORKER_SUPPORTS_LIMIT,
            param=size_limit_parameter(exceeded),
            type="invalid_request_error",
            metadata=metadata,
        )
    return OpenAIError(
        status=404,
        message=declaration_gap_message(reason, listed_models=listed_models, cancelled=cancelled),
        code=errors.NO_WORKER_SUPPORTS_FEATURES,
        param=None,
        type="not_found_error",
        metadata=metadata,
    )


async def service_gap_error_from_horde(
    horde: HordeApi,
    reason: Mapping[str, Any],
    *,
    requested_models: Sequence[str],
    listed_models: bool,
    request_id: str | None,
) -> OpenAIError:
    """:func:`service_gap_error`, reading the native model list (``horde.text_models()``) for a size limit gap.

    The list is read at the refusal, so the message describes the online workers at that time; when it cannot be
    read the message states the limit's name in place of the value.
    """
    entries: list[dict[str, Any]] | None = None
    if is_size_limit_gap(reason):
        try:
            entries = await horde.text_models()
        except (HordeRefusal, HordeUnreachable):
            entries = None
    return service_gap_error(
        reason,
        requested_models=requested_models,
        listed_models=listed_models,
        model_entries=entries,
        request_id=request_id,
    )


async def submit_refusal_error(horde: HordeApi, refusal: HordeRefusal, request: ChatCompletionRequest) -> OpenAIError:
    """Map a refusal of ``POST /v2/generate/chat/async`` (reference: Model availability, Native admission refusals).

    ``NoEligibleWorker`` with an ``impossible_reason`` of kind ``declaration_gap`` in the body is
    :func:`service_gap_error` without a request id (the Horde created no request); every other refusal is
    :func:`chat.waiting.refusals.error_from_refusal` (a ``NoEligibleWorker`` without a known reason is 503
    ``no_eligible_worker`` with ``Retry-After: 30`` and the Horde's message). ``request`` is the validated
    ``ChatCompletionRequest``.
    """
    reason = (refusal.body or {}).get("impossible_reason")
    if (
        refusal.rc == errors.NO_ELIGIBLE_WORKER_RC
        and isinstance(reason, dict)
        and reason.get("kind") == DECLARATION_GAP
    ):
        return await service_gap_error_from_horde(
            horde,
            reason,
            requested_models=request.requested_models,
            listed_models=request.models is not None,
            request_id=None,
        )
    return refusals.error_from_refusal(refusal, request=request)


def queue_refusal_reason(status: NativeStatus, remaining_seconds: float) -> str | None:
    """The ``fail_fast`` admission decision at a status read (reference: Fail-fast admission, Queue position refresh).

    None for a request with a processing or finished generation; :data:`NO_ELIGIBLE_THREADS` when
    ``eligible_worker_threads`` is 0 (a status without it, from an older Horde, never refuses on threads);
    :data:`WAIT_EXCEEDS_BUDGET` when ``wait_time`` exceeds ``remaining_seconds``; else None.
    """
    if has_started(status):
        return None
    threads = status.eligible_worker_threads
    if threads is not None and threads <= 0:
        return NO_ELIGIBLE_THREADS
    if status.wait_time > remaining_seconds:
        return WAIT_EXCEEDS_BUDGET
    return None


def queue_retry_after(wait_time: int | None) -> int:
    """``Retry-After`` of a ``queue_unavailable``: the estimated wait in seconds, at most
    :data:`QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS`; the cap when there is no positive estimate.
    """
    if not wait_time or wait_time <= 0:
        return QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS
    return min(int(wait_time), QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS)


def _seconds(value: float) -> str:
    whole = max(0, math.floor(value))
    return f"{whole} second" if whole == 1 else f"{whole} seconds"


def queue_unavailable_message(
    reason: str, *, threads: int | None, wait_time: int, remaining_seconds: float, cancelled: bool = True
) -> str:
    """The ``queue_unavailable`` message, stating the eligible worker threads, the estimated wait and the remaining
    budget at the deciding read (reference: Fail-fast admission).
    """
    if threads is None:
        thread_text = "an unknown number of eligible worker threads"
    else:
        thread_text = f"{threads} eligible worker thread" + ("" if threads == 1 else "s")
    lead = (
        "No eligible worker thread is online for this request"
        if reason == NO_ELIGIBLE_THREADS
        else "The estimated queue wait exceeds this request's remaining time budget"
    )
    message = (
        f"{lead} ({thread_text}, an estimated wait of {_seconds(wait_time)}, {_seconds(remaining_seconds)} of "
        'budget left) under horde.availability_mode "fail_fast".'
    )
    if cancelled:
        message += CANCELLED_SENTENCE
    return message


def queue_unavailable_error(
    reason: str, status: NativeStatus, *, remaining_seconds: float, request_id: str
) -> OpenAIError:
    """503 ``queue_unavailable`` at ``horde.availability_mode`` with ``Retry-After`` from :func:`queue_retry_after`
    (reference: Fail-fast admission). ``metadata`` holds ``request_id``, ``reason``, ``eligible_worker_threads``,
    ``wait_time`` and ``remaining_budget_seconds``.
    """
    return OpenAIError(
        status=503,
        message=queue_unavailable_message(
            reason,
            threads=status.eligible_worker_threads,
            wait_time=status.wait_time,
            remaining_seconds=remaining_seconds,
        ),
        code=errors.QUEUE_UNAVAILABLE,
        param="horde.availability_mode",
        metadata={
            "request_id": request_id,
            "reason": reason,
            "eligible_worker_threads": status.eligible_worker_threads,
            "wait_time": status.wait_time,
            "remaining_budget_seconds": max(0, math.floor(remaining_seconds)),
        },
        retry_after=queue_retry_after(status.wait_time),
    )


def grace_error(grace_seconds: float, request_id: str) -> OpenAIError:
    """503 ``no_eligible_worker`` when the fail-fast grace ended (reference: Model availability), with
    ``Retry-After: 30`` and ``x-should-retry: false`` (:func:`chat.errors.no_eligible_worker`).
    """
    return errors.no_eligible_worker(
        f"No online worker could serve this request for {grace_seconds:g} seconds: the workers serving the model "
        "went offline or are busy with other work." + CANCELLED_SENTENCE,
        metadata={"request_id": request_id},
    )


def faulted_error(status: NativeStatus, request_id: str) -> OpenAIError:
    """502 ``ChatRequestFaulted``: the worker faulted the request (``metadata.fault_reason``).

    A fault in :data:`UNRETRIABLE_FAULT_REASONS` (``prompt_overflow``) sets ``x-should-retry: false``; any other
    sets no header, so the SDK's default (retry a 5xx) applies.
    """
    return OpenAIError(
        status=502,
        message=f"The worker faulted the request ({status.fault_reason or 'no reason given'}).",
        code=errors.CHAT_REQUEST_FAULTED,
        metadata={"request_id": request_id, "fault_reason": status.fault_reason},
        should_retry=False if status.fault_reason in UNRETRIABLE_FAULT_REASONS else None,
    )


def no_generation_error(request_id: str) -> OpenAIError:
    """502 ``ChatRequestNoGeneration`` (reference: Completion without a generation)."""
    return OpenAIError(
        status=502,
        message="The Horde finished the request without a generation." + CANCELLED_SENTENCE,
        code=errors.CHAT_REQUEST_NO_GENERATION,
        metadata={"request_id": request_id},
    )


# --- the waiter --------------------------------------------------------------------------------------------------


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
            native chat route. The text API path passes chat.serving.text_route's ``TextRoutes``.
    """

    def __init__(
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
        self.cancelled_signal = False
        self.done_without_generation_reads = 0
        self.timer_delay: float = self.settings.signal_recheck_seconds
        """The backoff timer's next delay while the signal listener is subscribed (:meth:`recheck_delay`)."""
        self._read_failures = 0
        self._signal_queue: asyncio.Queue[str] | None = None
        if runtime.signals is not None:
            self._signal_queue = runtime.signals.register(request_id)

    def close(self) -> None:
        """Stop listening for this request's signals."""
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
        return OpenAIError(
            status=408,
            message=f"No worker finished the request within {self.timeout_seconds:g} seconds." + CANCELLED_SENTENCE,
            code=errors.CHAT_REQUEST_TIMEOUT,
            metadata={"request_id": self.request_id},
            should_retry=False,
        )

    # --- reads and sleeps ----------------------------------------------------------------------------------------

    async def read(self) -> NativeStatus | None:
        """One status read; None for a failure that may pass (a 429 is waited out for its ``Retry-After``).

        Raises OpenAIError for a refusal (such as 404 ``RequestNotFound`` or 401 ``InvalidAPIKey``, with the request's
        id as ``metadata.request_id``) or after :data:`MAX_CONSECUTIVE_READ_FAILURES` failures in a row (502
        ``HordeUnavailable``).
        """
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
        self.last_status = status
        if self.started_seen_at is None and has_started(status):
            self.started_seen_at = time.time()
        if self.first_status is None:
            self.first_status = status
        self.terminal = is_terminal(status)
        return status

    def _failed_read(self, detail: str, *, reached: bool) -> None:
        self._read_failures += 1
        if self._read_failures >= MAX_CONSECUTIVE_READ_FAILURES:
            # The caller cancels the request when the wait ends here (chat.views.chat_completions).
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
        """Seconds until the next timer re-read, shortened so a read comes when the grace ends.

        ``signal_recheck_seconds`` without a subscribed signal listener or when ``backoff`` is false (the
        positioned re-reads of "Queue position refresh"); else :attr:`timer_delay`, which :meth:`note_wake` doubles
        up to ``signal_recheck_max_seconds`` after each re-read the timer brought.
        """
        delay = self.settings.signal_recheck_seconds
        if backoff and self.signals_subscribed:
            delay = max(delay, self.timer_delay)
        if self.impossible_since is not None:
            grace_left = self.impossible_since + self.settings.fail_fast_grace_seconds - self.clock()
            delay = min(delay, max(0.0, grace_left))
        return delay

    def timer_ceiling(self) -> float:
        """The most the backoff timer waits between re-reads now: :func:`backoff_ceiling` with the requests
        registered for signals in this process.
        """
        registered = self.runtime.signals.registered if self.runtime.signals is not None else 0
        return backoff_ceiling(self.settings, registered)

    def note_wake(self, status: NativeStatus | None) -> None:
        """Set the backoff timer after a wake and its read: doubled (up to :meth:`timer_ceiling`) after a timer wake
        whose read succeeded with the listener subscribed; ``signal_recheck_seconds`` after a signal, a failed read,
        or while the listener is not subscribed.
        """
        base = self.settings.signal_recheck_seconds
        if status is None or self.woke_by != "timer" or not self.signals_subscribed:
            self.timer_delay = base
            return
        self.timer_delay = min(self.timer_ceiling(), max(base, self.timer_delay * 2))

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
