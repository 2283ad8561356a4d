"""Validation of the native chat submit payload and the request rules the Horde applies before creating a request.

Contract: ``native-horde-chat.md``, "Submit". :func:`validate_payload` is the schema step (400 ``Input payload
validation failed`` with ``errors`` keyed by dotted native paths such as ``params.max_length`` or
``messages.0.content``, no ``rc``); :func:`openai_body` rebuilds the OpenAI-shaped body the SDK's rules read;
:func:`request_rule_refusal` applies the rules that answer 400 with an ``rc`` (``UnsupportedChatParameter``,
``ChatRequestConflict``) and a ``param``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_limits import check_chat_request_limits
from horde_sdk.generation_parameters.text.chat_policy import (
    ChatConformance,
    ChatReasoningEffort,
    ChatResponseFormatType,
    ChatToolChoiceMode,
)

from devhorde.limits import MAX_CHAT_MODEL_COUNT, MAX_CHAT_TOOL_CALL_ID_CHARS, MAX_CHAT_TOOL_CALLS_PER_MESSAGE

VALIDATION_FAILED_MESSAGE: Final[str] = "Input payload validation failed"
"""The message of every payload validation failure (contract: Conventions)."""

MESSAGE_ROLES: Final[tuple[str, ...]] = ("system", "developer", "user", "assistant", "tool")
"""The message roles the native route accepts."""

CONTENT_PART_TYPES: Final[tuple[str, ...]] = ("text", "image_url")
"""The content part types the native route accepts."""

RESPONSE_FORMAT_TYPES: Final[tuple[str, ...]] = ("text", *(kind.value for kind in ChatResponseFormatType))
"""``response_format.type`` values: ``text`` and the SDK's constraining types."""

TOOL_CHOICE_MODES: Final[tuple[str, ...]] = tuple(
    mode.value for mode in ChatToolChoiceMode if mode is not ChatToolChoiceMode.FUNCTION
)
"""The string forms of ``tool_choice``; the ``function`` mode is only an object."""

# params keys: the type each must have ("integer", "number", "string list").
_PARAM_TYPES: Final[Mapping[str, str]] = {
    "max_length": "integer",
    "max_context_length": "integer",
    "temperature": "number",
    "top_p": "number",
    "frequency_penalty": "number",
    "presence_penalty": "number",
    "rep_pen": "number",
    "top_k": "integer",
    "min_p": "number",
    "seed": "integer",
    "n": "integer",
}

_BOOLEAN_KEYS: Final[tuple[str, ...]] = (
    "parallel_tool_calls",
    "openai_guards",
    "stream",
    "trusted_workers",
    "slow_workers",
    "worker_blacklist",
)

_OPENAI_SAMPLING_KEYS: Final[tuple[str, ...]] = ("temperature", "top_p", "frequency_penalty", "presence_penalty")


@dataclass(frozen=True, slots=True)
class RuleRefusal:
    """A 400 refusal with an ``rc`` and a ``param`` (contract: Submit refusals)."""

    rc: str
    message: str
    param: str

    def body(self) -> dict[str, str]:
        """The response body ``{"message", "rc", "param"}``."""
        return {"message": self.message, "rc": self.rc, "param": self.param}


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_error(value: object, json_type: str) -> str:
    return f"{value!r} is not of type '{json_type}'"


class _Errors:
    def __init__(self) -> None:
        self.by_path: dict[str, str] = {}

    def add(self, path: str, why: str) -> None:
        self.by_path.setdefault(path, why)


def _check_message(errors: _Errors, index: int, message: object) -> None:
    path = f"messages.{index}"
    if not isinstance(message, Mapping):
        errors.add(path, _type_error(message, "object"))
        return
    role = message.get("role")
    if role is None:
        errors.add(f"{path}.role", "'role' is a required property")
    elif not isinstance(role, str):
        errors.add(f"{path}.role", _type_error(role, "string"))
    elif role not in MESSAGE_ROLES:
        errors.add(f"{path}.role", f"{role!r} is not one of {list(MESSAGE_ROLES)}")
    content = message.get("content")
    if content is None:
        if "content" in message and role != "assistant":
            errors.add(f"{path}.content", _type_error(content, "string"))
        elif "content" not in message and role != "assistant":
            errors.add(f"{path}.content", "'content' is a required property")
    elif isinstance(content, list):
        for part_index, part in enumerate(content):
            part_path = f"{path}.content.{part_index}"
            if not isinstance(part, Mapping):
                errors.add(part_path, _type_error(part, "object"))
                continue
            part_type = part.get("type")
            if part_type not in CONTENT_PART_TYPES:
                errors.add(f"{part_path}.type", f"{part_type!r} is not one of {list(CONTENT_PART_TYPES)}")
            elif part_type == "text" and not isinstance(part.get("text"), str):
                errors.add(f"{part_path}.text", _type_error(part.get("text"), "string"))
            elif part_type == "image_url":
                image_url = part.get("image_url")
                if not isinstance(image_url, Mapping):
                    errors.add(f"{part_path}.image_url", _type_error(image_url, "object"))
                elif not isinstance(image_url.get("url"), str):
                    errors.add(f"{part_path}.image_url.url", _type_error(image_url.get("url"), "string"))
    elif not isinstance(content, str):
        errors.add(f"{path}.content", _type_error(content, "string"))
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            errors.add(f"{path}.tool_calls", _type_error(tool_calls, "array"))
            return
        for call_index, call in enumerate(tool_calls):
            call_path = f"{path}.tool_calls.{call_index}"
            if not isinstance(call, Mapping):
                errors.add(call_path, _type_error(call, "object"))
                continue
            if not isinstance(call.get("id"), str):
                errors.add(f"{call_path}.id", _type_error(call.get("id"), "string"))
            function = call.get("function")
            if not isinstance(function, Mapping):
                errors.add(f"{call_path}.function", _type_error(function, "object"))
                continue
            for key in ("name", "arguments"):
                if not isinstance(function.get(key), str):
                    errors.add(f"{call_path}.function.{key}", _type_error(function.get(key), "string"))
    if "tool_call_id" in message and not isinstance(message["tool_call_id"], str):
        errors.add(f"{path}.tool_call_id", _type_error(message["tool_call_id"], "string"))


def _check_tools(errors: _Errors, tools: object) -> None:
    if not isinstance(tools, list):
        errors.add("tools", _type_error(tools, "array"))
        return
    for index, tool in enumerate(tools):
        path = f"tools.{index}"
        if not isinstance(tool, Mapping):
            errors.add(path, _type_error(tool, "object"))
            continue
        if tool.get("type") != "function":
            errors.add(f"{path}.type", f"{tool.get('type')!r} is not one of ['function']")
        function = tool.get("function")
        if not isinstance(function, Mapping):
            errors.add(f"{path}.function", _type_error(function, "object"))
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name:
            errors.add(
                f"{path}.function.name",
                _type_error(name, "string") if not isinstance(name, str) else "'' should be non-empty",
            )
        if "parameters" in function and not isinstance(function["parameters"], Mapping):
            errors.add(f"{path}.function.parameters", _type_error(function["parameters"], "object"))
        if "strict" in function and not isinstance(function["strict"], bool):
            errors.add(f"{path}.function.strict", _type_error(function["strict"], "boolean"))


def _check_tool_choice(errors: _Errors, tool_choice: object) -> None:
    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICE_MODES:
            errors.add("tool_choice", f"{tool_choice!r} is not one of {list(TOOL_CHOICE_MODES)}")
        return
    if not isinstance(tool_choice, Mapping):
        errors.add("tool_choice", _type_error(tool_choice, "object"))
        return
    if tool_choice.get("type") != ChatToolChoiceMode.FUNCTION.value:
        errors.add("tool_choice.type", f"{tool_choice.get('type')!r} is not one of ['function']")
    function = tool_choice.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        errors.add("tool_choice.function.name", "'name' is a required property")


def _check_response_format(errors: _Errors, response_format: object) -> None:
    if not isinstance(response_format, Mapping):
        errors.add("response_format", _type_error(response_format, "object"))
        return
    kind = response_format.get("type")
    if kind not in RESPONSE_FORMAT_TYPES:
        errors.add("response_format.type", f"{kind!r} is not one of {list(RESPONSE_FORMAT_TYPES)}")
        return
    if kind == ChatResponseFormatType.JSON_SCHEMA.value:
        json_schema = response_format.get("json_schema")
        if not isinstance(json_schema, Mapping):
            errors.add("response_format.json_schema", "'json_schema' is a required property")
        elif not isinstance(json_schema.get("schema"), Mapping):
            errors.add("response_format.json_schema.schema", "'schema' is a required property")


def _check_models(errors: _Errors, models: object) -> None:
    if models is None:
        errors.add("models", "'models' is a required property")
    elif not isinstance(models, list):
        errors.add("models", _type_error(models, "array"))
    elif not models:
        errors.add("models", "[] is too short")
    elif len(models) > MAX_CHAT_MODEL_COUNT:
        errors.add("models", f"{models!r} is too long")
    else:
        for index, model in enumerate(models):
            if not isinstance(model, str):
                errors.add(f"models.{index}", _type_error(model, "string"))
            elif not model:
                errors.add(f"models.{index}", "'' should be non-empty")
        if all(isinstance(model, str) for model in models) and len(set(models)) != len(models):
            errors.add("models", f"{models!r} has non-unique elements")


def _check_params(errors: _Errors, params: object) -> None:
    if not isinstance(params, Mapping):
        errors.add("params", _type_error(params, "object"))
        return
    for key, json_type in _PARAM_TYPES.items():
        if key not in params:
            continue
        value = params[key]
        valid = _is_integer(value) if json_type == "integer" else _is_number(value)
        if not valid:
            errors.add(f"params.{key}", _type_error(value, json_type))
        elif key == "max_context_length" and value < 1:
            errors.add(f"params.{key}", f"{value!r} is less than the minimum of 1")
    if "stop_sequence" in params:
        stop = params["stop_sequence"]
        if not isinstance(stop, list):
            errors.add("params.stop_sequence", _type_error(stop, "array"))
        else:
            for index, sequence in enumerate(stop):
                if not isinstance(sequence, str):
                    errors.add(f"params.stop_sequence.{index}", _type_error(sequence, "string"))
    if "reasoning_effort" in params:
        effort = params["reasoning_effort"]
        efforts = [value.value for value in ChatReasoningEffort]
        if effort not in efforts:
            errors.add("params.reasoning_effort", f"{effort!r} is not one of {efforts}")


def validate_payload(payload: object) -> dict[str, str]:
    """Return the payload validation errors of a submit body, empty when it is valid.

    Args:
        payload: The decoded JSON body of ``POST /v2/generate/chat/async``.

    Returns:
        ``{"<dotted native path>": "<why>"}`` in the style of the Horde's JSON Schema errors, such as
        ``{"params.max_length": "'a' is not of type 'integer'"}``; unknown keys are ignored, as the Horde does.
    """
    errors = _Errors()
    if not isinstance(payload, Mapping):
        errors.add("", _type_error(payload, "object"))
        return errors.by_path
    messages = payload.get("messages")
    if messages is None:
        errors.add("messages", "'messages' is a required property")
    elif not isinstance(messages, list):
        errors.add("messages", _type_error(messages, "array"))
    elif not messages:
        errors.add("messages", "[] is too short")
    else:
        for index, message in enumerate(messages):
            _check_message(errors, index, message)
    _check_models(errors, payload.get("models"))
    if "params" in payload:
        _check_params(errors, payload["params"])
    if "tools" in payload:
        _check_tools(errors, payload["tools"])
    if "tool_choice" in payload:
        _check_tool_choice(errors, payload["tool_choice"])
    if "response_format" in payload:
        _check_response_format(errors, payload["response_format"])
    for key in _BOOLEAN_KEYS:
        if key in payload and not isinstance(payload[key], bool):
            errors.add(key, _type_error(payload[key], "boolean"))
    if "conformance" in payload:
        modes = [mode.value for mode in ChatConformance]
        if payload["conformance"] not in modes:
            errors.add("conformance", f"{payload['conformance']!r} is not one of {modes}")
    if "max_kudos" in payload:
        max_kudos = payload["max_kudos"]
        if not _is_number(max_kudos):
            errors.add("max_kudos", _type_error(max_kudos, "number"))
        elif max_kudos < 0:
            errors.add("max_kudos", f"{max_kudos!r} is less than the minimum of 0")
    if "workers" in payload:
        workers = payload["workers"]
        if not isinstance(workers, list) or not all(isinstance(worker, str) for worker in workers):
            errors.add("workers", _type_error(workers, "array"))
    return errors.by_path


def openai_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Rebuild the OpenAI-shaped request body from a valid native payload, for the SDK's rules.

    ``messages``, ``tools``, ``tool_choice``, ``parallel_tool_calls`` and ``response_format`` are copied when sent;
    ``params`` gives ``seed``, ``reasoning_effort``, the penalties and sampling values, ``n``, ``max_tokens``
    (from ``max_length``) and ``stop`` (from ``stop_sequence``); ``conformance`` becomes ``horde.conformance``.
    Keys the payload did not send stay absent.
    """
    body: dict[str, Any] = {"messages": payload.get("messages") or []}
    for key in ("tools", "tool_choice", "parallel_tool_calls", "response_format"):
        if key in payload:
            body[key] = payload[key]
    params = payload.get("params") or {}
    for key in ("seed", "reasoning_effort", "n", *_OPENAI_SAMPLING_KEYS):
        if key in params:
            body[key] = params[key]
    if "max_length" in params:
        body["max_tokens"] = params["max_length"]
    if "stop_sequence" in params:
        body["stop"] = params["stop_sequence"]
    if "conformance" in payload:
        body["horde"] = {"conformance": payload["conformance"]}
    return body


def message_text(message: Mapping[str, Any]) -> str:
    """Return a message's text: its string content, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


UNANSWERED_TOOL_CALLS_MESSAGE: Final[str] = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "The following tool_call_ids did not have response messages: {ids}"
)
"""OpenAI's message for tool calls left unanswered; ``{ids}`` is the unanswered ids, in call order, joined by ", "."""

ORPHAN_TOOL_MESSAGE: Final[str] = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)
"""OpenAI's message (and spelling) for a tool message that answers no call still open."""

UNKNOWN_TOOL_CALL_ID_MESSAGE: Final[str] = (
    "Invalid parameter: 'tool_call_id' of '{tool_call_id}' not found in 'tool_calls' of previous message."
)
"""OpenAI's message for a tool message whose ``tool_call_id`` is not a call of the assistant turn it follows."""


def _tool_call_bounds_refusal(messages: list[Mapping[str, Any]]) -> RuleRefusal | None:
    """``tool_calls`` on a message that is not an assistant's, and the Horde's tool call bounds."""
    for index, message in enumerate(messages):
        role = message.get("role")
        tool_calls = message.get("tool_calls") or []
        if tool_calls and role != "assistant":
            return RuleRefusal(
                "UnsupportedChatParameter",
                f"Invalid parameter: only messages with role 'assistant' can have 'tool_calls', but "
                f"'messages[{index}]' has role '{role}'.",
                f"messages[{index}].tool_calls",
            )
        if len(tool_calls) > MAX_CHAT_TOOL_CALLS_PER_MESSAGE:
            return RuleRefusal(
                "UnsupportedChatParameter",
                f"A message may carry at most {MAX_CHAT_TOOL_CALLS_PER_MESSAGE} tool calls.",
                f"messages[{index}].tool_calls",
            )
        for call_index, call in enumerate(tool_calls):
            if len(call.get("id", "")) > MAX_CHAT_TOOL_CALL_ID_CHARS:
                return RuleRefusal(
                    "UnsupportedChatParameter",
                    f"A tool call id may be at most {MAX_CHAT_TOOL_CALL_ID_CHARS} characters.",
                    f"messages[{index}].tool_calls[{call_index}].id",
                )
    return None


def tool_history_refusal(messages: list[Mapping[str, Any]]) -> RuleRefusal | None:
    """OpenAI's tool history rule over the conversation, with OpenAI's messages and params.

    An assistant message with ``tool_calls`` opens its calls; ``tool`` messages must follow it, each answering one
    call still open, before any other message. The first breach, in message order:

    - a ``tool`` message that does not follow an assistant turn with calls (or the tool messages answering it):
      ``messages.[i].role``, OpenAI's orphan message;
    - a ``tool`` message whose ``tool_call_id`` is not a call of the assistant turn it follows:
      ``messages.[i].tool_call_id``;
    - a second answer to one call: ``messages.[i].role``, the orphan message (it answers no call still open);
    - another message while calls are open: ``messages.[i].role``, naming the unanswered ids in call order;
    - the conversation ending while calls are open: ``messages``, likewise.

    The front applies the same rule before submitting (the agreement is tested by running both over one table).
    """
    offered: set[str] = set()
    open_calls: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not offered:
                return RuleRefusal("UnsupportedChatParameter", ORPHAN_TOOL_MESSAGE, f"messages.[{index}].role")
            if call_id not in offered:
                return RuleRefusal(
                    "UnsupportedChatParameter",
                    UNKNOWN_TOOL_CALL_ID_MESSAGE.format(tool_call_id=call_id),
                    f"messages.[{index}].tool_call_id",
                )
            if call_id not in open_calls:
                return RuleRefusal("UnsupportedChatParameter", ORPHAN_TOOL_MESSAGE, f"messages.[{index}].role")
            open_calls.remove(call_id)
            continue
        if open_calls:
            return RuleRefusal(
                "UnsupportedChatParameter",
                UNANSWERED_TOOL_CALLS_MESSAGE.format(ids=", ".join(open_calls)),
                f"messages.[{index}].role",
            )
        tool_calls = (message.get("tool_calls") or []) if role == "assistant" else []
        open_calls = [str(call.get("id")) for call in tool_calls]
        offered = set(open_calls)
    if open_calls:
        return RuleRefusal(
            "UnsupportedChatParameter", UNANSWERED_TOOL_CALLS_MESSAGE.format(ids=", ".join(open_calls)), "messages"
        )
    return None


def _mentions_json(messages: list[Mapping[str, Any]]) -> bool:
    return any("json" in message_text(message).lower() for message in messages)


def request_rule_refusal(payload: Mapping[str, Any]) -> RuleRefusal | None:
    """Return the first request rule a valid payload breaks, or None.

    The rules, in order: the SDK's ``check_chat_request_limits`` over :func:`openai_body` (``param`` as the SDK
    names it, such as ``max_tokens`` or ``tools[0].function.parameters``); ``tool_choice`` or
    ``parallel_tool_calls`` without tools (``ChatRequestConflict``); a forced function ``tools`` does not define;
    the tool history rule and the tool call bounds (``UnsupportedChatParameter``); with ``openai_guards``, a
    ``json_object`` request whose messages lack the word "json" (``ChatRequestConflict``, ``param`` ``messages``).
    """
    body = openai_body(payload)
    violations = check_chat_request_limits(body)
    if violations:
        return RuleRefusal("UnsupportedChatParameter", violations[0].message, violations[0].param)
    tools = payload.get("tools") or []
    for key in ("tool_choice", "parallel_tool_calls"):
        if key in payload and not tools:
            return RuleRefusal(
                "ChatRequestConflict",
                f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified.",
                key,
            )
    tool_choice = payload.get("tool_choice")
    if isinstance(tool_choice, Mapping):
        forced = tool_choice["function"]["name"]
        defined = {tool["function"]["name"] for tool in tools}
        if forced not in defined:
            return RuleRefusal(
                "UnsupportedChatParameter",
                f"Invalid value for 'tool_choice': function '{forced}' is not defined in 'tools'.",
                "tool_choice.function.name",
            )
    messages = list(payload.get("messages") or [])
    history_refusal = _tool_call_bounds_refusal(messages) or tool_history_refusal(messages)
    if history_refusal is not None:
        return history_refusal
    response_format = payload.get("response_format") or {}
    if (
        payload.get("openai_guards")
        and response_format.get("type") == ChatResponseFormatType.JSON_OBJECT.value
        and not _mentions_json(list(payload.get("messages") or []))
    ):
        return RuleRefusal(
            "ChatRequestConflict",
            "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
            "messages",
        )
    return None
