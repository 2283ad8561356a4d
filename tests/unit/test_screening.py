"""Body parsing and parameter screening (reference: Request keys, Parameter screening, Message roles, Refusal
attributes, Refused parameter log line).

Every refusal row asserts the status, ``type``, ``code``, ``param`` and the exact message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

from chat.errors import OpenAIError
from chat.horde.native_payload import build_native_payload
from chat.protocol.chat_request import (
    AssistantMessage,
    ChatCompletionRequest,
    DeveloperMessage,
    FunctionCall,
    FunctionDefinition,
    ImageContentPart,
    ImageUrl,
    NamedToolChoice,
    OpenAIErrorEnvelope,
    RefusalContentPart,
    SystemMessage,
    TextContentPart,
    ToolCall,
    ToolChoiceFunction,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from chat.reading.parameters import (
    COMMON_NON_OPENAI_SAMPLER_PARAMETERS,
    DEFAULT_NO_OP_PARAMETERS,
    REFUSED_PARAMETER_LOG_LENGTH,
    UNDEFINED_OPENAI_PARAMETERS,
    refusal_parameter_label,
)
from chat.reading.screening import (
    CONTENT_PART_KEYS,
    IMAGE_URL_KEYS,
    SUPPORTED_MESSAGE_KEYS,
    TOOL_CALL_FUNCTION_KEYS,
    TOOL_CALL_KEYS,
    TOOL_CHOICE_FUNCTION_KEYS,
    TOOL_CHOICE_KEYS,
    TOOL_FUNCTION_KEYS,
    TOOL_KEYS,
    drop_default_no_ops,
    drop_unknown_nested_keys,
    find_refused_parameter,
    read_chat_request,
)

NOT_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. This API expects a JSON object as the request body, but what was sent was not valid JSON. NaN, "
    "Infinity, numbers too large for a double and lone UTF-16 surrogates are not accepted either.)"
)
"""OpenAI's first sentence and the front's own hint, written out here so the test does not read it from the code
under test."""

ROLES = "'system', 'developer', 'user', 'assistant', and 'tool'"
USER = {"role": "user", "content": "Hi"}
BASE: dict[str, Any] = {"model": "example/model-7b", "messages": [USER]}


def body(**extra: Any) -> dict[str, Any]:
    return {**BASE, **extra}


def refusal(raw: bytes | dict[str, Any]) -> OpenAIError:
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    with pytest.raises(OpenAIError) as caught:
        read_chat_request(data)
    OpenAIErrorEnvelope.model_validate(caught.value.envelope())
    return caught.value


def outcome(error: OpenAIError) -> tuple[int, str | None, str | None, str | None, str]:
    return error.status, error.type, error.code, error.param, error.message


@pytest.fixture
def log_lines() -> Iterator[list[Any]]:
    records: list[Any] = []
    handler = logger.add(records.append, level="DEBUG", format="{message}")
    try:
        yield records
    finally:
        logger.remove(handler)


# ---------------------------------------------------------------------------------------------------------------------
# Body parsing


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"{", id="truncated"),
        pytest.param(b"model=m", id="form"),
        pytest.param(b'{"model": "m", "messages": [], "temperature": NaN}', id="NaN"),
        pytest.param(b'{"model": "m", "messages": [], "temperature": Infinity}', id="Infinity"),
        pytest.param(b'{"model": "m", "messages": [], "temperature": -Infinity}', id="-Infinity"),
        pytest.param(b'{"model": "m", "messages": [], "temperature": 1e400}', id="overflows-double"),
        pytest.param(b'{"model": "m", "messages": [], "top_k": NaN}', id="NaN-before-screening"),
        pytest.param(b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', id="lone-surrogate"),
        pytest.param(b'{"model": "\xff"}', id="not-utf8"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-past-recursion-limit"),
    ],
)
def test_body_that_is_not_json_is_bad_request(raw: bytes) -> None:
    """ref: request-keys.3"""
    assert outcome(refusal(raw)) == (400, "invalid_request_error", "BadRequest", None, NOT_JSON)


@pytest.mark.parametrize(
    ("raw", "got"),
    [
        pytest.param(b"[]", "an array", id="array"),
        pytest.param(b'[{"model": "m"}]', "an array", id="array-of-objects"),
        pytest.param(b'"hello"', "a string", id="string"),
        pytest.param(b"null", "null", id="null"),
        pytest.param(b"42", "an integer", id="integer"),
        pytest.param(b"4.5", "a decimal", id="decimal"),
        pytest.param(b"true", "a boolean", id="boolean"),
    ],
)
def test_valid_json_that_is_not_an_object_says_the_body_must_be_an_object(raw: bytes, got: str) -> None:
    """Valid JSON is not refused as unparseable: the message says the body must be a JSON object and names what came.

    ref: request-keys.3"""
    assert outcome(refusal(raw)) == (
        400,
        "invalid_request_error",
        "BadRequest",
        None,
        f"The request body must be a JSON object, but got {got} instead.",
    )


def test_escaped_surrogate_pair_is_json() -> None:
    """A valid pair (an emoji written as two escapes) is text, only a lone surrogate is refused. ref: request-keys.3"""
    request = read_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}')
    assert request.messages[0].content == "\U0001f600"


# ---------------------------------------------------------------------------------------------------------------------
# find_refused_parameter: one row per rule


def _unsupported(param: str, message: str) -> tuple[int, str, str, str, str]:
    return 400, "invalid_request_error", "UnsupportedChatParameter", param, message


REFUSALS = [
    pytest.param(
        body(top_k=40), _unsupported("top_k", "Unrecognized request argument supplied: top_k"), id="unknown-sampler"
    ),
    pytest.param(
        body(foo_bar=1), _unsupported("foo_bar", "Unrecognized request argument supplied: foo_bar"), id="unknown-key"
    ),
    pytest.param(
        body(functions=None),
        _unsupported("functions", "Unrecognized request argument supplied: functions"),
        id="undefined-openai-null",
    ),
    pytest.param(
        body(functions=[{"name": "f"}]),
        _unsupported("functions", "Unrecognized request argument supplied: functions"),
        id="undefined-openai-functions",
    ),
    pytest.param(
        body(function_call="auto"),
        _unsupported("function_call", "Unrecognized request argument supplied: function_call"),
        id="undefined-openai-function-call",
    ),
    pytest.param(
        body(min_p=0.1, logprobs=True),
        _unsupported("min_p", "Unrecognized request argument supplied: min_p"),
        id="unknown-key-before-no-op",
    ),
    pytest.param(
        body(logprobs=True, messages=[{"role": "function", "content": "x"}]),
        _unsupported(
            "logprobs",
            "Unsupported value: 'logprobs' does not support true on the AI Horde. Only the default (false) value is "
            "supported.",
        ),
        id="no-op-before-role",
    ),
    pytest.param(
        body(messages=[{"role": "function", "name": "f", "content": "x"}]),
        _unsupported("messages[0].role", f"Invalid value: 'function'. Supported values are: {ROLES}."),
        id="role-function",
    ),
    pytest.param(
        body(messages=[USER, {"role": "foobar", "content": "x"}]),
        _unsupported("messages[1].role", f"Invalid value: 'foobar'. Supported values are: {ROLES}."),
        id="role-unknown",
    ),
    pytest.param(
        body(
            messages=[
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}
            ]
        ),
        _unsupported(
            "messages[0].content[0].type=input_audio",
            "Invalid value: 'input_audio'. Supported values are: 'text' and 'image_url'.",
        ),
        id="part-input-audio",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "image": "x"}]}]),
        _unsupported(
            "messages[0].content[1].type=image", "Invalid value: 'image'. Supported values are: 'text' and 'image_url'."
        ),
        id="part-image",
    ),
    pytest.param(
        body(
            messages=[
                {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
                USER,
            ]
        ),
        _unsupported(
            "messages[0].content[0].type=image_url", "Invalid value: 'image_url'. Supported values are: 'text'."
        ),
        id="part-image-in-system",
    ),
    pytest.param(
        body(messages=[USER, {"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]),
        _unsupported(
            "messages[1].content[0].type=refusal",
            "Invalid value: 'refusal'. Supported values are: 'text' and 'image_url'.",
        ),
        id="part-refusal-in-user",
    ),
    pytest.param(
        body(messages=[{"role": "system", "content": [{"type": "refusal", "refusal": "no"}]}, USER]),
        _unsupported("messages[0].content[0].type=refusal", "Invalid value: 'refusal'. Supported values are: 'text'."),
        id="part-refusal-in-system",
    ),
    pytest.param(
        body(messages=[USER, {"role": "assistant", "content": [{"type": "input_audio", "input_audio": {}}]}, USER]),
        _unsupported(
            "messages[1].content[0].type=input_audio",
            "Invalid value: 'input_audio'. Supported values are: 'text' and 'refusal'.",
        ),
        id="part-audio-in-assistant",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": "x", "tool_calls": [{"id": "c", "type": "function"}]}]),
        _unsupported(
            "messages[0].tool_calls",
            "Invalid parameter: only messages with role 'assistant' can have 'tool_calls', but 'messages[0]' has role "
            "'user'.",
        ),
        id="tool-calls-on-user",
    ),
    pytest.param(
        body(messages=[USER, {"role": "tool", "content": "r", "tool_call_id": "c", "tool_calls": []}]),
        _unsupported(
            "messages[1].tool_calls",
            "Invalid parameter: only messages with role 'assistant' can have 'tool_calls', but 'messages[1]' has role "
            "'tool'.",
        ),
        id="tool-calls-on-tool",
    ),
    pytest.param(
        body(stream=True, stream_options={"include_usage": True, "include_padding": False}),
        _unsupported(
            "stream_options.include_padding",
            "Unrecognized request argument supplied: stream_options.include_padding",
        ),
        id="unknown-in-stream-options",
    ),
    pytest.param(
        body(response_format={"type": "json_object", "strict": True}),
        _unsupported("response_format.strict", "Unrecognized request argument supplied: response_format.strict"),
        id="unknown-in-response-format",
    ),
    pytest.param(
        body(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema_": {"type": "object"}}}),
        _unsupported(
            "response_format.json_schema.schema_",
            "Unrecognized request argument supplied: response_format.json_schema.schema_",
        ),
        id="schema_-is-unknown",
    ),
    pytest.param(
        body(horde={"trusted_workers": True, "priority": 5}),
        _unsupported("horde.priority", "Unrecognized request argument supplied: horde.priority"),
        id="unknown-horde-option",
    ),
]


@pytest.mark.parametrize(("request_body", "expected"), REFUSALS)
def test_screening_refusals(request_body: dict[str, Any], expected: tuple[Any, ...]) -> None:
    """ref: parameter-screening.1, parameter-screening.2, parameter-screening.3, parameter-screening.10,
    parameter-screening.11, parameter-screening.12, message-roles.1, message-roles.5"""
    assert outcome(refusal(request_body)) == expected


def test_tool_calls_null_on_a_user_message_is_dropped() -> None:
    """Only a non-null ``tool_calls`` is refused off an assistant message. ref: message-roles.1"""
    request = read_chat_request(json.dumps(body(messages=[{**USER, "tool_calls": None}])).encode())
    assert request.messages[0].model_dump(exclude_none=True) == USER


# ---------------------------------------------------------------------------------------------------------------------
# DEFAULT_NO_OP_PARAMETERS: every row both ways

NO_OP_ROWS = {
    # key: (documented default, a value that would change the reply, how the refusal quotes each)
    "audio": (None, {"voice": "alloy", "format": "wav"}, '{"voice":"alloy","format":"wav"}', "null"),
    "logit_bias": ({}, {"50256": -100}, "", ""),
    "logprobs": (False, True, "true", "false"),
    "modalities": (["text"], ["text", "audio"], '["text","audio"]', '["text"]'),
    "prediction": (None, {"type": "content", "content": "x"}, '{"type":"content","content":"x"}', "null"),
    "service_tier": ("auto", "flex", "'flex'", "'auto'"),
    "store": (False, True, "true", "false"),
    "top_logprobs": (0, 5, "5", "0"),
    "verbosity": ("medium", "low", "'low'", "'medium'"),
    "web_search_options": (None, {}, "{}", "null"),
}


def test_no_op_table_documents_each_default() -> None:
    """The table's keys and defaults, as OpenAI's chat completions reference documents them.

    ref: parameter-screening.2
    """
    assert {key: row.default for key, row in DEFAULT_NO_OP_PARAMETERS.items()} == {
        key: default for key, (default, _, _, _) in NO_OP_ROWS.items()
    }
    for row in DEFAULT_NO_OP_PARAMETERS.values():
        assert row.description.endswith(".")


@pytest.mark.parametrize("key", sorted(NO_OP_ROWS))
def test_no_op_accepted_at_default_and_null_and_dropped(key: str) -> None:
    """ref: parameter-screening.2, parameter-screening.4"""
    default = NO_OP_ROWS[key][0]
    for accepted in (default, None):
        request = read_chat_request(json.dumps(body(**{key: accepted})).encode())
        assert request == ChatCompletionRequest.model_validate(BASE)
        assert key not in build_native_payload(request, stream_progress=False)
    assert drop_default_no_ops(body(**{key: default})) == BASE


@pytest.mark.parametrize("key", sorted(NO_OP_ROWS))
def test_no_op_refused_at_any_other_value(key: str) -> None:
    """ref: parameter-screening.2, parameter-screening.3"""
    _, other, shown, default_shown = NO_OP_ROWS[key]
    if key == "logit_bias":
        assert outcome(refusal(body(**{key: other}))) == _unsupported(
            key, f"Unrecognized request argument supplied: {key}"
        )
        return
    assert outcome(refusal(body(**{key: other}))) == _unsupported(
        key,
        f"Unsupported value: '{key}' does not support {shown} on the AI Horde. Only the default ({default_shown}) "
        "value is supported.",
    )


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("top_logprobs", False, "false"),
        ("logprobs", 0, "0"),
        ("store", "false", "'false'"),
        ("modalities", "text", "'text'"),
    ],
)
def test_no_op_default_compares_as_json(key: str, value: Any, shown: str) -> None:
    """``false`` is not ``0``, a string is not a boolean or a list. ref: parameter-screening.2"""
    error = refusal(body(**{key: value}))
    assert (error.code, error.param) == ("UnsupportedChatParameter", key)
    assert f"does not support {shown} on the AI Horde" in error.message


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({"50256": -100}, id="one-bias"),
        pytest.param({"50256": 0}, id="zero-bias"),
        pytest.param({"1": 1, "2": -1}, id="two-biases"),
        pytest.param([], id="array"),
        pytest.param("{}", id="string"),
        pytest.param(0, id="zero"),
        pytest.param(False, id="false"),
    ],
)
def test_logit_bias_other_than_its_default_keeps_the_unknown_key_refusal(value: Any, log_lines: list[Any]) -> None:
    """Only ``{}`` and null are the no-op default (a deliberate deviation); any other value, even a map of zero
    biases, is refused exactly as before: OpenAI's unknown-key message, param and label ``logit_bias``.
    ref: refusal-attributes.4"""
    assert outcome(refusal(body(logit_bias=value))) == _unsupported(
        "logit_bias", "Unrecognized request argument supplied: logit_bias"
    )
    assert [str(record).strip() for record in log_lines if "Refused" in str(record)] == [
        "Refused unsupported chat parameter: path='logit_bias' label=logit_bias"
    ]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        pytest.param({"logit_bias": {"1": 1}, "top_k": 40}, "logit_bias", id="before-a-later-unknown-key"),
        pytest.param({"top_k": 40, "logit_bias": {"1": 1}}, "top_k", id="after-an-earlier-unknown-key"),
        pytest.param({"store": True, "logit_bias": {"1": 1}}, "logit_bias", id="before-a-no-op-value"),
        pytest.param({"logit_bias": {}, "top_k": 40}, "top_k", id="default-then-unknown"),
    ],
)
def test_logit_bias_is_refused_in_the_unknown_keys_pass(extra: dict[str, Any], param: str) -> None:
    """A biasing ``logit_bias`` is still an unknown key: it is found in key order among the unknown keys, before any
    no-op parameter's value. ref: parameter-screening.2"""
    error = refusal(body(**extra))
    assert (error.code, error.param, error.message) == (
        "UnsupportedChatParameter",
        param,
        f"Unrecognized request argument supplied: {param}",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("user", "user-1234"),
        ("safety_identifier", "a" * 128),
        ("prompt_cache_key", "conversation-42"),
        ("metadata", {f"k{i}": "v" * 512 for i in range(16)}),
    ],
)
def test_identifiers_are_accepted_and_not_forwarded(key: str, value: Any) -> None:
    """Identifiers that never change the reply pass with any valid value and stay at the front."""
    request = read_chat_request(json.dumps(body(**{key: value})).encode())
    assert getattr(request, key) == value
    payload = build_native_payload(request, stream_progress=False)
    assert payload == build_native_payload(ChatCompletionRequest.model_validate(BASE), stream_progress=False)


# ---------------------------------------------------------------------------------------------------------------------
# drop_unknown_nested_keys and the retained keys


def test_retained_keys_are_the_request_models_fields() -> None:
    """The screening tables and the models agree, so a retained key is still validated. ref: message-roles.2,
    message-roles.3, parameter-screening.6, parameter-screening.7, parameter-screening.8, parameter-screening.9"""

    def fields(model: Any) -> frozenset[str]:
        return frozenset(field.alias or name for name, field in model.model_fields.items())

    assert {
        "system": fields(SystemMessage),
        "developer": fields(DeveloperMessage),
        "user": fields(UserMessage),
        "assistant": fields(AssistantMessage),
        "tool": fields(ToolMessage),
    } == SUPPORTED_MESSAGE_KEYS
    assert SUPPORTED_MESSAGE_KEYS["tool"] == {"role", "content", "tool_call_id"}
    assert SUPPORTED_MESSAGE_KEYS["assistant"] == {"role", "content", "tool_calls", "name"}
    assert {
        "text": fields(TextContentPart),
        "image_url": fields(ImageContentPart),
        "refusal": fields(RefusalContentPart),
    } == CONTENT_PART_KEYS
    assert IMAGE_URL_KEYS == fields(ImageUrl) == {"url", "detail"}
    assert TOOL_CALL_KEYS == fields(ToolCall) == {"id", "type", "function"}
    assert TOOL_CALL_FUNCTION_KEYS == fields(FunctionCall) == {"name", "arguments"}
    assert TOOL_KEYS == fields(ToolDefinition) == {"type", "function"}
    assert TOOL_FUNCTION_KEYS == fields(FunctionDefinition) == {"name", "description", "parameters", "strict"}
    assert TOOL_CHOICE_KEYS == fields(NamedToolChoice) == {"type", "function"}
    assert TOOL_CHOICE_FUNCTION_KEYS == fields(ToolChoiceFunction) == {"name"}


PARAMETERS = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"city": {"type": "string", "x-unknown-keyword": True, "default": None}},
    "required": ["city"],
    "additionalProperties": False,
}


def test_drop_unknown_nested_keys_keeps_the_listed_keys_only() -> None:
    """ref: parameter-screening.5, parameter-screening.6, parameter-screening.7, parameter-screening.8,
    parameter-screening.9, message-roles.1, message-roles.2"""
    dirty = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief.", "name": "rules", "weight": 1},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "Look", "cache_control": {"type": "ephemeral"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x/y.png", "detail": "low", "mime": "png"},
                        "x": 1,
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": "{}", "parsed_arguments": {}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "weather"},
        ],
        "tools": [
            {
                "type": "function",
                "cache_control": {},
                "function": {"name": "weather", "description": "d", "parameters": PARAMETERS, "strict": False, "x": 1},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "weather", "arguments": "{}"}, "extra": 1},
    }
    assert drop_unknown_nested_keys(dirty) == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief.", "name": "rules"},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "weather", "description": "d", "parameters": PARAMETERS, "strict": False},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
    }
    assert dirty["messages"][0]["weight"] == 1, "the input is not modified"


def test_retained_keys_are_still_validated() -> None:
    """A kept key with a wrong value is refused. ref: message-roles.3"""
    error = refusal(body(messages=[{"role": "user", "content": "x", "name": 7, "weight": 1}]))
    assert outcome(error) == (
        400,
        "invalid_request_error",
        "BadRequest",
        "messages[0].name",
        "Invalid type for 'messages[0].name': expected a string, but got an integer instead.",
    )


def test_refusal_comes_before_dropping() -> None:
    """``tool_calls`` is not a user message's key, yet it is refused, not dropped: screening step 1 runs first.
    ref: parameter-screening.1, message-roles.1"""
    assert find_refused_parameter(body(messages=[{**USER, "tool_calls": [{}]}])) is not None
    error = refusal(body(messages=[{**USER, "tool_calls": [{}]}]))
    assert error.param == "messages[0].tool_calls"


SDK_REPLAYED_ASSISTANT = {
    "role": "assistant",
    "content": None,
    "refusal": None,
    "audio": None,
    "annotations": [],
    "function_call": None,
    "parsed": None,
    "tool_calls": [
        {
            "index": 0,
            "id": "call_abc",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}', "parsed_arguments": None},
        }
    ],
}


def test_sdk_replay_fields_are_dropped_from_the_forwarded_history() -> None:
    """ref: message-roles.4, parameter-screening.5"""
    request = read_chat_request(
        json.dumps(
            body(
                messages=[
                    USER,
                    SDK_REPLAYED_ASSISTANT,
                    {"role": "tool", "tool_call_id": "call_abc", "content": "18 C"},
                ],
                tools=[{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}],
            )
        ).encode()
    )
    payload = build_native_payload(request, stream_progress=False)
    assert payload["messages"] == [
        USER,
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "content": "18 C", "tool_call_id": "call_abc"},
    ]
    assert payload["tools"][0]["function"]["parameters"] == PARAMETERS, "forwarded unchanged"


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"$schema": "https://json-schema.org/draft/2020-12/schema", **PARAMETERS},
        "strict": False,
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
ANSWER = {"role": "tool", "tool_call_id": "call_1", "content": "4 C"}


def tool_turn(**assistant: Any) -> dict[str, Any]:
    """A tool round trip whose assistant turn carries ``assistant``'s keys beside its call."""
    return body(messages=[USER, {"role": "assistant", **assistant, "tool_calls": [CALL]}, ANSWER], tools=[WEATHER_TOOL])


TEXT_PARTS = [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]
IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}}
REAL_CLIENT_BODIES = [
    pytest.param(tool_turn(), id="tool-turn-content-missing"),
    pytest.param(tool_turn(content=None), id="tool-turn-content-null"),
    pytest.param(tool_turn(content=""), id="tool-turn-content-empty"),
    pytest.param(tool_turn(content=" "), id="tool-turn-content-blank"),
    pytest.param(
        body(messages=[{"role": "system", "content": "s", "name": "rules"}, {**USER, "name": "ann"}]),
        id="name-on-system-and-user",
    ),
    pytest.param(
        body(messages=[USER, {"role": "assistant", "content": "Hello", "tool_calls": None}, USER]), id="tool-calls-null"
    ),
    pytest.param(
        body(messages=[{"role": "developer", "content": TEXT_PARTS[:1]}, {"role": "user", "content": TEXT_PARTS}]),
        id="text-part-arrays",
    ),
    pytest.param(
        body(messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE_PART]}]),
        id="image-with-detail",
    ),
    pytest.param(body(tools=[WEATHER_TOOL]), id="parameters-with-schema-and-additional-properties"),
    pytest.param(body(tools=[WEATHER_TOOL], tool_choice="auto", parallel_tool_calls=False), id="strict-false-tool"),
    pytest.param(body(stream=False), id="stream-false"),
    pytest.param(body(stop="\n\n"), id="stop-string"),
    pytest.param(body(max_completion_tokens=256), id="max-completion-tokens"),
    pytest.param(body(stream=True, stream_options={"include_usage": True}), id="stream-options"),
    pytest.param(
        body(
            user="u", safety_identifier="s", prompt_cache_key="p", metadata={"a": "b"}, store=False, logprobs=False, n=1
        ),
        id="sdk-defaults-and-identifiers",
    ),
]


@pytest.mark.parametrize("request_body", REAL_CLIENT_BODIES)
def test_what_real_clients_send_passes(request_body: dict[str, Any]) -> None:
    """ref: message-roles.1, message-roles.2, message-roles.3, parameter-screening.8"""
    request = read_chat_request(json.dumps(request_body).encode())
    payload = build_native_payload(request, stream_progress=False)
    assert len(payload["messages"]) == len(request_body["messages"])
    if "tools" in request_body:
        assert payload["tools"][0]["function"]["parameters"] == WEATHER_TOOL["function"]["parameters"]


# ---------------------------------------------------------------------------------------------------------------------
# Refusal label and log line


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("top_k", "top_k"),
        ("min_p", "min_p"),
        ("rep_pen", "rep_pen"),
        ("repetition_penalty", "repetition_penalty"),
        ("top_a", "top_a"),
        ("typical", "typical"),
        ("tfs", "tfs"),
        ("logit_bias", "logit_bias"),
        ("functions", "functions"),
        ("function_call", "function_call"),
        ("logprobs", "logprobs"),
        ("service_tier", "service_tier"),
        ("temperature", "temperature"),
        ("messages[0].role", "messages"),
        ("messages[0].content[0].type=input_audio", "messages"),
        ("messages.[6].role", "messages"),
        ("horde.priority", "horde"),
        ("stream_options.include_obfuscation", "stream_options"),
        ("response_format.json_schema.schema_", "response_format"),
        ("tools[0].function.parameters", "tools"),
        ("foo_bar", "other"),
        ("my.secret.key", "other"),
        ("", "other"),
    ],
)
def test_refusal_parameter_label(path: str, label: str) -> None:
    """ref: refusal-attributes.2, refusal-attributes.3, refusal-attributes.4, refusal-attributes.5,
    refusal-attributes.6, refusal-attributes.7"""
    assert refusal_parameter_label(path) == label


def test_label_sets_hold_the_named_keys() -> None:
    """ref: refusal-attributes.4, refusal-attributes.5"""
    assert {"logit_bias", "functions", "function_call"} <= UNDEFINED_OPENAI_PARAMETERS
    assert {"top_k", "min_p", "rep_pen", "repetition_penalty", "top_a", "typical", "tfs"} <= (
        COMMON_NON_OPENAI_SAMPLER_PARAMETERS
    )


@pytest.mark.parametrize(
    ("request_body", "line"),
    [
        (body(top_k=1), "Refused unsupported chat parameter: path='top_k' label=top_k"),
        (body(my_key=1), "Refused unsupported chat parameter: path='my_key' label=other"),
        (body(**{"x" * 100: 1}), f"Refused unsupported chat parameter: path='{'x' * 64}' label=other"),
        (body(**{"a'b\nc": 1}), 'Refused unsupported chat parameter: path="a\'b\\nc" label=other'),
        (
            body(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]),
            "Refused unsupported chat parameter: path='messages[0].content[0].type' label=messages",
        ),
        (body(horde={"x": 1}), "Refused unsupported chat parameter: path='horde.x' label=horde"),
        (body(temperature=3), "Refused unsupported chat parameter: path='temperature' label=temperature"),
        (
            body(messages=[{"role": "tool", "tool_call_id": "c", "content": "r"}]),
            "Refused unsupported chat parameter: path='messages.[0].role' label=messages",
        ),
    ],
)
def test_refused_parameter_log_line(request_body: dict[str, Any], line: str, log_lines: list[Any]) -> None:
    """One INFO record per UnsupportedChatParameter refusal, path cut to 64 characters then repr'd.
    ref: refused-parameter-log-line.1, refused-parameter-log-line.2, refused-parameter-log-line.3,
    refused-parameter-log-line.4, refusal-attributes.9"""
    assert REFUSED_PARAMETER_LOG_LENGTH == 64
    error = refusal(request_body)
    assert error.code == "UnsupportedChatParameter"
    refused = [record for record in log_lines if "Refused unsupported chat parameter" in record]
    assert [str(record).rstrip("\n") for record in refused] == [line]
    assert refused[0].record["level"].name == "INFO"
    assert "\n" not in refused[0].record["message"]


def test_other_refusals_do_not_log_the_line(log_lines: list[Any]) -> None:
    """ref: refused-parameter-log-line.1, refusal-attributes.8"""
    assert refusal(body(messages=[])).code == "BadRequest"
    assert refusal(body(tool_choice="auto")).code == "ChatRequestConflict"
    assert not [record for record in log_lines if "Refused unsupported chat parameter" in record]


# ---------------------------------------------------------------------------------------------------------------------
# What OpenAI accepts at no cost: a refusal part in the history, stream_options.include_obfuscation; a tool call
# without its type is refused as OpenAI refuses it


def test_a_refusal_part_in_an_assistant_message_is_kept_as_that_turns_text() -> None:
    """OpenAI's assistant content may hold ``{"type": "refusal", "refusal": ...}`` parts (a model's refusal replayed as
    history); the front accepts them, drops unknown keys inside, and forwards the refusal's text as a text part.

    ref: message-roles.1, message-roles.2, message-roles.3"""
    history = [
        USER,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Well. "},
                {"type": "refusal", "refusal": "I can't help with that.", "annotations": []},
            ],
        },
        {"role": "user", "content": "Fine, something else then."},
    ]
    request = read_chat_request(json.dumps(body(messages=history)).encode())
    payload = build_native_payload(request, stream_progress=False)
    assert payload["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Well. "}, {"type": "text", "text": "I can't help with that."}],
    }
    assert payload["messages"][0] == USER and payload["messages"][2] == history[2]


@pytest.mark.parametrize(
    ("part", "param", "message"),
    [
        (
            {"type": "refusal", "refusal": 5},
            "messages[1].content[0].refusal",
            "Invalid type for 'messages[1].content[0].refusal': expected a string, but got an integer instead.",
        ),
        (
            {"type": "refusal"},
            "messages[1].content[0].refusal",
            "Missing required parameter: 'messages[1].content[0].refusal'.",
        ),
    ],
)
def test_a_malformed_refusal_part_is_refused_at_its_path(part: dict[str, Any], param: str, message: str) -> None:
    """ref: message-roles.3"""
    error = refusal(body(messages=[USER, {"role": "assistant", "content": [part]}, USER]))
    assert outcome(error) == (400, "invalid_request_error", "BadRequest", param, message)


@pytest.mark.parametrize("value", [True, False, None])
def test_stream_options_include_obfuscation_is_accepted_and_not_forwarded(value: bool | None) -> None:
    """``stream_options.include_obfuscation`` (OpenAI's stream padding flag) changes nothing here: accepted with any
    boolean, not forwarded. ref: parameter-screening.10, buffered-stream-events.12"""
    options = {"include_usage": True, "include_obfuscation": value}
    request = read_chat_request(json.dumps(body(stream=True, stream_options=options)).encode())
    assert request.include_usage is True
    payload = build_native_payload(request, stream_progress=False)
    assert "stream_options" not in payload and "include_obfuscation" not in json.dumps(payload)


def test_stream_options_include_obfuscation_must_be_a_boolean() -> None:
    """ref: parameter-screening.10"""
    error = refusal(body(stream=True, stream_options={"include_obfuscation": "yes"}))
    assert outcome(error) == (
        400,
        "invalid_request_error",
        "BadRequest",
        "stream_options.include_obfuscation",
        "Invalid type for 'stream_options.include_obfuscation': expected a boolean, but got a string instead.",
    )


def test_a_history_tool_call_without_type_is_refused_as_openai_does() -> None:
    """OpenAI requires ``type`` on each tool call of an assistant message; so does the front.

    ref: message-roles.2, message-roles.3"""
    call = {"id": "c1", "function": {"name": "f", "arguments": "{}"}}
    history = [USER, {"role": "assistant", "content": None, "tool_calls": [call]}, {**USER}]
    history.insert(2, {"role": "tool", "tool_call_id": "c1", "content": "ok"})
    error = refusal(body(messages=history))
    assert outcome(error) == (
        400,
        "invalid_request_error",
        "BadRequest",
        "messages[1].tool_calls[0].type",
        "Missing required parameter: 'messages[1].tool_calls[0].type'.",
    )
    history[1]["tool_calls"][0]["type"] = "function"
    assert read_chat_request(json.dumps(body(messages=history)).encode()).messages[1].tool_calls[0].type == "function"
