"""The buffered stream's chunk order and the SSE framing (reference: Buffered stream events, Stream errors)."""

from __future__ import annotations

import json

from chat.errors import OpenAIError
from chat.horde.native import NativeStatus
from chat.protocol.chat_request import ChatCompletionRequest
from chat.rendering.completion import buffered_chunks
from chat.rendering.sse import DONE_EVENT, KEEPALIVE_COMMENT, data_event


def request(**extra: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "org/m", "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}
    )


def status(message: dict, **generation: object) -> NativeStatus:
    return NativeStatus.model_validate(
        {
            "done": True,
            "finished": 1,
            "generations": [
                {
                    "id": "g1",
                    "worker_id": "w-1",
                    "model": "org/m",
                    "message": message,
                    "finish_reason": "stop",
                    "native_finish_reason": "eos_token",
                    "prompt_tokens": 5,
                    "completion_tokens": 7,
                    **generation,
                }
            ],
        }
    )


def deltas(chunks: list[dict]) -> list[dict]:
    return [chunk["choices"][0]["delta"] if chunk["choices"] else None for chunk in chunks]


def test_reasoning_then_content_then_finish_then_usage() -> None:
    """ref: buffered-stream-events.3, buffered-stream-events.4, buffered-stream-events.5, buffered-stream-events.6,
    buffered-stream-events.7, buffered-stream-events.11, buffered-stream-events.12"""
    chunks = buffered_chunks(
        request(stream_options={"include_usage": True}),
        status({"role": "assistant", "content": "Hello.", "reasoning_content": "Think."}),
        "req-1",
        1700000000,
    )
    assert deltas(chunks) == [
        {"role": "assistant"},
        {"reasoning_content": "Think."},
        {"content": "Hello."},
        {},
        None,
    ]
    finish = chunks[3]["choices"][0]
    assert finish["finish_reason"] == "stop"
    assert finish["native_finish_reason"] == "eos_token"
    assert "x_horde" in finish
    assert chunks[4]["choices"] == []
    assert chunks[4]["usage"]["completion_tokens"] == 7
    assert {chunk["id"] for chunk in chunks} == {"chatcmpl-req-1"}
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["system_fingerprint"] for chunk in chunks}) == 1


def test_reasoning_left_out_when_include_reasoning_is_false_and_no_usage_without_include_usage() -> None:
    """ref: buffered-stream-events.5, buffered-stream-events.12"""
    chunks = buffered_chunks(
        request(horde={"include_reasoning": False}),
        status({"role": "assistant", "content": "Hello.", "reasoning_content": "Think."}),
        "req-2",
        1700000000,
    )
    assert deltas(chunks) == [{"role": "assistant"}, {"content": "Hello."}, {}]


def test_tool_calls_chunk_has_each_call_whole_with_index_and_no_content() -> None:
    """ref: buffered-stream-events.8, buffered-stream-events.9, buffered-stream-events.10"""
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    chunks = buffered_chunks(
        request(tools=[{"type": "function", "function": {"name": "f"}}]),
        status({"role": "assistant", "content": None, "tool_calls": calls}, finish_reason="tool_calls"),
        "req-3",
        1700000000,
    )
    assert deltas(chunks) == [
        {"role": "assistant"},
        {"tool_calls": [{"index": 0, **calls[0]}, {"index": 1, **calls[1]}]},
        {},
    ]
    assert chunks[2]["choices"][0]["finish_reason"] == "tool_calls"


def test_sse_framing_and_error_event() -> None:
    """ref: buffered-stream-events.13, stream-errors.2, stream-errors.3"""
    assert DONE_EVENT == b"data: [DONE]\n\n"
    assert KEEPALIVE_COMMENT.startswith(b":")
    assert data_event({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()
    error = OpenAIError(
        status=503, message="m", code="no_eligible_worker", retry_after=30, metadata={"request_id": "r"}
    )
    event = error.stream_event()
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert json.loads(event[6:]) == {
        "error": {
            "message": "m",
            "type": "api_error",
            "param": None,
            "code": "no_eligible_worker",
            "metadata": {"request_id": "r", "retry_after": 30},
        }
    }
