"""Request keys end to end through the official OpenAI Python SDK (reference: Request keys, Parameter screening,
Message roles, Model selection, Value and contract validation).

A real uvicorn serves the front and a real devhorde (scenario :data:`KEYS_SCENARIO`) the native routes. The SDK
accumulates its own streamed tool-call reply with ``client.chat.completions.stream(...)`` and replays it as history,
with the fields it adds to such a reply; the front drops them and the request succeeds. Refusals come back as the
SDK's typed exceptions with OpenAI's status, code and param.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, ConfigDict

from tests.conftest import LiveStack

pytestmark = pytest.mark.integration

TOOLS_MODEL = "keys/toolsmith-7b"
TEXT_MODEL = "keys/plain-3b"
FAST = {"time_to_first_token_seconds": 0.01, "tokens_per_second": 2000, "post_interval_seconds": 0.01}

KEYS_SCENARIO: dict[str, Any] = {
    "name": "request-keys",
    "description": "A tool-calling worker and a plain one, both fast (tests/integration/test_request_keys.py).",
    "workers": [
        {
            "name": "keys-tools",
            "model": TOOLS_MODEL,
            "features": [
                "tools",
                "tool_choice_enforced",
                "single_tool_call_enforced",
                "json_schema",
                "structured_output_enforced",
                "prompt_overflow_refused",
            ],
            "threads": 2,
            **FAST,
        },
        {"name": "keys-plain", "model": TEXT_MODEL, "features": ["prompt_overflow_refused"], "threads": 2, **FAST},
    ],
}


class GetWeather(BaseModel):
    """Current weather in a city."""

    model_config = ConfigDict(extra="forbid")

    city: str


@pytest.fixture
def keys(stack: LiveStack) -> LiveStack:
    """The live stack serving :data:`KEYS_SCENARIO` (the default scenario comes back after the test)."""
    stack.put_scenario(KEYS_SCENARIO)
    stack.reset()
    return stack


class Recorder:
    """Keeps the JSON body of every request the SDK sends."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> None:
        if request.content:
            self.bodies.append(json.loads(request.content))


def client_for(stack: LiveStack, recorder: Recorder | None = None) -> openai.OpenAI:
    http_client = httpx.Client(event_hooks={"request": [recorder]} if recorder else {}, timeout=30)
    return openai.OpenAI(
        base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=30, http_client=http_client
    )


def test_sdk_replays_its_own_streamed_tool_call_reply(keys: LiveStack) -> None:
    """The SDK's accumulated streamed reply, replayed as history with ``refusal``, ``audio``, ``annotations``,
    ``function_call``, ``parsed``, ``tool_calls[].index`` and ``function.parsed_arguments``, is accepted, and the
    Horde receives the history without them. ref: message-roles.1, message-roles.2, message-roles.4,
    parameter-screening.5, parameter-screening.8"""
    recorder = Recorder()
    client = client_for(keys, recorder)
    tools = [openai.pydantic_function_tool(GetWeather, name="get_weather")]
    question = {"role": "user", "content": "What is the weather in Paris? Call get_weather."}
    with client.chat.completions.stream(
        model=TOOLS_MODEL, messages=[question], tools=tools, tool_choice="required", max_completion_tokens=64
    ) as stream:
        for _ in stream:
            pass
        first = stream.get_final_completion()
    reply = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert reply.tool_calls, "the worker called the tool"
    call = reply.tool_calls[0]
    assert isinstance(call.function.parsed_arguments, GetWeather)

    # The message exactly as the SDK accumulated it (every field it holds, as the SDK's own serialization writes it).
    accumulated = reply.model_dump(mode="json")
    for key in ("refusal", "audio", "annotations", "function_call", "parsed"):
        assert key in accumulated
    assert "index" in accumulated["tool_calls"][0]
    assert "parsed_arguments" in accumulated["tool_calls"][0]["function"]

    # Replayed both ways users do it: the SDK's message object (the SDK sends the fields it set) and its full dump.
    answer = {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 18, "sky": "clear"}'}
    forwarded = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": call.function.arguments},
            }
        ],
    }
    if reply.content is not None:
        forwarded["content"] = reply.content
    sent_bodies = []
    for replayed in (reply, accumulated):
        recorder.bodies.clear()
        second = client.chat.completions.create(
            model=TOOLS_MODEL, messages=[question, replayed, answer], tools=tools, max_completion_tokens=64
        )
        assert second.choices[0].message.content
        assert second.choices[0].finish_reason == "stop"
        sent_bodies.append(recorder.bodies[-1]["messages"][1])
        assert keys.native_requests()[-1]["payload"]["messages"] == [question, forwarded, answer]

    by_object, by_dump = sent_bodies
    assert "index" in by_object["tool_calls"][0], sorted(by_object)
    assert {"refusal", "audio", "annotations", "function_call", "parsed"} <= set(by_dump)
    assert "index" in by_dump["tool_calls"][0] and "parsed_arguments" in by_dump["tool_calls"][0]["function"]


def test_real_client_shapes_succeed(keys: LiveStack) -> None:
    """Keys real clients send pass: SDK defaults, identifiers, ``name``, ``stream: false``, a string ``stop`` and
    ``max_completion_tokens``. ref: parameter-screening.2, parameter-screening.4, message-roles.1"""
    completion = client_for(keys).chat.completions.create(
        model=TEXT_MODEL,
        messages=[
            {"role": "system", "content": "Be brief.", "name": "rules"},
            {"role": "user", "content": "Hi", "name": "ann"},
        ],
        stream=False,
        stop="\n\n",
        max_completion_tokens=32,
        n=1,
        store=False,
        logprobs=False,
        service_tier="auto",
        user="user-1",
        safety_identifier="hash-1",
        prompt_cache_key="conversation-1",
        metadata={"app": "tests"},
    )
    assert completion.choices[0].message.content
    payload = keys.native_requests()[-1]["payload"]
    assert payload["params"]["max_length"] == 32 and payload["params"]["stop_sequence"] == ["\n\n"]
    for key in ("store", "logprobs", "service_tier", "user", "safety_identifier", "prompt_cache_key", "metadata", "n"):
        assert key not in payload


def test_logit_bias_at_its_default_is_dropped(keys: LiveStack) -> None:
    """``logit_bias`` ``{}`` (SillyTavern's default) through the SDK, streamed and not, and ``null`` in a raw body are
    served, and the Horde never sees the key: a deliberate deviation from the reference, documented in the README.
    ref: parameter-screening.4"""
    recorder = Recorder()
    client = client_for(keys, recorder)
    messages: list[Any] = [{"role": "user", "content": "Hi"}]
    completion = client.chat.completions.create(model=TEXT_MODEL, messages=messages, logit_bias={}, max_tokens=16)
    assert completion.choices[0].message.content
    assert recorder.bodies[-1]["logit_bias"] == {}
    chunks = list(
        client.chat.completions.create(model=TEXT_MODEL, messages=messages, logit_bias={}, max_tokens=16, stream=True)
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    raw = httpx.post(
        f"{keys.openai_base_url}/chat/completions",
        json={"model": TEXT_MODEL, "messages": messages, "logit_bias": None, "max_tokens": 16},
        headers={"Authorization": "Bearer 0000000000"},
        timeout=30,
    )
    assert raw.status_code == 200, raw.text
    assert raw.json()["choices"][0]["message"]["content"]
    sent = keys.native_requests()
    assert len(sent) == 3
    assert all("logit_bias" not in request["payload"] for request in sent)
    assert all("logit_bias" not in request["payload"].get("params", {}) for request in sent)


@pytest.mark.parametrize(
    ("kwargs", "status", "code", "param", "message"),
    [
        pytest.param(
            {"extra_body": {"top_k": 40}},
            400,
            "UnsupportedChatParameter",
            "top_k",
            "Unrecognized request argument supplied: top_k",
            id="unknown-sampler",
        ),
        pytest.param(
            {"logprobs": True},
            400,
            "UnsupportedChatParameter",
            "logprobs",
            "Unsupported value: 'logprobs' does not support true on the AI Horde. Only the default (false) value is "
            "supported.",
            id="no-op-not-default",
        ),
        pytest.param(
            {"logit_bias": {"50256": -100}},
            400,
            "UnsupportedChatParameter",
            "logit_bias",
            "Unrecognized request argument supplied: logit_bias",
            id="logit-bias-not-default",
        ),
        pytest.param(
            {"temperature": 2.5},
            400,
            "UnsupportedChatParameter",
            "temperature",
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 2.5 instead.",
            id="out-of-range",
        ),
        pytest.param(
            {"messages": []},
            400,
            "BadRequest",
            "messages",
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            id="empty-messages",
        ),
        pytest.param(
            {"tool_choice": "auto"},
            400,
            "ChatRequestConflict",
            "tool_choice",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            id="tool-choice-without-tools",
        ),
        pytest.param(
            {
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}
                ]
            },
            400,
            "UnsupportedChatParameter",
            "messages[0].content[0].type=input_audio",
            "Invalid value: 'input_audio'. Supported values are: 'text' and 'image_url'.",
            id="content-part-type",
        ),
    ],
)
def test_refusals_are_the_sdks_typed_exceptions(
    keys: LiveStack, kwargs: dict[str, Any], status: int, code: str, param: str, message: str
) -> None:
    """The front refuses before submitting anything. ref: parameter-screening.2, parameter-screening.3,
    value-and-contract-validation.2, value-and-contract-validation.3, value-and-contract-validation.8,
    message-roles.5"""
    arguments = {"model": TEXT_MODEL, "messages": [{"role": "user", "content": "Hi"}], **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(keys).chat.completions.create(**arguments)
    error = caught.value
    assert (error.status_code, error.type, error.code, error.param, error.body["message"]) == (
        status,
        "invalid_request_error",
        code,
        param,
        message,
    )
    assert keys.native_requests() == []


def test_unanswered_tool_call_is_refused_with_openais_message(keys: LiveStack) -> None:
    """ref: value-and-contract-validation.8"""
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(keys).chat.completions.create(
            model=TOOLS_MODEL, messages=history, tools=[openai.pydantic_function_tool(GetWeather, name="get_weather")]
        )
    assert (caught.value.code, caught.value.param) == ("UnsupportedChatParameter", "messages")
    assert caught.value.body["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
        "The following tool_call_ids did not have response messages: call_abc"
    )


def test_unknown_model_in_models_names_its_entry(keys: LiveStack) -> None:
    """The Horde's UnknownModel message begins with the entry's quoted path; the front reports it as param.
    ref: model-selection.2, model-selection.4, model-selection.5, model-selection.6"""
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(keys).chat.completions.create(
            model=openai.omit,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "Hi"}],
            extra_body={"models": [TEXT_MODEL, "keys/no-such-model"]},
        )
    assert (caught.value.status_code, caught.value.code, caught.value.param) == (400, "UnknownModel", "models[1]")
    assert caught.value.body["message"] == (
        "The model 'keys/no-such-model' at models[1] is not a known text model. GET /v1/models lists the served ones."
    )


def test_models_list_is_forwarded_unchanged(keys: LiveStack) -> None:
    """ref: model-selection.2, model-selection.3"""
    completion = client_for(keys).chat.completions.create(
        model=openai.omit,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Hi"}],
        extra_body={"models": [TOOLS_MODEL, TEXT_MODEL]},
        max_tokens=32,
    )
    assert completion.model in {TOOLS_MODEL, TEXT_MODEL}
    assert keys.native_requests()[-1]["payload"]["models"] == [TOOLS_MODEL, TEXT_MODEL]


def test_unknown_model_sent_as_model_is_reported_at_model(keys: LiveStack) -> None:
    """The front sends ``model`` as a one-entry ``models``; the refusal names the key the client sent.
    ref: model-selection.2, model-selection.6"""
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(keys).chat.completions.create(
            model="keys/no-such-model", messages=[{"role": "user", "content": "Hi"}]
        )
    assert (caught.value.status_code, caught.value.code, caught.value.param) == (400, "UnknownModel", "model")
    assert caught.value.body["message"] == (
        "The model 'keys/no-such-model' is not a known text model. GET /v1/models lists the served ones."
    )
