"""Value and contract validation, model selection and native refusals (reference: Model selection, Value and contract
validation, Message roles).

One table row per rule; each asserts the status, ``type``, ``code``, ``param`` and the exact message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MAX_CHAT_SCHEMA_NESTING,
    MAX_CHAT_STOP_SEQUENCES,
    MAX_CHAT_TEXT_BYTES,
    MAX_CHAT_TOOL_COUNT,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
    SUPPORTED_CHAT_CHOICE_COUNT,
)

from chat.errors import NATIVE_FIELD_PARAMETERS, OpenAIError
from chat.horde.native import HordeRefusal
from chat.horde.native_payload import build_native_payload
from chat.horde.refusals import error_from_refusal
from chat.limits import MAX_CHAT_MODEL_COUNT
from chat.protocol.chat_request import ChatCompletionRequest, OpenAIErrorEnvelope
from chat.reading.request_rules import (
    find_json_guard_conflict,
    find_strict_schema_violation,
    find_tool_choice_conflict,
    find_tool_history_violation,
)
from chat.reading.screening import read_chat_request

USER = {"role": "user", "content": "Hi"}
BASE: dict[str, Any] = {"model": "example/model-7b", "messages": [USER]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
CALL = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
ASSISTANT_CALLS = {"role": "assistant", "content": None, "tool_calls": [CALL]}
ANSWER = {"role": "tool", "tool_call_id": "call_abc", "content": "sunny"}

INVALID = "invalid_request_error"
UNSUPPORTED = "UnsupportedChatParameter"
CONFLICT = "ChatRequestConflict"
BAD = "BadRequest"


def body(**extra: Any) -> dict[str, Any]:
    return {**BASE, **extra}


def nested_schema(depth: int) -> dict[str, Any]:
    """An object schema with ``depth`` levels of ``properties`` below its root."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def strict_format(schema: dict[str, Any], name: str = "default") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


ORGANIZATIONS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["organizations"],
    "properties": {
        "organizations": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "roles": {"type": "array", "items": {"type": "string"}}},
            },
        }
    },
}

ROWS = [
    # --- Value and contract validation: OpenAI's ranges (OPENAI_SAMPLING_RANGES) ---
    pytest.param(
        body(temperature=2.5),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "temperature",
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 2.5 instead.",
        ),
        id="temperature-above",
    ),
    pytest.param(
        body(temperature=-0.5),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "temperature",
            "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got -0.5 instead.",
        ),
        id="temperature-below",
    ),
    pytest.param(
        body(top_p=1.5),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "top_p",
            "Invalid 'top_p': decimal above maximum value. Expected a value <= 1, but got 1.5 instead.",
        ),
        id="top-p-above",
    ),
    pytest.param(
        body(frequency_penalty=3),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "frequency_penalty",
            "Invalid 'frequency_penalty': decimal above maximum value. Expected a value <= 2, but got 3 instead.",
        ),
        id="frequency-penalty-above",
    ),
    pytest.param(
        body(presence_penalty=-3),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "presence_penalty",
            "Invalid 'presence_penalty': decimal below minimum value. Expected a value >= -2, but got -3 instead.",
        ),
        id="presence-penalty-below",
    ),
    # --- n and token limits below 1 (OpenAI), 1..15 (Horde floor), above the Horde cap, n other than 1 ---
    pytest.param(
        body(max_tokens=0),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "max_tokens",
            "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead.",
        ),
        id="max-tokens-below-1",
    ),
    pytest.param(
        body(max_completion_tokens=-5),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "max_completion_tokens",
            "Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 1, but got -5 instead.",
        ),
        id="max-completion-tokens-below-1",
    ),
    pytest.param(
        body(n=0),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "n",
            "Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 instead.",
        ),
        id="n-below-1",
    ),
    pytest.param(
        body(max_tokens=15),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "max_tokens",
            "Invalid 'max_tokens': integer below minimum value. Expected a value >= 16, the smallest completion limit "
            "the AI Horde serves, but got 15 instead.",
        ),
        id="max-tokens-horde-floor",
    ),
    pytest.param(
        body(max_completion_tokens=1),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "max_completion_tokens",
            "Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 16, the smallest "
            "completion limit the AI Horde serves, but got 1 instead.",
        ),
        id="max-completion-tokens-horde-floor",
    ),
    pytest.param(
        body(max_tokens=16385),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "max_tokens",
            "Invalid 'max_tokens': integer above maximum value. Expected a value <= 16384, the largest completion "
            "limit the AI Horde serves, but got 16385 instead.",
        ),
        id="max-tokens-horde-cap",
    ),
    pytest.param(
        body(n=2),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "n",
            "Invalid 'n': integer above maximum value. Expected a value <= 1, since the AI Horde serves one choice per "
            "request, but got 2 instead.",
        ),
        id="n-other-than-1",
    ),
    pytest.param(
        body(stop=["a", "b", "c", "d", "e"]),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "stop",
            "Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length 5 "
            "instead.",
        ),
        id="five-stops",
    ),
    pytest.param(
        body(messages=[]),
        (
            400,
            INVALID,
            BAD,
            "messages",
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        ),
        id="empty-messages",
    ),
    # --- Model selection ---
    pytest.param(
        {"messages": [USER]},
        (400, INVALID, BAD, "model", "Missing required parameter: 'model'. Send exactly one of 'model' and 'models'."),
        id="no-model",
    ),
    pytest.param(
        body(models=["a"]),
        (400, INVALID, BAD, "models", "Invalid parameter: send exactly one of 'model' and 'models', not both."),
        id="model-and-models",
    ),
    pytest.param(
        {"models": [], "messages": [USER]},
        (
            400,
            INVALID,
            BAD,
            "models",
            "Invalid 'models': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        ),
        id="models-empty",
    ),
    pytest.param(
        {"models": ["a", "b", "c", "d", "e", "f"], "messages": [USER]},
        (
            400,
            INVALID,
            BAD,
            "models",
            "Invalid 'models': array too long. Expected an array with maximum length 5, but got an array with length 6 "
            "instead.",
        ),
        id="models-six",
    ),
    pytest.param(
        {"models": ["a", ""], "messages": [USER]},
        (
            400,
            INVALID,
            BAD,
            "models[1]",
            "Invalid 'models[1]': string too short. Expected a string with minimum length 1, but got an empty string "
            "instead.",
        ),
        id="models-empty-entry",
    ),
    pytest.param(
        {"models": ["a", "b", "a"], "messages": [USER]},
        (
            400,
            INVALID,
            BAD,
            "models[2]",
            "Invalid 'models[2]': duplicate value. Expected distinct model ids, but 'a' is also 'models[0]'.",
        ),
        id="models-duplicate",
    ),
    pytest.param(
        {"models": ["a", 5], "messages": [USER]},
        (
            400,
            INVALID,
            BAD,
            "models[1]",
            "Invalid type for 'models[1]': expected a string, but got an integer instead.",
        ),
        id="models-entry-not-a-string",
    ),
    # --- Other validation failures: the first failing field's request path, never a union tag ---
    pytest.param(
        body(temperature="1"),
        (
            400,
            INVALID,
            BAD,
            "temperature",
            "Invalid type for 'temperature': expected a decimal, but got a string instead.",
        ),
        id="string-for-number",
    ),
    pytest.param(
        body(max_tokens=100.0),
        (
            400,
            INVALID,
            BAD,
            "max_tokens",
            "Invalid type for 'max_tokens': expected an integer, but got a decimal instead.",
        ),
        id="decimal-for-integer",
    ),
    pytest.param(
        body(stream="true"),
        (400, INVALID, BAD, "stream", "Invalid type for 'stream': expected a boolean, but got a string instead."),
        id="string-for-boolean",
    ),
    pytest.param(
        body(stop=5),
        (
            400,
            INVALID,
            BAD,
            "stop",
            "Invalid type for 'stop': expected one of a string or array of strings, but got an integer instead.",
        ),
        id="stop-union",
    ),
    pytest.param(
        body(stop=["a", 1]),
        (400, INVALID, BAD, "stop[1]", "Invalid type for 'stop[1]': expected a string, but got an integer instead."),
        id="stop-entry",
    ),
    pytest.param(
        body(messages=["Hi"]),
        (
            400,
            INVALID,
            BAD,
            "messages[0]",
            "Invalid type for 'messages[0]': expected an object, but got a string instead.",
        ),
        id="message-not-object",
    ),
    pytest.param(
        body(messages=[{"content": "Hi"}]),
        (400, INVALID, BAD, "messages[0].role", "Missing required parameter: 'messages[0].role'."),
        id="message-without-role",
    ),
    pytest.param(
        body(messages=[{"role": None, "content": "Hi"}]),
        (
            400,
            INVALID,
            BAD,
            "messages[0].role",
            "Invalid type for 'messages[0].role': expected a string, but got null instead.",
        ),
        id="message-role-null",
    ),
    pytest.param(
        body(messages=[{"role": {"name": "user"}, "content": "Hi"}]),
        (
            400,
            INVALID,
            BAD,
            "messages[0].role",
            "Invalid type for 'messages[0].role': expected a string, but got an object instead.",
        ),
        id="message-role-not-a-string",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": ["text"], "text": "a"}]}]),
        (
            400,
            INVALID,
            BAD,
            "messages[0].content[0].type",
            "Invalid type for 'messages[0].content[0].type': expected a string, but got an array instead.",
        ),
        id="part-type-not-a-string",
    ),
    pytest.param(
        body(messages=[{"role": "system", "content": [{"type": 3, "text": "a"}]}]),
        (400, INVALID, BAD, "messages[0].content[0].type", "Invalid value: 3. Supported values are: 'text'."),
        id="text-part-type-not-a-string",
    ),
    pytest.param(
        body(messages=[{"role": "user"}]),
        (400, INVALID, BAD, "messages[0].content", "Missing required parameter: 'messages[0].content'."),
        id="user-without-content",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": {"text": "Hi"}}]),
        (
            400,
            INVALID,
            BAD,
            "messages[0].content",
            "Invalid type for 'messages[0].content': expected one of a string or array of objects, but got an object "
            "instead.",
        ),
        id="content-union",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
        (
            400,
            INVALID,
            BAD,
            "messages[0].content[0].text",
            "Invalid type for 'messages[0].content[0].text': expected a string, but got an integer instead.",
        ),
        id="text-part-text",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"text": "a"}]}]),
        (
            400,
            INVALID,
            BAD,
            "messages[0].content[0].type",
            "Missing required parameter: 'messages[0].content[0].type'.",
        ),
        id="part-without-type",
    ),
    pytest.param(
        body(
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x", "detail": "max"}}]}
            ]
        ),
        (
            400,
            INVALID,
            BAD,
            "messages[0].content[0].image_url.detail",
            "Invalid value: 'max'. Supported values are: 'auto', 'low', and 'high'.",
        ),
        id="image-detail",
    ),
    pytest.param(
        body(messages=[{"role": "tool", "content": "r"}]),
        (400, INVALID, BAD, "messages[0].tool_call_id", "Missing required parameter: 'messages[0].tool_call_id'."),
        id="tool-without-id",
    ),
    pytest.param(
        body(
            messages=[
                USER,
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
            ]
        ),
        (
            400,
            INVALID,
            BAD,
            "messages[1].tool_calls[0].function.arguments",
            "Missing required parameter: 'messages[1].tool_calls[0].function.arguments'.",
        ),
        id="history-call-without-arguments",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice="any"),
        (
            400,
            INVALID,
            BAD,
            "tool_choice",
            "Invalid value: 'any'. Supported values are: 'none', 'auto', and 'required'.",
        ),
        id="tool-choice-string",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice=True),
        (
            400,
            INVALID,
            BAD,
            "tool_choice",
            "Invalid type for 'tool_choice': expected one of a string or object, but got a boolean instead.",
        ),
        id="tool-choice-union",
    ),
    pytest.param(
        body(tools=[{"type": "custom", "custom": {"name": "x"}}]),
        (400, INVALID, BAD, "tools[0].type", "Invalid value: 'custom'. Supported values are: 'function'."),
        id="custom-tool",
    ),
    pytest.param(
        body(reasoning_effort="max"),
        (
            400,
            INVALID,
            BAD,
            "reasoning_effort",
            "Invalid value: 'max'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'.",
        ),
        id="reasoning-effort",
    ),
    pytest.param(
        body(response_format={"type": "xml"}),
        (
            400,
            INVALID,
            BAD,
            "response_format.type",
            "Invalid value: 'xml'. Supported values are: 'text', 'json_object', and 'json_schema'.",
        ),
        id="response-format-type",
    ),
    pytest.param(
        body(response_format={"type": "json_schema"}),
        (
            400,
            INVALID,
            BAD,
            "response_format.json_schema",
            "Missing required parameter: 'response_format.json_schema'.",
        ),
        id="json-schema-missing",
    ),
    pytest.param(
        body(response_format={"type": "json_schema", "json_schema": {"name": "n"}}),
        (
            400,
            INVALID,
            BAD,
            "response_format.json_schema.schema",
            "Missing required parameter: 'response_format.json_schema.schema'.",
        ),
        id="json-schema-requires-schema",
    ),
    pytest.param(
        body(metadata={f"k{i}": "v" for i in range(17)}),
        (
            400,
            INVALID,
            BAD,
            "metadata",
            "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object "
            "with 17 properties instead.",
        ),
        id="metadata-too-many",
    ),
    pytest.param(
        body(safety_identifier="s" * 129),
        (
            400,
            INVALID,
            BAD,
            "safety_identifier",
            "Invalid 'safety_identifier': string too long. Expected a string with maximum length 128, but got a string "
            "with length 129 instead.",
        ),
        id="safety-identifier-too-long",
    ),
    pytest.param(
        body(horde={"max_kudos": -1}),
        (
            400,
            INVALID,
            BAD,
            "horde.max_kudos",
            "Invalid 'horde.max_kudos': decimal below minimum value. Expected a value >= 0, but got -1 instead.",
        ),
        id="horde-bound",
    ),
    pytest.param(
        body(horde={"availability_mode": "never"}),
        (
            400,
            INVALID,
            BAD,
            "horde.availability_mode",
            "Invalid value: 'never'. Supported values are: 'wait' and 'fail_fast'.",
        ),
        id="horde-enum",
    ),
    # --- Contract rules (chat.reading.request_rules) ---
    pytest.param(
        body(tool_choice="none"),
        (
            400,
            INVALID,
            CONFLICT,
            "tool_choice",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
        ),
        id="tool-choice-without-tools",
    ),
    pytest.param(
        body(tools=[], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        (
            400,
            INVALID,
            CONFLICT,
            "tool_choice",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
        ),
        id="tool-choice-with-empty-tools",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_time"}}),
        (
            400,
            INVALID,
            CONFLICT,
            "tool_choice",
            "Invalid value for 'tool_choice': function 'get_time' is not one of the functions in 'tools'.",
        ),
        id="tool-choice-names-undeclared-function",
    ),
    pytest.param(
        body(parallel_tool_calls=False),
        (
            400,
            INVALID,
            CONFLICT,
            "parallel_tool_calls",
            "Invalid value for 'parallel_tool_calls': "
            "'parallel_tool_calls' is only allowed when 'tools' are specified.",
        ),
        id="parallel-tool-calls-without-tools",
    ),
    pytest.param(
        body(tools=[TOOL], messages=[USER, ASSISTANT_CALLS]),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages",
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. The following tool_call_ids did not have response messages: call_abc",
        ),
        id="unanswered-at-end",
    ),
    pytest.param(
        body(
            tools=[TOOL],
            messages=[
                USER,
                {**ASSISTANT_CALLS, "tool_calls": [CALL, {**CALL, "id": "call_def"}, {**CALL, "id": "call_ghi"}]},
                {**ANSWER, "tool_call_id": "call_def"},
                USER,
            ],
        ),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages.[3].role",
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. The following tool_call_ids did not have response messages: call_abc, call_ghi",
        ),
        id="unanswered-then-user",
    ),
    pytest.param(
        body(tools=[TOOL], messages=[USER, {"role": "assistant", "content": "Hello"}, ANSWER]),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages.[2].role",
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
            "'tool_calls'.",
        ),
        id="orphan-tool-message",
    ),
    pytest.param(
        body(tools=[TOOL], messages=[USER, ASSISTANT_CALLS, ANSWER, USER, ANSWER]),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages.[4].role",
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
            "'tool_calls'.",
        ),
        id="tool-message-after-user",
    ),
    pytest.param(
        body(tools=[TOOL], messages=[USER, ASSISTANT_CALLS, {**ANSWER, "tool_call_id": "call_zzz"}]),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages.[2].tool_call_id",
            "Invalid parameter: 'tool_call_id' of 'call_zzz' not found in 'tool_calls' of previous message.",
        ),
        id="unknown-tool-call-id",
    ),
    pytest.param(
        body(
            response_format=strict_format(
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
            )
        ),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "response_format",
            "Invalid schema for response_format 'default': In context=(), 'additionalProperties' is required to be "
            "supplied and to be false.",
        ),
        id="strict-additional-properties",
    ),
    pytest.param(
        body(response_format=strict_format(ORGANIZATIONS_SCHEMA, name="response")),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "response_format",
            "Invalid schema for response_format 'response': In context=('properties', 'organizations', 'items'), "
            "'required' is required to be supplied and to be an array including every key in properties. Missing "
            "'roles'.",
        ),
        id="strict-required",
    ),
    pytest.param(
        body(response_format={"type": "json_object"}, horde={"openai_guards": True}),
        (
            400,
            INVALID,
            CONFLICT,
            "messages",
            "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
        ),
        id="json-guard",
    ),
    pytest.param(
        body(
            tools=[
                {
                    "type": "function",
                    "function": {"name": "deep", "parameters": nested_schema(MAX_CHAT_SCHEMA_NESTING + 1)},
                }
            ]
        ),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "tools[0].function.parameters",
            "Invalid 'tools[0].function.parameters': a JSON Schema may nest at most 10 levels below its root.",
        ),
        id="tool-parameters-nesting",
    ),
    pytest.param(
        body(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": nested_schema(11)}}),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "response_format.json_schema.schema",
            "Invalid 'response_format.json_schema.schema': a JSON Schema may nest at most 10 levels below its root.",
        ),
        id="response-schema-nesting",
    ),
    pytest.param(
        body(
            tools=[{**TOOL, "function": {**TOOL["function"], "name": f"f{i}"}} for i in range(MAX_CHAT_TOOL_COUNT + 1)]
        ),
        (400, INVALID, UNSUPPORTED, "tools", f"A chat request may define at most {MAX_CHAT_TOOL_COUNT} tools."),
        id="tool-count-limit",
    ),
    pytest.param(
        body(
            tools=[TOOL],
            messages=[
                USER,
                {
                    **ASSISTANT_CALLS,
                    "tool_calls": [
                        {**CALL, "function": {"name": "get_weather", "arguments": "x" * MAX_CHAT_TEXT_BYTES}}
                    ],
                },
                ANSWER,
            ],
        ),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages",
            f"The message text of a chat request, tool call names and arguments included, may be at most "
            f"{MAX_CHAT_TEXT_BYTES} bytes.",
        ),
        id="message-text-limit-counts-tool-calls",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": "x" * (MAX_CHAT_TEXT_BYTES + 1)}]),
        (
            400,
            INVALID,
            UNSUPPORTED,
            "messages",
            f"The message text of a chat request, tool call names and arguments included, may be at most "
            f"{MAX_CHAT_TEXT_BYTES} bytes.",
        ),
        id="message-text-limit",
    ),
]


@pytest.mark.parametrize(("request_body", "expected"), ROWS)
def test_validation_rows(request_body: dict[str, Any], expected: tuple[Any, ...]) -> None:
    """ref: value-and-contract-validation.1, value-and-contract-validation.2, value-and-contract-validation.3,
    value-and-contract-validation.4, value-and-contract-validation.5, value-and-contract-validation.8,
    value-and-contract-validation.9, value-and-contract-validation.11, model-selection.1, model-selection.2,
    model-selection.4, message-roles.3, parameter-screening.11"""
    with pytest.raises(OpenAIError) as caught:
        read_chat_request(json.dumps(request_body).encode())
    error = caught.value
    assert (error.status, error.type, error.code, error.param, error.message) == expected
    assert OpenAIErrorEnvelope.model_validate(error.envelope()).error.param == expected[3]
    assert "<" not in (error.param or "") and "list[" not in (error.param or "")


def test_bounds_come_from_horde_sdk() -> None:
    """The rows above pin the SDK's values. ref: value-and-contract-validation.1, value-and-contract-validation.5"""
    assert dict(OPENAI_SAMPLING_RANGES) == {
        "temperature": (0, 2),
        "top_p": (0, 1),
        "frequency_penalty": (-2, 2),
        "presence_penalty": (-2, 2),
    }
    assert (MIN_CHAT_MAX_TOKENS, MAX_CHAT_MAX_TOKENS, MAX_CHAT_STOP_SEQUENCES) == (16, 16384, 4)
    assert (SUPPORTED_CHAT_CHOICE_COUNT, MAX_CHAT_SCHEMA_NESTING, MAX_CHAT_MODEL_COUNT) == (1, 10, 5)
    fields = ChatCompletionRequest.model_json_schema()["properties"]
    assert fields["temperature"]["anyOf"][0] == {"type": "number", "minimum": 0, "maximum": 2}
    assert fields["max_tokens"]["anyOf"][0] == {"type": "integer", "minimum": 16, "maximum": 16384}


@pytest.mark.parametrize(
    "request_body",
    [
        pytest.param(body(temperature=0, top_p=1, frequency_penalty=-2, presence_penalty=2), id="range-edges"),
        pytest.param(body(temperature=2, top_p=0, max_tokens=16, max_completion_tokens=16384, n=1), id="limit-edges"),
        pytest.param(body(stop=["a", "b", "c", "d"]), id="four-stops"),
        pytest.param(
            body(
                tools=[TOOL],
                messages=[USER, ASSISTANT_CALLS, ANSWER, {"role": "assistant", "content": "It is sunny."}, USER],
            ),
            id="answered-history",
        ),
        pytest.param(body(tools=[TOOL], tool_choice="none", parallel_tool_calls=True), id="tool-choice-with-tools"),
        pytest.param(
            body(
                response_format={"type": "json_object"},
                horde={"openai_guards": True},
                messages=[{"role": "user", "content": "Reply in JSON."}],
            ),
            id="json-guard-met",
        ),
        pytest.param(
            body(
                response_format={"type": "json_object"},
                horde={"openai_guards": True},
                messages=[{"role": "system", "content": [{"type": "text", "text": "Answer as a Json object"}]}, USER],
            ),
            id="json-guard-met-in-part",
        ),
        pytest.param(body(response_format={"type": "json_object"}), id="json-guard-off"),
        pytest.param(
            body(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}),
            id="non-strict-schema",
        ),
        pytest.param(
            body(
                response_format=strict_format(
                    {
                        **ORGANIZATIONS_SCHEMA,
                        "properties": {
                            "organizations": {
                                "type": "array",
                                "items": {
                                    **ORGANIZATIONS_SCHEMA["properties"]["organizations"]["items"],
                                    "required": ["name", "roles"],
                                },
                            }
                        },
                    }
                )
            ),
            id="strict-schema-ok",
        ),
        pytest.param(
            body(
                tools=[
                    {
                        "type": "function",
                        "function": {"name": "deep", "parameters": nested_schema(MAX_CHAT_SCHEMA_NESTING)},
                    }
                ]
            ),
            id="nesting-at-limit",
        ),
    ],
)
def test_valid_requests_pass(request_body: dict[str, Any]) -> None:
    """ref: value-and-contract-validation.1, value-and-contract-validation.8, value-and-contract-validation.9"""
    request = read_chat_request(json.dumps(request_body).encode())
    assert build_native_payload(request, stream_progress=False)["messages"]


def test_models_are_forwarded_unchanged() -> None:
    """ref: model-selection.2, model-selection.3"""
    ids = ["b/model-13b", "a/model-7b", "c/model-70b", "d", "e"]
    request = read_chat_request(json.dumps({"models": ids, "messages": [USER]}).encode())
    assert request.requested_models == ids
    assert build_native_payload(request, stream_progress=False)["models"] == ids
    single = read_chat_request(json.dumps(BASE).encode())
    assert build_native_payload(single, stream_progress=False)["models"] == ["example/model-7b"]


# ---------------------------------------------------------------------------------------------------------------------
# chat.reading.request_rules reads plain JSON (shared with the native route)


def test_contract_functions_read_plain_json() -> None:
    """The rules take decoded JSON, the shape both the front and the native route hold; odd values are no crash.
    ref: value-and-contract-validation.8, value-and-contract-validation.10"""
    assert find_tool_choice_conflict({"tools": [TOOL], "tool_choice": "auto"}) is None
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert find_tool_choice_conflict({"tools": [TOOL], "tool_choice": named}) is None
    assert find_tool_history_violation("not a list") is None
    assert find_tool_history_violation([5, {"role": "tool", "tool_call_id": ["x"]}]).param == "messages.[1].role"
    assert find_strict_schema_violation({"type": "json_schema", "json_schema": {"strict": True, "schema": 5}}) is None
    assert find_json_guard_conflict({"response_format": {"type": "json_object"}, "messages": "x"}, openai_guards=True)


# ---------------------------------------------------------------------------------------------------------------------
# Native refusals: payload validation failure and UnknownModel (error_from_refusal)


def native_validation(first: str) -> HordeRefusal:
    message = "Input payload validation failed"
    return HordeRefusal(
        status=400,
        message=message,
        rc=None,
        body={"message": message, "errors": {first: "is not valid", "messages.9.content": "later"}},
    )


@pytest.mark.parametrize(
    ("native", "model_key", "param"),
    [
        ("params.max_length", "model", "max_tokens"),
        ("params.stop_sequence", "model", "stop"),
        ("params.temperature", "model", "temperature"),
        ("params.max_context_length", "model", "horde.max_context_length"),
        ("max_kudos", "model", "horde.max_kudos"),
        ("messages.0.content", "model", "messages[0].content"),
        ("messages.2.tool_calls.0.function.arguments", "model", "messages[2].tool_calls[0].function.arguments"),
        ("tools.1.function.parameters", "models", "tools[1].function.parameters"),
        ("models.1", "models", "models[1]"),
        ("models.0", "model", "model"),
        ("models", "models", "models"),
    ],
)
def test_native_validation_failure_names_the_first_field(native: str, model_key: str, param: str) -> None:
    """ref: value-and-contract-validation.6, value-and-contract-validation.7"""
    assert dict(NATIVE_FIELD_PARAMETERS)["max_length"] == "max_tokens"
    assert dict(NATIVE_FIELD_PARAMETERS)["stop_sequence"] == "stop"
    request_body = BASE if model_key == "model" else {"models": ["a", "b"], "messages": [USER]}
    request = ChatCompletionRequest.model_validate(request_body)
    error = error_from_refusal(native_validation(native), request=request)
    assert (error.status, error.type, error.code, error.param, error.message) == (
        400,
        INVALID,
        BAD,
        param,
        f"Invalid '{param}': is not valid.",
    )


@pytest.mark.parametrize(
    ("request_body", "message", "param", "client_message"),
    [
        (
            {"models": ["a", "nobody/none-7b"], "messages": [USER]},
            "'models[1]' is not a known text model.",
            "models[1]",
            "The model 'nobody/none-7b' at models[1] is not a known text model. GET /v1/models lists the served ones.",
        ),
        (
            {"models": ["nope"], "messages": [USER]},
            "'models[0]' is not a known text model.",
            "models[0]",
            "The model 'nope' at models[0] is not a known text model. GET /v1/models lists the served ones.",
        ),
        (
            {"model": "nobody/none-7b", "messages": [USER]},
            "'models[0]' is not a known text model.",
            "model",
            "The model 'nobody/none-7b' is not a known text model. GET /v1/models lists the served ones.",
        ),
        (
            {"models": ["a", "b"], "messages": [USER]},
            "'models[7]' is not a known text model.",
            "models[7]",
            "'models[7]' is not a known text model.",
        ),
    ],
)
def test_unknown_model_param_comes_from_the_native_message(
    request_body: dict[str, Any], message: str, param: str, client_message: str
) -> None:
    """The param is the native message's entry path, or ``model`` when the client sent ``model``; the message names
    the id the client sent (the native message when the path names no entry of the request).

    ref: model-selection.4, model-selection.5, model-selection.6"""
    refusal = HordeRefusal(
        status=400, message=message, rc="UnknownModel", body={"message": message, "rc": "UnknownModel"}
    )
    request = ChatCompletionRequest.model_validate(request_body)
    error = error_from_refusal(refusal, request=request)
    assert (error.status, error.type, error.code, error.param, error.message) == (
        400,
        INVALID,
        "UnknownModel",
        param,
        client_message,
    )
    assert error_from_refusal(refusal, requested_model_key="models").param == message[1 : message.index("'", 1)]


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        (body(stream_options={"<string>": True}), "stream_options.<string>"),
        (body(response_format={"type": "text", "<text>": 1}), "response_format.<text>"),
        (body(metadata={"<object>": 5}), "metadata.<object>"),
        (body(metadata={"[key]": 5}), "metadata.[key]"),
    ],
)
def test_client_keys_spelled_like_union_tags_stay_in_the_param(request_body: dict[str, Any], param: str) -> None:
    """The union tags are left out of a param by position, not by spelling. ref: parameter-screening.3"""
    with pytest.raises(OpenAIError) as caught:
        read_chat_request(json.dumps(request_body).encode())
    assert caught.value.param == param


def test_native_unsupported_parameter_passes_through_and_logs() -> None:
    """A native ``UnsupportedChatParameter`` keeps its message and param and logs the refused parameter line.
    ref: refused-parameter-log-line.1, refused-parameter-log-line.2, value-and-contract-validation.10"""
    from loguru import logger

    lines: list[Any] = []
    handler = logger.add(lines.append, level="INFO", format="{message}")
    try:
        message = "A message may carry at most 128 tool calls."
        refusal = HordeRefusal(
            status=400,
            message=message,
            rc=UNSUPPORTED,
            body={"message": message, "rc": UNSUPPORTED, "param": "messages[1].tool_calls"},
        )
        error = error_from_refusal(refusal, request=ChatCompletionRequest.model_validate(BASE))
    finally:
        logger.remove(handler)
    assert (error.status, error.type, error.code, error.param, error.message) == (
        400,
        INVALID,
        UNSUPPORTED,
        "messages[1].tool_calls",
        message,
    )
    assert [str(line).rstrip() for line in lines] == [
        "Refused unsupported chat parameter: path='messages[1].tool_calls' label=messages"
    ]
