"""Each library's default SECOND turn, end to end (issue 26: the client libraries' default paths hold for a whole
conversation). The first turn is sent as the library sends it, and the second turn carries the first turn's answer
back the way the library does: the Vercel AI SDK's ``openai(model)`` (AI SDK 6 and 7, ``@ai-sdk/openai``'s Responses
provider) as an ``item_reference`` to the stored assistant message, openai-python's Responses API with
``previous_response_id``, LangChain's ``ChatOpenAI`` and openai-python's chat completions with the whole history; and
the legacy completions defaults of LangChain's ``OpenAI`` and LlamaIndex's ``OpenAILike``. Every one is served.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conformance.cases import PLAIN_MODEL, langchain_legacy_body, read_stream
from tests.conftest import LiveStack

pytestmark = pytest.mark.integration

KEY = {"Authorization": "Bearer second-turn-key"}
FIRST = "Hello! Tell me about lighthouses."
SECOND = "And who keeps them?"


def ai_sdk_user(text: str) -> dict[str, Any]:
    """A user message as ``@ai-sdk/openai``'s ``convertToOpenAIResponsesInput`` writes it."""
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def create_response(front: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /responses``: the response object, read from ``response.completed`` when streamed."""
    if body.get("stream"):
        with front.stream("POST", "/responses", json=body, headers=KEY) as streamed:
            assert streamed.status_code == 200, streamed.read()
            events = [payload for kind, payload in read_stream(streamed) if kind == "data"]
        assert events[-1]["type"] == "response.completed"
        completed: dict[str, Any] = events[-1]["response"]
        return completed
    reply = front.post("/responses", json=body, headers=KEY)
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()
    return response


def output_text(response: dict[str, Any]) -> str:
    return "".join(part["text"] for item in response["output"] if item["type"] == "message" for part in item["content"])


def native_messages(stack: LiveStack, request_id: str | None = None) -> list[dict[str, Any]]:
    """The messages of the devhorde's native request ``request_id``, or of its latest one when None: a response's id
    is random and names no native request (issue 35), and a worker's tests run one at a time on its own stack."""
    if request_id is None:
        entry = stack.latest_native_request()
    else:
        entry = {entry["id"]: entry for entry in stack.native_requests()}[request_id]
    messages: list[dict[str, Any]] = entry["payload"]["messages"]
    return messages


@pytest.mark.parametrize("stream", [False, True], ids=["generateText", "streamText"])
def test_ai_sdk_openai_provider_second_turn_item_reference(
    front: httpx.Client, conformance: LiveStack, stream: bool
) -> None:
    """AI SDK 6/7 ``openai(model)``: the first turn's assistant output goes back as ``{"type": "item_reference",
    "id": "msg_..."}`` (``store`` is true by default, so the provider sends the stored item's id)."""
    extra = {"stream": True} if stream else {}
    first = create_response(front, {"model": PLAIN_MODEL, "input": [ai_sdk_user(FIRST)], **extra})
    [message_id] = [item["id"] for item in first["output"] if item["type"] == "message"]
    second_body = {
        "model": PLAIN_MODEL,
        "input": [ai_sdk_user(FIRST), {"type": "item_reference", "id": message_id}, ai_sdk_user(SECOND)],
        **extra,
    }
    second = create_response(front, second_body)
    assert second["status"] in {"completed", "incomplete"} and output_text(second).strip()
    assert native_messages(conformance) == [
        {"role": "user", "content": [{"type": "text", "text": FIRST}]},
        {"role": "assistant", "content": output_text(first)},
        {"role": "user", "content": [{"type": "text", "text": SECOND}]},
    ]


def test_openai_python_responses_second_turn_previous_response_id(front: httpx.Client, conformance: LiveStack) -> None:
    """openai-python ``client.responses.create(model=..., previous_response_id=first.id, input=...)``."""
    first = create_response(front, {"model": PLAIN_MODEL, "input": FIRST})
    second = create_response(front, {"model": PLAIN_MODEL, "input": SECOND, "previous_response_id": first["id"]})
    assert second["previous_response_id"] == first["id"]
    assert [m["content"] for m in native_messages(conformance)] == [
        FIRST,
        output_text(first),
        SECOND,
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize(
    "system", [[{"role": "system", "content": "You are a helpful assistant."}], []], ids=["langchain", "openai-python"]
)
def test_chat_completions_second_turn_with_the_history(
    front: httpx.Client, conformance: LiveStack, system: list[dict[str, Any]], stream: bool
) -> None:
    """LangChain ``ChatOpenAI`` (``history.append(llm.invoke(history))``) and openai-python's chat completions send the
    whole history, the assistant's answer as a plain ``assistant`` message."""
    first_body = {"messages": [*system, {"role": "user", "content": FIRST}], "model": PLAIN_MODEL, "stream": False}
    first = front.post("/chat/completions", json=first_body, headers=KEY)
    assert first.status_code == 200, first.text
    answer = first.json()["choices"][0]["message"]["content"]
    history = [*first_body["messages"], {"role": "assistant", "content": answer}, {"role": "user", "content": SECOND}]
    body = {"messages": history, "model": PLAIN_MODEL, "stream": stream}
    if stream:
        with front.stream("POST", "/chat/completions", json=body, headers=KEY) as streamed:
            assert streamed.status_code == 200
            events = read_stream(streamed)
        assert events[-1] == ("done", None)
        chunks = [payload for kind, payload in events if kind == "data"]
        request_id = chunks[0]["id"].removeprefix("chatcmpl-")
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]).strip()
    else:
        second = front.post("/chat/completions", json=body, headers=KEY)
        assert second.status_code == 200, second.text
        request_id = second.json()["id"].removeprefix("chatcmpl-")
    assert native_messages(conformance, request_id) == history


LEGACY_DEFAULT_BODIES: dict[str, dict[str, Any]] = {
    "langchain-openai-legacy": langchain_legacy_body(PLAIN_MODEL, FIRST),
    "llamaindex-openailike-complete": {"model": PLAIN_MODEL, "prompt": FIRST, "temperature": 0.1, "stream": False},
}
"""LangChain's legacy ``OpenAI(...).invoke`` (langchain-openai ``BaseOpenAI._default_params``) and LlamaIndex's
``OpenAILike(...).complete`` (``is_chat_model`` false: ``completions.create(prompt, stream=False, model,
temperature=0.1)``) on their defaults, on a native chat model."""


@pytest.mark.parametrize("name", sorted(LEGACY_DEFAULT_BODIES))
def test_legacy_completion_defaults_complete_on_a_native_model(
    front: httpx.Client, conformance: LiveStack, name: str
) -> None:
    body = LEGACY_DEFAULT_BODIES[name]
    reply = front.post("/completions", json=body, headers=KEY)
    assert reply.status_code == 200, reply.text
    completion = reply.json()
    assert (completion["object"], completion["model"]) == ("text_completion", PLAIN_MODEL)
    assert completion["choices"][0]["text"].strip()
    messages = native_messages(conformance, completion["id"].removeprefix("cmpl-"))
    assert messages == [{"role": "user", "content": FIRST}]
    assert json.dumps(completion).count("text_completion") == 1


def test_langchain_legacy_openai_llm_itself_completes_on_a_native_model(
    front: httpx.Client, conformance: LiveStack
) -> None:
    """LangChain's legacy ``OpenAI`` LLM (langchain-openai), the library itself with its defaults, on a native chat
    model: its body carries ``frequency_penalty``, ``presence_penalty``, ``n`` and ``top_p`` at their defaults, which
    the front drops, and the model is served on the chat route with the prompt as one user message (issue 26,
    items 2 and 3)."""
    from langchain_openai import OpenAI

    llm = OpenAI(base_url=conformance.openai_base_url, api_key="second-turn-key", model=PLAIN_MODEL, max_retries=0)  # type: ignore[arg-type]
    text = llm.invoke(FIRST)
    assert text.strip()
    [entry] = conformance.native_requests()
    assert entry["payload"]["messages"] == [{"role": "user", "content": FIRST}]


def test_langchain_chat_openai_itself_holds_a_conversation(front: httpx.Client, conformance: LiveStack) -> None:
    """LangChain's ``ChatOpenAI``, the library itself: the second ``invoke`` sends the history with the first
    answer as the assistant's message, and the Horde is sent all three turns."""
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=conformance.openai_base_url, api_key="second-turn-key", model=PLAIN_MODEL, max_retries=0)  # type: ignore[arg-type]
    history: list[Any] = [HumanMessage(FIRST)]
    history.append(chat.invoke(history))
    history.append(HumanMessage(SECOND))
    answer = chat.invoke(history)
    assert str(answer.content).strip()
    first, second = conformance.native_requests()
    sent = [(m["role"], m["content"]) for m in second["payload"]["messages"]]
    assert sent == [("user", FIRST), ("assistant", history[1].content), ("user", SECOND)], sent
    assert first["payload"]["messages"] == [{"role": "user", "content": FIRST}]
