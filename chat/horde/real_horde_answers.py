"""What the real AI Horde answers where the native chat contract says nothing, and the front's answer to each.

The public AI Horde (``Haidra-Org/AI-Horde``) serves the front through its text generation API only; the rules below
are what it was seen to answer (the team's ``spec/real-horde.md``, with its source lines):

- Every answer carries ``Retry-After`` (flask-limiter's ``headers_enabled``, usually ``1``), 401 ``InvalidAPIKey``
  and 403 ``KudosUpfront`` included. The front copies it only onto an answer that means "retry later" (429 and 503,
  :func:`retry_later_seconds`), never onto a permanent refusal.
- 403 ``KudosUpfront``: the client's key does not hold the kudos a large request needs upfront. The front answers
  403 ``KudosUpfront`` at the client's completion limit key with ``x-should-retry: false`` and no ``Retry-After``;
  the message is the Horde's, then how to get kudos (:func:`kudos_upfront_error`).
- A payload the Horde's validation refuses is 400 without ``rc``, ``{"errors": {"params.max_length": "5000 is
  greater than the maximum of 4096"}, "message": "Input payload validation failed"}``: the front's message names the
  client's parameter and states the field's message (:func:`validation_message`).
- ``params.max_length`` is 16 to :data:`REAL_HORDE_MAX_TEXT_LENGTH` (4096) on the server, where horde-sdk allows
  16384: a larger completion limit is refused before submit (:func:`text_length_refusal`).
- A cancel (``DELETE .../status/{id}``) sets the request's ``n`` to 0: every later status reads ``done: false``,
  nothing waiting, processing or finished and no generation (``is_possible: false`` when no worker serves the model),
  until it expires 20 minutes later. Such a status ends the wait with 502 ``ChatRequestCancelled``: at once with
  ``is_possible: false``, at the next read otherwise (:func:`is_emptied`, :func:`emptied_reads_to_end`,
  :func:`cancelled_error`).
- A generation's ``state`` is ``ok``, ``censored`` or ``csam``: a censored one gets OpenAI's ``content_filter``
  finish reason (:func:`filtered_finish_reason`).

It imports only :mod:`chat.errors` from the front (its codes ``KudosUpfront`` and ``ChatRequestCancelled`` are in
the failure catalogue there), so :mod:`chat.horde.refusals`, :mod:`chat.horde.text`, :mod:`chat.serving.text_route`
and the service may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from horde_sdk.ai_horde_api.consts import GENERATION_STATE
from horde_sdk.worker.chat_declaration import ChatFinishReason

from chat import errors
from chat.errors import OpenAIError

# --- Retry-After -------------------------------------------------------------------------------------------------

RETRY_LATER_STATUSES: Final[frozenset[int]] = frozenset({429, 503})
"""The statuses whose answer means "retry later": only they carry the Horde's ``Retry-After`` on to the client."""

LIMITER_WINDOW_SECONDS: Final[int] = 1
"""The Horde limiter's shortest window (``2 per 1 second``), the least a ``Retry-After`` from it means. flask-limiter
writes ``int(reset - now)``, so within the last second of a one-second window it says ``Retry-After: 0``: a retry at
once lands in the same window and is refused again."""


def retry_after_seconds(headers: Mapping[str, str] | None) -> int | None:
    """The whole seconds of a ``Retry-After`` header (any case), at least :data:`LIMITER_WINDOW_SECONDS` (never 0);
    None when absent or not a number.
    """
    for name, value in (headers or {}).items():
        if name.lower() == "retry-after":
            try:
                return max(LIMITER_WINDOW_SECONDS, int(float(value)))
            except (ValueError, OverflowError):
                return None
    return None


def retry_later_seconds(status: int, headers: Mapping[str, str] | None) -> int | None:
    """The Horde's ``Retry-After`` for an answer of ``status``, only when it means "retry later"
    (:data:`RETRY_LATER_STATUSES`); None for every other status, whatever the header says.
    """
    return retry_after_seconds(headers) if status in RETRY_LATER_STATUSES else None


# --- KudosUpfront ------------------------------------------------------------------------------------------------

KUDOS_UPFRONT: Final[str] = errors.KUDOS_UPFRONT
"""The Horde's rc of a request that needs kudos the key does not hold yet (``horde/apis/v2/kobold.py:150-157``)."""

KUDOS_UPFRONT_ADVICE: Final[str] = (
    "The API key sent must already hold those kudos: register an account at the Horde (on the public AI Horde, "
    "https://aihorde.net/register) and send its API key as the bearer key; kudos are earned by running a worker or "
    "given by other users. Or ask for fewer tokens (a smaller '{param}')."
)
"""Added to the Horde's ``KudosUpfront`` message: how to get kudos, or what to lower (``{param}``, quoted so that
chat.responses names its Responses key)."""


def completion_limit_key(request: object | None) -> str:
    """The key the client set its completion limit with: ``max_completion_tokens`` when set, else ``max_tokens``
    (also when it set none: the front's default stands for it). chat.responses maps both to ``max_output_tokens``.
    """
    return "max_completion_tokens" if getattr(request, "max_completion_tokens", None) is not None else "max_tokens"


def kudos_upfront_error(message: str, request: object | None) -> OpenAIError:
    """403 ``permission_error`` ``KudosUpfront`` at :func:`completion_limit_key` with ``x-should-retry: false`` and
    no ``Retry-After`` (the same request is refused again until the key holds the kudos); the message is the Horde's,
    then :data:`KUDOS_UPFRONT_ADVICE`.
    """
    param = completion_limit_key(request)
    lead = message.strip() or "The Horde refused this request for kudos."
    if not lead.endswith("."):
        lead += "."
    return errors.failure(KUDOS_UPFRONT, f"{lead} {KUDOS_UPFRONT_ADVICE.format(param=param)}", param=param)


# --- validation errors -------------------------------------------------------------------------------------------


def validation_message(param: str | None, field_errors: Mapping[str, Any], field: str, fallback: str) -> str:
    """The message of a Horde payload validation failure (400 without ``rc``): ``Invalid 'max_tokens': 5000 is
    greater than the maximum of 4096.`` for the first failing ``field`` (named by the client's ``param``), or
    ``fallback`` (the Horde's message) when the field has no message.
    """
    detail = field_errors.get(field)
    if not isinstance(detail, str) or not detail.strip():
        return fallback
    detail = detail.strip()
    if not detail.endswith("."):
        detail += "."
    return f"Invalid '{param or field}': {detail}"


# --- the server's completion limit -------------------------------------------------------------------------------

REAL_HORDE_MAX_TEXT_LENGTH: Final[int] = 4096
"""The real AI Horde's largest ``params.max_length`` of a text request: ``"max_length": fields.Integer(min=16,
max=4096, default=80, ...)`` in ``horde/apis/models/kobold_v2.py:197-200`` (server 5.1.5). horde-sdk's
``ModelPayloadRootKobold.max_length`` allows 16384, which the server refuses with 400 "Input payload validation
failed"; the server is not a library, so its bound is written here."""


def text_length_refusal(limit: int, param: str, sdk_range: tuple[int, int]) -> OpenAIError | None:
    """400 ``no_worker_supports_limit`` at ``param`` for a text path completion limit outside horde-sdk's range
    ``sdk_range`` or above :data:`REAL_HORDE_MAX_TEXT_LENGTH` (the stricter of the two bounds applies), citing the
    bound that refuses it; None when the limit is served.
    """
    low, sdk_high = sdk_range
    high = min(sdk_high, REAL_HORDE_MAX_TEXT_LENGTH)
    if low <= limit <= high:
        return None
    if limit > high == REAL_HORDE_MAX_TEXT_LENGTH:
        reason = (
            f"the AI Horde's text generation API generates at most {REAL_HORDE_MAX_TEXT_LENGTH} tokens per request "
            f"(the server's bound; ask for {REAL_HORDE_MAX_TEXT_LENGTH} or fewer)."
        )
    else:
        reason = f"the Horde's text generation API generates between {low} and {high} tokens."
    return errors.failure(
        errors.NO_WORKER_SUPPORTS_LIMIT,
        f"No worker eligible for this request accepts a completion limit of {limit} tokens: {reason}",
        param=param,
    )


# --- a cancelled or emptied request ------------------------------------------------------------------------------

CHAT_REQUEST_CANCELLED: Final[str] = errors.CHAT_REQUEST_CANCELLED
"""The code of a request the Horde cancelled or emptied while the front waited for it."""

CANCELLED_MESSAGE: Final[str] = (
    "The Horde cancelled this request before any worker finished it (its status reads nothing waiting, processing "
    "or finished): someone cancelled it with its id, or the Horde dropped it. Send it again to start a new request."
)
"""The message of :func:`cancelled_error`."""


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_emptied(body: Mapping[str, Any]) -> bool:
    """Whether a text status is a request whose ``n`` the Horde set to 0 (its cancel, ``horde/apis/v2/kobold.py``
    ``TextAsyncStatus.delete``): ``done`` false, not faulted, ``waiting``, ``processing`` and ``finished`` all 0 and no
    generation. Any key missing or of another type is not that status. ``is_possible`` is not part of it: the server
    computes it from the online workers alone (``horde/database/functions.py`` ``wp_has_valid_workers``), so it stays
    true after the cancel of a request for a model with a worker (:func:`emptied_reads_to_end`).
    """
    return (
        body.get("done") is False
        and body.get("faulted") is not True
        and all(_count(body.get(key)) == 0 for key in ("waiting", "processing", "finished"))
        and not body.get("generations")
    )


def emptied_reads_to_end(body: Mapping[str, Any]) -> int:
    """How many :func:`is_emptied` status reads in a row end the wait: 1 when ``is_possible`` is false (nothing can
    serve it and nothing is left to serve), 2 when a worker could serve it: a second read a recheck later rules out a
    status read in the middle of a pop.
    """
    return 1 if body.get("is_possible") is False else 2


def cancelled_error(request_id: str) -> OpenAIError:
    """502 ``api_error`` ``ChatRequestCancelled`` (``metadata.request_id``) with ``x-should-retry: false``: the
    Horde ended the request, so waiting longer only runs into the timeout; a silent SDK retry would resubmit what
    someone chose to cancel, so the client decides.
    """
    return errors.failure(CHAT_REQUEST_CANCELLED, CANCELLED_MESSAGE, metadata={"request_id": request_id})


# --- censored generations ----------------------------------------------------------------------------------------

FILTERED_STATES: Final[frozenset[str]] = frozenset({GENERATION_STATE.censored.value, GENERATION_STATE.csam.value})
"""The text generation ``state`` values of a reply the Horde's filter changed (``horde/classes/kobold/
processing_generation.py:29-37``; horde-sdk's ``GENERATION_STATE``); ``ok`` is an ordinary reply."""

CONTENT_FILTER: Final[str] = ChatFinishReason.CONTENT_FILTER.value
"""OpenAI's ``finish_reason`` of a reply its content filter changed or withheld."""


def filtered_finish_reason(generation: Mapping[str, Any]) -> str | None:
    """``content_filter`` for a text generation whose ``state`` is in :data:`FILTERED_STATES`, else None."""
    state = generation.get("state")
    return CONTENT_FILTER if isinstance(state, str) and state in FILTERED_STATES else None
