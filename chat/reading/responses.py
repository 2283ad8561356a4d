"""OpenAI's Responses API over the chat completions path: one path, two wire formats.

A ``POST /v1/responses`` body is read in three steps (:func:`read_responses_request`):

1. :func:`find_stateful_refusal`: unknown top-level keys, and every feature that needs state kept between requests
   (``previous_response_id``, ``conversation``, ``store: true``, ``background: true``, ``prompt``, ``include``
   values, built-in tools), are 400 ``UnsupportedChatParameter`` at their param, in OpenAI's wording;
2. :class:`chat.protocol.responses_api.ResponsesRequest` validation, errors worded as chat.reading.screening words them;
3. :func:`chat_body`: the validated request becomes a chat completions body, which chat.reading.screening validates and
   checks against the same request rules as ``POST /v1/chat/completions``. An error's ``param`` is mapped back to
   the Responses path (:func:`responses_param`).

From then on the request runs as a chat completion (chat.views.chat_completions ``serve_chat``: native payload, submit,
waiter, cancels, availability errors, relay). Its results are rewritten:

- :func:`build_response`: a ``chat.completion`` becomes a ``response`` object: ``output`` holds a ``reasoning`` item
  (summary text) when the worker reasons, a ``message`` item with ``output_text``, and ``function_call`` items;
  ``usage`` holds ``input_tokens``, ``output_tokens`` and ``output_tokens_details.reasoning_tokens``; a ``length``
  stop is ``status: incomplete`` with ``incomplete_details.reason: max_output_tokens``.
- :class:`ResponseEventWriter`: the ``chat.completion.chunk`` stream (buffered or relayed live) becomes OpenAI's typed
  events in OpenAI's order (:func:`response_events`): ``response.created``, ``response.in_progress``, per item
  ``response.output_item.added``, its parts and deltas and their ``...done`` events, ``response.output_item.done``,
  then ``response.completed`` (or ``response.incomplete``). Keepalive comments pass through; a stream error becomes
  one ``error`` event, which ends the stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Final

from horde_sdk.worker.chat_declaration import ChatFinishReason
from pydantic import ValidationError

from chat import errors
from chat.errors import OpenAIError, dumps
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
from chat.reading.request_rules import ORPHAN_TOOL_MESSAGE, UNANSWERED_TOOL_CALLS_MESSAGE, UNKNOWN_TOOL_CALL_ID_MESSAGE
from chat.reading.screening import (
    check_chat_rules,
    json_type_name,
    openai_error_from_validation,
    parse_json_body,
    show_value,
    unsupported_chat_parameter,
    validate_chat_request,
)
from chat.streaming.buffered import KEEPALIVE_COMMENT

REQUEST_KEYS: Final[frozenset[str]] = frozenset(
    field.alias or name for name, field in ResponsesRequest.model_fields.items()
)
"""The top-level keys of :class:`ResponsesRequest`."""

STATEFUL_PARAMETERS: Final[Mapping[str, str]] = {
    "previous_response_id": "the front stores no responses; send the whole conversation in 'input'",
    "conversation": "the front stores no conversations; send the whole conversation in 'input'",
    "prompt": "the front stores no prompt templates; send the prompt in 'instructions' and 'input'",
}
"""OpenAI parameters that continue or reuse state stored at OpenAI, refused whenever not null, with the reason."""

STATE_FLAGS: Final[Mapping[str, str]] = {
    "store": "the front stores no responses",
    "background": "a background response needs a stored response to poll",
}
"""Boolean parameters accepted only as false or null (their default here), with the reason ``true`` is refused."""

INCLUDE_REASON: Final[str] = (
    "the front stores no responses and runs no built-in tools, so it has no extra output data to include"
)
"""Why every ``include`` value is refused (``reasoning.encrypted_content``, ``message.output_text.logprobs``, the
built-in tools' results): none has data on the Horde."""

NULL_ONLY_KEYS: Final[frozenset[str]] = frozenset({*STATEFUL_PARAMETERS, "include"})
"""Keys accepted only as null (``include`` also as ``[]``), checked by :func:`find_stateful_refusal` and left out of
validation."""

SUPPORTED_TOOL_TYPES: Final[tuple[str, ...]] = ("function",)
"""The ``tools[].type`` the Horde serves; built-in tools (``web_search``, ``file_search``, ...) run at OpenAI."""

CHAT_TO_RESPONSES_PARAMS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"^response_format(?:\.json_schema)?"), "text.format"),
    (re.compile(r"^max_completion_tokens|^max_tokens"), "max_output_tokens"),
    (re.compile(r"^reasoning_effort"), "reasoning.effort"),
    (re.compile(r"^tools\[(\d+)\]\.function"), r"tools[\1]"),
    (re.compile(r"^tool_choice\.function"), "tool_choice"),
    (re.compile(r"^models?(?:\[\d+\])?"), "model"),
)
"""Chat completions params and the Responses params they stand for (the rest keep their name)."""

_MESSAGE_PARAM: Final[re.Pattern[str]] = re.compile(r"^messages(?:\.?\[(\d+)\])?")


# ---------------------------------------------------------------------------------------------------------------------
# Reading a request


def find_stateful_refusal(body: Mapping[str, Any]) -> OpenAIError | None:
    """The first key of ``body`` the front refuses before validation, or None.

    In order: an unknown top-level key (``Unrecognized request argument supplied: <key>``); a
    :data:`STATEFUL_PARAMETERS` key that is not null; ``store`` or ``background`` true; a non-empty ``include``
    (at ``include[<i>]``); a ``tools`` entry whose ``type`` is not ``function`` (at ``tools[<i>].type``). All are
    400 ``UnsupportedChatParameter`` (logged like chat's refusals).
    """
    for key in body:
        if key not in REQUEST_KEYS and key not in STATEFUL_PARAMETERS and key != "include":
            return unsupported_chat_parameter(key, f"Unrecognized request argument supplied: {key}")
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
        return OpenAIError(
            status=400,
            message=(
                f"Invalid type for 'include': expected an array of strings, but got {json_type_name(include)} instead."
            ),
            code=errors.BAD_REQUEST,
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
        :func:`chat.reading.screening.openai_error_from_validation`
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
    for key in ("temperature", "top_p", "parallel_tool_calls", "user", "safety_identifier", "prompt_cache_key"):
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


def read_responses_request(raw: bytes) -> tuple[ResponsesRequest, ChatCompletionRequest, list[str]]:
    """Parse, screen and validate a ``POST /v1/responses`` body; return it, its chat completions request (validated
    and checked by chat.reading.screening) and the source param of each chat message.

    Raises:
        OpenAIError: 400 with OpenAI's message, the front's code and the Responses param.
    """
    body = parse_json_body(raw)
    refused = find_stateful_refusal(body)
    if refused is not None:
        raise refused
    request = validate_responses_request(body)
    screened, sources = chat_body(request)
    try:
        chat_request = validate_chat_request(screened)
        check_chat_rules(screened)
    except OpenAIError as error:
        raise tool_history_error(error, screened["messages"]) or as_responses_error(error, sources) from None
    return request, chat_request, sources


# ---------------------------------------------------------------------------------------------------------------------
# The response object


def response_id(request_id: str) -> str:
    """``resp_`` + the native request id."""
    return f"resp_{request_id}"


def _echoed_settings(request: ResponsesRequest) -> dict[str, Any]:
    """The request's settings a response echoes (OpenAI's defaults where the request has none)."""
    text = request.text.model_dump(exclude_none=True, by_alias=True) if request.text is not None else {}
    text.setdefault("format", {"type": "text"})
    tool_choice: Any = "auto"
    if isinstance(request.tool_choice, str):
        tool_choice = request.tool_choice
    elif request.tool_choice is not None:
        tool_choice = request.tool_choice.model_dump()
    reasoning = request.reasoning
    return {
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": dict(request.metadata or {}),
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "tool_choice": tool_choice,
        "tools": [tool.model_dump(exclude_none=True) for tool in request.tools or []],
        "text": text,
        "reasoning": {
            "effort": reasoning.effort.value if reasoning is not None and reasoning.effort is not None else None,
            "summary": reasoning.summary if reasoning is not None else None,
        },
        "previous_response_id": None,
        "store": False,
        "background": False,
        "truncation": "disabled",
        "service_tier": "default",
        "user": request.user,
    }


def response_shell(request: ResponsesRequest, request_id: str, model: str, created_at: int) -> dict[str, Any]:
    """The ``response`` of the ``response.created`` and ``response.in_progress`` events: ``in_progress``, no output,
    no usage.
    """
    return {
        "id": response_id(request_id),
        "object": "response",
        "created_at": created_at,
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
        "usage": None,
        **_echoed_settings(request),
    }


INCOMPLETE_REASONS: Final[Mapping[str, str]] = {
    ChatFinishReason.LENGTH.value: "max_output_tokens",
    ChatFinishReason.CONTENT_FILTER.value: "content_filter",
}
"""The chat ``finish_reason`` values that make a response ``incomplete``, and its ``incomplete_details.reason``."""


def output_items(completion: Mapping[str, Any], request_id: str) -> list[dict[str, Any]]:
    """The ``output`` of a completion, in order: the ``reasoning`` item when the message has ``reasoning_content``;
    the ``message`` item when the reply has text, or has neither calls nor reasoning (an empty reply); one
    ``function_call`` item per tool call. A message item is ``incomplete`` when the reply stopped at the limit.
    """
    choice = completion["choices"][0]
    message = choice["message"]
    incomplete = choice.get("finish_reason") in INCOMPLETE_REASONS
    items: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        items.append(
            {
                "id": f"rs_{request_id}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": reasoning}],
                "status": "completed",
            }
        )
    text = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if text or not (calls or reasoning):
        items.append(
            {
                "id": f"msg_{request_id}",
                "type": "message",
                "role": "assistant",
                "status": "incomplete" if incomplete else "completed",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }
        )
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        items.append(
            {
                "id": f"fc_{request_id}_{index}",
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
                "status": "completed",
            }
        )
    return items


def response_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A chat ``usage`` in the Responses shape: ``input_tokens`` (prompt), ``output_tokens`` (completion),
    ``output_tokens_details.reasoning_tokens`` (0 without a count), ``total_tokens``; no cached tokens.
    """
    details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
        "total_tokens": usage["total_tokens"],
    }


def build_response(
    request: ResponsesRequest, completion: Mapping[str, Any], request_id: str, created_at: int, completed_at: int
) -> dict[str, Any]:
    """The ``response`` object of a completion (:func:`chat.rendering.completion.build_completion`, or one a stream
    rebuilt).

    ``status`` is ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` for a ``length`` stop
    (``content_filter`` for a filtered one), else ``completed``; ``output`` is :func:`output_items`; ``usage`` is
    :func:`response_usage`; ``x_horde`` is the completion's, left out when it has none.
    """
    finish_reason = completion["choices"][0].get("finish_reason")
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    response = response_shell(request, request_id, completion["model"], created_at)
    response |= {
        "completed_at": completed_at,
        "status": "incomplete" if reason else "completed",
        "incomplete_details": {"reason": reason} if reason else None,
        "output": output_items(completion, request_id),
        "usage": response_usage(completion["usage"]),
    }
    if completion.get("x_horde"):
        response["x_horde"] = completion["x_horde"]
    return response


# ---------------------------------------------------------------------------------------------------------------------
# The event stream


def sse_event(event: Mapping[str, Any]) -> bytes:
    """``event: <type>`` and ``data: <json>``, as OpenAI frames Responses events."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + dumps(event) + b"\n\n"


class ResponseEventWriter:
    """Turns a chat completion's chunks into OpenAI's Responses events, in OpenAI's order.

    Feed the chunks in order (:meth:`chunk`); :meth:`start` gives the first two events, :meth:`finish` the rest once
    the chunks end, :meth:`error` the ``error`` event of a failed stream. Every event carries ``sequence_number``
    from 0. Text and reasoning deltas are sent as they come (live when the relay runs); an item is closed
    (``...done`` events) when the next item starts or, for the last one, at :meth:`finish`, with its final status.
    Items the chunks did not open (an empty reply's message item) are sent whole at :meth:`finish`, so the items
    streamed are always the final response's ``output``.
    """

    def __init__(self, request: ResponsesRequest, request_id: str, created_at: int, model: str) -> None:
        self.request = request
        self.request_id = request_id
        self.created_at = created_at
        self.model = model
        self.sequence = 0
        self.open_kind: str | None = None
        """``reasoning`` or ``message`` while that item takes deltas, else None."""
        self.opened: list[str] = []
        """The item ids sent so far (``output_item.added``), in output order."""
        self.closed: set[str] = set()
        self.reasoning = ""
        self.text = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.finish_chunk: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None

    # ------------------------------------------------------------------ framing

    def _event(self, event_type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": event_type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        """``response.created`` then ``response.in_progress``, each with the ``in_progress`` response."""
        shell = response_shell(self.request, self.request_id, self.model, self.created_at)
        return [self._event("response.created", response=shell), self._event("response.in_progress", response=shell)]

    # ------------------------------------------------------------------ items

    @property
    def _reasoning_id(self) -> str:
        return f"rs_{self.request_id}"

    @property
    def _message_id(self) -> str:
        return f"msg_{self.request_id}"

    def _open_reasoning(self) -> list[dict[str, Any]]:
        events = self._close_open()
        item = {"id": self._reasoning_id, "type": "reasoning", "summary": [], "status": "in_progress"}
        index = len(self.opened)
        self.opened.append(self._reasoning_id)
        self.open_kind = "reasoning"
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        events.append(
            self._event(
                "response.reasoning_summary_part.added",
                item_id=self._reasoning_id,
                output_index=index,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
        )
        return events

    def _open_message(self) -> list[dict[str, Any]]:
        events = self._close_open()
        item = {"id": self._message_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        index = len(self.opened)
        self.opened.append(self._message_id)
        self.open_kind = "message"
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        events.append(
            self._event(
                "response.content_part.added",
                item_id=self._message_id,
                output_index=index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            )
        )
        return events

    def _close_reasoning(self, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = self.opened.index(self._reasoning_id)
        text = item["summary"][0]["text"]
        self.closed.add(self._reasoning_id)
        return [
            self._event(
                "response.reasoning_summary_text.done",
                item_id=self._reasoning_id,
                output_index=index,
                summary_index=0,
                text=text,
            ),
            self._event(
                "response.reasoning_summary_part.done",
                item_id=self._reasoning_id,
                output_index=index,
                summary_index=0,
                part={"type": "summary_text", "text": text},
            ),
            self._event("response.output_item.done", output_index=index, item=dict(item)),
        ]

    def _close_message(self, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = self.opened.index(self._message_id)
        part = item["content"][0]
        self.closed.add(self._message_id)
        return [
            self._event(
                "response.output_text.done",
                item_id=self._message_id,
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=[],
            ),
            self._event(
                "response.content_part.done", item_id=self._message_id, output_index=index, content_index=0, part=part
            ),
            self._event("response.output_item.done", output_index=index, item=dict(item)),
        ]

    def _function_call(self, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = len(self.opened)
        self.opened.append(item["id"])
        self.closed.add(item["id"])
        added = {**item, "arguments": "", "status": "in_progress"}
        events = [self._event("response.output_item.added", output_index=index, item=added)]
        if item["arguments"]:
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=item["arguments"],
                )
            )
        events.append(
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        )
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def _close_open(self, final: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Close the item taking deltas: with its final form when ``final`` (by id) has it, else as streamed."""
        kind, self.open_kind = self.open_kind, None
        if kind == "reasoning":
            streamed = {
                "id": self._reasoning_id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": self.reasoning}],
                "status": "completed",
            }
            return self._close_reasoning((final or {}).get(self._reasoning_id, streamed))
        if kind == "message":
            streamed = {
                "id": self._message_id,
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}],
            }
            return self._close_message((final or {}).get(self._message_id, streamed))
        return []

    # ------------------------------------------------------------------ input

    def chunk(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events of one ``chat.completion.chunk``: reasoning and text deltas open their item when it is not
        open yet and send ``response.reasoning_summary_text.delta`` / ``response.output_text.delta``; tool calls
        close the open item; the finish chunk and the usage chunk are kept for :meth:`finish`.
        """
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if chunk.get("usage") is not None:
            self.usage = dict(chunk["usage"])
        choices = chunk.get("choices") or []
        if not choices:
            return []
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_chunk = dict(choice)
            return []
        delta = choice.get("delta") or {}
        events: list[dict[str, Any]] = []
        reasoning = delta.get("reasoning_content")
        if reasoning:
            if self.open_kind != "reasoning":
                events += self._open_reasoning()
            self.reasoning += reasoning
            events.append(
                self._event(
                    "response.reasoning_summary_text.delta",
                    item_id=self._reasoning_id,
                    output_index=self.opened.index(self._reasoning_id),
                    summary_index=0,
                    delta=reasoning,
                )
            )
        content = delta.get("content")
        if content:
            if self.open_kind != "message":
                events += self._open_message()
            self.text += content
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self._message_id,
                    output_index=self.opened.index(self._message_id),
                    content_index=0,
                    delta=content,
                    logprobs=[],
                )
            )
        if delta.get("tool_calls"):
            events += self._close_open()
            self.tool_calls += [
                {key: value for key, value in call.items() if key != "index"} for call in delta["tool_calls"]
            ]
        return events

    def completion(self) -> dict[str, Any]:
        """The completion the chunks describe (the shape :func:`build_response` reads)."""
        finish = self.finish_chunk or {}
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        completion: dict[str, Any] = {
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish.get("finish_reason")}],
            "usage": self.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        if finish.get("x_horde"):
            completion["x_horde"] = finish["x_horde"]
        return completion

    def finish(self, completed_at: int) -> list[dict[str, Any]]:
        """The events after the last chunk: the open item closed with its final status, the function calls and any
        item not streamed yet (whole), then ``response.completed``, or ``response.incomplete`` when the reply
        stopped at the limit, with the whole response.
        """
        response = build_response(self.request, self.completion(), self.request_id, self.created_at, completed_at)
        final = {item["id"]: item for item in response["output"]}
        events = self._close_open(final)
        for item in response["output"]:
            if item["id"] in self.opened:
                continue
            if item["type"] == "function_call":
                events += self._function_call(item)
            elif item["type"] == "message":
                events += self._open_message()
                self.open_kind = None
                events += self._close_message(item)
            elif item["type"] == "reasoning":
                events += self._open_reasoning()
                self.open_kind = None
                events += self._close_reasoning(item)
        terminal = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append(self._event(terminal, response=response))
        return events

    def error(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """The ``error`` event of a stream error (``{"error": {...}}``): ``code``, ``message``, ``param`` and the
        error's ``metadata`` when it has some.
        """
        body = envelope.get("error") or {}
        event = self._event("error", code=body.get("code"), message=body.get("message"), param=body.get("param"))
        if body.get("metadata"):
            event["metadata"] = body["metadata"]
        return event


def read_chat_events(raw: bytes) -> list[Any]:
    """The JSON payloads of the ``data:`` lines of chat completion SSE bytes (``[DONE]`` left out)."""
    payloads = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            payloads.append(json.loads(line[len(b"data: ") :]))
    return payloads


async def response_events(
    writer: ResponseEventWriter,
    chat_events: AsyncIterator[bytes],
    sources: list[str],
    clock: Callable[[], float],
) -> AsyncIterator[bytes]:
    """A Responses event stream from a chat completion event stream (buffered or relayed, chat.streaming.buffered).

    ``response.created`` and ``response.in_progress`` go out at once; keepalive comments pass through; each chunk's
    events follow it; after the last chunk come :meth:`ResponseEventWriter.finish`'s events. A chat stream error
    (``data: {"error": ...}``) becomes one ``error`` event (its ``param`` at the Responses path) and ends the stream.
    ``clock`` gives Unix seconds for ``completed_at``.
    """
    try:
        for event in writer.start():
            yield sse_event(event)
        async for raw in chat_events:
            if raw == KEEPALIVE_COMMENT:
                yield raw
                continue
            for payload in read_chat_events(raw):
                if isinstance(payload, dict) and "error" in payload:
                    error = dict(payload["error"])
                    if isinstance(error.get("message"), str):
                        error["message"] = responses_message(error["message"], error.get("param"), sources)
                    error["param"] = responses_param(error.get("param"), sources)
                    yield sse_event(writer.error({"error": error}))
                    return
                for event in writer.chunk(payload):
                    yield sse_event(event)
        for event in writer.finish(int(clock())):
            yield sse_event(event)
    finally:
        if isinstance(chat_events, AsyncGenerator):
            await chat_events.aclose()  # its own finally ends the wait and the relay (and cancels when not terminal)


def output_text(response: Mapping[str, Any]) -> str:
    """The text of a response's message items, joined (as the SDKs' ``output_text``)."""
    return "".join(
        part["text"]
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    )


def event_types(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ``type`` of each event, in order."""
    return [str(event["type"]) for event in events]
