"""OpenAI's Responses API over the chat completions path: one path, two wire formats.

A ``POST /v1/responses`` body is read in three steps (:func:`read_responses_request`):

1. :func:`find_stateful_refusal` (:func:`screen_responses_body`): unknown top-level keys, and every feature that needs
   state the front does not keep (``conversation``, ``background: true``, ``prompt``, ``include`` values, built-in
   tools), are 400 ``UnsupportedChatParameter`` at their param, in OpenAI's wording; then the view resolves
   ``previous_response_id`` and ``item_reference`` items from the stored responses
   (chat.serving.stored_responses.resolve_stored_input);
2. :class:`chat.protocol.responses_api.ResponsesRequest` validation, errors worded as chat.reading.screening words them;
3. :func:`chat_body`: the validated request becomes a chat completions body, which chat.reading.screening validates and
   checks against the same request rules as ``POST /v1/chat/completions``. An error's ``param`` is mapped back to
   the Responses path (:func:`responses_param`).

From then on the request runs as a chat completion (chat.serving.service.serve_chat: native payload, submit,
waiter, cancels, availability errors, relay); chat.rendering.responses_events rewrites its results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from chat import errors
from chat.errors import OpenAIError
from chat.protocol.capabilities import CAPABILITIES, responses_renames
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.responses_api import (
    RESPONSES_UNION_TAGS,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputImage,
    InputMessage,
    Refusal,
    ResponsesRequest,
)
from chat.reading.body import json_type_name, parse_json_body, show_value
from chat.reading.parameters import unsupported_chat_parameter
from chat.reading.request_rules import ORPHAN_TOOL_MESSAGE, UNANSWERED_TOOL_CALLS_MESSAGE, UNKNOWN_TOOL_CALL_ID_MESSAGE
from chat.reading.screening import check_chat_rules, validate_chat_request
from chat.reading.validation_wording import openai_error_from_validation

RESPONSES_REQUEST_KEYS: Final[frozenset[str]] = frozenset(
    field.alias or name for name, field in ResponsesRequest.model_fields.items()
)
"""The top-level keys of :class:`ResponsesRequest`."""

STATEFUL_PARAMETERS: Final[Mapping[str, str]] = {
    "conversation": "the front stores no conversations; send the whole conversation in 'input'",
    "prompt": "the front stores no prompt templates; send the prompt in 'instructions' and 'input'",
}
"""OpenAI parameters that continue or reuse state stored at OpenAI, refused whenever not null, with the reason."""

STATE_FLAGS: Final[Mapping[str, str]] = {
    "background": "a background response needs a stored response to poll",
}
"""Boolean parameters accepted only as false or null (their default here), with the reason ``true`` is refused."""

INCLUDE_REASON: Final[str] = (
    "workers return no encrypted reasoning or log probabilities and the front runs no built-in tools, so it has no "
    "extra output data to include"
)
"""Why every ``include`` value is refused (``reasoning.encrypted_content``, ``message.output_text.logprobs``, the
built-in tools' results): none has data on the Horde."""

NULL_ONLY_KEYS: Final[frozenset[str]] = frozenset({*STATEFUL_PARAMETERS, "include"})
"""Keys accepted only as null (``include`` also as ``[]``), checked by :func:`find_stateful_refusal` and left out of
validation."""

SUPPORTED_TOOL_TYPES: Final[tuple[str, ...]] = ("function",)
"""The ``tools[].type`` the Horde serves; built-in tools (``web_search``, ``file_search``, ...) run at OpenAI."""

RESPONSES_PATH_TAILS: Final[Mapping[str, str]] = {
    "response_format": r"(?:\.json_schema)?",
    "models": r"(?:\[\d+\])?",
}
"""The part of a chat path after a renamed parameter that its Responses parameter also stands for (a ``json_schema``
format's keys are ``text.format``'s own; any ``models`` entry is ``model``)."""

CHAT_TO_RESPONSES_PARAMS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    *(
        (re.compile(rf"^{re.escape(field)}(?!\w){RESPONSES_PATH_TAILS.get(field, '')}"), responses)
        for field, responses in responses_renames()
    ),
    (re.compile(r"^tools\[(\d+)\]\.function"), r"tools[\1]"),
    (re.compile(r"^tool_choice\.function"), "tool_choice"),
)
"""Chat completions params and the Responses params they stand for (chat.protocol.capabilities' ``responses``, and a
function tool's and a forced function's keys one level up); the rest keep their name."""

CHAT_BODY_CONVERTED: Final[frozenset[str]] = frozenset({"model", "tools", "tool_choice", "stream", "metadata", "horde"})
"""Parameters of the same name in both APIs that :func:`chat_body` sets or converts itself."""

COPIED_PARAMETERS: Final[tuple[str, ...]] = tuple(
    capability.field
    for capability in CAPABILITIES
    if capability.responses == capability.field and capability.field not in CHAT_BODY_CONVERTED
)
"""Responses parameters copied into the chat body as they are: ``temperature``, ``top_p``, ``parallel_tool_calls``,
``user``, ``safety_identifier``, ``prompt_cache_key``."""

_MESSAGE_PARAM: Final[re.Pattern[str]] = re.compile(r"^messages(?:\.?\[(\d+)\])?")


# ---------------------------------------------------------------------------------------------------------------------
# Reading a request


def find_stateful_refusal(body: Mapping[str, Any]) -> OpenAIError | None:
    """The first key of ``body`` the front refuses before validation, or None.

    In order: an unknown top-level key (``Unrecognized request argument supplied: <key>``); a
    :data:`STATEFUL_PARAMETERS` key that is not null; ``background`` true; a non-empty ``include``
    (at ``include[<i>]``); a ``tools`` entry whose ``type`` is not ``function`` (at ``tools[<i>].type``). All are
    400 ``UnsupportedChatParameter`` (logged like chat's refusals).
    """
    for key in body:
        if key not in RESPONSES_REQUEST_KEYS and key not in STATEFUL_PARAMETERS and key != "include":
            return unsupported_chat_parameter(key, f"Unrecognized request argument supplied: {errors.clip(key)}")
    for key, reason in STATEFUL_PARAMETERS.items():
        if body.get(key) is not None:
            return unsupported_chat_parameter(
                key, f"Unsupported parameter: '{key}' is not supported on the AI Horde: {reason}."
            )
    for key, reason in STATE_FLAGS.items():
        if body.get(key) is True:
            return unsupported_chat_parameter(
                key,
                f"Unsupported value: '{key}' does not support true on the AI Horde: {reason}. "
                "Only false (the default here) is supported.",
            )
    include = body.get("include")
    if isinstance(include, list) and include:
        return unsupported_chat_parameter(
            "include[0]",
            f"Unsupported value: 'include' does not support {show_value(include[0])} on the AI Horde: "
            f"{INCLUDE_REASON}.",
        )
    if include is not None and not isinstance(include, list):
        return errors.failure(
            errors.BAD_REQUEST,
            f"Invalid type for 'include': expected an array of strings, but got {json_type_name(include)} instead.",
            param="include",
        )
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        tool_type = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(tool_type, str) and tool_type not in SUPPORTED_TOOL_TYPES:
            return unsupported_chat_parameter(
                f"tools[{index}].type",
                f"Invalid value: {show_value(tool_type)}. Supported values are: 'function'. Built-in tools run on "
                "OpenAI's servers; the AI Horde serves function tools only.",
            )
    return None


def _without_union_tags(location: tuple[int | str, ...]) -> tuple[int | str, ...]:
    return tuple(part for part in location if part not in RESPONSES_UNION_TAGS)


def validate_responses_request(body: Mapping[str, Any]) -> ResponsesRequest:
    """Validate a screened body against :class:`ResponsesRequest`.

    Raises:
        OpenAIError: 400 for the first failing field, worded by
        :func:`chat.reading.validation_wording.openai_error_from_validation`
            at its Responses path (``input[2].content[0].text``).
    """
    try:
        return ResponsesRequest.model_validate({key: value for key, value in body.items() if key not in NULL_ONLY_KEYS})
    except ValidationError as exc:
        failures = exc.errors(include_url=False)
        first = next((failure for failure in failures if failure["type"] == "extra_forbidden"), failures[0])
        first = {**first, "loc": _without_union_tags(first["loc"])}
        raise openai_error_from_validation(first, body) from None


def _part_text(part: Any) -> str:
    if isinstance(part, Refusal):
        return part.refusal
    return str(getattr(part, "text", ""))


def _message_content(message: InputMessage) -> str | list[dict[str, Any]]:
    """A message item's content as a chat message's: the string, text parts, or text and ``image_url`` parts."""
    if isinstance(message.content, str):
        return message.content
    if message.role == "assistant":
        return "".join(_part_text(part) for part in message.content)
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, InputImage):
            image: dict[str, Any] = {"url": part.image_url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append({"type": "text", "text": _part_text(part)})
    return parts


def chat_messages(request: ResponsesRequest) -> tuple[list[dict[str, Any]], list[str]]:
    """The chat ``messages`` of a Responses request, and the Responses param each message came from.

    ``instructions`` is a first ``system`` message; a string ``input`` is one ``user`` message; message items keep
    their role (``input_text`` parts become ``text`` parts, ``input_image`` parts ``image_url`` parts, an assistant
    message's ``output_text`` and ``refusal`` parts its text); consecutive ``function_call`` items become one
    assistant message's ``tool_calls`` (joined to the assistant message right before them, when it has none); a
    ``function_call_output`` item becomes a ``tool`` message; ``reasoning`` items are left out.
    """
    messages: list[dict[str, Any]] = []
    sources: list[str] = []
    if request.instructions is not None:
        messages.append({"role": "system", "content": request.instructions})
        sources.append("instructions")
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
        sources.append("input")
        return messages, sources
    for index, item in enumerate(request.input):
        if isinstance(item, InputMessage):
            messages.append({"role": item.role, "content": _message_content(item)})
            sources.append(f"input[{index}]")
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            previous = messages[-1] if messages else None
            if previous is not None and previous["role"] == "assistant" and sources[-1] != "instructions":
                previous.setdefault("tool_calls", []).append(call)
                if previous.get("content") == "":
                    previous["content"] = None
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                sources.append(f"input[{index}]")
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else "".join(_part_text(p) for p in item.output)
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
            sources.append(f"input[{index}]")
    return messages, sources


def chat_body(request: ResponsesRequest) -> tuple[dict[str, Any], list[str]]:
    """The chat completions body of a validated Responses request, and the source param of each message.

    ``max_output_tokens`` becomes ``max_completion_tokens``, ``text.format`` ``response_format`` (a ``json_schema``
    format's ``name``, ``description``, ``schema`` and ``strict`` go under ``json_schema``), ``reasoning.effort``
    ``reasoning_effort``, function tools ``{"type": "function", "function": {...}}``, a forced function
    ``{"type": "function", "function": {"name"}}``. A stream asks for the usage chunk, which ``response.completed``
    needs. ``temperature``, ``top_p``, ``parallel_tool_calls``, ``user``, ``safety_identifier``,
    ``prompt_cache_key``, ``metadata`` and ``horde`` keep their names.
    """
    messages, sources = chat_messages(request)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.max_output_tokens is not None:
        body["max_completion_tokens"] = request.max_output_tokens
    for key in COPIED_PARAMETERS:
        value = getattr(request, key)
        if value is not None:
            body[key] = value
    if request.metadata is not None:
        body["metadata"] = dict(request.metadata)
    if request.horde is not None:
        body["horde"] = request.horde.model_dump(exclude_none=True)
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.tools is not None:
        body["tools"] = [
            {"type": "function", "function": tool.model_dump(exclude_none=True, exclude={"type"})}
            for tool in request.tools
        ]
    if isinstance(request.tool_choice, str):
        body["tool_choice"] = request.tool_choice
    elif request.tool_choice is not None:
        body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice.name}}
    text_format = request.text.format if request.text is not None else None
    if text_format is not None:
        dumped = text_format.model_dump(exclude_none=True, by_alias=True)
        if dumped["type"] == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {key: value for key, value in dumped.items() if key != "type"},
            }
        else:
            body["response_format"] = dumped
    if request.reasoning is not None and request.reasoning.effort is not None:
        body["reasoning_effort"] = request.reasoning.effort.value
    return body, sources


def responses_param(param: str | None, sources: list[str]) -> str | None:
    """A chat completions ``param`` as the Responses request's path: ``messages[3].content`` is the item that
    message came from (``input[2]``, ``instructions``), ``response_format`` is ``text.format``,
    ``max_completion_tokens`` is ``max_output_tokens``, ``tools[0].function.name`` is ``tools[0].name``.
    """
    if param is None:
        return None
    message = _MESSAGE_PARAM.match(param)
    if message is not None:
        index = message.group(1)
        if index is not None and int(index) < len(sources):
            return sources[int(index)]
        return "input"
    for pattern, replacement in CHAT_TO_RESPONSES_PARAMS:
        mapped, count = pattern.subn(replacement, param, count=1)
        if count:
            return mapped
    return param


def message_path(path: str, sources: list[str]) -> str:
    """A chat completions path as a Responses path for an error's message text: like :func:`responses_param`, but a
    path inside a message item's content keeps its tail (``messages[1].content[0].image_url`` is
    ``input[0].content[0].image_url``: a non-assistant item's parts keep their order and field names).
    """
    message = _MESSAGE_PARAM.match(path)
    mapped = responses_param(path, sources) or path
    if message is None or message.group(1) is None:
        return mapped
    tail = path[message.end() :]
    if mapped.startswith("input[") and tail.startswith(".content["):
        return mapped + tail
    return mapped


def responses_message(message: str, param: str | None, sources: list[str]) -> str:
    """``message`` with the chat completions path ``param`` it names (quoted, or after ``supplied:``) written as the
    Responses path (:func:`message_path`), and a quoted ``'response_format'`` as ``'text.format'``, so the text names
    the fields the client sent.
    """
    message = message.replace("'response_format'", "'text.format'")  # the JSON guard names it beside 'messages'
    if not param:
        return message
    path = message_path(param, sources)
    if path == param:
        return message
    return message.replace(f"'{param}'", f"'{path}'").replace(f"supplied: {param}", f"supplied: {path}")


def as_responses_error(error: OpenAIError, sources: list[str]) -> OpenAIError:
    """``error`` with its ``param`` at the Responses path (:func:`responses_param`) and the chat path its message
    names rewritten too (:func:`responses_message`); modified in place.
    """
    error.message = responses_message(error.message, error.param, sources)
    error.param = responses_param(error.param, sources)
    return error


NO_TOOL_CALL_MESSAGE: Final[str] = "No tool call found for function call output with call_id {call_id}."
"""OpenAI's Responses message (param ``input``) for a ``function_call_output`` that answers no ``function_call``
before it (chat completions words it as an orphan ``tool`` message or an unknown ``tool_call_id``)."""

NO_TOOL_OUTPUT_MESSAGE: Final[str] = "No tool output found for function call {call_id}."
"""OpenAI's Responses message (param ``input``) for a ``function_call`` without its ``function_call_output``; the
first unanswered call is named."""

_TOOL_HISTORY_PARAM: Final[re.Pattern[str]] = re.compile(r"^messages\.\[(\d+)\]\.(?:role|tool_call_id)$")
_UNANSWERED_PREFIX: Final[str] = UNANSWERED_TOOL_CALLS_MESSAGE.partition("{ids}")[0]
_UNKNOWN_CALL_PREFIX: Final[str] = UNKNOWN_TOOL_CALL_ID_MESSAGE.partition("{tool_call_id}")[0]


def tool_history_error(error: OpenAIError, messages: list[dict[str, Any]]) -> OpenAIError | None:
    """The Responses form of a chat tool-history refusal (chat.reading.request_rules) of the chat ``messages`` a request
    became, or None when ``error`` is another refusal: OpenAI's :data:`NO_TOOL_CALL_MESSAGE` or
    :data:`NO_TOOL_OUTPUT_MESSAGE` at ``input``, same status and code.
    """
    if error.message.startswith(_UNANSWERED_PREFIX):
        first = error.message.removeprefix(_UNANSWERED_PREFIX).split(", ")[0]
        message = NO_TOOL_OUTPUT_MESSAGE.format(call_id=first)
    elif error.message == ORPHAN_TOOL_MESSAGE or error.message.startswith(_UNKNOWN_CALL_PREFIX):
        match = _TOOL_HISTORY_PARAM.match(error.param or "")
        if match is None or int(match.group(1)) >= len(messages):
            return None
        message = NO_TOOL_CALL_MESSAGE.format(call_id=messages[int(match.group(1))].get("tool_call_id"))
    else:
        return None
    error.message, error.param = message, "input"
    return error


def screen_responses_body(raw: bytes) -> dict[str, Any]:
    """Parse a ``POST /v1/responses`` body and refuse what :func:`find_stateful_refusal` refuses.

    Raises:
        OpenAIError: 400 with OpenAI's message, the front's code and the Responses param.
    """
    body = parse_json_body(raw)
    refused = find_stateful_refusal(body)
    if refused is not None:
        raise refused
    return body


def read_responses_body(body: Mapping[str, Any]) -> tuple[ResponsesRequest, ChatCompletionRequest, list[str]]:
    """Validate a screened ``POST /v1/responses`` body (stored state already resolved); return it, its chat
    completions request (validated and checked by chat.reading.screening) and the source param of each chat message.

    Raises:
        OpenAIError: 400 with OpenAI's message, the front's code and the Responses param.
    """
    request = validate_responses_request(body)
    screened, sources = chat_body(request)
    try:
        chat_request = validate_chat_request(screened)
        check_chat_rules(screened)
    except OpenAIError as error:
        raise tool_history_error(error, screened["messages"]) or as_responses_error(error, sources) from None
    return request, chat_request, sources


def read_responses_request(raw: bytes) -> tuple[ResponsesRequest, ChatCompletionRequest, list[str]]:
    """Parse, screen and validate a ``POST /v1/responses`` body without stored state (:func:`screen_responses_body`
    then :func:`read_responses_body`).
    """
    return read_responses_body(screen_responses_body(raw))
