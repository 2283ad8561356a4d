"""The response shape end to end: completions and buffered streams read with the official OpenAI SDK's own types.

Reference sections: Assistant message and adjustments, Reasoning and usage, Model and fingerprint, Buffered stream
events, Completion without a generation, Kudos cap. A real devhorde (scenario :data:`SHAPE_SCENARIO`) serves the
native routes; the front runs under uvicorn. Streams go to a second front started without Redis, which delivers every
stream whole (reference: Relayed deltas), so the buffered event order is what is read. Each completion and chunk is
also validated against the front's response models and must serialize back to the JSON the front sent.
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from chat.protocol.chat_request import ChatCompletionChunk, ChatCompletionResponse
from chat.rendering.completion import EMPTY_REPLY_NOTICE, REASONING_ONLY_NOTICE
from tests.conftest import LiveStack, Process, start_front

pytestmark = pytest.mark.integration

# Worker ids of the scenario, new in each process: no two devhordes of a parallel run (pytest-xdist) share one.
PLAIN_ID = str(uuid.uuid4())
REASONER_ID = str(uuid.uuid4())
THINKER_ID = str(uuid.uuid4())
FIXED_REPLY = "Tides rise and fall about twice a day."
STRICT = "prompt_overflow_refused"
TOOL_FEATURES = ["tools", "tool_choice_enforced", "single_tool_call_enforced", STRICT]
FAST = {"time_to_first_token_seconds": 0.01, "tokens_per_second": 2000, "post_interval_seconds": 0.01}

SHAPE_SCENARIO: dict[str, Any] = {
    "name": "response-shape",
    "description": "One worker per response-shape branch (tests/integration/test_response_shape.py).",
    "known_models": ["shape/first-9b"],
    "queue_position_delay_seconds": 0,
    "kudos_per_token": 0.215,
    "workers": [
        # Text only, every count reported; also the second listed model of a models request.
        {
            "name": "plain-1",
            "id": PLAIN_ID,
            "model": "shape/plain-2b",
            "reply_style": "fixed",
            "fixed_reply": FIXED_REPLY,
            "max_length": 1024,
            **FAST,
        },
        # Reasoning and text, every count reported.
        {
            "name": "reasoner-1",
            "id": REASONER_ID,
            "model": "shape/reasoner-8b",
            "reasoning": "always",
            "features": ["reasoning_effort", STRICT],
            "reply_words": 20,
            "max_length": 2048,
            **FAST,
        },
        # Reasoning and no text (a reasoning-only reply).
        {
            "name": "thinker-1",
            "id": THINKER_ID,
            "model": "shape/thinker-8b",
            "reasoning": "always",
            "reasoning_only": True,
            "features": ["reasoning_effort", STRICT],
            "max_length": 2048,
            **FAST,
        },
        # No text, no reasoning, no calls.
        {"name": "empty-1", "model": "shape/empty-2b", "empty_reply": True, **FAST},
        # Reasoning and a long reply, no counts reported, a small declared limit (the Horde lowers max_tokens).
        {
            "name": "mute-1",
            "model": "shape/mute-2b",
            "reasoning": "always",
            "reply_words": 200,
            "max_length": 40,
            "report_usage": [],
            **FAST,
        },
        # Whitespace only: not visible text.
        {"name": "blank-1", "model": "shape/blank-2b", "reply_style": "fixed", "fixed_reply": " \n\t ", **FAST},
        # Reasoning and text; prompt and completion counts reported, the reasoning count not.
        {
            "name": "half-1",
            "model": "shape/half-8b",
            "reasoning": "always",
            "features": ["reasoning_effort", STRICT],
            "reply_words": 20,
            "report_usage": ["prompt_tokens", "completion_tokens"],
            **FAST,
        },
        # Tool calls (the simulator sends tool calls without text).
        {"name": "tools-1", "model": "shape/tools-7b", "features": TOOL_FEATURES, **FAST},
        # Done and not faulted without a generation.
        {"name": "ghost-1", "model": "shape/ghost-2b", **FAST, "done_without_generation": True},
        # Reads done: true with processing: 1 while it works, then finishes.
        {
            "name": "flicker-1",
            "model": "shape/flicker-2b",
            "reply_style": "fixed",
            "fixed_reply": FIXED_REPLY,
            "done_while_processing": True,
            "time_to_first_token_seconds": 1.0,
            "tokens_per_second": 4,
            "post_interval_seconds": 0.5,
        },
        # Slow enough for a native cancel while the front waits.
        {"name": "slow-1", "model": "shape/slow-2b", "time_to_first_token_seconds": 5.0, "tokens_per_second": 2},
    ],
}

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
PROMPT = [{"role": "user", "content": "Tell me about tides."}]


def fingerprint(worker_id: str, model: str) -> str:
    """fp_ + the first 10 hex characters of SHA-256 over the worker id followed by the model."""
    return "fp_" + hashlib.sha256(f"{worker_id}{model}".encode()).hexdigest()[:10]


def client_for(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="0000000000", max_retries=0, timeout=30)


@pytest.fixture
def shape(stack: LiveStack) -> LiveStack:
    """The live stack serving :data:`SHAPE_SCENARIO` (the default scenario comes back after the test)."""
    stack.put_scenario(SHAPE_SCENARIO)
    return stack


@pytest.fixture(scope="module")
def buffered_front(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second front on the same devhorde without Redis: every stream is delivered whole. Yields its /v1 URL."""
    process: Process
    process, base = start_front(tmp_path_factory.mktemp("buffered-front"), live_stack.horde_url, redis=False)
    try:
        yield f"{base}/v1"
    finally:
        process.stop()


def create(stack: LiveStack, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """A non-streamed completion through the SDK: ``(the SDK's ChatCompletion, the JSON the front sent)``.

    The JSON is validated against ``chat.protocol.chat_request.ChatCompletionResponse`` and must serialize back
    unchanged.
    """
    raw = client_for(stack.openai_base_url).chat.completions.with_raw_response.create(**kwargs)
    body = raw.http_response.json()
    validated = ChatCompletionResponse.model_validate(copy.deepcopy(body))
    assert validated.model_dump(mode="json", exclude_unset=True) == body
    return raw.parse(), body


def stream(base_url: str, **kwargs: Any) -> list[Any]:
    """Every chunk of a streamed completion read with the SDK, each validated against ``ChatCompletionChunk``."""
    chunks = list(client_for(base_url).chat.completions.create(stream=True, **kwargs))
    for chunk in chunks:
        sent = chunk.to_dict()
        validated = ChatCompletionChunk.model_validate(copy.deepcopy(sent))
        assert validated.model_dump(mode="json", exclude_unset=True) == sent
    return chunks


def native_status(stack: LiveStack, completion_id: str) -> dict[str, Any]:
    """The devhorde's native status of the request behind an OpenAI completion id."""
    request_id = completion_id.removeprefix("chatcmpl-")
    response = httpx.get(
        f"{stack.horde_url}/v2/generate/chat/status/{request_id}", headers={"apikey": "0000000000"}, timeout=5
    )
    response.raise_for_status()
    return response.json()


def native_generation(stack: LiveStack, completion_id: str) -> dict[str, Any]:
    return native_status(stack, completion_id)["generations"][0]


# ---------------------------------------------------------------------------------------------------------------------
# Completions


def test_text_completion_with_reported_counts(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.3, model-and-fingerprint.1,
    model-and-fingerprint.4, reasoning-and-usage.7, reasoning-and-usage.17, response-shape.1"""
    completion, body = create(shape, model="shape/plain-2b", messages=PROMPT, max_tokens=64)
    generation = native_generation(shape, completion.id)
    choice = completion.choices[0]
    assert completion.object == "chat.completion"
    assert completion.model == "shape/plain-2b"
    assert completion.system_fingerprint == fingerprint(PLAIN_ID, "shape/plain-2b")
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content == FIXED_REPLY
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert choice.model_extra == {"native_finish_reason": "eos_token"}
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        generation["prompt_tokens"],
        generation["completion_tokens"],
        generation["prompt_tokens"] + generation["completion_tokens"],
    )
    assert completion.usage.completion_tokens_details is None
    assert completion.model_extra == {}
    assert body["choices"][0]["message"] == {"role": "assistant", "content": FIXED_REPLY}


def test_reasoning_and_text_completion(shape: LiveStack) -> None:
    """ref: reasoning-and-usage.1, reasoning-and-usage.2, reasoning-and-usage.3, reasoning-and-usage.4,
    reasoning-and-usage.17"""
    completion, _ = create(shape, model="shape/reasoner-8b", messages=PROMPT, max_tokens=512)
    generation = native_generation(shape, completion.id)
    message = completion.choices[0].message
    assert message.content == generation["message"]["content"] and message.content.strip()
    assert message.model_extra == {"reasoning_content": generation["message"]["reasoning_content"]}
    assert message.model_extra["reasoning_content"] not in message.content
    assert completion.usage.completion_tokens_details.reasoning_tokens == generation["reasoning_tokens"] > 0
    assert completion.usage.completion_tokens == generation["completion_tokens"]
    assert completion.system_fingerprint == fingerprint(REASONER_ID, "shape/reasoner-8b")
    assert completion.model_extra == {}


def test_reasoning_hidden_keeps_the_reasoning_count(shape: LiveStack) -> None:
    """ref: reasoning-and-usage.2, reasoning-and-usage.6"""
    completion, body = create(
        shape,
        model="shape/reasoner-8b",
        messages=PROMPT,
        max_tokens=512,
        extra_body={"horde": {"include_reasoning": False}},
    )
    generation = native_generation(shape, completion.id)
    assert generation["message"]["reasoning_content"]
    assert completion.choices[0].message.model_extra == {}
    assert "reasoning_content" not in body["choices"][0]["message"]
    assert completion.usage.completion_tokens_details.reasoning_tokens == generation["reasoning_tokens"]


def test_reasoning_only_completion_has_a_notice(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.4, reasoning-and-usage.2,
    reasoning-and-usage.4, completion-attributes.5"""
    completion, _ = create(shape, model="shape/thinker-8b", messages=PROMPT, max_tokens=512)
    generation = native_generation(shape, completion.id)
    choice = completion.choices[0]
    assert choice.message.content == ""
    assert choice.message.model_extra["reasoning_content"] == generation["message"]["reasoning_content"]
    assert choice.finish_reason == "stop"
    assert completion.model_extra["x_horde"] == {"notice": REASONING_ONLY_NOTICE}
    assert completion.usage.completion_tokens_details.reasoning_tokens == generation["reasoning_tokens"]


def test_reasoning_only_at_the_limit_has_the_length_notice(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.4, completion-attributes.5, reasoning-and-usage.13"""
    completion, _ = create(shape, model="shape/thinker-8b", messages=PROMPT, max_tokens=16)
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason, choice.model_extra["native_finish_reason"]) == (
        "",
        "length",
        "length",
    )
    assert completion.model_extra["x_horde"] == {
        "notice": "The reply has reasoning but no visible text and no tool calls. The worker stopped at the "
        "completion limit of 16 tokens; retry with a higher max_tokens or a lower reasoning_effort."
    }
    assert completion.usage.completion_tokens_details.reasoning_tokens == 16


def test_empty_reply_has_a_notice_and_no_reasoning_count(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.4, reasoning-and-usage.7"""
    completion, body = create(shape, model="shape/empty-2b", messages=PROMPT)
    assert completion.choices[0].message.content == ""
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model_extra["x_horde"] == {"notice": EMPTY_REPLY_NOTICE}
    assert completion.usage.completion_tokens_details is None
    assert "completion_tokens_details" not in body["usage"]


def test_whitespace_reply_is_not_visible_text(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.4, completion-attributes.3"""
    completion, _ = create(shape, model="shape/blank-2b", messages=PROMPT)
    assert completion.choices[0].message.content == " \n\t "
    assert completion.model_extra["x_horde"] == {"notice": EMPTY_REPLY_NOTICE}


def test_reported_completion_with_estimated_reasoning(shape: LiveStack) -> None:
    """ref: reasoning-and-usage.4, reasoning-and-usage.5, reasoning-and-usage.17"""
    completion, _ = create(shape, model="shape/half-8b", messages=PROMPT, max_tokens=512)
    generation = native_generation(shape, completion.id)
    assert "reasoning_tokens" not in generation
    assert completion.usage.prompt_tokens == generation["prompt_tokens"]
    assert completion.usage.completion_tokens == generation["completion_tokens"]
    reasoning = generation["message"]["reasoning_content"]
    assert completion.usage.completion_tokens_details.reasoning_tokens == math.ceil(len(reasoning) / 4)
    assert completion.model_extra["x_horde"] == {"estimated_usage": True}


def test_tool_calls_without_text(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.2,
    assistant-message-and-adjustments.3"""
    completion, body = create(
        shape,
        model="shape/tools-7b",
        tools=WEATHER_TOOLS,
        tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather and the time in Oslo?"}],
    )
    generation = native_generation(shape, completion.id)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert body["choices"][0]["message"]["content"] is None
    submitted = generation["message"]["tool_calls"]
    assert submitted
    assert [
        (call.id, call.type, call.function.name, call.function.arguments) for call in choice.message.tool_calls
    ] == [(call["id"], "function", call["function"]["name"], call["function"]["arguments"]) for call in submitted]
    assert body["choices"][0]["message"]["tool_calls"] == submitted
    assert "x_horde" not in body


def test_lowered_limit_caps_the_estimates(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.4, reasoning-and-usage.5, reasoning-and-usage.8, reasoning-and-usage.9,
    reasoning-and-usage.11"""
    completion, body = create(shape, model="shape/mute-2b", messages=PROMPT, max_tokens=100, max_completion_tokens=90)
    status = native_status(shape, completion.id)
    generation = status["generations"][0]
    assert {"prompt_tokens", "completion_tokens", "reasoning_tokens"}.isdisjoint(generation)
    assert status["context_adjustments"] == [{"kind": "worker_max_length", "requested": 90, "applied": 40}]
    message = generation["message"]
    reasoning, text = message["reasoning_content"], message["content"]
    assert math.ceil(len(reasoning + text) / 4) > 40
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 40
    assert completion.usage.completion_tokens_details.reasoning_tokens == min(40, math.ceil(len(reasoning) / 4))
    assert completion.usage.prompt_tokens == math.ceil(len(PROMPT[0]["content"]) / 4)
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 40
    assert completion.model_extra["x_horde"] == {
        "context_adjustments": [{"kind": "worker_max_length", "requested": 90, "applied": 40}],
        "estimated_usage": True,
    }
    assert body["x_horde"]["context_adjustments"] == status["context_adjustments"]


def test_lowered_limit_with_reported_counts(shape: LiveStack) -> None:
    """ref: assistant-message-and-adjustments.4, reasoning-and-usage.17"""
    completion, _ = create(shape, model="shape/plain-2b", messages=PROMPT, max_tokens=2000)
    generation = native_generation(shape, completion.id)
    assert completion.model_extra["x_horde"] == {
        "context_adjustments": [{"kind": "worker_max_length", "requested": 2000, "applied": 1024}]
    }
    assert completion.usage.completion_tokens == generation["completion_tokens"]
    assert completion.usage.prompt_tokens == generation["prompt_tokens"]


def test_models_request_served_by_its_second_model(shape: LiveStack) -> None:
    """ref: model-and-fingerprint.1, model-and-fingerprint.2, model-and-fingerprint.4, model-selection.2,
    model-selection.3"""
    completion, _ = create(
        shape, model=openai.omit, messages=PROMPT, extra_body={"models": ["shape/first-9b", "shape/plain-2b"]}
    )
    native = {entry["id"]: entry for entry in shape.native_requests()}[completion.id.removeprefix("chatcmpl-")]
    assert native["payload"]["models"] == ["shape/first-9b", "shape/plain-2b"]
    assert completion.model == "shape/plain-2b"
    assert completion.system_fingerprint == fingerprint(PLAIN_ID, "shape/plain-2b")
    assert completion.choices[0].message.content == FIXED_REPLY


# ---------------------------------------------------------------------------------------------------------------------
# Buffered streams


def deltas(chunks: list[Any]) -> list[dict[str, Any] | None]:
    return [chunk.choices[0].delta.to_dict() if chunk.choices else None for chunk in chunks]


def test_buffered_stream_reasoning_text_finish_and_usage(shape: LiveStack, buffered_front: str) -> None:
    """ref: buffered-stream-events.2, buffered-stream-events.3, buffered-stream-events.5, buffered-stream-events.7,
    buffered-stream-events.11, buffered-stream-events.12, buffered-stream-events.13, model-and-fingerprint.6"""
    chunks = stream(
        buffered_front,
        model="shape/reasoner-8b",
        messages=PROMPT,
        max_tokens=512,
        stream_options={"include_usage": True},
    )
    generation = native_generation(shape, chunks[0].id)
    message = generation["message"]
    assert deltas(chunks) == [
        {"role": "assistant"},
        {"reasoning_content": message["reasoning_content"]},
        {"content": message["content"]},
        {},
        None,
    ]
    assert chunks[1].choices[0].delta.model_extra == {"reasoning_content": message["reasoning_content"]}
    assert [chunk.choices[0].finish_reason for chunk in chunks[:4]] == [None, None, None, "stop"]
    assert chunks[3].choices[0].model_extra == {"native_finish_reason": "eos_token", "x_horde": {}}
    assert chunks[4].choices == []
    assert chunks[4].usage.completion_tokens == generation["completion_tokens"]
    assert chunks[4].usage.completion_tokens_details.reasoning_tokens == generation["reasoning_tokens"]
    assert {(c.id, c.model, c.system_fingerprint, c.object) for c in chunks} == {
        (chunks[0].id, "shape/reasoner-8b", fingerprint(REASONER_ID, "shape/reasoner-8b"), "chat.completion.chunk")
    }
    assert [chunk.usage for chunk in chunks[:4]] == [None] * 4


def test_buffered_stream_hides_reasoning_and_ends_without_usage(shape: LiveStack, buffered_front: str) -> None:
    """ref: buffered-stream-events.5, buffered-stream-events.12, reasoning-and-usage.2"""
    chunks = stream(
        buffered_front,
        model="shape/reasoner-8b",
        messages=PROMPT,
        max_tokens=512,
        extra_body={"horde": {"include_reasoning": False}},
    )
    generation = native_generation(shape, chunks[0].id)
    assert deltas(chunks) == [{"role": "assistant"}, {"content": generation["message"]["content"]}, {}]


def test_buffered_stream_tool_calls_each_whole_with_index(shape: LiveStack, buffered_front: str) -> None:
    """ref: buffered-stream-events.9, buffered-stream-events.10, buffered-stream-events.11"""
    chunks = stream(
        buffered_front,
        model="shape/tools-7b",
        tools=WEATHER_TOOLS,
        tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather and the time in Oslo?"}],
        stream_options={"include_usage": True},
    )
    submitted = native_generation(shape, chunks[0].id)["message"]["tool_calls"]
    assert len(submitted) == 2
    assert deltas(chunks) == [
        {"role": "assistant"},
        {"tool_calls": [{"index": index, **call} for index, call in enumerate(submitted)]},
        {},
        None,
    ]
    calls = chunks[1].choices[0].delta.tool_calls
    assert [(c.index, c.id, c.type, c.function.name, c.function.arguments) for c in calls] == [
        (i, call["id"], "function", call["function"]["name"], call["function"]["arguments"])
        for i, call in enumerate(submitted)
    ]
    assert chunks[1].choices[0].delta.content is None
    assert chunks[2].choices[0].finish_reason == "tool_calls"


def test_buffered_stream_reasoning_only_and_empty(shape: LiveStack, buffered_front: str) -> None:
    """ref: buffered-stream-events.5, buffered-stream-events.7, buffered-stream-events.11,
    assistant-message-and-adjustments.4"""
    chunks = stream(buffered_front, model="shape/thinker-8b", messages=PROMPT, max_tokens=512)
    reasoning = native_generation(shape, chunks[0].id)["message"]["reasoning_content"]
    assert deltas(chunks) == [{"role": "assistant"}, {"reasoning_content": reasoning}, {}]
    assert chunks[-1].choices[0].model_extra["x_horde"] == {"notice": REASONING_ONLY_NOTICE}
    assert {chunk.system_fingerprint for chunk in chunks} == {fingerprint(THINKER_ID, "shape/thinker-8b")}

    chunks = stream(buffered_front, model="shape/empty-2b", messages=PROMPT)
    assert deltas(chunks) == [{"role": "assistant"}, {}]
    assert chunks[-1].choices[0].model_extra["x_horde"] == {"notice": EMPTY_REPLY_NOTICE}


def test_buffered_stream_models_request_and_lowered_limit(shape: LiveStack, buffered_front: str) -> None:
    """ref: model-and-fingerprint.2, model-and-fingerprint.6, assistant-message-and-adjustments.4"""
    chunks = stream(
        buffered_front,
        model=openai.omit,
        messages=PROMPT,
        max_tokens=2000,
        extra_body={"models": ["shape/first-9b", "shape/plain-2b"]},
    )
    assert {(c.model, c.system_fingerprint) for c in chunks} == {
        ("shape/plain-2b", fingerprint(PLAIN_ID, "shape/plain-2b"))
    }
    assert deltas(chunks) == [{"role": "assistant"}, {"content": FIXED_REPLY}, {}]
    assert chunks[-1].choices[0].model_extra["x_horde"] == {
        "context_adjustments": [{"kind": "worker_max_length", "requested": 2000, "applied": 1024}]
    }


# ---------------------------------------------------------------------------------------------------------------------
# Completion without a generation


def wait_for_cancel(stack: LiveStack, request_id: str) -> dict[str, Any]:
    """The devhorde's record of ``request_id`` once the front's cancel reached it (the cancel runs in the
    background after the response)."""
    deadline = time.monotonic() + 15
    while True:
        native = {entry["id"]: entry for entry in stack.native_requests()}[request_id]
        if native["cancel_requests"] >= 1 or time.monotonic() > deadline:
            return native
        time.sleep(0.1)


def test_done_without_a_generation_is_502_and_cancelled(shape: LiveStack) -> None:
    """ref: completion-without-a-generation.1, completion-without-a-generation.2, completion-without-a-generation.3"""
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(shape.openai_base_url).chat.completions.create(model="shape/ghost-2b", messages=PROMPT)
    error = caught.value
    assert error.status_code == 502
    assert error.code == "ChatRequestNoGeneration"
    assert error.type == "api_error"
    request_id = error.body["metadata"]["request_id"]
    assert error.body["message"] == ("The Horde finished the request without a generation. The request was cancelled.")
    assert native_status(shape, f"chatcmpl-{request_id}")["generations"] == []
    assert wait_for_cancel(shape, request_id)["cancel_requests"] >= 1


def test_done_without_a_generation_in_a_stream_is_an_error_event(shape: LiveStack, buffered_front: str) -> None:
    """ref: completion-without-a-generation.2, stream-errors.3"""
    with pytest.raises(openai.APIError) as caught:
        stream(buffered_front, model="shape/ghost-2b", messages=PROMPT)
    assert caught.value.code == "ChatRequestNoGeneration"


def test_done_while_still_processing_is_unfinished(shape: LiveStack) -> None:
    """ref: completion-without-a-generation.1"""
    completion, _ = create(shape, model="shape/flicker-2b", messages=PROMPT)
    assert completion.choices[0].message.content == FIXED_REPLY
    assert native_status(shape, completion.id)["generations"]


def test_native_cancel_while_waiting_is_502(shape: LiveStack) -> None:
    """ref: completion-without-a-generation.2"""
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            client_for(shape.openai_base_url).chat.completions.create(model="shape/slow-2b", messages=PROMPT)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 10
    request_id = None
    while request_id is None and time.monotonic() < deadline:
        waiting = [e for e in shape.native_requests() if e["models"] == ["shape/slow-2b"] and e["state"] != "done"]
        request_id = waiting[-1]["id"] if waiting else None
        time.sleep(0.05)
    assert request_id is not None
    httpx.delete(
        f"{shape.horde_url}/v2/generate/chat/status/{request_id}", headers={"apikey": "0000000000"}, timeout=5
    ).raise_for_status()
    thread.join(30)
    error = outcome["error"]
    assert isinstance(error, openai.InternalServerError)
    assert (error.status_code, error.code, error.body["metadata"]["request_id"]) == (
        502,
        "ChatRequestNoGeneration",
        request_id,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Kudos cap


def test_kudos_cap_refusal_through_the_sdk(shape: LiveStack) -> None:
    """ref: kudos-cap.1, kudos-cap.2, kudos-cap.4, kudos-cap.5"""
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(shape.openai_base_url).chat.completions.create(
            model="shape/plain-2b", messages=PROMPT, max_tokens=1000, extra_body={"horde": {"max_kudos": 1}}
        )
    error = caught.value
    assert error.status_code == 400
    assert (error.type, error.code, error.param) == ("invalid_request_error", "max_kudos_exceeded", "horde.max_kudos")
    assert error.body == {
        "message": "The request's kudos estimate at current pricing is 215, above its horde.max_kudos of 1. "
        "The estimate assumes the full max_tokens is generated.",
        "type": "invalid_request_error",
        "param": "horde.max_kudos",
        "code": "max_kudos_exceeded",
        "metadata": {"rc": "ChatKudosCapExceeded", "kudos_estimate": 215, "max_kudos": 1},
    }


def test_kudos_cap_with_fractional_values(shape: LiveStack) -> None:
    """ref: kudos-cap.2"""
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(shape.openai_base_url).chat.completions.create(
            model="shape/plain-2b", messages=PROMPT, max_tokens=50, extra_body={"horde": {"max_kudos": 0.5}}
        )
    assert caught.value.body["metadata"] == {"rc": "ChatKudosCapExceeded", "kudos_estimate": 10.75, "max_kudos": 0.5}
    assert caught.value.body["message"].startswith(
        "The request's kudos estimate at current pricing is 10.75, above its horde.max_kudos of 0.5."
    )


def test_max_kudos_is_forwarded(shape: LiveStack) -> None:
    """ref: kudos-cap.1"""
    completion, _ = create(
        shape, model="shape/plain-2b", messages=PROMPT, max_tokens=64, extra_body={"horde": {"max_kudos": 500}}
    )
    native = {entry["id"]: entry for entry in shape.native_requests()}[completion.id.removeprefix("chatcmpl-")]
    assert native["payload"]["max_kudos"] == 500
