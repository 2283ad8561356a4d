"""The request rules shared with the native route (reference: Value and contract validation).

The front applies them after validating a request (chat.reading.screening), so the client receives OpenAI's message and
param; the native route repeats them. Each ``find_*`` function reads plain JSON (a mapping as decoded) and returns
the first :class:`ChatRuleViolation`, or None:

- :func:`find_tool_choice_conflict`: ``tool_choice`` or ``parallel_tool_calls`` without tools, or a named
  ``tool_choice`` whose function is not one of the tools (``ChatRequestConflict``);
- :func:`find_tool_history_violation`: unanswered tool calls, orphan tool messages (``UnsupportedChatParameter``);
- :func:`find_strict_schema_violation`: a strict ``json_schema`` breaking OpenAI's structural rules;
- :func:`find_json_guard_conflict`: under ``horde.openai_guards``, ``json_object`` without the word "json";
- :func:`find_limit_violation`: horde-sdk's ``check_chat_request_limits``.

Schema nesting deeper than horde-sdk's ``MAX_CHAT_SCHEMA_NESTING`` is refused earlier, by validation
(chat.protocol.chat_request), at the schema's path. The native route also checks the tool call bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_limits import check_chat_request_limits

from chat.errors import CHAT_REQUEST_CONFLICT, UNSUPPORTED_CHAT_PARAMETER


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRuleViolation:
    """One request rule a chat request breaks, in OpenAI's words.

    Attributes:
        code: ``UnsupportedChatParameter`` or ``ChatRequestConflict`` (the error ``code``; the status is 400).
        param: The request path at fault, in OpenAI's form for the rule (such as ``messages.[6].role``).
        message: OpenAI's message for the rule (openai-errors.md), or one in the same style.
    """

    code: str
    param: str
    message: str


def _as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


TOOL_CHOICE_UNKNOWN_FUNCTION_MESSAGE: Final[str] = (
    "Invalid value for 'tool_choice': function '{name}' is not one of the functions in 'tools'."
)
"""The message for a named ``tool_choice`` whose function no tool declares (OpenAI's "Invalid value for" style)."""


def find_tool_choice_conflict(body: Mapping[str, Any]) -> ChatRuleViolation | None:
    """``tool_choice`` or ``parallel_tool_calls`` sent without tools (an absent or empty ``tools``), or a named
    ``tool_choice`` (``{"type": "function", "function": {"name": ...}}``) whose function no tool declares.

    Returns:
        A ``ChatRequestConflict`` at ``tool_choice`` (checked first) or ``parallel_tool_calls`` with OpenAI's message,
        or None.
    """
    tools = _as_list(body.get("tools"))
    if tools:
        named = _as_mapping(_as_mapping(body.get("tool_choice")).get("function")).get("name")
        declared = {_as_mapping(_as_mapping(tool).get("function")).get("name") for tool in tools}
        if isinstance(named, str) and named not in declared:
            return ChatRuleViolation(
                code=CHAT_REQUEST_CONFLICT,
                param="tool_choice",
                message=TOOL_CHOICE_UNKNOWN_FUNCTION_MESSAGE.format(name=named),
            )
        return None
    for key in ("tool_choice", "parallel_tool_calls"):
        if body.get(key) is not None:
            return ChatRuleViolation(
                code=CHAT_REQUEST_CONFLICT,
                param=key,
                message=f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified.",
            )
    return None


UNANSWERED_TOOL_CALLS_MESSAGE: Final[str] = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "The following tool_call_ids did not have response messages: {ids}"
)
"""OpenAI's message for tool calls without answers; ``{ids}`` is the unanswered ids joined with ``", "``."""

ORPHAN_TOOL_MESSAGE: Final[str] = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)
"""OpenAI's message (and spelling) for a tool message that answers no preceding ``tool_calls``."""

UNKNOWN_TOOL_CALL_ID_MESSAGE: Final[str] = (
    "Invalid parameter: 'tool_call_id' of '{tool_call_id}' not found in 'tool_calls' of previous message."
)
"""OpenAI's message for a tool message whose ``tool_call_id`` is not a call of the assistant turn it follows."""


def find_tool_history_violation(messages: object) -> ChatRuleViolation | None:
    """OpenAI's tool history rule over ``messages`` (reference: Value and contract validation); the Horde applies the
    same rule, with the same params and messages.

    An assistant message with ``tool_calls`` opens its calls; ``tool`` messages must follow it, each answering one
    call still open, before any other message. The first breach, in message order (every param is OpenAI's form):

    - a ``tool`` message that does not follow an assistant turn with calls (or the tool messages answering it):
      ``messages.[<i>].role`` with OpenAI's orphan message;
    - a ``tool`` message whose ``tool_call_id`` is not a call of that turn: ``messages.[<i>].tool_call_id``;
    - a second answer to one call: ``messages.[<i>].role`` with the orphan message (it answers no call still open);
    - another message while calls are unanswered: ``messages.[<i>].role``, naming the unanswered ids in call order;
    - the history ending while calls are unanswered: ``messages``, likewise.

    Returns:
        The first violation (``UnsupportedChatParameter``), or None.
    """
    offered: set[str] | None = None  # the call ids of the assistant turn the current tool block answers
    pending: list[str] = []
    for index, message in enumerate(_as_list(messages)):
        fields = _as_mapping(message)
        role = fields.get("role")
        if role == "tool":
            tool_call_id = fields.get("tool_call_id")
            if offered is None:
                return _orphan_tool_message(index)
            if not isinstance(tool_call_id, str) or tool_call_id not in offered:
                return ChatRuleViolation(
                    code=UNSUPPORTED_CHAT_PARAMETER,
                    param=f"messages.[{index}].tool_call_id",
                    message=UNKNOWN_TOOL_CALL_ID_MESSAGE.format(tool_call_id=tool_call_id),
                )
            if tool_call_id not in pending:
                return _orphan_tool_message(index)  # answered already
            pending.remove(tool_call_id)
            continue
        if pending:
            return ChatRuleViolation(
                code=UNSUPPORTED_CHAT_PARAMETER,
                param=f"messages.[{index}].role",
                message=UNANSWERED_TOOL_CALLS_MESSAGE.format(ids=", ".join(pending)),
            )
        offered = None
        calls = _as_list(fields.get("tool_calls")) if role == "assistant" else []
        if calls:
            pending = [str(_as_mapping(call).get("id")) for call in calls]
            offered = set(pending)
    if pending:
        return ChatRuleViolation(
            code=UNSUPPORTED_CHAT_PARAMETER,
            param="messages",
            message=UNANSWERED_TOOL_CALLS_MESSAGE.format(ids=", ".join(pending)),
        )
    return None


def _orphan_tool_message(index: int) -> ChatRuleViolation:
    return ChatRuleViolation(
        code=UNSUPPORTED_CHAT_PARAMETER, param=f"messages.[{index}].role", message=ORPHAN_TOOL_MESSAGE
    )


STRICT_SCHEMA_ADDITIONAL_PROPERTIES_MESSAGE: Final[str] = (
    "Invalid schema for response_format '{name}': In context={context}, 'additionalProperties' is required to be "
    "supplied and to be false."
)
"""OpenAI's message for a strict schema object without ``additionalProperties: false``."""

STRICT_SCHEMA_REQUIRED_MESSAGE: Final[str] = (
    "Invalid schema for response_format '{name}': In context={context}, 'required' is required to be supplied and "
    "to be an array including every key in properties. Missing '{missing}'."
)
"""OpenAI's message for a strict schema object whose ``required`` does not list every property."""

_SUBSCHEMA_MAPS: Final[tuple[str, ...]] = ("properties", "$defs", "definitions")
"""Keywords whose value maps names to subschemas."""

_SUBSCHEMA_LISTS: Final[tuple[str, ...]] = ("anyOf", "allOf", "oneOf", "prefixItems")
"""Keywords whose value is a list of subschemas."""

_SUBSCHEMA_VALUES: Final[tuple[str, ...]] = ("items", "not")
"""Keywords whose value is one subschema (``items`` may also be a list)."""


def _is_object_schema(schema: Mapping[str, Any]) -> bool:
    schema_type = schema.get("type")
    return (
        schema_type == "object"
        or (isinstance(schema_type, list) and "object" in schema_type)
        or ("properties" in schema)
    )


def _subschemas(schema: Mapping[str, Any], context: tuple[str | int, ...]) -> list[tuple[object, tuple[Any, ...]]]:
    children: list[tuple[object, tuple[Any, ...]]] = []
    for keyword, value in schema.items():
        if keyword in _SUBSCHEMA_MAPS:
            children.extend((sub, (*context, keyword, name)) for name, sub in _as_mapping(value).items())
        elif keyword in _SUBSCHEMA_LISTS or (keyword in _SUBSCHEMA_VALUES and isinstance(value, list)):
            children.extend((sub, (*context, keyword, index)) for index, sub in enumerate(_as_list(value)))
        elif keyword in _SUBSCHEMA_VALUES:
            children.append((value, (*context, keyword)))
    return children


def find_strict_schema_violation(response_format: object) -> ChatRuleViolation | None:
    """OpenAI's structural rules of a strict ``json_schema`` response format (Structured Outputs).

    Applies when ``response_format.type`` is ``json_schema`` and ``json_schema.strict`` is true. Every object schema
    (``type: object`` or one with ``properties``), the root and every subschema under ``properties``, ``items``,
    ``anyOf``, ``allOf``, ``oneOf``, ``prefixItems``, ``not``, ``$defs`` and ``definitions``, must set
    ``additionalProperties: false`` and list every property in ``required``. ``context`` in the message is the
    keyword path from the root as a Python tuple, as OpenAI writes it: ``()``, ``('properties', 'a', 'items')``.

    Returns:
        The first violation in document order (``UnsupportedChatParameter`` at ``response_format``), or None.
    """
    fields = _as_mapping(response_format)
    json_schema = _as_mapping(fields.get("json_schema"))
    if fields.get("type") != "json_schema" or json_schema.get("strict") is not True:
        return None
    name = json_schema.get("name")
    pending: list[tuple[object, tuple[Any, ...]]] = [(json_schema.get("schema"), ())]
    while pending:
        schema, context = pending.pop()
        if not isinstance(schema, Mapping):
            continue
        if _is_object_schema(schema):
            if schema.get("additionalProperties") is not False:
                return ChatRuleViolation(
                    code=UNSUPPORTED_CHAT_PARAMETER,
                    param="response_format",
                    message=STRICT_SCHEMA_ADDITIONAL_PROPERTIES_MESSAGE.format(name=name, context=repr(context)),
                )
            required = _as_list(schema.get("required"))
            missing = [key for key in _as_mapping(schema.get("properties")) if key not in required]
            if missing:
                return ChatRuleViolation(
                    code=UNSUPPORTED_CHAT_PARAMETER,
                    param="response_format",
                    message=STRICT_SCHEMA_REQUIRED_MESSAGE.format(name=name, context=repr(context), missing=missing[0]),
                )
        pending.extend(reversed(_subschemas(schema, context)))
    return None


JSON_GUARD_MESSAGE: Final[str] = (
    "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
)
"""OpenAI's message for ``json_object`` without the word "json" in the messages."""


def _message_texts(messages: object) -> list[str]:
    texts: list[str] = []
    for message in _as_list(messages):
        content = _as_mapping(message).get("content")
        if isinstance(content, str):
            texts.append(content)
        for part in _as_list(content):
            text = _as_mapping(part).get("text")
            if isinstance(text, str):
                texts.append(text)
    return texts


def find_json_guard_conflict(body: Mapping[str, Any], *, openai_guards: bool) -> ChatRuleViolation | None:
    """OpenAI's guard on JSON mode, applied under ``horde.openai_guards``: a ``json_object`` response format needs
    the word "json", in any case, in some message's text.

    Returns:
        A ``ChatRequestConflict`` at ``messages`` with OpenAI's message, or None.
    """
    if not openai_guards or _as_mapping(body.get("response_format")).get("type") != "json_object":
        return None
    if any("json" in text.lower() for text in _message_texts(body.get("messages"))):
        return None
    return ChatRuleViolation(code=CHAT_REQUEST_CONFLICT, param="messages", message=JSON_GUARD_MESSAGE)


def find_limit_violation(body: Mapping[str, Any]) -> ChatRuleViolation | None:
    """The first violation of horde-sdk's ``check_chat_request_limits`` (tool count, tool spec size, message text
    size, schema nesting, token limit range, stop count, sampling ranges, choice count), with the SDK's param and
    message.

    Returns:
        An ``UnsupportedChatParameter`` violation, or None.
    """
    for limit in check_chat_request_limits(body):
        return ChatRuleViolation(code=UNSUPPORTED_CHAT_PARAMETER, param=limit.param, message=limit.message)
    return None


def find_chat_rule_violation(body: Mapping[str, Any], *, openai_guards: bool) -> ChatRuleViolation | None:
    """Apply the request rules in the reference's order and return the first one broken.

    The order: ``tool_choice`` / ``parallel_tool_calls`` without tools, the tool history rule, the strict
    ``json_schema`` structural rules, the JSON guard (under ``openai_guards``), then horde-sdk's request limits.

    Args:
        body: An OpenAI chat completions body (keys ``messages``, ``tools``, ``tool_choice``,
            ``parallel_tool_calls``, ``response_format`` and the limited values), as screened and validated.
        openai_guards: The request's ``horde.openai_guards``.
    """
    return (
        find_tool_choice_conflict(body)
        or find_tool_history_violation(body.get("messages"))
        or find_strict_schema_violation(body.get("response_format"))
        or find_json_guard_conflict(body, openai_guards=openai_guards)
        or find_limit_violation(body)
    )
