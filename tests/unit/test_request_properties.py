"""Property tests: arbitrary JSON at every key never makes the front fail (reference: Request keys, Parameter
screening, Value and contract validation).

Driven in process: :func:`chat.reading.screening.read_chat_request` reads the body, and an accepted request goes through
:func:`chat.horde.native_payload.build_native_payload` and the JSON encoder that sends it. The front must answer either
a native payload or an :class:`~chat.errors.OpenAIError` with a 4xx status whose envelope validates against
:class:`chat.protocol.chat_request.OpenAIErrorEnvelope`, and whose ``param`` is a request path, never a pydantic union
tag.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loguru import logger

from chat.errors import OpenAIError, dumps
from chat.horde.native_payload import build_native_payload
from chat.protocol.chat_request import UNION_TAGS, OpenAIErrorEnvelope
from chat.reading.parameters import (
    CHAT_REQUEST_KEYS,
    COMMON_NON_OPENAI_SAMPLER_PARAMETERS,
    DEFAULT_NO_OP_PARAMETERS,
    UNDEFINED_OPENAI_PARAMETERS,
)
from chat.reading.screening import read_chat_request

PROPERTY_SETTINGS = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "",
            " ",
            "user",
            "assistant",
            "tool",
            "system",
            "developer",
            "function",
            "text",
            "image_url",
            "json_schema",
            "json_object",
            "auto",
            "none",
            "required",
            "object",
            "string",
            "call_1",
            "get_weather",
            "fail_fast",
            "strict",
        ]
    )
    | st.sampled_from([0, 1, 2, 15, 16, 16384, 16385, -1, 0.5, 2.5, 1e300])
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=16,
)


def base_body() -> dict[str, Any]:
    """A valid request that uses every part of the request model."""
    return {
        "model": "example/model-7b",
        "messages": [
            {"role": "system", "content": "Answer in json.", "name": "rules"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},
                    {"type": "image_url", "image_url": {"url": "https://example.org/a.png", "detail": "low"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    "strict": False,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": True,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": False},
        },
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 256,
        "temperature": 0.7,
        "stop": ["\n\n"],
        "horde": {"conformance": "best_effort", "openai_guards": True, "max_kudos": 10},
    }


# Where a value can go: (the object's path in the base body, the keys tried there).
TOP_LEVEL_KEYS = sorted(
    CHAT_REQUEST_KEYS
    | set(DEFAULT_NO_OP_PARAMETERS)
    | UNDEFINED_OPENAI_PARAMETERS
    | COMMON_NON_OPENAI_SAMPLER_PARAMETERS
)
SLOTS: list[tuple[tuple[Any, ...], list[str]]] = [
    ((), TOP_LEVEL_KEYS),
    (("messages", 0), ["role", "content", "name", "tool_calls"]),
    (("messages", 1), ["role", "content", "name", "tool_calls", "refusal"]),
    (("messages", 1, "content", 0), ["type", "text", "image_url"]),
    (("messages", 1, "content", 1), ["type", "image_url"]),
    (("messages", 1, "content", 1, "image_url"), ["url", "detail"]),
    (("messages", 2), ["role", "content", "tool_calls", "name", "audio", "parsed"]),
    (("messages", 2, "tool_calls", 0), ["id", "type", "function", "index"]),
    (("messages", 2, "tool_calls", 0, "function"), ["name", "arguments", "parsed_arguments"]),
    (("messages", 3), ["role", "content", "tool_call_id", "name"]),
    (("tools", 0), ["type", "function"]),
    (("tools", 0, "function"), ["name", "description", "parameters", "strict"]),
    (("tool_choice",), ["type", "function"]),
    (("tool_choice", "function"), ["name"]),
    (("response_format",), ["type", "json_schema"]),
    (("response_format", "json_schema"), ["name", "description", "schema", "schema_", "strict"]),
    (("stream_options",), ["include_usage", "include_obfuscation"]),
    (
        ("horde",),
        [
            "conformance",
            "openai_guards",
            "max_kudos",
            "max_context_length",
            "trusted_workers",
            "slow_workers",
            "workers",
            "worker_blacklist",
            "include_reasoning",
            "availability_mode",
        ],
    ),
]


@st.composite
def mutation(draw: Callable[..., Any]) -> tuple[tuple[Any, ...], str, Any]:
    parent, keys = draw(st.sampled_from(SLOTS))
    key = draw(st.sampled_from(keys) | st.text(max_size=8))
    return parent, key, draw(json_values)


def apply(body: dict[str, Any], parent: tuple[Any, ...], key: str, value: Any) -> None:
    target: Any = body
    for step in parent:
        target = target[step]
    target[key] = value


def check_front_answer(raw: bytes) -> None:
    """The front answers a payload it can send, or a 4xx OpenAI error envelope with a request path as param."""
    try:
        request = read_chat_request(raw)
    except OpenAIError as error:
        assert 400 <= error.status < 500  # noqa: PT017 - a property check: a refusal is one allowed outcome, not the expected one
        envelope = OpenAIErrorEnvelope.model_validate(error.envelope())
        assert envelope.error.type == "invalid_request_error"
        assert envelope.error.code in {"BadRequest", "UnsupportedChatParameter", "ChatRequestConflict"}
        param = envelope.error.param or ""
        # A pydantic-internal location part (a union tag, a member label) is never in the param, unless the client
        # itself sent a key spelled that way.
        internal = (*UNION_TAGS, "list[", "literal[", "function-", "[key]", "tagged-union")
        assert not any(marker in param and marker.encode() not in raw for marker in internal)
        json.loads(dumps(error.envelope()))
        return
    for stream_progress in (False, True):
        payload = build_native_payload(request, stream_progress=stream_progress)
        assert json.loads(dumps(payload))["models"] == request.requested_models


@pytest.fixture(autouse=True)
def _quiet_logs() -> Any:
    logger.disable("chat")
    yield
    logger.enable("chat")


def test_base_body_is_accepted() -> None:
    read_chat_request(json.dumps(base_body()).encode())


@PROPERTY_SETTINGS
@given(st.lists(mutation(), min_size=1, max_size=3))
def test_arbitrary_values_at_every_key(mutations: list[tuple[tuple[Any, ...], str, Any]]) -> None:
    """ref: request-keys.2, parameter-screening.1, parameter-screening.3, parameter-screening.10,
    value-and-contract-validation.2, message-roles.3"""
    body = copy.deepcopy(base_body())
    for parent, key, value in mutations:
        try:
            apply(body, parent, key, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced the parent object
    check_front_answer(json.dumps(body).encode())


@PROPERTY_SETTINGS
@given(st.dictionaries(st.sampled_from(TOP_LEVEL_KEYS) | st.text(max_size=8), json_values, max_size=8))
def test_arbitrary_top_level_objects(extra: dict[str, Any]) -> None:
    """ref: request-keys.2, parameter-screening.2, model-selection.1"""
    check_front_answer(json.dumps(extra).encode())
    check_front_answer(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], **extra}).encode())


@PROPERTY_SETTINGS
@given(json_values)
def test_arbitrary_json_bodies(value: Any) -> None:
    """ref: request-keys.3"""
    check_front_answer(json.dumps(value).encode())


@PROPERTY_SETTINGS
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_arbitrary_bytes(raw: bytes) -> None:
    """ref: request-keys.3"""
    check_front_answer(raw)
