"""The front end to end through the official OpenAI Python SDK, sync and async, against real processes.

A real uvicorn serves the front, a real devhorde serves the native routes, and both use the Redis on 127.0.0.1:6379.
Every test runs twice: against the native chat routes (``live_stack``) and against the ``text-only`` scenario, where
the front reaches the models through the Horde's text generation API (``text_live_stack``).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.conftest import LiveStack

pytestmark = pytest.mark.integration

PROMPT = [{"role": "user", "content": "Tell me about lighthouses."}]


@pytest.fixture
def stack(any_api_stack: LiveStack) -> LiveStack:
    """This module's tests run against the native stack and the text-only stack."""
    return any_api_stack


def sync_client(stack: LiveStack, api_key: str = "0000000000") -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key=api_key, max_retries=0, timeout=30)


def async_client(stack: LiveStack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=30)


def served_model(stack: LiveStack) -> str:
    """A model of the default scenario that any plain text request can use."""
    return stack.default_scenario_text_model  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _text_model(stack: LiveStack) -> None:
    cards = httpx.get(f"{stack.openai_base_url}/models", timeout=10).json()["data"]
    plain = [
        card["id"]
        for card in cards
        # a text API card lists the prompted tools (x_horde.tool_calls), which every text model takes
        if (
            card["x_horde"]["tool_calls"] == "prompted"
            or not {"tools", "reasoning_effort"} & set(card["supported_parameters"])
        )
        and card["architecture"]["input_modalities"] == ["text"]
    ]
    stack.default_scenario_text_model = (plain or [cards[0]["id"]])[0]  # type: ignore[attr-defined]


def test_models_list_through_the_sdk(stack: LiveStack) -> None:
    """This module drives the front through the official OpenAI Python SDK.
    ref: contract-tests.1, model-card-fields.2"""
    models = sync_client(stack).models.list()
    ids = [model.id for model in models]
    assert len(ids) >= 3
    assert ids == sorted(ids)
    native = httpx.get(f"{stack.horde_url}/v2/status/models", params={"type": "text"}).json()
    if stack.api == "text":
        assert not any("chat" in entry for entry in native)
        counts = {entry["name"]: entry["count"] for entry in native if entry["count"] > 0}
        assert set(ids) == set(counts)
        workers = httpx.get(f"{stack.horde_url}/v2/workers", params={"type": "text"}).json()
        for model in models:
            extra = model.model_extra or {}
            # the text API's model list declares no limits: the largest its online workers declare (/v2/workers)
            serving = [worker for worker in workers if model.id in worker["models"]]
            declared = (
                max(worker["max_context_length"] for worker in serving),
                max(worker["max_length"] for worker in serving),
            )
            assert (extra["context_length"], extra["top_provider"]["max_completion_tokens"]) == declared
            assert extra["supported_parameters"] == [
                "max_tokens",
                "temperature",
                "top_p",
                "stop",
                "tools",
                "tool_choice",
                "parallel_tool_calls",
                "response_format",
                "structured_outputs",
            ]
            assert (extra["x_horde"]["api"], extra["x_horde"]["workers"]) == ("text", counts[model.id])
            assert extra["x_horde"]["tool_calls"] == "prompted"
        return
    served = {entry["name"]: entry["chat"] for entry in native if entry.get("chat") and entry["chat"]["workers"] > 0}
    assert set(ids) == set(served)
    for model in models:
        extra = model.model_extra or {}
        assert model.object == "model"
        assert extra["context_length"] == served[model.id]["max_context_length"]
        assert extra["top_provider"]["max_completion_tokens"] == served[model.id]["max_length"]
        assert extra["supported_parameters"][:4] == ["max_tokens", "temperature", "top_p", "stop"]
        assert extra["x_horde"]["workers"] == served[model.id]["workers"]
        assert extra["x_horde"]["api"] == "chat"


def test_models_retrieve_through_the_sdk(stack: LiveStack) -> None:
    """``models.retrieve`` of a listed id (``org/name``, its slash sent as ``%2F``) is the list's card, field for
    field; an unknown id is the SDK's ``NotFoundError`` with OpenAI's ``model_not_found``.

    ref: model-card-fields.2"""
    client = sync_client(stack)
    listed = {model.id: model for model in client.models.list()}
    model_id = served_model(stack)
    assert "/" in model_id
    retrieved = client.models.retrieve(model_id)
    assert retrieved.model_dump() == listed[model_id].model_dump()
    assert (retrieved.id, retrieved.object, retrieved.owned_by) == (model_id, "model", "aihorde")
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nobody/serves-this")
    assert missing.value.status_code == 404
    assert missing.value.code == "model_not_found"
    assert missing.value.body == {
        "message": "The model `nobody/serves-this` does not exist or you do not have access to it.",
        "type": "not_found_error",
        "param": None,
        "code": "model_not_found",
    }


def test_plain_completion_sync(stack: LiveStack) -> None:
    """A non-streamed completion reads back with the SDK's own types, and the key reaches the Horde as apikey."""
    model = served_model(stack)
    completion = sync_client(stack, api_key="sdk-test-key-1").chat.completions.create(
        model=model, messages=PROMPT, max_tokens=48
    )
    assert completion.object == "chat.completion"
    assert completion.model == model
    assert completion.id.startswith("chatcmpl-")
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in {"stop", "length"}
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert completion.system_fingerprint is not None and completion.system_fingerprint.startswith("fp_")
    request_id = completion.id.removeprefix("chatcmpl-")
    native = {entry["id"]: entry for entry in stack.native_requests()}[request_id]
    assert native["apikey"] == "sdk-test-key-1"
    assert native["payload"]["models"] == [model]
    assert native["payload"]["params"]["max_length"] == 48
    assert native["api"] == stack.api
    if stack.api == "text":
        assert "Tell me about lighthouses." in native["payload"]["prompt"]
        assert (completion.model_extra or {})["x_horde"]["api"] == "text"


@pytest.mark.asyncio
async def test_plain_completion_async(stack: LiveStack) -> None:
    model = served_model(stack)
    completion = await async_client(stack).chat.completions.create(model=model, messages=PROMPT, max_tokens=32)
    assert completion.choices[0].message.content
    assert completion.model == model


def test_streamed_completion_with_usage_sync(stack: LiveStack) -> None:
    """ref: buffered-stream-events.3, buffered-stream-events.7, buffered-stream-events.11,
    buffered-stream-events.12, buffered-stream-events.13"""
    model = served_model(stack)
    client = sync_client(stack)
    chunks = list(
        client.chat.completions.create(
            model=model, messages=PROMPT, max_tokens=48, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.strip()
    finishes = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert len(finishes) == 1
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert chunks[-2] is finishes[0]
    assert len({chunk.id for chunk in chunks}) == 1
    assert len({chunk.system_fingerprint for chunk in chunks}) == 1
    # The streamed text is the reply the Horde finished.
    request_id = chunks[0].id.removeprefix("chatcmpl-")
    status = httpx.get(f"{stack.horde_url}/v2/generate/{stack.api}/status/{request_id}").json()
    if stack.api == "text":
        assert text == status["generations"][0]["text"].lstrip()
    else:
        assert text == status["generations"][0]["message"]["content"]


@pytest.mark.asyncio
async def test_streamed_completion_async(stack: LiveStack) -> None:
    model = served_model(stack)
    stream = await async_client(stack).chat.completions.create(model=model, messages=PROMPT, max_tokens=32, stream=True)
    pieces = [chunk async for chunk in stream]
    assert pieces[-1].choices[0].finish_reason in {"stop", "length"}
    assert all(chunk.usage is None for chunk in pieces)


def test_raw_sse_event_order_with_httpx(stack: LiveStack) -> None:
    """The wire format: data events in the reference's order, then data: [DONE]; headers for SSE and CORS.

    ref: buffered-stream-events.2, buffered-stream-events.13, browser-access.1"""
    body = {
        "model": served_model(stack),
        "messages": PROMPT,
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{stack.openai_base_url}/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["access-control-allow-origin"] == "*"
        raw = response.read().decode()
    events = [block for block in raw.split("\n\n") if block]
    data = [block.removeprefix("data: ") for block in events if block.startswith("data: ")]
    assert all(block.startswith(("data: ", ":")) for block in events)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    kinds = []
    for chunk in chunks:
        if not chunk["choices"]:
            kinds.append("usage")
        elif chunk["choices"][0]["finish_reason"]:
            kinds.append("finish")
        else:
            kinds.append(next(iter(chunk["choices"][0]["delta"])))
    assert kinds[0] == "role"
    assert kinds[-2:] == ["finish", "usage"]
    assert set(kinds[1:-2]) <= {"reasoning_content", "content"}


def test_refusal_is_the_sdks_typed_exception(stack: LiveStack) -> None:
    """A refusal reaches the SDK as its typed exception with status, code and param."""
    client = sync_client(stack)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=served_model(stack), messages=[], max_tokens=32)
    assert refused.value.status_code == 400
    assert refused.value.code == "BadRequest"
    assert refused.value.param == "messages"
    with pytest.raises(openai.APIStatusError) as unserved:
        client.chat.completions.create(model="nobody/serves-this", messages=PROMPT, max_tokens=32)
    assert unserved.value.status_code in {400, 404, 503}
    assert unserved.value.body is not None and "code" in unserved.value.body


def test_healthz(stack: LiveStack) -> None:
    response = httpx.get(f"{stack.front_url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
