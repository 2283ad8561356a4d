"""A ``POST /v1/completions`` body -> a validated :class:`chat.protocol.legacy_completion.CompletionRequest`.

The body takes ``model``, ``prompt`` (a string, or a list of one string), ``max_tokens``, ``temperature``, ``top_p``,
``stop``, ``stream``, ``stream_options``, ``echo`` (only false) and ``n`` (only 1); ``best_of``,
``frequency_penalty``, ``presence_penalty``, ``logit_bias``, ``logprobs``, ``seed`` and ``suffix`` only at OpenAI's
default (dropped, :data:`DROPPED_DEFAULT_KEYS`); any other key is refused like an unknown key (400
``UnsupportedChatParameter``, ``Unrecognized request argument supplied: <key>``).
"""

from __future__ import annotations

from typing import Final

from pydantic import ValidationError

from chat import errors
from chat.protocol.legacy_completion import CompletionRequest
from chat.reading.body import parse_json_body, show_value
from chat.reading.parameters import unsupported_chat_parameter
from chat.reading.validation_wording import openai_error_from_validation

PROMPT_SHAPE_MESSAGE: Final[str] = (
    "Invalid 'prompt': the AI Horde serves one text prompt per request, a string or an array of one string "
    "(token arrays and batches are not served)."
)
"""The 400 ``BadRequest`` message at ``prompt`` for any other shape."""

ONLY_DEFAULT_KEYS: Final[dict[str, object]] = {"echo": False, "n": 1}
"""Keys accepted only at their default (or null); any other value is 400 ``UnsupportedChatParameter`` at the key."""

DROPPED_DEFAULT_KEYS: Final[dict[str, object]] = {
    "best_of": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": {},
    "logprobs": None,
    "seed": None,
    "suffix": None,
}
"""OpenAI legacy completions parameters the front does not define, accepted at OpenAI's default (or null), where
they change nothing, and dropped, as chat completions drops its default no-ops: LangChain's legacy ``OpenAI`` LLM
sends ``frequency_penalty`` 0, ``presence_penalty`` 0, ``n`` 1, ``seed`` and ``logprobs`` null and ``logit_bias``
``{}`` on every call. Any other value is 400 ``UnsupportedChatParameter`` at the key."""


def read_completion_request(raw: bytes) -> CompletionRequest:
    """Parse, screen and validate a body.

    Raises:
        OpenAIError: 400 ``BadRequest`` for a body that is not a JSON object; 400 ``UnsupportedChatParameter`` for
            an unknown key or ``echo`` / ``n`` at a value other than their default; the first validation failure
            in OpenAI's words otherwise.
    """
    body = parse_json_body(raw)
    for key in body:
        if key not in CompletionRequest.model_fields and key not in DROPPED_DEFAULT_KEYS:
            raise unsupported_chat_parameter(key, f"Unrecognized request argument supplied: {errors.clip(key)}")
    for key, default in (ONLY_DEFAULT_KEYS | DROPPED_DEFAULT_KEYS).items():
        value = body.get(key)
        if value is not None and (value != default or isinstance(value, bool) != isinstance(default, bool)):
            raise unsupported_chat_parameter(
                key,
                f"Unsupported value: '{key}' does not support {show_value(value)} on the AI Horde. "
                f"Only the default ({show_value(default)}) value is supported.",
            )
    prompt = body.get("prompt")
    if prompt is not None and not (
        isinstance(prompt, str) or (isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str))
    ):
        raise errors.failure(errors.BAD_REQUEST, PROMPT_SHAPE_MESSAGE, param="prompt")
    try:
        return CompletionRequest.model_validate({k: v for k, v in body.items() if k not in DROPPED_DEFAULT_KEYS})
    except ValidationError as exc:
        raise openai_error_from_validation(exc.errors(include_url=False)[0], body) from None
