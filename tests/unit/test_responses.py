"""``POST /v1/responses``: input items -> the native payload, refusals at their Responses param, native statuses ->
``response`` objects and OpenAI's typed stream events in OpenAI's exact order.

Every response object is validated by the official ``openai`` SDK's ``Response`` type and every event sequence is fed
through the SDK's own ``responses.stream`` accumulator (``ResponseStreamState``), which raises on an event out of
order, so the front's sequences are the ones the SDK accepts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from chat.errors import OpenAIError
from chat.horde.native import NativeStatus
from chat.horde.native_payload import build_native_payload
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.responses_api import ResponseObject, ResponsesRequest
from chat.reading.responses import read_responses_request
from chat.rendering.completion import buffered_chunks, build_completion
from chat.rendering.responses_events import (
    ResponseEventWriter,
    build_response,
    event_types,
    output_text,
    response_events,
)
from chat.rendering.sse import KEEPALIVE_COMMENT, data_event

CREATED = 1_700_000_000
COMPLETED = 1_700_000_009
WORKER = "6f1c2b1e-0d8a-4c3e-9a55-3e0f7d2c9b10"
CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}},
    {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
]
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
EVENTS = TypeAdapter(ResponseStreamEvent)


def read(body: dict[str, Any]) -> tuple[ResponsesRequest, ChatCompletionRequest, list[str]]:
    return read_responses_request(json.dumps(body).encode())


@pytest.mark.parametrize("raw", [b"{nope", b"NaN"])
def test_a_body_that_is_not_json_gets_a_hint_that_names_no_other_route(raw: bytes) -> None:
    """The not-JSON message is shared with ``POST /v1/chat/completions``, so its hint names no route: a Responses
    client must not read that it should have called chat completions."""
    with pytest.raises(OpenAIError) as caught:
        read_responses_request(raw)
    assert (caught.value.status, caught.value.code, caught.value.param, caught.value.message) == (
        400,
        "BadRequest",
        None,
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
        "library correctly. This API expects a JSON object as the request body, but what was sent was not valid "
        "JSON. NaN, Infinity, numbers too large for a double and lone UTF-16 surrogates are not accepted either.)",
    )


def payload(body: dict[str, Any]) -> dict[str, Any]:
    _, chat_request, _ = read(body)
    return build_native_payload(chat_request, stream_progress=False)


def refusal(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(OpenAIError) as caught:
        read(body)
    assert caught.value.status == 400
    error: dict[str, Any] = caught.value.envelope()["error"]
    return error


def status(message: dict[str, Any], **generation: Any) -> NativeStatus:
    gen: dict[str, Any] = {
        "id": "g1",
        "worker_id": WORKER,
        "model": "org/m",
        "message": message,
        "finish_reason": "stop",
        "native_finish_reason": "eos_token",
        "prompt_tokens": 11,
        "completion_tokens": 7,
        **generation,
    }
    return NativeStatus.model_validate({"done": True, "finished": 1, "generations": [gen]})


# ---------------------------------------------------------------------------------------------------------------------
# Input items -> native payload


def test_string_input_is_one_user_message_and_settings_map_to_native_keys() -> None:
    assert payload(
        {
            "model": "org/m",
            "input": "Tell me about tides.",
            "instructions": "Be brief.",
            "max_output_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "reasoning": {"effort": "low", "summary": "auto"},
            "metadata": {"k": "v"},
            "user": "u1",
            "store": False,
        }
    ) == {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about tides."}],
        "models": ["org/m"],
        "params": {"max_length": 64, "temperature": 0.5, "top_p": 0.9, "reasoning_effort": "low"},
    }


def test_message_and_function_items_map_to_chat_messages() -> None:
    """Parts become chat parts, a replayed assistant message's output_text its text, consecutive function_call items
    one assistant turn's tool_calls, function_call_output items tool messages, reasoning items nothing."""
    body = {
        "model": "org/m",
        "input": [
            {"role": "developer", "content": "Answer in English."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is here?"},
                    {"type": "input_image", "image_url": "https://example.org/a.png", "detail": "low"},
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}]},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Let me check.", "annotations": [], "logprobs": []}],
            },
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather", "arguments": "{}"},
            {
                "type": "function_call",
                "call_id": "call_b",
                "name": "get_time",
                "arguments": "{}",
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "noon"}]},
            {"role": "user", "content": "Thanks."},
        ],
    }
    assert payload(body)["messages"] == [
        {"role": "developer", "content": "Answer in English."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is here?"},
                {"type": "image_url", "image_url": {"url": "https://example.org/a.png", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_a"},
        {"role": "tool", "content": "noon", "tool_call_id": "call_b"},
        {"role": "user", "content": "Thanks."},
    ]


def test_tools_tool_choice_and_json_schema_format_map_to_chat_keys() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    mapped = payload(
        {
            "model": "org/m",
            "input": "Weather?",
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "text": {"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
        }
    )
    assert mapped["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": WEATHER_TOOL["parameters"],
                "strict": False,
            },
        }
    ]
    assert mapped["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert mapped["parallel_tool_calls"] is False
    assert mapped["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": schema, "strict": True},
    }


def test_a_stream_asks_for_the_usage_chunk() -> None:
    _, chat_request, _ = read({"model": "org/m", "input": "Hi", "stream": True})
    assert chat_request.is_stream and chat_request.include_usage


# ---------------------------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"conversation": "conv_1"},
            "conversation",
            (
                "Unsupported parameter: 'conversation' is not supported on the AI Horde: the front stores no "
                "conversations; send the whole conversation in 'input'."
            ),
        ),
        (
            {"background": True},
            "background",
            (
                "Unsupported value: 'background' does not support true on the AI Horde: a background response needs a "
                "stored response to poll. Only false (the default here) is supported."
            ),
        ),
        (
            {"include": ["reasoning.encrypted_content"]},
            "include[0]",
            (
                "Unsupported value: 'include' does not support 'reasoning.encrypted_content' on the AI Horde: workers "
                "return no encrypted reasoning or log probabilities and the front runs no built-in tools, so it has no "
                "extra output data to include."
            ),
        ),
        (
            {"tools": [WEATHER_TOOL, {"type": "web_search"}]},
            "tools[1].type",
            (
                "Invalid value: 'web_search'. Supported values are: 'function'. Built-in tools run on OpenAI's "
                "servers; the AI Horde serves function tools only."
            ),
        ),
        ({"top_k": 5}, "top_k", "Unrecognized request argument supplied: top_k"),
    ],
)
def test_state_needing_features_are_refused_at_their_param(body: dict[str, Any], param: str, message: str) -> None:
    error = refusal({"model": "org/m", "input": "Hi", **body})
    assert error == {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": "UnsupportedChatParameter",
    }


def test_store_false_background_false_and_empty_include_are_accepted() -> None:
    request, _, _ = read({"model": "org/m", "input": "Hi", "store": False, "background": False, "include": []})
    assert request.store is False


def test_store_true_and_a_previous_response_id_are_read() -> None:
    """Both are resolved by the view (chat.serving.stored_responses); the reader keeps them for the echo."""
    request, _, _ = read({"model": "org/m", "input": "Hi", "store": True, "previous_response_id": "resp_1"})
    assert (request.store, request.previous_response_id) == (True, "resp_1")


def test_a_previous_response_id_that_is_not_a_string_is_a_bad_request() -> None:
    assert refusal({"model": "org/m", "input": "Hi", "previous_response_id": 5}) == {
        "message": "Invalid type for 'previous_response_id': expected a string, but got an integer instead.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "BadRequest",
    }


@pytest.mark.parametrize(
    ("body", "param", "message", "code"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
            "input[0].content[0].text",
            "Invalid type for 'input[0].content[0].text': expected a string, but got an integer instead.",
            "BadRequest",
        ),
        (
            {"input": [{"type": "item_reference", "id": "msg_1"}]},
            "input[0].type",
            (
                "Invalid value: 'item_reference'. Supported values are: 'message', 'function_call', "
                "'function_call_output', and 'reasoning'."
            ),
            "BadRequest",
        ),
        (
            {"max_output_tokens": 8},
            "max_output_tokens",
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 8 instead.",
            "BadRequest",
        ),
        (
            {"tool_choice": "required"},
            "tool_choice",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            "ChatRequestConflict",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"}]},
            "input",
            "No tool output found for function call call_a.",
            "UnsupportedChatParameter",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": {"type": "object"}}}},
            "text.format",
            (
                "Invalid schema for response_format 'x': In context=(), 'additionalProperties' is required to be "
                "supplied and to be false."
            ),
            "UnsupportedChatParameter",
        ),
        (
            {"top_logprobs": 3},
            "top_logprobs",
            "Invalid value: 3. Supported values are: 0.",
            "BadRequest",
        ),
        (
            {"input": None},
            "input",
            "Invalid type for 'input': expected one of a string or array of objects, but got null instead.",
            "BadRequest",
        ),
    ],
)
def test_validation_errors_name_the_responses_path(body: dict[str, Any], param: str, message: str, code: str) -> None:
    error = refusal({"model": "org/m", "input": "Hi", **body})
    assert (error["param"], error["message"], error["code"]) == (param, message, code)


def test_missing_input_is_a_missing_parameter() -> None:
    error = refusal({"model": "org/m"})
    assert (error["param"], error["message"]) == ("input", "Missing required parameter: 'input'.")


# ---------------------------------------------------------------------------------------------------------------------
# Native status -> response object


def response_of(body: dict[str, Any], native: NativeStatus, request_id: str = "r1") -> dict[str, Any]:
    request, chat_request, _ = read(body)
    completion = build_completion(chat_request, native, request_id, CREATED)
    response = build_response(request, completion, request_id, CREATED, COMPLETED)
    ResponseObject.model_validate(response)  # the documented model describes it
    Response.model_validate(response)  # the official SDK's type reads it
    return response


def test_text_reply_is_a_completed_response_with_one_message_item() -> None:
    response = response_of({"model": "org/m", "input": "Hi"}, status({"role": "assistant", "content": "Hello."}))
    assert response == {
        "id": "resp_r1",
        "object": "response",
        "created_at": CREATED,
        "completed_at": COMPLETED,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": "org/m",
        "output": [
            {
                "id": "msg_r1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hello.", "annotations": [], "logprobs": []}],
            }
        ],
        "usage": {
            "input_tokens": 11,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 18,
        },
        "instructions": None,
        "max_output_tokens": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": None, "summary": None},
        "previous_response_id": None,
        "store": True,  # OpenAI's default: a request without `store` is stored
        "background": False,
        "truncation": "disabled",
        "service_tier": "default",
        "user": None,
    }


def test_reasoning_and_tool_calls_are_output_items_in_order() -> None:
    native = status(
        {"role": "assistant", "content": None, "reasoning_content": "Check the weather.", "tool_calls": CALLS},
        finish_reason="tool_calls",
        reasoning_tokens=4,
    )
    response = response_of({"model": "org/m", "input": "Weather?", "tools": [WEATHER_TOOL]}, native)
    assert response["output"] == [
        {
            "id": "rs_r1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Check the weather."}],
            "status": "completed",
        },
        {
            "id": "fc_r1_0",
            "type": "function_call",
            "call_id": "call_a",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
            "status": "completed",
        },
        {
            "id": "fc_r1_1",
            "type": "function_call",
            "call_id": "call_b",
            "name": "get_time",
            "arguments": "{}",
            "status": "completed",
        },
    ]
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 4}
    assert response["tools"] == [WEATHER_TOOL]


def test_length_stop_is_incomplete_with_max_output_tokens() -> None:
    native = status({"role": "assistant", "content": "Once upon"}, finish_reason="length")
    response = response_of({"model": "org/m", "input": "Story", "max_output_tokens": 16}, native)
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert response["output"][0]["status"] == "incomplete"
    assert response["max_output_tokens"] == 16


def test_reasoning_only_reply_has_no_message_item_and_keeps_the_notice() -> None:
    native = status(
        {"role": "assistant", "content": "", "reasoning_content": "Hmm, long thought"},
        finish_reason="length",
        completion_tokens=16,
    )
    response = response_of({"model": "org/m", "input": "Hi", "max_output_tokens": 16}, native)
    assert [item["type"] for item in response["output"]] == ["reasoning"]
    assert response["status"] == "incomplete"
    assert response["x_horde"]["notice"].startswith("The reply has reasoning but no visible text")


# ---------------------------------------------------------------------------------------------------------------------
# Event sequences


def events_of(body: dict[str, Any], chunks: list[dict[str, Any]], request_id: str = "r1") -> list[dict[str, Any]]:
    request, _, _ = read(body)
    writer = ResponseEventWriter(request, request_id, CREATED, request.model)
    events = writer.start()
    for chunk in chunks:
        events += writer.chunk(chunk)
    events += writer.finish(COMPLETED)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(EVENTS.validate_python(event))  # the SDK's stream helper: raises on a wrong order
    return events


def buffered(body: dict[str, Any], native: NativeStatus) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    request, chat_request, _ = read({**body, "stream": True})
    chunks = buffered_chunks(chat_request, native, "r1", CREATED)
    events = events_of({**body, "stream": True}, chunks)
    completion = build_completion(chat_request, native, "r1", CREATED)
    return events, build_response(request, completion, "r1", CREATED, COMPLETED)


def test_text_stream_event_order() -> None:
    events, whole = buffered({"model": "org/m", "input": "Hi"}, status({"role": "assistant", "content": "Hello."}))
    assert event_types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert events[2]["item"] == {
        "id": "msg_r1",
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    assert events[4] == {
        "type": "response.output_text.delta",
        "sequence_number": 4,
        "item_id": "msg_r1",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hello.",
        "logprobs": [],
    }
    assert events[-1]["response"] == whole  # the streamed response is the non-streamed one


def test_reasoning_then_text_stream_event_order() -> None:
    native = status({"role": "assistant", "content": "Blue.", "reasoning_content": "Rayleigh."}, reasoning_tokens=2)
    events, whole = buffered({"model": "org/m", "input": "Sky?"}, native)
    assert event_types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.get("output_index") for event in events[2:14]] == [0] * 6 + [1] * 6
    assert events[-1]["response"] == whole


def test_tool_call_stream_event_order() -> None:
    native = status({"role": "assistant", "content": None, "tool_calls": CALLS}, finish_reason="tool_calls")
    events, whole = buffered({"model": "org/m", "input": "Weather?", "tools": [WEATHER_TOOL]}, native)
    assert event_types(events) == [
        "response.created",
        "response.in_progress",
        *[
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
        ]
        * 2,
        "response.completed",
    ]
    assert events[2]["item"] == {
        "id": "fc_r1_0",
        "type": "function_call",
        "call_id": "call_a",
        "name": "get_weather",
        "arguments": "",
        "status": "in_progress",
    }
    assert events[4] == {
        "type": "response.function_call_arguments.done",
        "sequence_number": 4,
        "item_id": "fc_r1_0",
        "output_index": 0,
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    }
    assert events[-1]["response"] == whole


def test_empty_reply_streams_an_empty_message_item() -> None:
    events, whole = buffered({"model": "org/m", "input": "Hi"}, status({"role": "assistant", "content": ""}))
    assert event_types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert output_text(events[-1]["response"]) == "" and events[-1]["response"] == whole


def test_length_stop_ends_with_response_incomplete() -> None:
    native = status({"role": "assistant", "content": "Once upon"}, finish_reason="length")
    events, whole = buffered({"model": "org/m", "input": "Story"}, native)
    assert event_types(events)[-2:] == ["response.output_item.done", "response.incomplete"]
    assert events[-2]["item"]["status"] == "incomplete"
    assert events[-1]["response"] == whole


def relayed_chunks(pieces: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Chunks as a relayed stream sends them: the role chunk, many small deltas, the finish and usage chunks."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": "chatcmpl-r1", "object": "chat.completion.chunk", "model": "org/m", "choices": choices, **extra}

    chunks = [chunk([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])]
    chunks += [chunk([{"index": 0, "delta": {field: text}, "finish_reason": None}]) for field, text in pieces]
    chunks.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop", "x_horde": {}}]))
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    chunks.append(chunk([], usage=usage))
    return chunks


def test_relayed_deltas_each_become_one_delta_event() -> None:
    pieces = [("reasoning_content", "A"), ("reasoning_content", "B"), ("content", "Hel"), ("content", "lo.")]
    events = events_of({"model": "org/m", "input": "Hi", "stream": True}, relayed_chunks(pieces))
    assert [(event["type"], event.get("delta")) for event in events if event["type"].endswith(".delta")] == [
        ("response.reasoning_summary_text.delta", "A"),
        ("response.reasoning_summary_text.delta", "B"),
        ("response.output_text.delta", "Hel"),
        ("response.output_text.delta", "lo."),
    ]
    final = events[-1]["response"]
    assert output_text(final) == "Hello."
    assert final["output"][0]["summary"] == [{"type": "summary_text", "text": "AB"}]
    assert final["usage"]["total_tokens"] == 8


async def _chat_stream(items: list[bytes]) -> AsyncGenerator[bytes]:
    for item in items:
        yield item


def test_keepalives_pass_through_and_a_stream_error_is_one_error_event() -> None:
    request, _, sources = read({"model": "org/m", "input": "Hi", "stream": True, "max_output_tokens": 16})
    writer = ResponseEventWriter(request, "r1", CREATED, "org/m")
    error = OpenAIError(
        status=400, message="Too long.", code="no_worker_supports_limit", param="max_completion_tokens", retry_after=30
    )
    chat_items = [KEEPALIVE_COMMENT, data_event(relayed_chunks([])[0]), error.stream_event(), b"data: [DONE]\n\n"]

    async def collect() -> list[bytes]:
        return [item async for item in response_events(writer, _chat_stream(chat_items), sources, lambda: COMPLETED)]

    out = asyncio.run(collect())
    assert out[2] == KEEPALIVE_COMMENT
    assert out[0].startswith(b"event: response.created\ndata: {")
    assert len(out) == 4  # created, in_progress, keepalive, error; nothing after the error (no [DONE])
    assert out[3].startswith(b"event: error\ndata: ")
    assert json.loads(out[3].split(b"data: ", 1)[1]) == {
        "type": "error",
        "sequence_number": 2,
        "code": "no_worker_supports_limit",
        "message": "Too long.",
        "param": "max_output_tokens",
        "metadata": {"retry_after": 30},
    }


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"tools": [{"type": "function", "name": "bad name!"}]},
            "tools[0].name",
            (
                "Invalid 'tools[0].name': string does not match pattern. Expected a string that matches the pattern "
                "'^[a-zA-Z0-9_-]+$'."
            ),
        ),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x/a.png"}]}]},
            "input[0]",
            "Unrecognized request argument supplied: input[0].content[0].image_url",
        ),
        (
            {"text": {"format": {"type": "json_object"}}, "horde": {"openai_guards": True}},
            "input",
            "'input' must contain the word 'json' in some form, to use 'text.format' of type 'json_object'.",
        ),
    ],
)
def test_error_messages_name_the_responses_path_not_the_chat_one(
    body: dict[str, Any], param: str, message: str
) -> None:
    """The shared chat screening words its messages with chat paths (``tools[0].function.name``,
    ``messages[0].content[0].image_url``); a Responses client reads the field it sent."""
    error = refusal({"model": "org/m", "input": "Hi", **body})
    assert (error["param"], error["message"]) == (param, message)


def test_a_stream_error_message_names_the_responses_path() -> None:
    request, _, sources = read({"model": "org/m", "input": "Hi", "stream": True})
    writer = ResponseEventWriter(request, "r1", CREATED, "org/m")
    error = OpenAIError(
        status=400, message="Invalid 'max_completion_tokens': too large.", param="max_completion_tokens"
    )
    chat_items = [error.stream_event(), b"data: [DONE]\n\n"]

    async def collect() -> list[bytes]:
        return [item async for item in response_events(writer, _chat_stream(chat_items), sources, lambda: COMPLETED)]

    event = json.loads(asyncio.run(collect())[-1].split(b"data: ", 1)[1])
    assert (event["message"], event["param"]) == ("Invalid 'max_output_tokens': too large.", "max_output_tokens")


CALL_A = {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"}
CALL_B = {"type": "function_call", "call_id": "call_b", "name": "g", "arguments": "{}"}


def output_of(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([output_of("call_z")], "No tool call found for function call output with call_id call_z."),
        ([CALL_A, output_of("call_z")], "No tool call found for function call output with call_id call_z."),
        (
            [CALL_A, output_of("call_a"), output_of("call_a")],
            "No tool call found for function call output with call_id call_a.",
        ),
        ([CALL_A, CALL_B, {"role": "user", "content": "and?"}], "No tool output found for function call call_a."),
        ([CALL_A, CALL_B, output_of("call_a")], "No tool output found for function call call_b."),
    ],
)
def test_tool_history_refusals_use_openais_responses_wording(items: list[dict[str, Any]], message: str) -> None:
    """The chat rules' tool-history refusals speak of ``tool`` messages and ``tool_call_id``; the Responses API words
    them with the ``function_call`` item's ``call_id``, param ``input``."""
    error = refusal({"model": "org/m", "input": [{"role": "user", "content": "Hi"}, *items]})
    assert error == {
        "message": message,
        "type": "invalid_request_error",
        "param": "input",
        "code": "UnsupportedChatParameter",
    }


@pytest.mark.parametrize(
    ("chat_param", "responses_path"),
    [
        ("messages[0].content", "instructions"),
        ("messages.[1].role", "input[0]"),
        ("messages", "input"),
        ("max_completion_tokens", "max_output_tokens"),
        ("max_tokens", "max_output_tokens"),
        ("response_format.json_schema.schema", "text.format.schema"),
        ("reasoning_effort", "reasoning.effort"),
        ("tools[2].function.parameters", "tools[2].parameters"),
        ("tool_choice.function.name", "tool_choice.name"),
        ("models[0]", "model"),
        ("horde.max_context_length", "horde.max_context_length"),
        (None, None),
    ],
)
def test_chat_params_map_back_to_responses_paths(chat_param: str | None, responses_path: str | None) -> None:
    """An error of the shared chat path (validation, the waiter's limit gaps, the Horde's refusals) names the
    Responses field the client sent."""
    from chat.reading.responses import responses_param

    _, _, sources = read({"model": "org/m", "instructions": "Be brief.", "input": [{"role": "user", "content": "Hi"}]})
    assert sources == ["instructions", "input[0]"]
    assert responses_param(chat_param, sources) == responses_path


@pytest.mark.asyncio
async def test_other_methods_are_405_in_the_openai_envelope() -> None:
    from django.test import AsyncClient

    response = await AsyncClient().get("/v1/responses")
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert json.loads(response.content)["error"]["message"] == "Method not allowed. Use POST."
