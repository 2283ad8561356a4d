"""The OpenAI error envelope and the front's error codes, statuses and retry headers.

Every refusal the front returns is ``{"error": {"message", "type", "param", "code"}}`` (plus ``metadata`` where the
reference adds it), the shape OpenAI's API and the official SDKs read. ``x-should-retry`` tells the official SDK
whether to retry (it decides alone when present); ``Retry-After`` is in whole seconds.
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
"""503: the in-flight cap per client address or in total is reached (oaifront.guards)."""
FRONT_SHUTTING_DOWN: Final = "FrontShuttingDown"
"""503 of a request the front ended because its process is stopping (SIGTERM); the request was cancelled."""
MAX_KUDOS_EXCEEDED: Final = "max_kudos_exceeded"
CHAT_KUDOS_CAP_EXCEEDED: Final = "ChatKudosCapExceeded"
"""The native rc of a submit refused because its kudos estimate exceeds ``max_kudos`` (reference: Kudos cap)."""
INVALID_API_KEY: Final = "InvalidAPIKey"
METHOD_NOT_ALLOWED: Final = "method_not_allowed"
NO_ELIGIBLE_WORKER_RC: Final = "NoEligibleWorker"
"""The native rc of a submit no online worker can serve (503, or 403 with an optional ``impossible_reason``)."""

NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS: Final = 30
"""``Retry-After`` of every ``no_eligible_worker`` (reference: Model availability)."""

CORS_HEADERS: Final[Mapping[str, str]] = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "Retry-After, x-should-retry",
}
"""Headers every response carries so browser clients such as KoboldAI Lite can call the front (Browser access)."""


def error_type_for_status(status: int) -> str:
    """Return OpenAI's ``error.type`` for an HTTP status: ``api_error`` for 5xx, ``invalid_request_error`` default."""
    if status >= 500:
        return "api_error"
    return ERROR_TYPE_BY_STATUS.get(status, "invalid_request_error")


@dataclass(eq=False)
class OpenAIError(Exception):
    """A refusal in OpenAI's error envelope.

    Attributes:
        status: The HTTP status (400, 404, 503, ...).
        message: The human sentence; OpenAI's own wording where the reference asks for it.
        code: The error code (the front's, such as ``UnsupportedChatParameter``, or the Horde's rc).
        param: The request path at fault, or None.
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
            headers["Retry-After"] = str(self.retry_after)
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
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
    return OpenAIError(
        status=405,
        message=f"Method not allowed. Use {allowed}.",
        code=METHOD_NOT_ALLOWED,
        extra_headers={"Allow": allowed},
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
    return OpenAIError(
        status=503,
        message=message,
        code=NO_ELIGIBLE_WORKER,
        metadata=metadata,
        retry_after=NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS,
        should_retry=False,
    )


FRONT_SHUTDOWN_RETRY_AFTER_SECONDS: Final = 5
"""``Retry-After`` of ``FrontShuttingDown``: a restarted front, or another process behind the same address, serves
again within seconds."""

FRONT_SHUTTING_DOWN_MESSAGE: Final = (
    "The front is restarting, so it stopped waiting for this request and cancelled it at the Horde. "
    "Retry in a few seconds."
)


def front_shutting_down(request_id: str | None) -> OpenAIError:
    """503 ``FrontShuttingDown`` (``api_error``) with ``Retry-After: 5``: the front's process is stopping. The request
    (``metadata.request_id`` when the Horde had created it) is cancelled at the Horde. No ``x-should-retry``: the
    SDKs' default retries a 503 after ``Retry-After``. Mid-stream it is the SSE error event before ``data: [DONE]``.
    """
    return OpenAIError(
        status=503,
        message=FRONT_SHUTTING_DOWN_MESSAGE,
        code=FRONT_SHUTTING_DOWN,
        metadata={"request_id": request_id} if request_id is not None else None,
        retry_after=FRONT_SHUTDOWN_RETRY_AFTER_SECONDS,
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
    return OpenAIError(status=502, message=message, code=HORDE_UNAVAILABLE, metadata=metadata)


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
    return OpenAIError(
        status=502,
        message=(
            f"The Horde's API root looks wrong: {detail}. HORDE_URL must name the API root, which usually ends in "
            "/api (such as https://aihorde.net/api)."
        ),
        code=HORDE_UNAVAILABLE,
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
    return OpenAIError(
        status=400,
        message=message,
        code=MAX_KUDOS_EXCEEDED,
        param="horde.max_kudos",
        type="invalid_request_error",
        metadata=metadata,
    )


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

MODEL_NOT_FOUND: Final = "model_not_found"
"""OpenAI's 404 code for ``GET /v1/models/{model}`` of a model the model list does not hold."""
