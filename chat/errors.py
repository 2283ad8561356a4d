"""The OpenAI error envelope and the front's failure catalogue: every code, its status, type and retry headers.

Every refusal the front returns is ``{"error": {"message", "type", "param", "code"}}`` (plus ``metadata`` where the
reference adds it), the shape OpenAI's API and the official SDKs read. ``x-should-retry`` tells the official SDK
whether to retry (it decides alone when present); ``Retry-After`` is in whole seconds. Before the headers a failure
is that JSON body with its status; in a stream whose headers went out it is one ``data: {"error": ...}`` event
(:meth:`OpenAIError.stream_event`, the headers' values under ``metadata``) before ``data: [DONE]``.

The failure tree (who raises what; each leaf is a code of :data:`FAILURES`)::

    OpenAIError
    ├── the body (chat.reading, oaifront.guards)
    │   ├── BadRequest ................ 400  not JSON, not an object, fails validation
    │   ├── UnsupportedChatParameter .. 400  a key or value the Horde cannot serve
    │   ├── ChatRequestConflict ....... 400  keys that contradict each other
    │   ├── InvalidAPIKey ............. 401  a bearer key no header can carry
    │   ├── method_not_allowed ........ 405  another method than the route's
    │   ├── RequestBodyTimeout ........ 408  the body did not arrive in time
    │   └── RequestTooLarge ........... 413  the body is over the limit
    ├── stored responses (chat.serving.stored_responses)
    │   ├── previous_response_not_found 400  previous_response_id names no stored response
    │   ├── item_not_found ............ 404  an item_reference names no stored item
    │   └── response_not_found ........ 404  GET / DELETE /v1/responses/{id} of no stored response
    ├── the route (chat.serving)
    │   ├── model_not_found ........... 404  no such model (GET /v1/models/{model})
    │   ├── context_length_exceeded ... 400  the prompt cannot fit (text path)
    │   ├── max_kudos_exceeded ........ 400  the kudos estimate is over horde.max_kudos
    │   └── content_policy_violation .. 400  (images) a worker's censor blanked an image
    ├── availability (chat.waiting, chat.horde.refusals, chat.serving.route_choice)
    │   ├── no_worker_supports_limit .. 400  no worker declares the limit, or over the real Horde's 4096
    │   ├── KudosUpfront .............. 403  the key lacks the kudos a large request needs upfront
    │   ├── no_worker_supports_features 404  no worker declares a feature
    │   ├── no_eligible_worker ........ 503  no worker can serve it, at submit or after the grace
    │   ├── queue_unavailable ......... 503  fail_fast: no thread, or the queue wait is over budget
    │   └── rate_limit_exceeded ....... 429  the Horde rate-limited without a code (its rc passes through otherwise)
    ├── the wait (chat.waiting.waiter, chat.streaming.relayed)
    │   ├── ChatRequestTimeout ........ 408  the budget ran out
    │   ├── ChatRequestFaulted ........ 502  the worker failed it
    │   ├── ChatRequestNoGeneration ... 502  done without a generation
    │   ├── ChatRequestCancelled ...... 502  the Horde cancelled or emptied it (text path: n = 0)
    │   ├── ModelReplyInvalid ......... 502  (text path) no valid call or JSON after the repair attempts
    │   ├── ImageRequestIncomplete .... 502  (images) done with fewer images than n (a faulted job)
    │   └── ChatStreamDiverged ........ 502  (mid-stream only) the final reply is not the relayed text
    └── the front and the Horde (chat.horde, oaifront.guards, chat.serving.runtime)
        ├── HordeUnavailable .......... 502  unreachable, a 5xx, or an answer outside the contract
        ├── FrontAtCapacity ........... 503  the in-flight caps are reached
        └── FrontShuttingDown ......... 503  the process is stopping

A Horde refusal with an rc of its own (``TooManyPrompts``, ``MaintenanceMode``, ...) passes through with the
Horde's status, and its ``Retry-After`` only on a 429 or 503 (chat.horde.refusals; the real AI Horde sends one on every
answer); ``KudosUpfront`` is the Horde's rc too, answered with how to get kudos (chat.horde.real_horde_answers). The
table (:data:`FAILURES`; a
``Retry-After`` or ``x-should-retry`` of "-" is not sent, "computed" is set per refusal by its builder):

=============================  ======  ======================  ============  ==============
code                           status  type                    Retry-After   x-should-retry
=============================  ======  ======================  ============  ==============
BadRequest                     400     invalid_request_error   -            -
UnsupportedChatParameter       400     invalid_request_error   -            -
ChatRequestConflict            400     invalid_request_error   -            -
context_length_exceeded        400     invalid_request_error   -            -
max_kudos_exceeded             400     invalid_request_error   -            -
content_policy_violation       400     invalid_request_error   -            -
no_worker_supports_limit       400     invalid_request_error   -            -
previous_response_not_found    400     invalid_request_error   -            -
InvalidAPIKey                  401     authentication_error    -            false
KudosUpfront                   403     permission_error        -            false
model_not_found                404     not_found_error         -            -
no_worker_supports_features    404     not_found_error         -            -
item_not_found                 404     invalid_request_error   -            -
response_not_found             404     invalid_request_error   -            -
method_not_allowed             405     invalid_request_error   -            -
ChatRequestTimeout             408     timeout_error           -            false
RequestBodyTimeout             408     timeout_error           -            -
RequestTooLarge                413     invalid_request_error   -            -
rate_limit_exceeded            429     rate_limit_error        the Horde's   -
ChatRequestFaulted             502     api_error               -            computed
ChatRequestNoGeneration        502     api_error               -            -
ChatRequestCancelled           502     api_error               -            false
ModelReplyInvalid              502     api_error               -            false
ChatStreamDiverged             502     api_error               -            -
ImageRequestIncomplete         502     api_error               -            -
HordeUnavailable               502     api_error               -            -
no_eligible_worker             503     api_error               30            false
queue_unavailable              503     api_error               computed      -
FrontAtCapacity                503     api_error               computed      true
FrontShuttingDown              503     api_error               5             -
=============================  ======  ======================  ============  ==============
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final

from django.http import HttpResponse

ERROR_TYPE_BY_STATUS: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
"""OpenAI's ``error.type`` for each client-error status; every 5xx is ``api_error``."""

# Codes the front itself returns (the Horde's own rc values pass through as codes too).
BAD_REQUEST: Final = "BadRequest"
UNSUPPORTED_CHAT_PARAMETER: Final = "UnsupportedChatParameter"
CHAT_REQUEST_CONFLICT: Final = "ChatRequestConflict"
NO_ELIGIBLE_WORKER: Final = "no_eligible_worker"
NO_WORKER_SUPPORTS_FEATURES: Final = "no_worker_supports_features"
NO_WORKER_SUPPORTS_LIMIT: Final = "no_worker_supports_limit"
QUEUE_UNAVAILABLE: Final = "queue_unavailable"
RATE_LIMIT_EXCEEDED: Final = "rate_limit_exceeded"
CHAT_REQUEST_TIMEOUT: Final = "ChatRequestTimeout"
CHAT_REQUEST_FAULTED: Final = "ChatRequestFaulted"
CHAT_REQUEST_NO_GENERATION: Final = "ChatRequestNoGeneration"
CHAT_STREAM_DIVERGED: Final = "ChatStreamDiverged"
HORDE_UNAVAILABLE: Final = "HordeUnavailable"
REQUEST_TOO_LARGE: Final = "RequestTooLarge"
"""413: the request body is over ``HORDE_OAI_MAX_BODY_BYTES`` (oaifront.guards)."""
REQUEST_BODY_TIMEOUT: Final = "RequestBodyTimeout"
"""408: the request body did not arrive within ``HORDE_OAI_BODY_TIMEOUT_SECONDS`` (oaifront.guards)."""
FRONT_AT_CAPACITY: Final = "FrontAtCapacity"
"""503: the in-flight cap per client address or in total, or the request-body memory budget, is reached
(oaifront.guards)."""
FRONT_SHUTTING_DOWN: Final = "FrontShuttingDown"
"""503 of a request the front ended because its process is stopping (SIGTERM); the request was cancelled."""
MAX_KUDOS_EXCEEDED: Final = "max_kudos_exceeded"
CHAT_KUDOS_CAP_EXCEEDED: Final = "ChatKudosCapExceeded"
"""The native rc of a submit refused because its kudos estimate exceeds ``max_kudos`` (reference: Kudos cap)."""
INVALID_API_KEY: Final = "InvalidAPIKey"
KUDOS_UPFRONT: Final = "KudosUpfront"
"""403 (the Horde's rc, ``horde/apis/v2/kobold.py:150-157``): the key does not hold the kudos a request over the
Horde's free allowance needs upfront (chat.horde.real_horde_answers.kudos_upfront_error)."""
MODEL_REPLY_INVALID: Final = "ModelReplyInvalid"
"""502 on the text path: the model's reply holds no valid tool call or JSON where the request needs one, after
``HORDE_OAI_TEXT_REPAIR_ATTEMPTS`` repairs (chat.horde.text.TextRoutes). No ``x-should-retry``: the SDKs retry a 502
by default, and a retry samples the model again."""
CHAT_REQUEST_CANCELLED: Final = "ChatRequestCancelled"
"""502: the Horde cancelled or emptied the request while the front waited for it (chat.horde.real_horde_answers)."""
METHOD_NOT_ALLOWED: Final = "method_not_allowed"
CONTENT_POLICY_VIOLATION: Final = "content_policy_violation"
"""OpenAI's 400 code of an image its safety system refused; here an image a worker's censor blanked (images)."""
IMAGE_REQUEST_INCOMPLETE: Final = "ImageRequestIncomplete"
"""502 of an image request the Horde ended with fewer images than ``n``: its jobs faulted (images)."""
MODEL_NOT_FOUND: Final = "model_not_found"
"""OpenAI's 404 code for ``GET /v1/models/{model}`` of a model the model list does not hold."""
PREVIOUS_RESPONSE_NOT_FOUND: Final = "previous_response_not_found"
"""OpenAI's code for a ``previous_response_id`` it does not hold (400, ``invalid_request_error``)."""
ITEM_NOT_FOUND: Final = "item_not_found"
"""404 of an ``item_reference`` the front does not hold (OpenAI's type for it, ``invalid_request_error``)."""
RESPONSE_NOT_FOUND: Final = "response_not_found"
"""404 of ``GET`` / ``DELETE /v1/responses/{id}`` for a response the key did not store."""
NO_ELIGIBLE_WORKER_RC: Final = "NoEligibleWorker"
"""The native rc of a submit no online worker can serve (503, or 403 with an optional ``impossible_reason``)."""

QUEUE_POSITION_HEADER: Final[str] = "x-horde-queue-position"
"""The response header with a waiting request's ``queue_position`` (chat.rendering.progress, issue 25)."""

WAIT_TIME_HEADER: Final[str] = "x-horde-wait-time"
"""The response header with a waiting request's ``wait_time`` in seconds (chat.rendering.progress, issue 25)."""


CONTEXT_LENGTH_EXCEEDED: Final = "context_length_exceeded"
"""OpenAI's code for a prompt that does not fit the model's context (the text path)."""

NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS: Final = 30
"""``Retry-After`` of every ``no_eligible_worker`` (reference: Model availability)."""

FRONT_SHUTDOWN_RETRY_AFTER_SECONDS: Final = 5
"""``Retry-After`` of ``FrontShuttingDown``: a restarted front, or another process behind the same address, serves
again within seconds."""

RETRY_AFTER_HEADER: Final = "Retry-After"
"""The header of the whole seconds to wait before retrying."""
SHOULD_RETRY_HEADER: Final = "x-should-retry"
"""The header the official OpenAI SDKs read to decide alone whether to retry (``true`` / ``false``)."""

CORS_HEADERS: Final[Mapping[str, str]] = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": ", ".join(
        (RETRY_AFTER_HEADER, SHOULD_RETRY_HEADER, QUEUE_POSITION_HEADER, WAIT_TIME_HEADER)
    ),
}
"""Headers every response carries so browser clients such as KoboldAI Lite can call the front (Browser access):
the retry headers and the queue-progress headers are exposed, so a browser client can read them too.
"""


@dataclass(frozen=True)
class Failure:
    """One code of the catalogue: its status and, when every refusal with it sends them, its retry headers."""

    code: str
    status: int
    when: str
    retry_after: int | None = None
    """The ``Retry-After`` every refusal with this code sends; None when none does or its builder computes it."""
    should_retry: bool | None = None
    """The ``x-should-retry`` every refusal with this code sends; None when none does or its builder decides."""
    error_type: str | None = None
    """OpenAI's ``error.type`` where OpenAI sends another than the status's (its 404s of stored state)."""
    computed: frozenset[str] = frozenset()
    """The retry headers (:data:`RETRY_AFTER_HEADER`, :data:`SHOULD_RETRY_HEADER`) its builder sets per refusal: the
    table's "computed" (and ``rate_limit_exceeded``'s ``Retry-After``, the Horde's)."""

    @property
    def type(self) -> str:
        """OpenAI's ``error.type``: :attr:`error_type`, or the status's."""
        return self.error_type or error_type_for_status(self.status)

    @property
    def sends_retry_after(self) -> bool:
        """Whether a refusal with this code may carry ``Retry-After`` (a fixed value, or one set per refusal)."""
        return self.retry_after is not None or RETRY_AFTER_HEADER in self.computed

    @property
    def sends_should_retry(self) -> bool:
        """Whether a refusal with this code may carry ``x-should-retry`` (a fixed value, or one set per refusal)."""
        return self.should_retry is not None or SHOULD_RETRY_HEADER in self.computed


FAILURES: Final[Mapping[str, Failure]] = {
    failure.code: failure
    for failure in (
        Failure(
            BAD_REQUEST, 400, "the body is not a JSON object or fails validation, or the Horde refused the payload"
        ),
        Failure(UNSUPPORTED_CHAT_PARAMETER, 400, "a key, value, role or content part the Horde cannot serve"),
        Failure(CHAT_REQUEST_CONFLICT, 400, "keys that contradict each other (tool_choice without tools, ...)"),
        Failure(CONTEXT_LENGTH_EXCEEDED, 400, "the rendered prompt cannot fit the context (text path)"),
        Failure(MAX_KUDOS_EXCEEDED, 400, "the kudos estimate is above horde.max_kudos"),
        Failure(CONTENT_POLICY_VIOLATION, 400, "a worker's NSFW censor blanked an image (images)"),
        Failure(NO_WORKER_SUPPORTS_LIMIT, 400, "no online worker declares the completion limit or context length"),
        Failure(PREVIOUS_RESPONSE_NOT_FOUND, 400, "previous_response_id names no response stored for the key"),
        Failure(
            INVALID_API_KEY,
            401,
            "the Authorization header is not Bearer, or its key is not printable ASCII (the Horde's rc of an unknown "
            "key too)",
            should_retry=False,
        ),
        Failure(
            KUDOS_UPFRONT,
            403,
            "the key lacks the kudos the request needs upfront (the Horde's rc); the message says how to get kudos",
            should_retry=False,
        ),
        Failure(MODEL_NOT_FOUND, 404, "the model list does not hold the model (GET /v1/models/{model})"),
        Failure(NO_WORKER_SUPPORTS_FEATURES, 404, "no online worker declares a feature or guarantee the request needs"),
        Failure(
            ITEM_NOT_FOUND,
            404,
            "an item_reference names no item stored for the key",
            error_type="invalid_request_error",
        ),
        Failure(
            RESPONSE_NOT_FOUND,
            404,
            "GET or DELETE /v1/responses/{id} of no response stored for the key",
            error_type="invalid_request_error",
        ),
        Failure(METHOD_NOT_ALLOWED, 405, "another method than the route's"),
        Failure(CHAT_REQUEST_TIMEOUT, 408, "no reply within the front's timeout", should_retry=False),
        Failure(REQUEST_BODY_TIMEOUT, 408, "the body did not arrive within HORDE_OAI_BODY_TIMEOUT_SECONDS"),
        Failure(REQUEST_TOO_LARGE, 413, "the body is over HORDE_OAI_MAX_BODY_BYTES"),
        Failure(
            RATE_LIMIT_EXCEEDED,
            429,
            "the Horde rate-limited the request without a code of its own",
            computed=frozenset({RETRY_AFTER_HEADER}),
        ),
        Failure(
            CHAT_REQUEST_FAULTED,
            502,
            "the worker failed the request (x-should-retry false for prompt_overflow)",
            computed=frozenset({SHOULD_RETRY_HEADER}),
        ),
        Failure(CHAT_REQUEST_NO_GENERATION, 502, "the Horde ended the request without a reply"),
        Failure(
            MODEL_REPLY_INVALID,
            502,
            "text path: the reply holds no valid tool call or JSON where one is needed, after the repair attempts",
            should_retry=False,
        ),
        Failure(
            CHAT_REQUEST_CANCELLED,
            502,
            "the Horde cancelled or emptied the request before a worker finished it",
            should_retry=False,
        ),
        Failure(CHAT_STREAM_DIVERGED, 502, "mid-stream: the final reply does not start with the relayed text"),
        Failure(IMAGE_REQUEST_INCOMPLETE, 502, "the Horde ended an image request with fewer images than n (images)"),
        Failure(HORDE_UNAVAILABLE, 502, "the Horde could not be reached, or answered a 5xx or outside its contract"),
        Failure(
            NO_ELIGIBLE_WORKER,
            503,
            "no online worker can serve the request, at submit or after the grace",
            retry_after=NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS,
            should_retry=False,
        ),
        Failure(
            QUEUE_UNAVAILABLE,
            503,
            "fail_fast: no eligible thread, or the queue wait exceeds the budget",
            computed=frozenset({RETRY_AFTER_HEADER}),
        ),
        Failure(
            FRONT_AT_CAPACITY,
            503,
            "the in-flight cap per client address or in total, or the request-body memory budget, is reached",
            should_retry=True,
            computed=frozenset({RETRY_AFTER_HEADER}),
        ),
        Failure(
            FRONT_SHUTTING_DOWN,
            503,
            "the process is stopping; the request was cancelled",
            retry_after=FRONT_SHUTDOWN_RETRY_AFTER_SECONDS,
        ),
    )
}
"""The failure catalogue: every code the front itself returns, by code (the table of the module docstring)."""


def failure(  # noqa: PLR0913 - the envelope's optional fields, each a keyword a refusal may set
    code: str,
    message: str,
    *,
    param: str | None = None,
    metadata: dict[str, Any] | None = None,
    retry_after: int | None = None,
    should_retry: bool | None = None,
    extra_headers: dict[str, str] | None = None,
) -> OpenAIError:
    """The :class:`OpenAIError` of a catalogue code: status, type and the code's fixed retry headers from
    :data:`FAILURES`; ``retry_after`` and ``should_retry`` set the computed ones.
    """
    entry = FAILURES[code]
    return OpenAIError(
        status=entry.status,
        message=message,
        code=code,
        param=param,
        type=entry.type,
        metadata=metadata,
        retry_after=retry_after if retry_after is not None else entry.retry_after,
        should_retry=should_retry if should_retry is not None else entry.should_retry,
        extra_headers=dict(extra_headers or {}),
    )


def error_type_for_status(status: int) -> str:
    """Return OpenAI's ``error.type`` for an HTTP status: ``api_error`` for 5xx, ``invalid_request_error`` default."""
    if status >= 500:
        return "api_error"
    return ERROR_TYPE_BY_STATUS.get(status, "invalid_request_error")


QUOTED_INPUT_CHARS: Final[int] = 64
"""The most characters of a client's own text (a key, an id, a value) an error message or log line quotes."""

MAX_ERROR_MESSAGE_CHARS: Final[int] = 2048
"""The longest ``message`` of an envelope: a message that would quote more of a client's input is cut here."""

MAX_ERROR_PARAM_CHARS: Final[int] = 256
"""The longest ``param`` of an envelope (a request path, which holds the client's key names)."""


def clip(text: str, limit: int = QUOTED_INPUT_CHARS) -> str:
    """``text`` cut to ``limit`` characters with ``…`` when longer: a client's input as a message quotes it."""
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(eq=False)
class OpenAIError(Exception):
    """A refusal in OpenAI's error envelope.

    Attributes:
        status: The HTTP status (400, 404, 503, ...).
        message: The human sentence; OpenAI's own wording where the reference asks for it.
        code: The error code (the front's, such as ``UnsupportedChatParameter``, or the Horde's rc).
        param: The request path at fault, or None; cut to :data:`MAX_ERROR_PARAM_CHARS` (``message`` to
            :data:`MAX_ERROR_MESSAGE_CHARS`), so no client input is echoed without bound.
        type: OpenAI's error type; derived from the status when not given.
        metadata: Extra fields under ``error.metadata`` (``request_id``, ``retry_after``, ``rc``, ...), or None.
        retry_after: Seconds for the ``Retry-After`` header, or None for no header.
        should_retry: The ``x-should-retry`` header value, or None for no header.
    """

    status: int
    message: str
    code: str | None = None
    param: str | None = None
    type: str | None = None
    metadata: dict[str, Any] | None = None
    retry_after: int | None = None
    should_retry: bool | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.message = clip(self.message, MAX_ERROR_MESSAGE_CHARS)
        if self.param is not None:
            self.param = clip(self.param, MAX_ERROR_PARAM_CHARS)
        super().__init__(self.message)
        if self.type is None:
            self.type = error_type_for_status(self.status)

    def envelope(self) -> dict[str, Any]:
        """Return ``{"error": {"message", "type", "param", "code"[, "metadata"]}}``."""
        body: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code,
        }
        if self.metadata:
            body["metadata"] = dict(self.metadata)
        return {"error": body}

    def headers(self) -> dict[str, str]:
        """Return the response headers: ``Retry-After`` and ``x-should-retry`` when set, plus any extras."""
        headers = dict(self.extra_headers)
        if self.retry_after is not None:
            headers[RETRY_AFTER_HEADER] = str(self.retry_after)
        if self.should_retry is not None:
            headers[SHOULD_RETRY_HEADER] = "true" if self.should_retry else "false"
        return headers

    def to_response(self) -> HttpResponse:
        """Return the JSON error response with its status and headers."""
        return json_response(self.envelope(), status=self.status, headers=self.headers())

    def stream_event(self) -> bytes:
        """Return the mid-stream form: ``data: {"error": ...}`` (the caller sends ``data: [DONE]`` after it).

        ``metadata.retry_after`` carries the interval a ``Retry-After`` header would have (reference: Stream errors),
        and ``metadata.should_retry`` the boolean an ``x-should-retry`` header would have, when the error sets one.
        """
        envelope = self.envelope()
        if self.retry_after is not None:
            envelope["error"].setdefault("metadata", {})["retry_after"] = self.retry_after
        if self.should_retry is not None:
            envelope["error"].setdefault("metadata", {})["should_retry"] = self.should_retry
        return b"data: " + dumps(envelope) + b"\n\n"


def dumps(value: object) -> bytes:
    """Serialise JSON compactly, keeping non-ASCII text as UTF-8 (the SDKs and browsers read UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def json_response(value: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> HttpResponse:
    """Return ``value`` as an ``application/json`` response with the CORS headers."""
    response = HttpResponse(dumps(value), status=status, content_type="application/json")
    for name, header_value in {**CORS_HEADERS, **(headers or {})}.items():
        response[name] = header_value
    return response


def method_not_allowed(allowed: str) -> HttpResponse:
    """405 in OpenAI's envelope, with ``Allow``: every view's answer to another method."""
    return failure(
        METHOD_NOT_ALLOWED, f"Method not allowed. Use {allowed}.", extra_headers={"Allow": allowed}
    ).to_response()


def reason_phrase(status: int) -> str:
    """Return the standard reason phrase of ``status`` (for messages that name it)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def no_eligible_worker(message: str, *, metadata: dict[str, Any] | None = None) -> OpenAIError:
    """503 ``no_eligible_worker`` with ``Retry-After: 30`` and ``x-should-retry: false`` (reference: Model
    availability, Native admission refusals 4-5): an SDK retries within seconds, and the online workers are most likely
    the same by then, so a silent retry only repeats the refusal (at submit) or the whole grace (after it).
    """
    return failure(NO_ELIGIBLE_WORKER, message, metadata=metadata)


FRONT_SHUTTING_DOWN_MESSAGE: Final = (
    "The front is stopping, so it gave up waiting for this request and cancelled it at the Horde. "
    "Retry in a few seconds."
)


def front_shutting_down(request_id: str | None) -> OpenAIError:
    """503 ``FrontShuttingDown`` (``api_error``) with ``Retry-After: 5``: the front's process is stopping. The request
    (``metadata.request_id`` when the Horde had created it) is cancelled at the Horde. No ``x-should-retry``: the
    SDKs' default retries a 503 after ``Retry-After``. Mid-stream it is the SSE error event before ``data: [DONE]``.
    """
    return failure(
        FRONT_SHUTTING_DOWN,
        FRONT_SHUTTING_DOWN_MESSAGE,
        metadata={"request_id": request_id} if request_id is not None else None,
    )


def horde_unavailable(detail: str, *, reached: bool = False, request_id: str | None = None) -> OpenAIError:
    """502 ``HordeUnavailable``: the Horde could not be reached, or answered a 5xx or outside its contract.

    The message says "could not be reached" only when it was not reached: ``The Horde could not be reached
    (ConnectError: ...).``; otherwise what it answered: ``The Horde answered HTTP 502 Bad Gateway without an error
    code.`` (``detail`` is worded to follow "The Horde answered"). With ``request_id`` (a submitted request, which the
    front cancels) it ends with "The request was cancelled." and ``metadata.request_id`` names it.
    """
    message = f"The Horde answered {detail}." if reached else f"The Horde could not be reached ({detail})."
    if request_id is not None:
        message += " The request was cancelled."
    metadata = {"request_id": request_id} if request_id is not None else None
    return failure(HORDE_UNAVAILABLE, message, metadata=metadata)


KUDOS_CAP_EXCESS_PATTERN: Final[re.Pattern[str]] = re.compile(
    r"kudos estimate at current pricing is (?P<kudos_estimate>\d+(?:\.\d+)?), "
    r"above its horde\.max_kudos of (?P<max_kudos>\d+(?:\.\d+)?)\."
)
"""Reads the two numbers of the native ``ChatKudosCapExceeded`` message (reference: Kudos cap), such as "The
request's kudos estimate at current pricing is 215, above its horde.max_kudos of 1. The estimate assumes the full
max_tokens is generated.": groups ``kudos_estimate`` and ``max_kudos``, decimal text without a sign or exponent.
The native error body holds only the message and the rc, so the front reads the values from the message."""


def horde_api_root_wrong(detail: str) -> OpenAIError:
    """502 ``HordeUnavailable`` for a ``HORDE_URL`` that answers 404 without the Horde's ``rc``: the server is
    reachable, but the URL is not the Horde's API root.
    """
    return failure(
        HORDE_UNAVAILABLE,
        f"The Horde's API root looks wrong: {detail}. HORDE_URL must name the API root, which usually ends in "
        "/api (such as https://aihorde.net/api).",
    )


def kudos_cap_error(message: str, rc: str = CHAT_KUDOS_CAP_EXCEEDED) -> OpenAIError:
    """400 ``invalid_request_error`` ``max_kudos_exceeded`` at ``horde.max_kudos`` for a ``ChatKudosCapExceeded``
    refusal (reference: Kudos cap).

    The message is the native one. ``metadata`` holds ``rc`` and, read from the message with
    :data:`KUDOS_CAP_EXCESS_PATTERN`, ``kudos_estimate`` and ``max_kudos`` (numbers: an integer when the
    text is integral, such as ``215`` or ``1.0``, else a float); a message that does not match leaves both out.
    """
    metadata: dict[str, Any] = {"rc": rc}
    match = KUDOS_CAP_EXCESS_PATTERN.search(message)
    if match is not None:
        for key in ("kudos_estimate", "max_kudos"):
            value = float(match[key])
            metadata[key] = int(value) if value.is_integer() else value
    return failure(MAX_KUDOS_EXCEEDED, message, param="horde.max_kudos", metadata=metadata)


NATIVE_FIELD_PARAMETERS: Final[Mapping[str, str]] = {
    "max_length": "max_tokens",
    "stop_sequence": "stop",
    "max_context_length": "horde.max_context_length",
}
"""The request key of each native ``params`` key whose name differs (reference: Value and contract validation):
``max_length`` is ``max_tokens``, ``stop_sequence`` is ``stop``, ``max_context_length`` is the client's
``horde.max_context_length``."""

NATIVE_REQUEST_PATH_PATTERN: Final[re.Pattern[str]] = re.compile(r"^'(?P<path>[^']+)'")
"""The quoted request path an ``UnknownModel`` message begins with, such as ``'models[1]' is not a known text
model.`` (reference: Model selection)."""

UNKNOWN_MODEL: Final = "UnknownModel"
"""The native rc of a ``models`` entry that is not a known text model."""

UNKNOWN_MODEL_MESSAGE: Final[str] = (
    "The model '{model}'{at} is not a known text model. GET /v1/models lists the served ones."
)
"""The front's ``UnknownModel`` message, naming the id the client sent: ``{at}`` is empty for ``model`` and
`` at models[1]`` for an entry of ``models``."""
