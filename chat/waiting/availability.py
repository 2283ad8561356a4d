"""The availability refusals of a submitted chat request: the errors a status read or the submit brings.

Reference sections: "No eligible worker" (Declaration gaps, Size limit gaps, Native admission refusals), "Fail-fast
admission", "Stream errors", "Completion without a generation" and the statuses of "Error attributes". The rules
that pick one are chat.waiting.waiter's; each builder here makes the ``chat.errors.OpenAIError`` (its status, code,
``Retry-After`` and ``x-should-retry`` from the catalogue in chat.errors) and its message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import ChatGuarantee, ChatLimitField
from horde_sdk.worker.chat_declaration import ChatFaultReason

from chat import errors
from chat.errors import OpenAIError
from chat.horde import refusals
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus
from chat.horde.ports import HordeApi
from chat.protocol.chat_request import ChatCompletionRequest
from chat.waiting.status import DECLARATION_GAP, has_started

QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS: Final[int] = 60
"""The largest ``Retry-After`` of a ``queue_unavailable`` refusal, in seconds: the online pool changes minute to
minute (reference: Fail-fast admission)."""

NO_ELIGIBLE_THREADS: Final[str] = "no_eligible_threads"
"""The ``queue_unavailable`` reason when no eligible worker thread is online (reference: Error attributes)."""

WAIT_EXCEEDS_BUDGET: Final[str] = "wait_exceeds_budget"
"""The ``queue_unavailable`` reason when the estimated wait exceeds the remaining budget (Error attributes)."""


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
        return errors.failure(
            errors.NO_WORKER_SUPPORTS_LIMIT,
            size_limit_gap_message(exceeded, largest, listed_models=listed_models, cancelled=cancelled),
            param=size_limit_parameter(exceeded),
            metadata=metadata,
        )
    return errors.failure(
        errors.NO_WORKER_SUPPORTS_FEATURES,
        declaration_gap_message(reason, listed_models=listed_models, cancelled=cancelled),
        param=None,
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
    :func:`chat.horde.refusals.error_from_refusal` (a ``NoEligibleWorker`` without a known reason is 503
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
    return errors.failure(
        errors.QUEUE_UNAVAILABLE,
        queue_unavailable_message(
            reason,
            threads=status.eligible_worker_threads,
            wait_time=status.wait_time,
            remaining_seconds=remaining_seconds,
        ),
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
    return errors.failure(
        errors.CHAT_REQUEST_FAULTED,
        f"The worker faulted the request ({status.fault_reason or 'no reason given'}).",
        metadata={"request_id": request_id, "fault_reason": status.fault_reason},
        should_retry=False if status.fault_reason in UNRETRIABLE_FAULT_REASONS else None,
    )


def no_generation_error(request_id: str) -> OpenAIError:
    """502 ``ChatRequestNoGeneration`` (reference: Completion without a generation)."""
    return errors.failure(
        errors.CHAT_REQUEST_NO_GENERATION,
        "The Horde finished the request without a generation." + CANCELLED_SENTENCE,
        metadata={"request_id": request_id},
    )


# --- the waiter --------------------------------------------------------------------------------------------------
