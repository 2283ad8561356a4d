"""Reading, screening and validating a chat completions body (reference: Request keys, Parameter screening, Model
selection, Value and contract validation, Message roles, Refused parameter log line).

:func:`read_chat_request` is the one entry point: bytes in, a validated
:class:`chat.protocol.chat_request.ChatCompletionRequest` out, or :class:`chat.errors.OpenAIError` raised with OpenAI's
envelope (always a 400). The steps, in order:

1. :func:`chat.reading.body.parse_json_body`: a body that is not JSON, or holds NaN, Infinity or -Infinity (or a number
   too large for a double, or a lone UTF-16 surrogate) is 400 ``BadRequest`` with OpenAI's not-JSON sentence; valid JSON
   that is not an object is 400 ``BadRequest`` saying the body must be a JSON object.
2. :func:`find_refused_parameter`: unknown top-level keys, non-default values of
   :data:`chat.reading.parameters.DEFAULT_NO_OP_PARAMETERS`,
   unsupported roles, ``tool_calls`` on a message other than an assistant message, and unsupported content part
   types are 400 ``UnsupportedChatParameter`` at their path.
3. :func:`drop_default_no_ops`: the keys of :data:`DEFAULT_NO_OP_PARAMETERS` at their default are removed.
4. :func:`drop_unknown_nested_keys`: unknown keys inside messages, tool definitions and ``tool_choice`` are removed.
5. :func:`validate_chat_request`: pydantic validation; the first failure becomes OpenAI's message at the failing
   field's request path (chat.reading.validation_wording: never a pydantic union tag).
6. chat.reading.request_rules's request rules, shared with the native route.

Every ``UnsupportedChatParameter`` refusal logs the reference's "Refused parameter log line"
(chat.reading.parameters).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from chat import errors
from chat.errors import OpenAIError
from chat.protocol.chat_request import (
    ASSISTANT_CONTENT_PART_TYPES,
    MESSAGE_ROLES,
    USER_CONTENT_PART_TYPES,
    ChatCompletionRequest,
    openai_value_list,
)
from chat.reading.body import parse_json_body, show_value
from chat.reading.parameters import CHAT_REQUEST_KEYS, DEFAULT_NO_OP_PARAMETERS, unsupported_chat_parameter
from chat.reading.request_rules import find_chat_rule_violation
from chat.reading.validation_wording import openai_error_from_validation

SUPPORTED_MESSAGE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "tool_calls", "name"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
"""The keys each role retains (reference: Message roles); any other key of a message is dropped, including ``name``
on a tool message and the fields the OpenAI SDK adds to a replayed reply (``refusal``, ``audio``, ``annotations``,
``function_call``, ``parsed``)."""

SUPPORTED_CONTENT_PART_TYPES: Final[Mapping[str, tuple[str, ...]]] = {
    role: {"user": USER_CONTENT_PART_TYPES, "assistant": ASSISTANT_CONTENT_PART_TYPES}.get(role, ("text",))
    for role in MESSAGE_ROLES
}
"""The content part types each role takes: ``text`` and ``image_url`` in a user message, ``text`` and ``refusal`` in
an assistant message, ``text`` elsewhere."""

CONTENT_PART_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "text": frozenset({"type", "text"}),
    "image_url": frozenset({"type", "image_url"}),
    "refusal": frozenset({"type", "refusal"}),
}
"""The keys a content part retains, by type."""

IMAGE_URL_KEYS: Final[frozenset[str]] = frozenset({"url", "detail"})
"""The keys an ``image_url`` object retains."""

TOOL_CALL_KEYS: Final[frozenset[str]] = frozenset({"id", "type", "function"})
"""The keys a history tool call retains (``index``, added by the OpenAI SDK, is dropped)."""

TOOL_CALL_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name", "arguments"})
"""The keys a history tool call's function retains (``parsed_arguments``, added by the OpenAI SDK, is dropped)."""

TOOL_KEYS: Final[frozenset[str]] = frozenset({"type", "function"})
"""The keys a ``tools`` entry retains."""

TOOL_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name", "description", "parameters", "strict"})
"""The keys a tool's function retains; ``parameters`` is forwarded unchanged."""

TOOL_CHOICE_KEYS: Final[frozenset[str]] = frozenset({"type", "function"})
"""The keys a ``tool_choice`` object retains."""

TOOL_CHOICE_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name"})
"""The keys a ``tool_choice`` object's function retains."""

# ---------------------------------------------------------------------------------------------------------------------
# Body parsing (reference: Request keys)


# ---------------------------------------------------------------------------------------------------------------------
# Screening (reference: Parameter screening, Message roles)


def _json_equal(value: object, default: object) -> bool:
    """JSON equality: ``false`` is not ``0``, ``0`` is ``0.0``."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value == default
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default
    if isinstance(value, list) and isinstance(default, list):
        return len(value) == len(default) and all(map(_json_equal, value, default))
    if isinstance(value, dict) and isinstance(default, dict):
        return value.keys() == default.keys() and all(_json_equal(value[key], default[key]) for key in value)
    return type(value) is type(default) and value == default


def is_default_no_op(key: str, value: object) -> bool:
    """Whether ``value`` of a :data:`DEFAULT_NO_OP_PARAMETERS` key is its default (or null)."""
    return value is None or _json_equal(value, DEFAULT_NO_OP_PARAMETERS[key].default)


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusedParameter:
    """A parameter :func:`find_refused_parameter` refuses.

    Attributes:
        path: The refused request path, as logged (``messages[0].content[1].type``).
        param: The error's ``param``: the path, with ``=<type>`` after an unsupported content part type.
        message: The error's message, in OpenAI's wording.
    """

    path: str
    param: str
    message: str


def find_refused_parameter(body: Mapping[str, Any]) -> RefusedParameter | None:
    """The first parameter the front refuses before validation (reference: Parameter screening, step 1).

    In this order: an unknown top-level key (OpenAI's ``Unrecognized request argument supplied: <key>``; so is
    ``logit_bias`` at any value other than ``{}`` or null); a :data:`DEFAULT_NO_OP_PARAMETERS` key with a value other
    than its default or null; then, message by message, an unsupported role (``messages[<i>].role``), ``tool_calls``
    on a message other than an assistant message (``messages[<i>].tool_calls``; null is let through and dropped) and
    a content part type the role does not take (param ``messages[<i>].content[<j>].type=<type>``). A role or type
    that is missing or not a string is left to validation, which reports its type.

    Returns:
        The refusal, or None when screening passes.
    """
    for key, value in body.items():
        no_op = DEFAULT_NO_OP_PARAMETERS.get(key)
        if key not in CHAT_REQUEST_KEYS and (
            no_op is None or (no_op.unrecognized_otherwise and not is_default_no_op(key, value))
        ):
            return RefusedParameter(
                path=key, param=key, message=f"Unrecognized request argument supplied: {errors.clip(key)}"
            )
    for key, value in body.items():
        if key in DEFAULT_NO_OP_PARAMETERS and not is_default_no_op(key, value):
            default = show_value(DEFAULT_NO_OP_PARAMETERS[key].default)
            return RefusedParameter(
                path=key,
                param=key,
                message=(
                    f"Unsupported value: '{key}' does not support {show_value(value)} on the AI Horde. "
                    f"Only the default ({default}) value is supported."
                ),
            )
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(message, dict):
            refused = _refused_in_message(index, message)
            if refused is not None:
                return refused
    return None


def _refused_in_message(index: int, message: dict[str, Any]) -> RefusedParameter | None:
    role = message.get("role")
    if not isinstance(role, str):
        return None
    if role not in SUPPORTED_MESSAGE_KEYS:
        path = f"messages[{index}].role"
        return RefusedParameter(
            path=path,
            param=path,
            message=f"Invalid value: {show_value(role)}. Supported values are: {openai_value_list(MESSAGE_ROLES)}.",
        )
    if role != "assistant" and message.get("tool_calls") is not None:
        path = f"messages[{index}].tool_calls"
        return RefusedParameter(
            path=path,
            param=path,
            message=(
                f"Invalid parameter: only messages with role 'assistant' can have 'tool_calls', but "
                f"'messages[{index}]' has role '{role}'."
            ),
        )
    content = message.get("content")
    supported = SUPPORTED_CONTENT_PART_TYPES[role]
    for part_index, part in enumerate(content if isinstance(content, list) else []):
        part_type = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part_type, str) or part_type in supported:
            continue
        path = f"messages[{index}].content[{part_index}].type"
        return RefusedParameter(
            path=path,
            param=f"{path}={part_type}",
            message=f"Invalid value: {show_value(part_type)}. Supported values are: {openai_value_list(supported)}.",
        )
    return None


def drop_default_no_ops(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``body`` without the :data:`DEFAULT_NO_OP_PARAMETERS` keys, whose values screening found at their
    default (reference: Parameter screening, step 2).
    """
    return {key: value for key, value in body.items() if key not in DEFAULT_NO_OP_PARAMETERS}


def _keep(value: object, keys: frozenset[str]) -> object:
    return {key: item for key, item in value.items() if key in keys} if isinstance(value, dict) else value


def _keep_nested(value: object, keys: frozenset[str], nested_key: str, nested_keys: frozenset[str]) -> object:
    kept = _keep(value, keys)
    if isinstance(kept, dict) and nested_key in kept:
        kept[nested_key] = _keep(kept[nested_key], nested_keys)
    return kept


def _screen_message(message: object) -> object:
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(role, str) or role not in SUPPORTED_MESSAGE_KEYS:
        return message
    kept = _keep(message, SUPPORTED_MESSAGE_KEYS[role])
    assert isinstance(kept, dict)
    content = kept.get("content")
    if isinstance(content, list):
        kept["content"] = [_screen_content_part(part) for part in content]
    tool_calls = kept.get("tool_calls")
    if isinstance(tool_calls, list):
        kept["tool_calls"] = [
            _keep_nested(call, TOOL_CALL_KEYS, "function", TOOL_CALL_FUNCTION_KEYS) for call in tool_calls
        ]
    return kept


def _screen_content_part(part: object) -> object:
    part_type = part.get("type") if isinstance(part, dict) else None
    if not isinstance(part_type, str) or part_type not in CONTENT_PART_KEYS:
        return part
    return _keep_nested(part, CONTENT_PART_KEYS[part_type], "image_url", IMAGE_URL_KEYS)


def drop_unknown_nested_keys(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``body`` with unknown keys removed inside messages, tool definitions and ``tool_choice``
    (reference: Parameter screening, step 3, and Message roles).

    A message keeps its role's :data:`SUPPORTED_MESSAGE_KEYS`; a history tool call keeps ``id``, ``type`` and
    ``function`` (``name``, ``arguments``); a text part keeps ``type`` and ``text``, an image part ``type`` and
    ``image_url`` (``url``, ``detail``); a tool keeps ``type`` and ``function`` (``name``, ``description``,
    ``parameters``, ``strict``; ``parameters`` unchanged); a ``tool_choice`` object keeps ``type`` and ``function``
    (``name``). Values of the wrong JSON type are left for validation. ``body`` is not modified.
    """
    screened = dict(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        screened["messages"] = [_screen_message(message) for message in messages]
    tools = body.get("tools")
    if isinstance(tools, list):
        screened["tools"] = [_keep_nested(tool, TOOL_KEYS, "function", TOOL_FUNCTION_KEYS) for tool in tools]
    if "tool_choice" in body:
        screened["tool_choice"] = _keep_nested(
            body["tool_choice"], TOOL_CHOICE_KEYS, "function", TOOL_CHOICE_FUNCTION_KEYS
        )
    return screened


# ---------------------------------------------------------------------------------------------------------------------
# Validation (reference: Model selection, Value and contract validation)


def validate_chat_request(body: Mapping[str, Any]) -> ChatCompletionRequest:
    """Validate a screened body against :class:`ChatCompletionRequest`.

    Raises:
        OpenAIError: 400 for the first unknown key, else the first failing field, in the model's field order
            (:func:`openai_error_from_validation`).
    """
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        failures = exc.errors(include_url=False)
        # An unknown key is reported before the other failures of its object, as screening reports unknown
        # top-level keys first: ``schema_`` is refused as unknown, not as a missing ``schema``.
        first = next((failure for failure in failures if failure["type"] == "extra_forbidden"), failures[0])
        raise openai_error_from_validation(first, body) from None


def check_chat_rules(body: Mapping[str, Any]) -> None:
    """Apply chat.reading.request_rules's request rules to a screened, validated body.

    Raises:
        OpenAIError: 400 ``UnsupportedChatParameter`` (logged) or ``ChatRequestConflict`` with OpenAI's message and
            param.
    """
    horde = body.get("horde")
    openai_guards = isinstance(horde, dict) and horde.get("openai_guards") is True
    violation = find_chat_rule_violation(body, openai_guards=openai_guards)
    if violation is None:
        return
    if violation.code == errors.UNSUPPORTED_CHAT_PARAMETER:
        raise unsupported_chat_parameter(violation.param, violation.message)
    raise OpenAIError(status=400, message=violation.message, code=violation.code, param=violation.param)


def read_chat_request(raw: bytes) -> ChatCompletionRequest:
    """Parse, screen and validate a ``POST /v1/chat/completions`` body, then apply the request rules.

    Raises:
        OpenAIError: 400 with OpenAI's message, the front's code and the parameter's path.
    """
    body = parse_json_body(raw)
    refused = find_refused_parameter(body)
    if refused is not None:
        raise unsupported_chat_parameter(refused.param, refused.message, path=refused.path)
    screened = drop_unknown_nested_keys(drop_default_no_ops(body))
    request = validate_chat_request(screened)
    check_chat_rules(screened)
    return request
