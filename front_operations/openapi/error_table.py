"""The status/code table of the OpenAPI document: each route's error codes, grouped by the status each carries.

Every fact about a code the front returns (its status, and whether its refusals send ``Retry-After`` or
``x-should-retry`` and with which value) is read from the failure catalogue, :data:`chat.errors.FAILURES`; what is
kept here is only what the document says and the catalogue does not: the public text of when each route returns a
code (:class:`DocumentedError`), the Horde's own codes the front passes through (:data:`PASSED_THROUGH_STATUSES`), and
the wording of the retry headers' descriptions (:data:`RETRY_HEADERS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from chat import errors
from chat.horde.real_horde_answers import RETRY_LATER_STATUSES
from chat.waiting.availability import QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS

REQUEST_NOT_FOUND: Final = "RequestNotFound"
"""The Horde's rc for a native request id it does not know (expired), passed through."""
TOO_MANY_PROMPTS: Final = "TooManyPrompts"
"""The Horde's rc for too many requests in flight for a key, passed through."""
MAINTENANCE_MODE: Final = "MaintenanceMode"
"""The Horde's rc while it accepts no new work, passed through."""

PASSED_THROUGH_STATUSES: Final[Mapping[str, int]] = MappingProxyType(
    {
        errors.UNKNOWN_MODEL: 400,
        REQUEST_NOT_FOUND: 404,
        TOO_MANY_PROMPTS: 429,
        MAINTENANCE_MODE: 503,
    }
)
"""The status of each Horde rc the document names that is not in the catalogue: the front passes it through with the
Horde's status, and the Horde's ``Retry-After`` only on a :data:`~chat.horde.real_horde_answers.RETRY_LATER_STATUSES`
status (chat.horde.refusals)."""


@dataclass(frozen=True)
class DocumentedError:
    """One error code a route can return, and when; its status comes from the catalogue."""

    code: str
    """The ``error.code``: a code of :data:`chat.errors.FAILURES`, or one of :data:`PASSED_THROUGH_STATUSES`."""
    when: str
    """When the route returns it (public text, Markdown)."""

    @property
    def status(self) -> int:
        """The HTTP status: the catalogue's, or the Horde's for a passed-through rc."""
        failure = errors.FAILURES.get(self.code)
        return failure.status if failure is not None else PASSED_THROUGH_STATUSES[self.code]

    def sends(self, header: str) -> bool:
        """Whether a refusal with this code may carry ``header`` (``Retry-After`` or ``x-should-retry``)."""
        failure = errors.FAILURES.get(self.code)
        if failure is None:
            return header == errors.RETRY_AFTER_HEADER and self.status in RETRY_LATER_STATUSES
        if header == errors.RETRY_AFTER_HEADER:
            return failure.sends_retry_after
        return failure.sends_should_retry


def fixed_headers(code: str) -> str:
    """The retry headers every refusal with a catalogue ``code`` sends, as the document writes them:
    ```Retry-After: 30` and `x-should-retry: false```; empty when it sends none.
    """
    failure = errors.FAILURES[code]
    sent = []
    if failure.retry_after is not None:
        sent.append(f"`{errors.RETRY_AFTER_HEADER}: {failure.retry_after}`")
    if failure.should_retry is not None:
        sent.append(f"`{errors.SHOULD_RETRY_HEADER}: {'true' if failure.should_retry else 'false'}`")
    return " and ".join(sent)


def by_status(documented: Iterable[DocumentedError]) -> Mapping[int, tuple[DocumentedError, ...]]:
    """``documented`` grouped by status, the statuses in ascending order, each status's codes in the given order."""
    grouped: dict[int, list[DocumentedError]] = {}
    for error in documented:
        grouped.setdefault(error.status, []).append(error)
    return MappingProxyType({status: tuple(grouped[status]) for status in sorted(grouped)})


_MAINTENANCE = DocumentedError(MAINTENANCE_MODE, "The Horde accepts no new work for now.")
_FRONT_AT_CAPACITY = DocumentedError(
    errors.FRONT_AT_CAPACITY,
    "The front is serving as many requests from your address, or in total, as it accepts at once "
    "(`HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT`, `HORDE_OAI_MAX_IN_FLIGHT`); `Retry-After` says when to retry.",
)
_RATE_LIMITS = (
    DocumentedError(errors.RATE_LIMIT_EXCEEDED, "The Horde rate-limited the request without a code of its own."),
    DocumentedError(TOO_MANY_PROMPTS, "The key has too many requests in flight at the Horde."),
)
_HORDE_UNAVAILABLE = DocumentedError(
    errors.HORDE_UNAVAILABLE, "The Horde could not be reached, or answered outside its contract."
)

_CHAT_COMPLETION_ERRORS: Final[tuple[DocumentedError, ...]] = (
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
        errors.CONTEXT_LENGTH_EXCEEDED,
        "Through the Horde's text generation API, the rendered prompt cannot fit the context even with the oldest "
        "turns left out (OpenAI's wording); `param` is `messages`.",
    ),
    DocumentedError(
        errors.MAX_KUDOS_EXCEEDED,
        "The kudos estimate is above `horde.max_kudos`; `metadata` holds `rc`, `kudos_estimate` and `max_kudos`.",
    ),
    DocumentedError(errors.INVALID_API_KEY, "The Horde does not know the bearer key."),
    DocumentedError(
        errors.KUDOS_UPFRONT,
        "The request is over the free output allowance and the key lacks the kudos to hold upfront; `param` "
        f"is the completion limit's key, {fixed_headers(errors.KUDOS_UPFRONT)} and no `Retry-After`, and the "
        "message says how to get kudos.",
    ),
    DocumentedError(
        errors.NO_WORKER_SUPPORTS_FEATURES,
        "No online worker serving the model declares a feature or guarantee the request needs (OpenRouter's "
        "status for no endpoint supporting the requested features); the message lists them, and "
        "`metadata.request_id` names the cancelled request.",
    ),
    DocumentedError(REQUEST_NOT_FOUND, "The Horde no longer knows the request (it expired)."),
    DocumentedError(
        errors.CHAT_REQUEST_TIMEOUT,
        "No reply came within the front's timeout; the request was cancelled. "
        f"{fixed_headers(errors.CHAT_REQUEST_TIMEOUT)}: the request already waited its whole budget.",
    ),
    DocumentedError(errors.REQUEST_BODY_TIMEOUT, "The body did not arrive within `HORDE_OAI_BODY_TIMEOUT_SECONDS`."),
    DocumentedError(
        errors.REQUEST_TOO_LARGE,
        "The body is over the front's limit (`HORDE_OAI_MAX_BODY_BYTES`), refused from `Content-Length` or as soon "
        "as the bytes received pass it, before the body is read.",
    ),
    *_RATE_LIMITS,
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
        f"waiting, processing or finished). {fixed_headers(errors.CHAT_REQUEST_CANCELLED)}: send it again to start "
        "a new request.",
    ),
    DocumentedError(
        errors.MODEL_REPLY_INVALID,
        "Text path only: the model's reply holds no valid tool call or JSON where the request needs one (a call "
        "that does not parse, an undeclared function, arguments outside a strict schema, JSON that does not match "
        "`response_format`), after `HORDE_OAI_TEXT_REPAIR_ATTEMPTS` repair turns; the message says what was wrong. "
        "No `x-should-retry`: the SDKs retry a 502 by default, and a retry samples the model again.",
    ),
    _HORDE_UNAVAILABLE,
    DocumentedError(
        errors.NO_ELIGIBLE_WORKER,
        "No online worker can serve the request: at submit (on a Horde without chat routes, answered from its "
        f"model list before any submit), or after waiting for one to appear. {fixed_headers(errors.NO_ELIGIBLE_WORKER)}"
        ": a retry within seconds meets the same online workers.",
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
        f"{fixed_headers(errors.FRONT_SHUTTING_DOWN)}. In a stream already open it is the error event before "
        "`data: [DONE]`.",
    ),
    _FRONT_AT_CAPACITY,
)

CHAT_COMPLETION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = by_status(_CHAT_COMPLETION_ERRORS)
"""The error statuses of ``POST /v1/chat/completions`` with the codes each carries (reference: Error attributes, No
eligible worker, Kudos cap, Refusal attributes). A streamed request gets them as plain JSON before any stream header;
an error after the stream's headers is an SSE ``error`` event instead."""

_MODEL_LIST_ERRORS: Final[tuple[DocumentedError, ...]] = (
    *_RATE_LIMITS,
    _HORDE_UNAVAILABLE,
    _MAINTENANCE,
    _FRONT_AT_CAPACITY,
)

MODEL_LIST_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = by_status(_MODEL_LIST_ERRORS)
"""The error statuses of ``GET /v1/models`` with the codes each carries."""

MODEL_RETRIEVE_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = by_status(
    (
        DocumentedError(
            errors.MODEL_NOT_FOUND,
            "`GET /v1/models` does not list the model: the Horde does not know it, or no online chat worker "
            "serves it. OpenAI's message: ``The model `<id>` does not exist or you do not have access to it.``; "
            "`param` is null.",
        ),
        *_MODEL_LIST_ERRORS,
    )
)
"""The error statuses of ``GET /v1/models/{model}``: those of ``GET /v1/models`` and 404 ``model_not_found``."""

LEGACY_COMPLETION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = CHAT_COMPLETION_ERRORS
"""The error statuses of ``POST /v1/completions``: those of chat completions (a model without a text API path is
served on the native chat route)."""

RESPONSES_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = by_status(
    (
        *_CHAT_COMPLETION_ERRORS,
        DocumentedError(
            errors.PREVIOUS_RESPONSE_NOT_FOUND,
            "`previous_response_id` names no response stored for this API key: never stored (`store: false`, over "
            "`HORDE_OAI_STORED_RESPONSE_MAX_BYTES`), expired (`HORDE_OAI_STORED_RESPONSE_SECONDS`), deleted, or "
            "another key's. OpenAI's message: `Previous response with id '<id>' not found.`; `param` is "
            "`previous_response_id`.",
        ),
        DocumentedError(
            errors.ITEM_NOT_FOUND,
            "An `item_reference` input item names no output item of a response stored for this API key; `param` is "
            "`input[<i>]`.",
        ),
    )
)
"""The error statuses of ``POST /v1/responses``: those of chat completions, with the stored state's
``previous_response_not_found`` (400) and ``item_not_found`` (404)."""

STORED_RESPONSE_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = by_status(
    (
        DocumentedError(errors.INVALID_API_KEY, "The bearer key is not printable ASCII."),
        DocumentedError(
            errors.RESPONSE_NOT_FOUND,
            "No response with this id is stored for this API key (never stored, expired, deleted, or "
            "another key's). OpenAI's message: `Response with id '<id>' not found.`",
        ),
        _FRONT_AT_CAPACITY,
    )
)
"""The error statuses of ``GET`` and ``DELETE /v1/responses/{id}``: the front's own store, so no Horde ``rc`` is
passed through (front_operations.openapi.document.route_responses, ``calls_the_horde``); the in-flight caps apply
(oaifront.guards)."""


IMAGE_GENERATION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = by_status(
    (
        DocumentedError(
            errors.BAD_REQUEST,
            "The body is not a JSON object or fails validation (OpenAI's wording: `n` 1-10, `size` `WIDTHxHEIGHT` in "
            "multiples of 64 from 64 to 3072, a `horde` option outside the Horde's bounds, an unknown key), or the "
            "Horde refused the payload; `param` is the first failing field.",
        ),
        DocumentedError(
            errors.UNSUPPORTED_CHAT_PARAMETER,
            "A key or value the Horde cannot serve (`style: natural`, `moderation: low`, `output_format` `gif` or "
            "`svg`, `partial_images` above 0, a streamed `url`, `complexity`, `frame_count`, `svg`); `param` is the "
            "key.",
        ),
        DocumentedError(
            errors.CONTENT_POLICY_VIOLATION,
            "A worker's NSFW censor blanked an image: never returned as a success, whatever the other images; "
            "`metadata.request_id` names the request.",
        ),
        DocumentedError(
            errors.MAX_KUDOS_EXCEEDED,
            "The Horde's dry run prices the request (one image's kudos times `n`) above `horde.max_kudos`; nothing "
            "was submitted. `metadata` holds `kudos_estimate` and `max_kudos`.",
        ),
        DocumentedError(errors.INVALID_API_KEY, "The Horde does not know the bearer key."),
        DocumentedError(
            errors.KUDOS_UPFRONT,
            "The request needs kudos upfront (over 1024x1024, over 40 steps, `horde.slow_workers: false`) and the "
            f"key lacks them; `param` is `size`, {fixed_headers(errors.KUDOS_UPFRONT)}, and the message says how to "
            "get kudos or what to lower (`size`, `quality`, `horde.steps`, `horde.allow_downgrade: true`).",
        ),
        DocumentedError(REQUEST_NOT_FOUND, "The Horde no longer knows the request (it expired)."),
        DocumentedError(
            errors.CHAT_REQUEST_TIMEOUT,
            "No image within `HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS`; the request was cancelled. "
            f"{fixed_headers(errors.CHAT_REQUEST_TIMEOUT)}.",
        ),
        DocumentedError(
            errors.REQUEST_BODY_TIMEOUT, "The body did not arrive within `HORDE_OAI_BODY_TIMEOUT_SECONDS`."
        ),
        DocumentedError(errors.REQUEST_TOO_LARGE, "The body is over the front's limit (`HORDE_OAI_MAX_BODY_BYTES`)."),
        *_RATE_LIMITS,
        DocumentedError(
            errors.CHAT_REQUEST_CANCELLED,
            "The Horde cancelled or dropped the request before its images were made. "
            f"{fixed_headers(errors.CHAT_REQUEST_CANCELLED)}: send it again to start a new request.",
        ),
        DocumentedError(
            errors.IMAGE_REQUEST_INCOMPLETE,
            "The Horde ended the request with fewer images than `n` (its workers failed the rest); no image is "
            "returned. `metadata` holds `request_id`, `images` and `n`.",
        ),
        _HORDE_UNAVAILABLE,
        DocumentedError(
            errors.NO_ELIGIBLE_WORKER,
            "No online image worker serves the model (or the size and options): at once, from the Horde's "
            "`NoAvailableWorker` warning at submit, or after `HORDE_OAI_FAIL_FAST_GRACE_SECONDS` of the Horde "
            f"reporting the request impossible; the request is cancelled. {fixed_headers(errors.NO_ELIGIBLE_WORKER)}.",
        ),
        _MAINTENANCE,
        DocumentedError(
            errors.FRONT_SHUTTING_DOWN,
            "The front is stopping: it gave up waiting and cancelled the request at the Horde. "
            f"{fixed_headers(errors.FRONT_SHUTTING_DOWN)}. In a stream already open it is the error event before "
            "`data: [DONE]`.",
        ),
        _FRONT_AT_CAPACITY,
    )
)
"""The error statuses of ``POST /v1/images/generations`` with the codes each carries (docs/images.md, "Errors"). A
streamed request gets them as plain JSON before any stream header, an error after them as one error event."""


def _enumerate(items: Sequence[str], last: str = " and ") -> str:
    """``a, b and c`` (``last`` before the last item)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + last + items[-1]


COMPUTED_RETRY_AFTER: Final[Mapping[str, str | None]] = MappingProxyType(
    {
        errors.RATE_LIMIT_EXCEEDED: None,
        errors.QUEUE_UNAVAILABLE: f"the estimated wait (at most {QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS})",
        errors.FRONT_AT_CAPACITY: "`HORDE_OAI_CAPACITY_RETRY_AFTER_SECONDS`",
    }
)
"""What ``Retry-After`` holds for each catalogue code whose builder sets it per refusal; None where it is the Horde's
own value (the description's closing clause)."""

SHOULD_RETRY_WORDING: Final[Mapping[str, tuple[str, str | None]]] = MappingProxyType(
    {
        errors.NO_ELIGIBLE_WORKER: ("every `no_eligible_worker`", "within seconds meets the same workers"),
        errors.CHAT_REQUEST_TIMEOUT: ("`ChatRequestTimeout`", "waits the whole budget again"),
        errors.CHAT_REQUEST_FAULTED: ("a `ChatRequestFaulted` whose fault is `prompt_overflow`", "overflows again"),
        errors.INVALID_API_KEY: ("`InvalidAPIKey`", None),
        errors.KUDOS_UPFRONT: ("`KudosUpfront`", None),
        errors.CHAT_REQUEST_CANCELLED: ("`ChatRequestCancelled`", None),
        errors.MODEL_REPLY_INVALID: ("`ModelReplyInvalid`", None),
    }
)
"""How the ``x-should-retry`` description names each catalogue code that sends ``false``, in its order, and why a
retry is pointless (None: no reason given); the codes are checked against the catalogue."""

SHOULD_RETRY_TRUE_WORDING: Final[Mapping[str, str]] = MappingProxyType({errors.FRONT_AT_CAPACITY: "`FrontAtCapacity`"})
"""How the ``x-should-retry`` description names each catalogue code that sends ``true`` (a busy moment of this
front: a retry after ``Retry-After`` is served); checked against the catalogue."""


def retry_after_description() -> str:
    """The ``Retry-After`` description: the catalogue's fixed values and computed codes, in catalogue order."""
    values = []
    for failure in errors.FAILURES.values():
        if failure.retry_after is not None:
            values.append(f"{failure.retry_after} with `{failure.code}`")
        elif failure.sends_retry_after and (value := COMPUTED_RETRY_AFTER[failure.code]) is not None:
            values.append(f"{value} with `{failure.code}`")
    horde = f"the Horde's own value on a {_enumerate([str(status) for status in sorted(RETRY_LATER_STATUSES)], ' or ')}"
    return (
        f"Whole seconds to wait before retrying: {', '.join(values)}, and {horde} when it sent one (never on a "
        "permanent refusal)."
    )


def should_retry_description() -> str:
    """The ``x-should-retry`` description: every catalogue code that sends it, named by :data:`SHOULD_RETRY_WORDING`.

    Raises:
        ValueError: the catalogue's codes that send ``x-should-retry`` are not those the wording names, or one sends
            ``true`` but is not in :data:`SHOULD_RETRY_TRUE_WORDING`.
    """
    sending = {failure.code for failure in errors.FAILURES.values() if failure.sends_should_retry}
    sending_true = {failure.code for failure in errors.FAILURES.values() if failure.should_retry}
    if sending != set(SHOULD_RETRY_WORDING) | set(SHOULD_RETRY_TRUE_WORDING) or sending_true != set(
        SHOULD_RETRY_TRUE_WORDING
    ):
        raise ValueError(f"x-should-retry: the catalogue's codes {sorted(sending)} are not the documented ones")
    reasoned = [(name, reason) for name, reason in SHOULD_RETRY_WORDING.values() if reason is not None]
    plain = [name for name, reason in SHOULD_RETRY_WORDING.values() if reason is None]
    with_reasons = _enumerate([reasoned[0][0], *(f"with {name}" for name, _ in reasoned[1:])])
    reasons = _enumerate([reason for _, reason in reasoned], ", or ")
    return (
        "Whether the official OpenAI SDKs should retry; when present it decides alone. `false` with "
        f"{with_reasons}: a retry {reasons}; and with {_enumerate(plain)}. `true` with "
        f"{_enumerate(list(SHOULD_RETRY_TRUE_WORDING.values()))}: the front is busy for a moment, and a retry after "
        "`Retry-After` is served. Absent otherwise, so the SDKs' defaults apply."
    )


RETRY_HEADERS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        errors.RETRY_AFTER_HEADER: {
            "description": retry_after_description(),
            "schema": {"type": "integer", "minimum": 0},
        },
        errors.SHOULD_RETRY_HEADER: {
            "description": should_retry_description(),
            "schema": {"type": "string", "enum": ["true", "false"]},
        },
    }
)
"""The retry headers an error response may carry."""


def retry_headers(status: int, documented: Iterable[DocumentedError]) -> dict[str, Mapping[str, Any]]:
    """The retry headers (:data:`RETRY_HEADERS`) a response of ``status`` may carry: each one some code listed at it
    sends (:meth:`DocumentedError.sends`), and ``Retry-After`` on a 429 or 503, where a Horde rc passes through with
    the Horde's value.
    """
    listed = tuple(documented)
    return {
        header: description
        for header, description in RETRY_HEADERS.items()
        if any(error.sends(header) for error in listed)
        or (header == errors.RETRY_AFTER_HEADER and status in RETRY_LATER_STATUSES)
    }
