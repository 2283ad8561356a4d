"""``POST /v1/completions``: keys at OpenAI's defaults are dropped (chat.reading.completions), and a reply of the
native chat route keeps the ``text_completion`` shapes (chat.rendering.text_completion)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from chat.errors import OpenAIError
from chat.reading.completions import read_completion_request
from chat.rendering.sse import DONE_EVENT, KEEPALIVE_COMMENT, data_event
from chat.rendering.text_completion import text_chunk_of_chat, text_completion_of_chat, text_events_of_chat
from tests.conformance.cases import langchain_legacy_body

LANGCHAIN_LEGACY_DEFAULTS: dict[str, Any] = {**langchain_legacy_body("org/m", "Hi"), "best_of": 1, "suffix": None}


def test_keys_at_their_openai_default_are_dropped() -> None:
    request = read_completion_request(json.dumps(LANGCHAIN_LEGACY_DEFAULTS).encode())
    assert request.model_dump(exclude_none=True) == {
        "model": "org/m",
        "prompt": ["Hi"],
        "temperature": 0.7,
        "top_p": 1.0,
        "n": 1,
        "max_tokens": 256,
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "presence_penalty",
            1,
            "Unsupported value: 'presence_penalty' does not support 1 on the AI Horde. Only the "
            "default (0) value is supported.",
        ),
        (
            "logit_bias",
            {"50256": -100},
            "Unsupported value: 'logit_bias' does not support {\"50256\":-100} on the AI "
            "Horde. Only the default ({}) value is supported.",
        ),
        (
            "seed",
            7,
            "Unsupported value: 'seed' does not support 7 on the AI Horde. Only the default (null) value is supported.",
        ),
        (
            "frequency_penalty",
            False,
            "Unsupported value: 'frequency_penalty' does not support false on the AI Horde. "
            "Only the default (0) value is supported.",
        ),
    ],
)
def test_keys_away_from_their_default_are_refused(key: str, value: object, message: str) -> None:
    with pytest.raises(OpenAIError) as refused:
        read_completion_request(json.dumps({"model": "org/m", "prompt": "Hi", key: value}).encode())
    assert refused.value.envelope()["error"] == {
        "message": message,
        "type": "invalid_request_error",
        "param": key,
        "code": "UnsupportedChatParameter",
    }


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-r1",
    "object": "chat.completion",
    "created": 5,
    "model": "org/m",
    "system_fingerprint": "fp_1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    "x_horde": {"worker_name": "w"},
}


def test_a_chat_completion_becomes_a_text_completion() -> None:
    assert text_completion_of_chat(COMPLETION, "r1") == {
        "id": "cmpl-r1",
        "object": "text_completion",
        "created": 5,
        "model": "org/m",
        "system_fingerprint": "fp_1",
        "choices": [{"text": "Hello.", "index": 0, "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "x_horde": {"worker_name": "w"},
    }


def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-r1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "org/m",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, **extra}],
    }


HEAD = {"id": "cmpl-r1", "object": "text_completion", "created": 5, "model": "org/m", "system_fingerprint": "fp_1"}


def test_chat_chunks_become_text_completion_chunks() -> None:
    assert text_chunk_of_chat(chunk({"role": "assistant", "content": ""}), "r1") is None
    assert text_chunk_of_chat(chunk({"reasoning_content": "Hm."}), "r1") is None
    assert text_chunk_of_chat(chunk({"content": "Hel"}), "r1") == {
        **HEAD,
        "choices": [{"text": "Hel", "index": 0, "logprobs": None, "finish_reason": None}],
    }
    assert text_chunk_of_chat(chunk({}, "stop", x_horde={"worker_name": "w"}), "r1") == {
        **HEAD,
        "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}],
        "x_horde": {"worker_name": "w"},
    }
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert text_chunk_of_chat({**chunk({}), "choices": [], "usage": usage}, "r1") == {
        **HEAD,
        "choices": [],
        "usage": usage,
    }


@pytest.mark.asyncio
async def test_the_event_stream_keeps_keepalives_errors_and_done() -> None:
    error = {"error": {"message": "Gone.", "type": "api_error", "param": None, "code": "HordeUnavailable"}}

    async def chat_events() -> AsyncIterator[bytes]:
        yield KEEPALIVE_COMMENT
        yield data_event(chunk({"role": "assistant", "content": ""})) + data_event(chunk({"content": "Hi"}))
        yield data_event(error)
        yield DONE_EVENT

    events = [event async for event in text_events_of_chat(chat_events(), "r1")]
    assert events == [
        KEEPALIVE_COMMENT,
        data_event({**HEAD, "choices": [{"text": "Hi", "index": 0, "logprobs": None, "finish_reason": None}]}),
        data_event(error),
        DONE_EVENT,
    ]
