# ruff: noqa: E501 - one row per line: each row's exact message is longer than a line
"""The front refuses, at the client's path and in OpenAI's words, everything the Horde's payload validation would.

No client should ever read the native ``Input payload validation failed``. :data:`NATIVE_ROWS` walks the native
payload validation (``native-horde-chat.md``, Conventions and Submit; the devhorde's ``devhorde.payload.
validate_payload``) constraint by constraint, over every field the front forwards: one row per constraint, each a
client body the front must refuse with the exact code, param and message. Each row also proves it belongs to that
list: the same body forwarded naively (:func:`naive_native_payload`, what the front would send without its own checks)
fails the native validation. :data:`OPENAI_ROWS` are OpenAI's own rules on the same fields that the native validation
does not enforce (a function or schema name ``^[a-zA-Z0-9_-]{1,64}$``), refused by the front all the same.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat.errors import OpenAIError
from chat.reading.screening import read_chat_request
from devhorde.payload import validate_payload

USER = {"role": "user", "content": "Hi"}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "m/a", "messages": [USER], **extra}


def msgs(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m/a", "messages": list(messages), **extra}


CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def call_msg(**call: Any) -> list[dict[str, Any]]:
    return [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, **call}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]


NATIVE_ROWS: list[Any] = [
    pytest.param(
        body(model=""),
        (
            "BadRequest",
            "model",
            "Invalid 'model': string too short. Expected a string with minimum length 1, but got an empty string instead.",
        ),
        id="model-empty",
    ),
    pytest.param(
        {"models": ["m/a", ""], "messages": [USER]},
        (
            "BadRequest",
            "models[1]",
            "Invalid 'models[1]': string too short. Expected a string with minimum length 1, but got an empty string instead.",
        ),
        id="models-entry-empty",
    ),
    pytest.param(
        {"models": [], "messages": [USER]},
        (
            "BadRequest",
            "models",
            "Invalid 'models': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        ),
        id="models-empty",
    ),
    pytest.param(
        {"models": [f"m/{i}" for i in range(6)], "messages": [USER]},
        (
            "BadRequest",
            "models",
            "Invalid 'models': array too long. Expected an array with maximum length 5, but got an array with length 6 instead.",
        ),
        id="models-too-many",
    ),
    pytest.param(
        {"models": ["m/a", "m/a"], "messages": [USER]},
        (
            "BadRequest",
            "models[1]",
            "Invalid 'models[1]': duplicate value. Expected distinct model ids, but 'm/a' is also 'models[0]'.",
        ),
        id="models-duplicate",
    ),
    pytest.param(
        {"models": ["m/a", 5], "messages": [USER]},
        ("BadRequest", "models[1]", "Invalid type for 'models[1]': expected a string, but got an integer instead."),
        id="models-entry-not-string",
    ),
    pytest.param(
        {"model": "m/a"}, ("BadRequest", "messages", "Missing required parameter: 'messages'."), id="messages-missing"
    ),
    pytest.param(
        body(messages={"role": "user"}),
        ("BadRequest", "messages", "Invalid type for 'messages': expected an array, but got an object instead."),
        id="messages-not-array",
    ),
    pytest.param(
        body(messages=[]),
        (
            "BadRequest",
            "messages",
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        ),
        id="messages-empty",
    ),
    pytest.param(
        msgs(5),
        (
            "BadRequest",
            "messages[0]",
            "Invalid type for 'messages[0]': expected an object, but got an integer instead.",
        ),
        id="message-not-object",
    ),
    pytest.param(
        msgs({"content": "Hi"}),
        ("BadRequest", "messages[0].role", "Missing required parameter: 'messages[0].role'."),
        id="role-missing",
    ),
    pytest.param(
        msgs({"role": 5, "content": "Hi"}),
        (
            "BadRequest",
            "messages[0].role",
            "Invalid type for 'messages[0].role': expected a string, but got an integer instead.",
        ),
        id="role-not-string",
    ),
    pytest.param(
        msgs({"role": "function", "content": "Hi"}),
        (
            "UnsupportedChatParameter",
            "messages[0].role",
            "Invalid value: 'function'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'.",
        ),
        id="role-unknown",
    ),
    pytest.param(
        msgs({"role": "user", "content": None}),
        (
            "BadRequest",
            "messages[0].content",
            "Invalid type for 'messages[0].content': expected one of a string or array of objects, but got null instead.",
        ),
        id="content-null-user",
    ),
    pytest.param(
        msgs({"role": "system"}, USER),
        ("BadRequest", "messages[0].content", "Missing required parameter: 'messages[0].content'."),
        id="content-missing-system",
    ),
    pytest.param(
        msgs({"role": "user", "content": 5}),
        (
            "BadRequest",
            "messages[0].content",
            "Invalid type for 'messages[0].content': expected one of a string or array of objects, but got an integer instead.",
        ),
        id="content-number",
    ),
    pytest.param(
        msgs({"role": "user", "content": ["Hi"]}),
        (
            "BadRequest",
            "messages[0].content[0]",
            "Invalid type for 'messages[0].content[0]': expected an object, but got a string instead.",
        ),
        id="part-not-object",
    ),
    pytest.param(
        msgs({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}),
        (
            "UnsupportedChatParameter",
            "messages[0].content[0].type=input_audio",
            "Invalid value: 'input_audio'. Supported values are: 'text' and 'image_url'.",
        ),
        id="part-type-unknown",
    ),
    pytest.param(
        msgs({"role": "user", "content": [{"type": "text", "text": 5}]}),
        (
            "BadRequest",
            "messages[0].content[0].text",
            "Invalid type for 'messages[0].content[0].text': expected a string, but got an integer instead.",
        ),
        id="text-part-text-not-string",
    ),
    pytest.param(
        msgs({"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]}),
        (
            "BadRequest",
            "messages[0].content[0].image_url",
            "Invalid type for 'messages[0].content[0].image_url': expected an object, but got a string instead.",
        ),
        id="image-url-not-object",
    ),
    pytest.param(
        msgs({"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}),
        (
            "BadRequest",
            "messages[0].content[0].image_url.url",
            "Invalid type for 'messages[0].content[0].image_url.url': expected a string, but got an integer instead.",
        ),
        id="image-url-url-not-string",
    ),
    pytest.param(
        msgs(USER, {"role": "assistant", "content": None, "tool_calls": {"id": "c1"}}),
        (
            "BadRequest",
            "messages[1].tool_calls",
            "Invalid type for 'messages[1].tool_calls': expected an array, but got an object instead.",
        ),
        id="tool-calls-not-array",
    ),
    pytest.param(
        msgs(USER, {"role": "assistant", "content": None, "tool_calls": ["c1"]}),
        (
            "BadRequest",
            "messages[1].tool_calls[0]",
            "Invalid type for 'messages[1].tool_calls[0]': expected an object, but got a string instead.",
        ),
        id="tool-call-not-object",
    ),
    pytest.param(
        msgs(*call_msg(id=5)),
        (
            "BadRequest",
            "messages[1].tool_calls[0].id",
            "Invalid type for 'messages[1].tool_calls[0].id': expected a string, but got an integer instead.",
        ),
        id="tool-call-id-not-string",
    ),
    pytest.param(
        msgs(*call_msg(function="get_weather")),
        (
            "BadRequest",
            "messages[1].tool_calls[0].function",
            "Invalid type for 'messages[1].tool_calls[0].function': expected an object, but got a string instead.",
        ),
        id="tool-call-function-not-object",
    ),
    pytest.param(
        msgs(*call_msg(function={"name": 5, "arguments": "{}"})),
        (
            "BadRequest",
            "messages[1].tool_calls[0].function.name",
            "Invalid type for 'messages[1].tool_calls[0].function.name': expected a string, but got an integer instead.",
        ),
        id="tool-call-name-not-string",
    ),
    pytest.param(
        msgs(*call_msg(function={"name": "f", "arguments": {}})),
        (
            "BadRequest",
            "messages[1].tool_calls[0].function.arguments",
            "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, but got an object instead.",
        ),
        id="tool-call-arguments-not-string",
    ),
    pytest.param(
        msgs(
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": 5, "content": "ok"},
        ),
        (
            "BadRequest",
            "messages[2].tool_call_id",
            "Invalid type for 'messages[2].tool_call_id': expected a string, but got an integer instead.",
        ),
        id="tool-call-id-of-tool-not-string",
    ),
    pytest.param(
        body(tools=TOOL),
        ("BadRequest", "tools", "Invalid type for 'tools': expected an array, but got an object instead."),
        id="tools-not-array",
    ),
    pytest.param(
        body(tools=["get_weather"]),
        ("BadRequest", "tools[0]", "Invalid type for 'tools[0]': expected an object, but got a string instead."),
        id="tool-not-object",
    ),
    pytest.param(
        body(tools=[{**TOOL, "type": "retrieval"}]),
        ("BadRequest", "tools[0].type", "Invalid value: 'retrieval'. Supported values are: 'function'."),
        id="tool-type-not-function",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": "get_weather"}]),
        (
            "BadRequest",
            "tools[0].function",
            "Invalid type for 'tools[0].function': expected an object, but got a string instead.",
        ),
        id="tool-function-not-object",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": {"parameters": {}}}]),
        ("BadRequest", "tools[0].function.name", "Missing required parameter: 'tools[0].function.name'."),
        id="tool-name-missing",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": {"name": 5}}]),
        (
            "BadRequest",
            "tools[0].function.name",
            "Invalid type for 'tools[0].function.name': expected a string, but got an integer instead.",
        ),
        id="tool-name-not-string",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": {"name": ""}}]),
        (
            "BadRequest",
            "tools[0].function.name",
            "Invalid 'tools[0].function.name': string too short. Expected a string with minimum length 1, but got an empty string instead.",
        ),
        id="tool-name-empty",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]),
        (
            "BadRequest",
            "tools[0].function.parameters",
            "Invalid type for 'tools[0].function.parameters': expected an object, but got an array instead.",
        ),
        id="tool-parameters-not-object",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": {"name": "f", "strict": "yes"}}]),
        (
            "BadRequest",
            "tools[0].function.strict",
            "Invalid type for 'tools[0].function.strict': expected a boolean, but got a string instead.",
        ),
        id="tool-strict-not-boolean",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice="any"),
        ("BadRequest", "tool_choice", "Invalid value: 'any'. Supported values are: 'none', 'auto', and 'required'."),
        id="tool-choice-unknown-string",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice=5),
        (
            "BadRequest",
            "tool_choice",
            "Invalid type for 'tool_choice': expected one of a string or object, but got an integer instead.",
        ),
        id="tool-choice-not-object",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice={"type": "tool", "function": {"name": "get_weather"}}),
        ("BadRequest", "tool_choice.type", "Invalid value: 'tool'. Supported values are: 'function'."),
        id="tool-choice-type",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice={"type": "function", "function": {}}),
        ("BadRequest", "tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'."),
        id="tool-choice-name-missing",
    ),
    pytest.param(
        body(response_format="json_object"),
        (
            "BadRequest",
            "response_format",
            "Invalid type for 'response_format': expected an object, but got a string instead.",
        ),
        id="response-format-not-object",
    ),
    pytest.param(
        body(response_format={"type": "yaml"}),
        (
            "BadRequest",
            "response_format.type",
            "Invalid value: 'yaml'. Supported values are: 'text', 'json_object', and 'json_schema'.",
        ),
        id="response-format-type",
    ),
    pytest.param(
        body(response_format={"type": "json_schema"}),
        ("BadRequest", "response_format.json_schema", "Missing required parameter: 'response_format.json_schema'."),
        id="json-schema-missing",
    ),
    pytest.param(
        body(response_format={"type": "json_schema", "json_schema": {"name": "r"}}),
        (
            "BadRequest",
            "response_format.json_schema.schema",
            "Missing required parameter: 'response_format.json_schema.schema'.",
        ),
        id="json-schema-schema-missing",
    ),
    pytest.param(
        body(max_tokens=64.5),
        ("BadRequest", "max_tokens", "Invalid type for 'max_tokens': expected an integer, but got a decimal instead."),
        id="max-tokens-not-integer",
    ),
    pytest.param(
        body(max_completion_tokens="64"),
        (
            "BadRequest",
            "max_completion_tokens",
            "Invalid type for 'max_completion_tokens': expected an integer, but got a string instead.",
        ),
        id="max-completion-tokens-not-integer",
    ),
    pytest.param(
        body(horde={"max_context_length": 0}),
        (
            "BadRequest",
            "horde.max_context_length",
            "Invalid 'horde.max_context_length': integer below minimum value. Expected a value >= 1, but got 0 instead.",
        ),
        id="max-context-length-below-1",
    ),
    pytest.param(
        body(horde={"max_context_length": 4096.5}),
        (
            "BadRequest",
            "horde.max_context_length",
            "Invalid type for 'horde.max_context_length': expected an integer, but got a decimal instead.",
        ),
        id="max-context-length-not-integer",
    ),
    pytest.param(
        body(temperature="hot"),
        ("BadRequest", "temperature", "Invalid type for 'temperature': expected a decimal, but got a string instead."),
        id="temperature-not-number",
    ),
    pytest.param(
        body(top_p=True),
        ("BadRequest", "top_p", "Invalid type for 'top_p': expected a decimal, but got a boolean instead."),
        id="top-p-not-number",
    ),
    pytest.param(
        body(frequency_penalty="0"),
        (
            "BadRequest",
            "frequency_penalty",
            "Invalid type for 'frequency_penalty': expected a decimal, but got a string instead.",
        ),
        id="frequency-penalty-not-number",
    ),
    pytest.param(
        body(presence_penalty=[0]),
        (
            "BadRequest",
            "presence_penalty",
            "Invalid type for 'presence_penalty': expected a decimal, but got an array instead.",
        ),
        id="presence-penalty-not-number",
    ),
    pytest.param(
        body(seed=4.2),
        ("BadRequest", "seed", "Invalid type for 'seed': expected an integer, but got a decimal instead."),
        id="seed-not-integer",
    ),
    pytest.param(
        body(stop=["a", 5]),
        ("BadRequest", "stop[1]", "Invalid type for 'stop[1]': expected a string, but got an integer instead."),
        id="stop-entry-not-string",
    ),
    pytest.param(
        body(stop=5),
        (
            "BadRequest",
            "stop",
            "Invalid type for 'stop': expected one of a string or array of strings, but got an integer instead.",
        ),
        id="stop-not-string-or-array",
    ),
    pytest.param(
        body(reasoning_effort="extreme"),
        (
            "BadRequest",
            "reasoning_effort",
            "Invalid value: 'extreme'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'.",
        ),
        id="reasoning-effort-unknown",
    ),
    pytest.param(
        body(tools=[TOOL], parallel_tool_calls="yes"),
        (
            "BadRequest",
            "parallel_tool_calls",
            "Invalid type for 'parallel_tool_calls': expected a boolean, but got a string instead.",
        ),
        id="parallel-tool-calls-not-boolean",
    ),
    pytest.param(
        body(stream="yes"),
        ("BadRequest", "stream", "Invalid type for 'stream': expected a boolean, but got a string instead."),
        id="stream-not-boolean",
    ),
    pytest.param(
        body(horde={"openai_guards": 1}),
        (
            "BadRequest",
            "horde.openai_guards",
            "Invalid type for 'horde.openai_guards': expected a boolean, but got an integer instead.",
        ),
        id="openai-guards-not-boolean",
    ),
    pytest.param(
        body(horde={"trusted_workers": "true"}),
        (
            "BadRequest",
            "horde.trusted_workers",
            "Invalid type for 'horde.trusted_workers': expected a boolean, but got a string instead.",
        ),
        id="trusted-workers-not-boolean",
    ),
    pytest.param(
        body(horde={"slow_workers": 0}),
        (
            "BadRequest",
            "horde.slow_workers",
            "Invalid type for 'horde.slow_workers': expected a boolean, but got an integer instead.",
        ),
        id="slow-workers-not-boolean",
    ),
    pytest.param(
        body(horde={"worker_blacklist": "no"}),
        (
            "BadRequest",
            "horde.worker_blacklist",
            "Invalid type for 'horde.worker_blacklist': expected a boolean, but got a string instead.",
        ),
        id="worker-blacklist-not-boolean",
    ),
    pytest.param(
        body(horde={"conformance": "loose"}),
        (
            "BadRequest",
            "horde.conformance",
            "Invalid value: 'loose'. Supported values are: 'strict' and 'best_effort'.",
        ),
        id="conformance-unknown",
    ),
    pytest.param(
        body(horde={"max_kudos": -1}),
        (
            "BadRequest",
            "horde.max_kudos",
            "Invalid 'horde.max_kudos': decimal below minimum value. Expected a value >= 0, but got -1 instead.",
        ),
        id="max-kudos-negative",
    ),
    pytest.param(
        body(horde={"max_kudos": "10"}),
        (
            "BadRequest",
            "horde.max_kudos",
            "Invalid type for 'horde.max_kudos': expected a decimal, but got a string instead.",
        ),
        id="max-kudos-not-number",
    ),
    pytest.param(
        body(horde={"workers": "w1"}),
        (
            "BadRequest",
            "horde.workers",
            "Invalid type for 'horde.workers': expected an array, but got a string instead.",
        ),
        id="workers-not-array",
    ),
    pytest.param(
        body(horde={"workers": ["w1", 2]}),
        (
            "BadRequest",
            "horde.workers[1]",
            "Invalid type for 'horde.workers[1]': expected a string, but got an integer instead.",
        ),
        id="workers-entry-not-string",
    ),
]
OPENAI_ROWS: list[Any] = [
    pytest.param(
        body(tools=[{"type": "function", "function": {"name": "get weather"}}]),
        (
            "BadRequest",
            "tools[0].function.name",
            "Invalid 'tools[0].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
        ),
        id="tool-name-with-space",
    ),
    pytest.param(
        body(tools=[{"type": "function", "function": {"name": "f" * 65}}]),
        (
            "BadRequest",
            "tools[0].function.name",
            "Invalid 'tools[0].function.name': string too long. Expected a string with maximum length 64, but got a string with length 65 instead.",
        ),
        id="tool-name-too-long",
    ),
    pytest.param(
        body(response_format={"type": "json_schema", "json_schema": {"name": "", "schema": {}}}),
        (
            "BadRequest",
            "response_format.json_schema.name",
            "Invalid 'response_format.json_schema.name': string too short. Expected a string with minimum length 1, but got an empty string instead.",
        ),
        id="json-schema-name-empty",
    ),
    pytest.param(
        body(response_format={"type": "json_schema", "json_schema": {"name": "my.schema", "schema": {}}}),
        (
            "BadRequest",
            "response_format.json_schema.name",
            "Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
        ),
        id="json-schema-name-with-dot",
    ),
]


NATIVE_PARAMS = {
    "max_tokens": "max_length",
    "max_completion_tokens": "max_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "seed": "seed",
    "reasoning_effort": "reasoning_effort",
}
HORDE_TOP_LEVEL = ("conformance", "openai_guards", "max_kudos", "trusted_workers", "slow_workers", "workers")
HORDE_TOP_LEVEL += ("worker_blacklist",)


def naive_native_payload(body: dict[str, Any]) -> dict[str, Any]:
    """The native payload of ``body`` forwarded without the front's checks, key for key as
    ``chat.horde.native_payload.build_native_payload`` maps a valid request (``model`` as a one-entry ``models``, the token limit
    as ``params.max_length``, ``stop`` as ``params.stop_sequence``, the ``horde`` options in their native places)."""
    payload: dict[str, Any] = {}
    if "messages" in body:
        payload["messages"] = body["messages"]
    payload["models"] = [body["model"]] if "model" in body else body.get("models")
    params = {native: body[key] for key, native in NATIVE_PARAMS.items() if key in body}
    if "stop" in body:
        params["stop_sequence"] = [body["stop"]] if isinstance(body["stop"], str) else body["stop"]
    horde = body.get("horde") or {}
    if "max_context_length" in horde:
        params["max_context_length"] = horde["max_context_length"]
    if params:
        payload["params"] = params
    for key in ("tools", "tool_choice", "parallel_tool_calls", "response_format", "stream"):
        if key in body:
            payload[key] = body[key]
    for key in HORDE_TOP_LEVEL:
        if key in horde:
            payload[key] = horde[key]
    return payload


def front_refusal(body: dict[str, Any]) -> tuple[int, str | None, str | None, str]:
    with pytest.raises(OpenAIError) as caught:
        read_chat_request(json.dumps(body).encode())
    error = caught.value
    return error.status, error.code, error.param, error.message


@pytest.mark.parametrize(("body", "expected"), NATIVE_ROWS)
def test_the_front_refuses_what_the_native_validation_would(
    body: dict[str, Any], expected: tuple[str, str, str]
) -> None:
    """ref: request-keys.2, value-and-contract-validation.5, value-and-contract-validation.6, message-roles.3"""
    assert validate_payload(naive_native_payload(body)) != {}  # the Horde would refuse it
    assert front_refusal(body) == (400, *expected)  # the front does first, at the client's path
    assert "Input payload validation failed" not in expected[2]


@pytest.mark.parametrize(("body", "expected"), OPENAI_ROWS)
def test_openais_name_rules_are_the_fronts_too(body: dict[str, Any], expected: tuple[str, str, str]) -> None:
    """OpenAI's ``^[a-zA-Z0-9_-]{1,64}$`` for a function name and a ``json_schema`` name.

    ref: value-and-contract-validation.8"""
    assert front_refusal(body) == (400, *expected)


def test_the_naive_payload_of_a_valid_body_passes_the_native_validation() -> None:
    """The mapping the rows rely on is the front's: a valid body maps to a payload the Horde accepts."""
    valid = body(
        max_tokens=64,
        stop="x",
        temperature=0.5,
        seed=1,
        tools=[TOOL],
        tool_choice="auto",
        parallel_tool_calls=True,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
        horde={"max_context_length": 4096, "conformance": "strict", "max_kudos": 5, "workers": ["w1"]},
    )
    read_chat_request(json.dumps(valid).encode())
    assert validate_payload(naive_native_payload(valid)) == {}


def test_every_constraint_of_the_native_validation_has_a_row() -> None:
    """At least one row per native field the validation checks (the list walked from ``validate_payload``)."""
    paths: set[str] = set()
    for row in NATIVE_ROWS:
        errors = validate_payload(naive_native_payload(row.values[0]))
        paths |= {".".join(part for part in path.split(".") if not part.isdigit()) for path in errors}
    assert paths >= {
        "messages",
        "messages.role",
        "messages.content",
        "messages.content.type",
        "messages.content.text",
        "messages.content.image_url",
        "messages.content.image_url.url",
        "messages.tool_calls",
        "messages.tool_calls.id",
        "messages.tool_calls.function",
        "messages.tool_calls.function.name",
        "messages.tool_calls.function.arguments",
        "messages.tool_call_id",
        "models",
        "params.max_length",
        "params.max_context_length",
        "params.temperature",
        "params.top_p",
        "params.frequency_penalty",
        "params.presence_penalty",
        "params.seed",
        "params.stop_sequence",
        "params.reasoning_effort",
        "tools",
        "tools.type",
        "tools.function",
        "tools.function.name",
        "tools.function.parameters",
        "tools.function.strict",
        "tool_choice",
        "tool_choice.type",
        "tool_choice.function.name",
        "response_format",
        "response_format.type",
        "response_format.json_schema",
        "response_format.json_schema.schema",
        "parallel_tool_calls",
        "stream",
        "openai_guards",
        "trusted_workers",
        "slow_workers",
        "worker_blacklist",
        "conformance",
        "max_kudos",
        "workers",
    }
