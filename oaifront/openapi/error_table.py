"""The status/code table of the OpenAPI document: each route's error statuses and the codes each carries.

TO BE REPLACED: this table repeats what the builders decide (status, code, ``Retry-After``, ``x-should-retry``); the
failure catalogue coming at the top of ``chat/errors.py`` (issue 21) will hold code -> status, type, retry headers and
when, and :mod:`oaifront.openapi.document` will read that instead. Until then the table is isolated here, and nothing
but the document reads it. The Horde's own codes it names (:data:`INVALID_API_KEY` and the other rc constants) are
passed through by the front, not raised by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from chat import errors
from chat.waiting.availability import QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS


@dataclass(frozen=True)
class DocumentedError:
    """One error code a status can carry, and when."""

    code: str
    """The ``error.code``."""
    when: str
    """When the front returns it (public text, Markdown)."""


INVALID_API_KEY: Final = errors.INVALID_API_KEY
"""The Horde's rc for a key it does not know, passed through."""
KUDOS_UPFRONT: Final = errors.KUDOS_UPFRONT
"""The Horde's rc for a request over the free output allowance without the kudos to hold upfront (its message
followed by how to get kudos, chat.horde.real_horde_answers)."""
REQUEST_NOT_FOUND: Final = "RequestNotFound"
"""The Horde's rc for a native request id it does not know (expired), passed through."""
TOO_MANY_PROMPTS: Final = "TooManyPrompts"
"""The Horde's rc for too many requests in flight for a key, passed through."""
MAINTENANCE_MODE: Final = "MaintenanceMode"
"""The Horde's rc while it accepts no new work, passed through."""

_MAINTENANCE = DocumentedError(MAINTENANCE_MODE, "The Horde accepts no new work for now.")
_FRONT_AT_CAPACITY = DocumentedError(
    errors.FRONT_AT_CAPACITY,
    "The front is serving as many requests from your address, or in total, as it accepts at once "
    "(`HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT`, `HORDE_OAI_MAX_IN_FLIGHT`); `Retry-After` says when to retry.",
)
_REQUEST_TOO_LARGE = DocumentedError(
    errors.REQUEST_TOO_LARGE,
    "The body is over the front's limit (`HORDE_OAI_MAX_BODY_BYTES`), refused from `Content-Length` or as soon as "
    "the bytes received pass it, before the body is read.",
)
_REQUEST_BODY_TIMEOUT = DocumentedError(
    errors.REQUEST_BODY_TIMEOUT, "The body did not arrive within `HORDE_OAI_BODY_TIMEOUT_SECONDS`."
)
_RATE_LIMITS = (
    DocumentedError(errors.RATE_LIMIT_EXCEEDED, "The Horde rate-limited the request without a code of its own."),
    DocumentedError(TOO_MANY_PROMPTS, "The key has too many requests in flight at the Horde."),
)
_HORDE_UNAVAILABLE = DocumentedError(
    errors.HORDE_UNAVAILABLE, "The Horde could not be reached, or answered outside its contract."
)

CHAT_COMPLETION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        400: (
            DocumentedError(
                errors.BAD_REQUEST,
                "The body is not a JSON object (NaN and Infinity count as invalid JSON) or fails validation, or the "
                "Horde refused the payload; `param` is the first failing field.",
            ),
            DocumentedError(
                errors.UNSUPPORTED_CHAT_PARAMETER,
                "An unknown top-level key, a no-op parameter at another value than its default, an unsupported role or "
                "content part type, a value outside OpenAI's range, a token limit below the Horde's floor, or a tool "
                "history or strict schema breaking OpenAI's rules; `param` is its path.",
            ),
            DocumentedError(
                errors.CHAT_REQUEST_CONFLICT,
                "`tool_choice` or `parallel_tool_calls` without `tools`, or, under `horde.openai_guards`, a "
                "`json_object` request whose messages do not contain the word json.",
            ),
            DocumentedError(
                errors.UNKNOWN_MODEL,
                "`model`, or an entry of `models`, is not a known text model; `param` is `model` or the entry's path.",
            ),
            DocumentedError(
                errors.NO_WORKER_SUPPORTS_LIMIT,
                "The request is over every online worker's completion limit or context length for its models, or, "
                "through the Horde's text generation API, over the server's 4096 tokens; `param` is `max_tokens` (or "
                "the key the client sent) or `horde.max_context_length`. Volunteer workers come and go: retrying is up "
                "to you.",
            ),
            DocumentedError(
                errors.MAX_KUDOS_EXCEEDED,
                "The kudos estimate is above `horde.max_kudos`; `metadata` holds `rc`, `kudos_estimate` and "
                "`max_kudos`.",
            ),
        ),
        401: (DocumentedError(INVALID_API_KEY, "The Horde does not know the bearer key."),),
        403: (
            DocumentedError(
                KUDOS_UPFRONT,
                "The request is over the free output allowance and the key lacks the kudos to hold upfront; `param` "
                "is the completion limit's key, `x-should-retry: false` and no `Retry-After`, and the message says "
                "how to get kudos.",
            ),
        ),
        404: (
            DocumentedError(
                errors.NO_WORKER_SUPPORTS_FEATURES,
                "No online worker serving the model declares a feature or guarantee the request needs (OpenRouter's "
                "status for no endpoint supporting the requested features); the message lists them, and "
                "`metadata.request_id` names the cancelled request.",
            ),
            DocumentedError(REQUEST_NOT_FOUND, "The Horde no longer knows the request (it expired)."),
        ),
        408: (
            DocumentedError(
                errors.CHAT_REQUEST_TIMEOUT,
                "No reply came within the front's timeout; the request was cancelled. `x-should-retry: false`: the "
                "request already waited its whole budget.",
            ),
            _REQUEST_BODY_TIMEOUT,
        ),
        413: (_REQUEST_TOO_LARGE,),
        429: _RATE_LIMITS,
        502: (
            DocumentedError(
                errors.CHAT_REQUEST_FAULTED,
                "The worker failed the request; `metadata.fault_reason` says why. With `prompt_overflow`, "
                "`x-should-retry: false`: the same prompt overflows again.",
            ),
            DocumentedError(
                errors.CHAT_REQUEST_NO_GENERATION, "The Horde ended the request without a reply; it was cancelled."
            ),
            DocumentedError(
                errors.CHAT_REQUEST_CANCELLED,
                "The Horde cancelled or dropped the request before a worker finished it (its status reads nothing "
                "waiting, processing or finished). `x-should-retry: false`: send it again to start a new request.",
            ),
            _HORDE_UNAVAILABLE,
        ),
        503: (
            DocumentedError(
                errors.NO_ELIGIBLE_WORKER,
                "No online worker can serve the request: at submit (on a Horde without chat routes, answered from its "
                "model list before any submit), or after waiting for one to appear. `Retry-After: "
                f"{errors.NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS}` and `x-should-retry: false`: a retry within seconds "
                "meets the same online workers.",
            ),
            DocumentedError(
                errors.QUEUE_UNAVAILABLE,
                "With `horde.availability_mode: fail_fast`, no eligible worker thread exists or the estimated wait "
                "exceeds the front's timeout; `param` is `horde.availability_mode`.",
            ),
            _MAINTENANCE,
            DocumentedError(
                errors.FRONT_SHUTTING_DOWN,
                "The front is stopping: it gave up waiting for the request and cancelled it at the Horde. "
                f"`Retry-After: {errors.FRONT_SHUTDOWN_RETRY_AFTER_SECONDS}`. In a stream already open it is the "
                "error event before `data: [DONE]`.",
            ),
            _FRONT_AT_CAPACITY,
        ),
    }
)
"""The error statuses of ``POST /v1/chat/completions`` with the codes each carries (reference: Error attributes, No
eligible worker, Kudos cap, Refusal attributes). A streamed request gets them as plain JSON before any stream header;
an error after the stream's headers is an SSE ``error`` event instead."""

MODEL_LIST_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        429: _RATE_LIMITS,
        502: (_HORDE_UNAVAILABLE,),
        503: (_MAINTENANCE, _FRONT_AT_CAPACITY),
    }
)
"""The error statuses of ``GET /v1/models`` with the codes each carries."""

MODEL_RETRIEVE_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        404: (
            DocumentedError(
                errors.MODEL_NOT_FOUND,
                "`GET /v1/models` does not list the model: the Horde does not know it, or no online chat worker "
                "serves it. OpenAI's message: ``The model `<id>` does not exist or you do not have access to it.``; "
                "`param` is null.",
            ),
        ),
        **MODEL_LIST_ERRORS,
    }
)
"""The error statuses of ``GET /v1/models/{model}``: those of ``GET /v1/models`` and 404 ``model_not_found``."""

LEGACY_COMPLETION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = CHAT_COMPLETION_ERRORS
"""The error statuses of ``POST /v1/completions``: those of chat completions (a model without a text API path is
served on the native chat route)."""

RETRY_HEADER_STATUSES: Final = frozenset({408, 429, 502, 503})
"""Statuses the official OpenAI SDKs retry by default, where ``Retry-After`` and ``x-should-retry`` tune the retry."""

RETRY_HEADERS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        "Retry-After": {
            "description": (
                f"Whole seconds to wait before retrying: {errors.NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS} with "
                "`no_eligible_worker`, the estimated wait (at most "
                f"{QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS}) with `queue_unavailable`, "
                f"{errors.FRONT_SHUTDOWN_RETRY_AFTER_SECONDS} with `FrontShuttingDown`, and the Horde's own value on a "
                "429 or 503 when it sent one (never on a permanent refusal)."
            ),
            "schema": {"type": "integer", "minimum": 0},
        },
        "x-should-retry": {
            "description": (
                "Whether the official OpenAI SDKs should retry; when present it decides alone. `false` with every "
                "`no_eligible_worker`, with `ChatRequestTimeout` and with a `ChatRequestFaulted` whose fault is "
                "`prompt_overflow`: a retry within seconds meets the same workers, waits the whole budget again, or "
                "overflows again; and with `InvalidAPIKey`, `KudosUpfront` and `ChatRequestCancelled`. Absent "
                "otherwise, so the SDKs' defaults apply."
            ),
            "schema": {"type": "string", "enum": ["true", "false"]},
        },
    }
)
"""The retry headers an error response may carry."""

_PREVIOUS_RESPONSE_NOT_FOUND = DocumentedError(
    errors.PREVIOUS_RESPONSE_NOT_FOUND,
    "`previous_response_id` names no response stored for this API key: never stored (`store: false`, over "
    "`HORDE_OAI_STORED_RESPONSE_MAX_BYTES`), expired (`HORDE_OAI_STORED_RESPONSE_SECONDS`), deleted, or another "
    "key's. OpenAI's message: `Previous response with id '<id>' not found.`; `param` is `previous_response_id`.",
)
_ITEM_NOT_FOUND = DocumentedError(
    errors.ITEM_NOT_FOUND,
    "An `item_reference` input item names no output item of a response stored for this API key; `param` is "
    "`input[<i>]`.",
)

RESPONSES_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        **CHAT_COMPLETION_ERRORS,
        400: (*CHAT_COMPLETION_ERRORS[400], _PREVIOUS_RESPONSE_NOT_FOUND),
        404: (*CHAT_COMPLETION_ERRORS.get(404, ()), _ITEM_NOT_FOUND),
    }
)
"""The error statuses of ``POST /v1/responses``: those of chat completions, with the stored state's
``previous_response_not_found`` (400) and ``item_not_found`` (404)."""

STORED_RESPONSE_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        401: (DocumentedError(errors.INVALID_API_KEY, "The bearer key is not printable ASCII."),),
        404: (
            DocumentedError(
                errors.RESPONSE_NOT_FOUND,
                "No response with this id is stored for this API key (never stored, expired, deleted, or "
                "another key's). OpenAI's message: `Response with id '<id>' not found.`",
            ),
        ),
    }
)
"""The error statuses of ``GET`` and ``DELETE /v1/responses/{id}``."""
