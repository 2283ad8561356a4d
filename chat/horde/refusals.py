"""Native refusals in OpenAI's envelope: a Horde refusal at submit or status becomes an ``OpenAIError`` with the
client's param (reference: Value and contract validation, Model selection, Kudos cap).

This module sits above :mod:`chat.errors` (the envelope, codes and statuses, which imports nothing from ``chat``) and
above :mod:`chat.rendering.completion` and :mod:`chat.reading.screening`, whose names (the forwarded ``horde`` options,
the refused-parameter log line) it needs.
"""

from __future__ import annotations

import re
from typing import Any, Final

from chat import errors
from chat.errors import (
    BAD_REQUEST,
    CHAT_KUDOS_CAP_EXCEEDED,
    NATIVE_FIELD_PARAMETERS,
    NATIVE_REQUEST_PATH_PATTERN,
    NO_ELIGIBLE_WORKER_RC,
    RATE_LIMIT_EXCEEDED,
    UNKNOWN_MODEL,
    UNKNOWN_MODEL_MESSAGE,
    UNSUPPORTED_CHAT_PARAMETER,
    OpenAIError,
    horde_unavailable,
    kudos_cap_error,
    no_eligible_worker,
    reason_phrase,
)
from chat.horde.native import HordeRefusal
from chat.horde.native_payload import HORDE_OPTION_KEYS
from chat.horde.real_horde_answers import KUDOS_UPFRONT, kudos_upfront_error, retry_later_seconds, validation_message
from chat.protocol.chat_request import ChatCompletionRequest
from chat.reading.parameters import log_refused_parameter

_MODELS_ENTRY_PATTERN: Final[re.Pattern[str]] = re.compile(r"^models\[(?P<index>\d+)\]$")


def _requested_model(request: ChatCompletionRequest | None, native_path: str | None) -> str | None:
    """The model id at ``native_path`` (``models[<i>]``, as the Horde names it) of the request, or None."""
    match = _MODELS_ENTRY_PATTERN.match(native_path or "")
    if match is None or request is None:
        return None
    models = request.requested_models
    index = int(match["index"])
    return models[index] if index < len(models) else None


def native_param(native_path: str, *, requested_model_key: str | None = None) -> str:
    """Translate a native payload path (``params.max_length``, ``messages.0.content``) to the client's request path.

    The ``params.`` prefix is dropped and a native params key renamed with :data:`NATIVE_FIELD_PARAMETERS`; a Horde
    option the front forwards at the top level (``max_kudos``, ...) is ``horde.<key>``; numeric segments become
    indexes (``messages[0].content``); ``models`` is ``model`` when the client sent ``model``
    (``requested_model_key``).
    """
    parts = native_path.split(".")
    if parts[0] == "params" and len(parts) > 1:
        parts = parts[1:]
    head = NATIVE_FIELD_PARAMETERS.get(parts[0], parts[0])
    if head in HORDE_OPTION_KEYS:
        head = f"horde.{head}"
    if head == "models" and requested_model_key == "model":
        return "model"
    return head + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in parts[1:])


def error_from_refusal(
    refusal: HordeRefusal, *, requested_model_key: str | None = None, request: ChatCompletionRequest | None = None
) -> OpenAIError:
    """Map a native refusal (:class:`~chat.horde.native.HordeRefusal`) at submit or status to the OpenAI envelope.

    The Horde's ``rc`` passes through as the code, with its message; a 429 without an rc is ``rate_limit_exceeded``;
    ``NoEligibleWorker`` is 503 ``no_eligible_worker`` (a submit refusal with a declaration gap as ``impossible_reason``
    is mapped before this by ``chat.waiting.availability.submit_refusal_error``); other 5xx are ``HordeUnavailable``;
    ``ChatKudosCapExceeded`` is :func:`kudos_cap_error`; ``KudosUpfront`` is
    :func:`chat.horde.real_horde_answers.kudos_upfront_error`; ``InvalidAPIKey`` is the catalogue's (401,
    ``x-should-retry: false``). A payload validation failure (400 without an rc) is
    ``BadRequest`` at the first failing field (:func:`native_param`), with that field's message when the Horde gave one
    (:func:`chat.horde.real_horde_answers.validation_message`); ``UnknownModel`` keeps its status and rc, with the
    entry path its message begins with as param (:data:`NATIVE_REQUEST_PATH_PATTERN`), or ``model`` when the client sent
    ``model``; its message names the id the client sent (``UNKNOWN_MODEL_MESSAGE``) when ``request`` is given, else the
    native message with ``'model'`` in place of ``'models[0]'``. ``request`` (the ``ChatCompletionRequest``) or
    ``requested_model_key`` (``model`` or ``models``) tells which key the client sent. The Horde's ``Retry-After`` is
    kept only on a 429 or 503 (:func:`chat.horde.real_horde_answers.retry_later_seconds`: the real Horde sends one on
    every answer).
    """
    if request is not None:
        requested_model_key = "model" if request.model is not None else "models"
    status: int = refusal.status
    rc: str | None = refusal.rc
    message: str = refusal.message or reason_phrase(status)
    body: dict[str, Any] = refusal.body or {}
    retry_after = retry_later_seconds(status, refusal.headers)
    if rc == KUDOS_UPFRONT:
        return kudos_upfront_error(message, request)
    if rc == errors.INVALID_API_KEY:  # permanent: x-should-retry false, never the limiter's Retry-After
        return errors.failure(errors.INVALID_API_KEY, message)
    if rc == CHAT_KUDOS_CAP_EXCEEDED:
        return kudos_cap_error(message, rc)
    if rc == NO_ELIGIBLE_WORKER_RC:
        return no_eligible_worker(message)
    if status == 429:
        return OpenAIError(status=429, message=message, code=rc or RATE_LIMIT_EXCEEDED, retry_after=retry_after)
    if status >= 500 and rc != "MaintenanceMode":
        return horde_unavailable(f"HTTP {status} {rc or 'without an error code'}: {message}", reached=True)
    if status == 400 and rc is None:
        field_errors = body.get("errors")
        first = next(iter(field_errors), None) if isinstance(field_errors, dict) else None
        param = native_param(first, requested_model_key=requested_model_key) if isinstance(first, str) else None
        if isinstance(first, str) and isinstance(field_errors, dict):
            message = validation_message(param, field_errors, first, message)
        return errors.failure(BAD_REQUEST, message, param=param)
    if rc == UNKNOWN_MODEL:
        match = NATIVE_REQUEST_PATH_PATTERN.match(message)
        param = "model" if requested_model_key == "model" else (match["path"] if match else None)
        model_id = _requested_model(request, match["path"] if match else None)
        if model_id is not None:
            message = UNKNOWN_MODEL_MESSAGE.format(model=model_id, at="" if param == "model" else f" at {param}")
        elif match and param != match["path"]:
            # The client sent `model`, which the front forwards as `models[0]`: name the key the client sent.
            message = f"'{param}'" + message[match.end() :]
        return OpenAIError(status=status, message=message, code=rc, param=param, retry_after=retry_after)
    if rc == UNSUPPORTED_CHAT_PARAMETER and isinstance(body.get("param"), str):
        log_refused_parameter(body["param"])
    return OpenAIError(
        status=status,
        message=message,
        code=rc,
        param=body.get("param") if isinstance(body.get("param"), str) else None,
        retry_after=retry_after,
    )
