"""The response shape: assistant message, adjustments, model and fingerprint, buffered chunks and the kudos cap.

Reference sections: Assistant message and adjustments, Reasoning and usage, Model and fingerprint, Buffered stream
events, Completion without a generation, Kudos cap. Every completion and chunk built here is validated against
``chat.protocol.chat_request.ChatCompletionResponse`` / ``ChatCompletionChunk`` and must serialize back to the same
dict, so the response models describe exactly what the mapping produces.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from chat.errors import KUDOS_CAP_EXCESS_PATTERN, kudos_cap_error
from chat.horde.native import HordeRefusal, NativeStatus
from chat.horde.native_payload import relays_deltas
from chat.horde.refusals import error_from_refusal
from chat.metrics import outcome_class_for
from chat.protocol.chat_request import ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse
from chat.rendering.completion import (
    EMPTY_REPLY_NOTICE,
    REASONING_ONLY_NOTICE,
    ChunkFactory,
    buffered_chunks,
    build_completion,
    build_system_fingerprint,
    finish_chunk,
    no_visible_text_content,
)

WORKER = "6f1c2b1e-0d8a-4c3e-9a55-3e0f7d2c9b10"
CREATED = 1_700_000_000
CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}},
    {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
]


def fingerprint(worker: str, model: str) -> str:
    """The reference's fingerprint, computed here independently: fp_ + 10 hex of SHA-256(worker id + model)."""
    return "fp_" + hashlib.sha256((worker + model).encode("utf-8")).hexdigest()[:10]


def request(**extra: Any) -> ChatCompletionRequest:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Tell me about tides."}]}
    if "models" not in extra:
        body["model"] = "org/m"
    return ChatCompletionRequest.model_validate({**body, **extra})


def status(message: dict[str, Any] | None = None, *, adjustments: Any = None, **generation: Any) -> NativeStatus:
    """A done status with one generation; counts reported unless overridden (None removes a key)."""
    gen: dict[str, Any] = {
        "id": "g1",
        "worker_id": WORKER,
        "worker_name": "w1",
        "model": "org/m",
        "message": message if message is not None else {"role": "assistant", "content": "High tide."},
        "finish_reason": "stop",
        "native_finish_reason": "eos_token",
        "prompt_tokens": 11,
        "completion_tokens": 7,
    }
    gen.update(generation)
    gen = {key: value for key, value in gen.items() if value is not None}
    body: dict[str, Any] = {"done": True, "finished": 1, "generations": [gen]}
    if adjustments is not None:
        body["context_adjustments"] = adjustments
    return NativeStatus.model_validate(body)


def completion_of(req: ChatCompletionRequest, st: NativeStatus, request_id: str = "r1") -> dict[str, Any]:
    completion = build_completion(req, st, request_id, CREATED)
    assert_valid_completion(completion)
    return completion


def chunks_of(req: ChatCompletionRequest, st: NativeStatus, request_id: str = "r1") -> list[dict[str, Any]]:
    chunks = buffered_chunks(req, st, request_id, CREATED)
    for chunk in chunks:
        assert_valid_chunk(chunk)
    return chunks


def assert_valid_completion(completion: dict[str, Any]) -> None:
    """The completion validates against the response model and serializes back unchanged."""
    model = ChatCompletionResponse.model_validate(copy.deepcopy(completion))
    assert model.model_dump(mode="json", exclude_unset=True) == completion


def assert_valid_chunk(chunk: dict[str, Any]) -> None:
    """The chunk validates against the chunk model and serializes back unchanged."""
    model = ChatCompletionChunk.model_validate(copy.deepcopy(chunk))
    assert model.model_dump(mode="json", exclude_unset=True) == chunk


# ---------------------------------------------------------------------------------------------------------------------
# Assistant message and adjustments


def test_text_completion_has_the_exact_shape() -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.2,
    assistant-message-and-adjustments.3, model-and-fingerprint.1, model-and-fingerprint.4, response-shape.1"""
    completion = completion_of(request(), status())
    assert completion == {
        "id": "chatcmpl-r1",
        "object": "chat.completion",
        "created": CREATED,
        "model": "org/m",
        "system_fingerprint": fingerprint(WORKER, "org/m"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "High tide."},
                "logprobs": None,
                "finish_reason": "stop",
                "native_finish_reason": "eos_token",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def test_tool_calls_without_text_have_null_content_and_calls_as_submitted() -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.2,
    assistant-message-and-adjustments.3"""
    for content in (None, ""):
        completion = completion_of(
            request(tools=[{"type": "function", "function": {"name": "get_weather"}}]),
            status(
                {"role": "assistant", "content": content, "tool_calls": CALLS},
                finish_reason="tool_calls",
                native_finish_reason="tool_calls",
            ),
        )
        choice = completion["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": None, "tool_calls": CALLS}
        assert choice["finish_reason"] == "tool_calls"
        assert "x_horde" not in completion


def test_tool_calls_with_text_keep_the_text() -> None:
    """ref: assistant-message-and-adjustments.2"""
    completion = completion_of(
        request(),
        status({"role": "assistant", "content": "Checking.", "tool_calls": CALLS[:1]}, finish_reason="tool_calls"),
    )
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "Checking.", "tool_calls": CALLS[:1]}


def test_tool_call_keeps_only_id_type_function_name_and_arguments() -> None:
    """ref: assistant-message-and-adjustments.3"""
    submitted = [
        {
            "id": "call_x",
            "type": "function",
            "index": 3,
            "function": {"name": "f", "arguments": '{"a": 1}', "parsed_arguments": {"a": 1}},
        }
    ]
    completion = completion_of(
        request(), status({"role": "assistant", "content": None, "tool_calls": submitted}, finish_reason="tool_calls")
    )
    assert completion["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]


def test_content_is_always_present() -> None:
    """ref: assistant-message-and-adjustments.1, assistant-message-and-adjustments.2"""
    completion = completion_of(request(), status({"role": "assistant", "content": None}))
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": ""}
    completion = completion_of(request(), status({"role": "assistant"}))
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": ""}


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter", "tool_calls"])
def test_finish_reason_passes_through_with_native_finish_reason(reason: str) -> None:
    """ref: assistant-message-and-adjustments.3"""
    message = {"role": "assistant", "content": "x"}
    if reason == "tool_calls":
        message["tool_calls"] = CALLS[:1]
    st = status(message, finish_reason=reason, native_finish_reason="backend_" + reason)
    completion = completion_of(request(), st)
    choice = completion["choices"][0]
    assert (choice["finish_reason"], choice["native_finish_reason"]) == (reason, "backend_" + reason)


def test_unknown_or_missing_finish_reason_becomes_stop_or_tool_calls_and_native_is_null_when_unreported() -> None:
    """ref: assistant-message-and-adjustments.3"""
    completion = completion_of(request(), status(finish_reason="eos", native_finish_reason=None))
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["choices"][0]["native_finish_reason"] is None
    completion = completion_of(
        request(), status({"role": "assistant", "content": None, "tool_calls": CALLS}, finish_reason=None)
    )
    assert completion["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("message", "finish", "notice"),
    [
        ({"role": "assistant", "content": ""}, "stop", EMPTY_REPLY_NOTICE),
        ({"role": "assistant", "content": " \n\t "}, "stop", EMPTY_REPLY_NOTICE),
        ({"role": "assistant", "content": "\u3000\n"}, "stop", EMPTY_REPLY_NOTICE),
        ({"role": "assistant", "content": "", "reasoning_content": "Let me think."}, "stop", REASONING_ONLY_NOTICE),
        (
            {"role": "assistant", "content": "", "reasoning_content": "Let me think."},
            "length",
            "The reply has reasoning but no visible text and no tool calls. The worker stopped at the completion "
            "limit of 64 tokens; retry with a higher max_tokens or a lower reasoning_effort.",
        ),
        (
            {"role": "assistant", "content": "  "},
            "length",
            "The reply has no visible text and no tool calls. The worker stopped at the completion limit of 64 "
            "tokens; retry with a higher max_tokens.",
        ),
        ({"role": "assistant", "content": "  ", "reasoning_content": "   "}, "stop", EMPTY_REPLY_NOTICE),
    ],
)
def test_notice_for_a_reply_without_visible_text_or_tool_calls(message: dict, finish: str, notice: str) -> None:
    """ref: assistant-message-and-adjustments.4, completion-attributes.3, completion-attributes.5"""
    completion = completion_of(request(max_tokens=64), status(message, finish_reason=finish, reasoning_tokens=3))
    assert completion["x_horde"] == {"notice": notice}
    assert completion["choices"][0]["message"]["content"] == message["content"]


def test_no_notice_with_visible_text_or_tool_calls() -> None:
    """ref: assistant-message-and-adjustments.4"""
    assert "x_horde" not in completion_of(request(), status({"role": "assistant", "content": " ok "}))
    no_text_calls = status({"role": "assistant", "content": None, "tool_calls": CALLS}, finish_reason="tool_calls")
    assert "x_horde" not in completion_of(request(), no_text_calls)


def test_notice_category_reads_native_reasoning_even_when_hidden() -> None:
    """ref: completion-attributes.4, assistant-message-and-adjustments.4"""
    st = status({"role": "assistant", "content": "", "reasoning_content": "Hmm."})
    completion = completion_of(request(horde={"include_reasoning": False}), st)
    assert completion["x_horde"]["notice"] == REASONING_ONLY_NOTICE
    assert "reasoning_content" not in completion["choices"][0]["message"]
    assert no_visible_text_content(st.generations[0]) == "reasoning_only"
    assert no_visible_text_content(status().generations[0]) is None
    assert no_visible_text_content(status({"role": "assistant", "content": " "}).generations[0]) == "empty"


def test_context_adjustments_pass_through_unchanged() -> None:
    """ref: assistant-message-and-adjustments.4, assistant-message-and-adjustments.5"""
    adjustments = [
        {"kind": "worker_max_length", "requested": 4096, "applied": 1024},
        {"kind": "future_kind", "detail": {"nested": [1, 2]}, "note": "kept"},
    ]
    completion = completion_of(request(max_tokens=4096), status(adjustments=copy.deepcopy(adjustments)))
    assert completion["x_horde"] == {"context_adjustments": adjustments}


@pytest.mark.parametrize("adjustments", [None, []])
def test_context_adjustments_omitted_when_the_horde_adjusted_nothing(adjustments: Any) -> None:
    """ref: assistant-message-and-adjustments.4"""
    completion = completion_of(request(), status(adjustments=adjustments))
    assert "x_horde" not in completion


def test_x_horde_key_order_notice_adjustments_estimated_usage() -> None:
    """ref: assistant-message-and-adjustments.4, reasoning-and-usage.5"""
    adjustments = [{"kind": "worker_max_length", "requested": 4096, "applied": 20}]
    completion = completion_of(
        request(max_tokens=4096),
        status(
            {"role": "assistant", "content": "", "reasoning_content": "r" * 400},
            adjustments=adjustments,
            finish_reason="length",
            completion_tokens=None,
        ),
    )
    assert completion["x_horde"] == {
        "notice": "The reply has reasoning but no visible text and no tool calls. The worker stopped at the "
        "completion limit of 20 tokens; retry with a higher max_tokens or a lower reasoning_effort.",
        "context_adjustments": adjustments,
        "estimated_usage": True,
    }
    assert list(completion["x_horde"]) == ["notice", "context_adjustments", "estimated_usage"]


# ---------------------------------------------------------------------------------------------------------------------
# Reasoning


def test_reasoning_content_when_submitted() -> None:
    """ref: reasoning-and-usage.1, reasoning-and-usage.2, reasoning-and-usage.3"""
    st = status({"role": "assistant", "content": "Answer.", "reasoning_content": "Because."}, reasoning_tokens=2)
    completion = completion_of(request(), st)
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Answer.",
        "reasoning_content": "Because.",
    }
    assert completion["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_reasoning_hidden_by_include_reasoning_false_keeps_the_count() -> None:
    """ref: reasoning-and-usage.2, reasoning-and-usage.6"""
    st = status({"role": "assistant", "content": "Answer.", "reasoning_content": "Because."}, reasoning_tokens=2)
    completion = completion_of(request(horde={"include_reasoning": False}), st)
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "Answer."}
    assert completion["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    completion = completion_of(request(horde={"include_reasoning": True}), st)
    assert completion["choices"][0]["message"]["reasoning_content"] == "Because."


def test_empty_reasoning_is_not_reasoning() -> None:
    """ref: reasoning-and-usage.2, reasoning-and-usage.7"""
    completion = completion_of(request(), status({"role": "assistant", "content": "A.", "reasoning_content": ""}))
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "A."}
    assert "completion_tokens_details" not in completion["usage"]


# ---------------------------------------------------------------------------------------------------------------------
# Model and fingerprint


def test_models_request_names_the_listed_model_that_served_it() -> None:
    """ref: model-and-fingerprint.1, model-and-fingerprint.2, model-and-fingerprint.4, model-selection.3"""
    completion = completion_of(request(models=["org/first", "org/second"]), status(model="org/second"))
    assert completion["model"] == "org/second"
    assert completion["system_fingerprint"] == fingerprint(WORKER, "org/second")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({"model": "org/asked"}, "org/asked"), ({"models": ["org/one", "org/two"]}, "org/one")],
)
def test_model_falls_back_to_the_request_when_the_generation_has_none(extra: dict, expected: str) -> None:
    """ref: model-and-fingerprint.3"""
    completion = completion_of(request(**extra), status(model=None))
    assert completion["model"] == expected
    assert completion["system_fingerprint"] == fingerprint(WORKER, expected)


def test_fingerprint_is_fp_and_ten_hex_of_sha256_of_worker_and_model() -> None:
    """ref: model-and-fingerprint.4, model-and-fingerprint.5"""
    expected = "fp_" + hashlib.sha256(f"{WORKER}org/m".encode()).hexdigest()[:10]
    assert build_system_fingerprint(WORKER, "org/m") == expected
    assert len(expected) == 13 and all(c in "0123456789abcdef" for c in expected[3:])
    assert build_system_fingerprint("other-worker", "org/m") != expected
    assert build_system_fingerprint(WORKER, "org/other") != expected
    assert build_system_fingerprint(WORKER, "é/模型") == fingerprint(WORKER, "é/模型")


@pytest.mark.parametrize("worker_id", [None, ""])
def test_fingerprint_is_null_without_a_worker_id(worker_id: str | None) -> None:
    """ref: model-and-fingerprint.5, model-and-fingerprint.8"""
    assert build_system_fingerprint(worker_id, "org/m") is None
    completion = completion_of(request(), status(worker_id=worker_id))
    assert completion["system_fingerprint"] is None
    chunks = chunks_of(request(stream=True), status(worker_id=worker_id))
    assert {chunk["system_fingerprint"] for chunk in chunks} == {None}


# ---------------------------------------------------------------------------------------------------------------------
# Buffered stream events


def chunk(
    delta: dict[str, Any], *, model: str = "org/m", fp: str | None = None, usage: bool = False, **choice: Any
) -> dict[str, Any]:
    """An expected one-choice chunk: ``logprobs: null`` on the choice, and ``usage: null`` when ``usage`` (the
    request's ``stream_options.include_usage``)."""
    expected: dict[str, Any] = {
        "id": "chatcmpl-r1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": fp if fp is not None else fingerprint(WORKER, model),
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, **choice}],
    }
    if usage:
        expected["usage"] = None
    return expected


def test_buffered_events_with_reasoning_text_and_usage_are_exact() -> None:
    """ref: buffered-stream-events.2, buffered-stream-events.3, buffered-stream-events.5, buffered-stream-events.7,
    buffered-stream-events.11, buffered-stream-events.12, model-and-fingerprint.6"""
    st = status(
        {"role": "assistant", "content": "Answer.", "reasoning_content": "Because."},
        reasoning_tokens=2,
        adjustments=[{"kind": "worker_max_length", "requested": 2048, "applied": 1024}],
    )
    chunks = chunks_of(request(stream=True, stream_options={"include_usage": True}, max_tokens=2048), st)
    finish = chunk(
        {},
        usage=True,
        finish_reason="stop",
        native_finish_reason="eos_token",
        x_horde={"context_adjustments": [{"kind": "worker_max_length", "requested": 2048, "applied": 1024}]},
    )
    usage = {
        **chunk({}),
        "choices": [],
        "usage": {
            "prompt_tokens": 11,
            "completion_tokens": 7,
            "total_tokens": 18,
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
    assert chunks == [
        chunk({"role": "assistant"}, usage=True),
        chunk({"reasoning_content": "Because."}, usage=True),
        chunk({"content": "Answer."}, usage=True),
        finish,
        usage,
    ]
    assert [list(c) for c in chunks[:-1]] == [[*CHUNK_KEYS, "usage"]] * 4  # usage: null after choices, as OpenAI
    assert all(c["choices"][0]["logprobs"] is None for c in chunks[:-1])


CHUNK_KEYS = ["id", "object", "created", "model", "system_fingerprint", "choices"]


def test_every_chunk_choice_has_null_logprobs_and_usage_is_null_only_with_include_usage() -> None:
    """OpenAI's null fields on a stream's chunks: ``logprobs: null`` on every chunk choice (as on the completion's
    choice); ``usage: null`` on every chunk with a choice when ``stream_options.include_usage`` is true, and no
    ``usage`` key at all without it.

    ref: buffered-stream-events.12, buffered-stream-events.6"""
    st = status({"role": "assistant", "content": "Answer.", "tool_calls": CALLS}, finish_reason="tool_calls")
    for include_usage, expected_keys in ((True, [*CHUNK_KEYS, "usage"]), (False, CHUNK_KEYS), (None, CHUNK_KEYS)):
        options = {} if include_usage is None else {"stream_options": {"include_usage": include_usage}}
        chunks = chunks_of(request(stream=True, **options), st)
        with_choices = [c for c in chunks if c["choices"]]
        assert len(with_choices) == 4  # role, content, tool calls, finish
        assert [list(c) for c in with_choices] == [expected_keys] * 4
        assert all(c.get("usage", "absent") == (None if include_usage else "absent") for c in with_choices)
        assert [list(c["choices"][0])[:3] for c in with_choices] == [["index", "delta", "logprobs"]] * 4
        assert all(c["choices"][0]["logprobs"] is None for c in with_choices)
        usage_chunks = [c for c in chunks if not c["choices"]]
        assert len(usage_chunks) == (1 if include_usage else 0)
        assert all(isinstance(c["usage"], dict) and c["usage"]["total_tokens"] > 0 for c in usage_chunks)


def test_buffered_events_without_include_usage_or_hidden_reasoning() -> None:
    """ref: buffered-stream-events.5, buffered-stream-events.12, reasoning-and-usage.2"""
    st = status({"role": "assistant", "content": "Answer.", "reasoning_content": "Because."}, reasoning_tokens=2)
    chunks = chunks_of(
        request(stream=True, horde={"include_reasoning": False}, stream_options={"include_usage": False}), st
    )
    assert chunks == [
        chunk({"role": "assistant"}),
        chunk({"content": "Answer."}),
        chunk({}, finish_reason="stop", native_finish_reason="eos_token", x_horde={}),
    ]


def test_tool_call_chunk_has_each_call_whole_with_its_index_and_no_content() -> None:
    """ref: buffered-stream-events.9, buffered-stream-events.10, buffered-stream-events.7"""
    st = status(
        {"role": "assistant", "content": "Let me check.", "tool_calls": CALLS},
        finish_reason="tool_calls",
        native_finish_reason="tool_calls",
    )
    chunks = chunks_of(request(stream=True), st)
    assert chunks == [
        chunk({"role": "assistant"}),
        chunk({"content": "Let me check."}),
        chunk({"tool_calls": [{"index": 0, **CALLS[0]}, {"index": 1, **CALLS[1]}]}),
        chunk({}, finish_reason="tool_calls", native_finish_reason="tool_calls", x_horde={}),
    ]
    assert list(chunks[2]["choices"][0]["delta"]["tool_calls"][0]) == ["index", "id", "type", "function"]
    no_text = status({"role": "assistant", "content": None, "tool_calls": CALLS}, finish_reason="tool_calls")
    assert [c["choices"][0]["delta"] for c in chunks_of(request(stream=True), no_text)] == [
        {"role": "assistant"},
        {"tool_calls": [{"index": 0, **CALLS[0]}, {"index": 1, **CALLS[1]}]},
        {},
    ]


def test_reasoning_only_and_empty_replies_stream_without_a_content_chunk() -> None:
    """ref: buffered-stream-events.5, buffered-stream-events.7, buffered-stream-events.11,
    assistant-message-and-adjustments.4"""
    st = status(
        {"role": "assistant", "content": "", "reasoning_content": "Thinking."},
        finish_reason="stop",
        native_finish_reason=None,
        reasoning_tokens=2,
    )
    chunks = chunks_of(request(stream=True), st)
    assert chunks == [
        chunk({"role": "assistant"}),
        chunk({"reasoning_content": "Thinking."}),
        chunk({}, finish_reason="stop", native_finish_reason=None, x_horde={"notice": REASONING_ONLY_NOTICE}),
    ]
    empty = chunks_of(request(stream=True), status({"role": "assistant", "content": ""}))
    assert [c["choices"][0]["delta"] for c in empty] == [{"role": "assistant"}, {}]
    assert empty[-1]["choices"][0]["x_horde"] == {"notice": EMPTY_REPLY_NOTICE}


def test_whitespace_content_is_sent_as_it_is() -> None:
    """ref: buffered-stream-events.7"""
    chunks = chunks_of(request(stream=True), status({"role": "assistant", "content": "\n"}))
    assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant"}, {"content": "\n"}, {}]


def test_every_chunk_shares_id_created_model_and_fingerprint_of_the_completion() -> None:
    """ref: model-and-fingerprint.6, buffered-stream-events.2"""
    req = request(models=["org/a", "org/b"], stream=True, stream_options={"include_usage": True})
    st = status({"role": "assistant", "content": "Hi.", "reasoning_content": "R."}, model="org/b")
    chunks = chunks_of(req, st, request_id="req-9")
    completion = completion_of(req, st, request_id="req-9")
    assert {(c["id"], c["created"], c["model"], c["system_fingerprint"]) for c in chunks} == {
        ("chatcmpl-req-9", CREATED, "org/b", fingerprint(WORKER, "org/b"))
    }
    assert (completion["id"], completion["model"], completion["system_fingerprint"]) == (
        "chatcmpl-req-9",
        "org/b",
        fingerprint(WORKER, "org/b"),
    )
    assert chunks[-1]["usage"] == completion["usage"]
    assert chunks[-2]["choices"][0]["x_horde"] == completion.get("x_horde", {})


def test_finish_chunk_and_chunk_factory_for_other_streams() -> None:
    """ref: buffered-stream-events.11, model-and-fingerprint.6, model-and-fingerprint.7"""
    completion = completion_of(request(), status({"role": "assistant", "content": ""}, finish_reason="length"))
    factory = ChunkFactory("r1", CREATED, "org/m", "fp_0123456789")
    finish = finish_chunk(factory, completion)
    assert_valid_chunk(finish)
    assert finish == chunk(
        {}, fp="fp_0123456789", finish_reason="length", native_finish_reason="eos_token", x_horde=completion["x_horde"]
    )
    assert_valid_chunk(factory.delta({"content": "x"}))


# ---------------------------------------------------------------------------------------------------------------------
# Completion without a generation


def test_no_completion_without_a_generation() -> None:
    """ref: completion-without-a-generation.3"""
    with pytest.raises(ValueError, match="finished generation"):
        build_completion(request(), NativeStatus.model_validate({"done": True}), "r1", CREATED)
    with pytest.raises(ValueError, match="finished generation"):
        buffered_chunks(request(stream=True), NativeStatus.model_validate({"done": True}), "r1", CREATED)


# ---------------------------------------------------------------------------------------------------------------------
# Kudos cap

KUDOS_MESSAGE = (
    "The request's kudos estimate at current pricing is 215, above its horde.max_kudos of 1. "
    "The estimate assumes the full max_tokens is generated."
)


def test_kudos_cap_refusal_is_the_reference_envelope() -> None:
    """ref: kudos-cap.1, kudos-cap.2, kudos-cap.4, kudos-cap.5"""
    refusal = HordeRefusal(
        status=400,
        message=KUDOS_MESSAGE,
        rc="ChatKudosCapExceeded",
        body={"message": KUDOS_MESSAGE, "rc": "ChatKudosCapExceeded"},
    )
    error = error_from_refusal(refusal)
    assert error.status == 400
    assert error.envelope() == {
        "error": {
            "message": KUDOS_MESSAGE,
            "type": "invalid_request_error",
            "param": "horde.max_kudos",
            "code": "max_kudos_exceeded",
            "metadata": {"rc": "ChatKudosCapExceeded", "kudos_estimate": 215, "max_kudos": 1},
        }
    }
    assert error.headers() == {}


@pytest.mark.parametrize(
    ("estimate", "cap", "metadata"),
    [
        ("12.5", "0.25", {"kudos_estimate": 12.5, "max_kudos": 0.25}),
        ("215.0", "1.0", {"kudos_estimate": 215, "max_kudos": 1}),
        ("3", "0", {"kudos_estimate": 3, "max_kudos": 0}),
    ],
)
def test_kudos_cap_values_are_read_from_the_message(estimate: str, cap: str, metadata: dict) -> None:
    """ref: kudos-cap.2"""
    message = KUDOS_MESSAGE.replace("215", estimate).replace("max_kudos of 1.", f"max_kudos of {cap}.")
    match = KUDOS_CAP_EXCESS_PATTERN.search(message)
    assert match is not None and (match["kudos_estimate"], match["max_kudos"]) == (estimate, cap)
    error = kudos_cap_error(message)
    assert error.metadata == {"rc": "ChatKudosCapExceeded", **metadata}
    assert error.message == message


def test_kudos_cap_message_that_does_not_match_leaves_the_values_out() -> None:
    """ref: kudos-cap.3"""
    refusal = HordeRefusal(
        status=400,
        message="Too expensive.",
        rc="ChatKudosCapExceeded",
        body={"message": "Too expensive.", "rc": "ChatKudosCapExceeded"},
    )
    assert error_from_refusal(refusal).envelope() == {
        "error": {
            "message": "Too expensive.",
            "type": "invalid_request_error",
            "param": "horde.max_kudos",
            "code": "max_kudos_exceeded",
            "metadata": {"rc": "ChatKudosCapExceeded"},
        }
    }


def test_a_new_horde_rc_passes_through_as_the_code_and_stays_unclassified() -> None:
    """The code set is open: an rc the front has never seen is the client's code, with the Horde's message and
    status, and its outcome class is unclassified. ref: outcome-class.8, outcome-class.9"""
    refusal = HordeRefusal(
        status=403,
        message="Your account is on a break.",
        rc="SomeNewHordeRc",
        body={"message": "Your account is on a break.", "rc": "SomeNewHordeRc"},
    )
    error = error_from_refusal(refusal)
    assert (error.status, error.code, error.message) == (403, "SomeNewHordeRc", "Your account is on a break.")
    assert outcome_class_for(error.code) == "unclassified"


@pytest.mark.parametrize(
    ("extra", "relayed"),
    [
        ({}, True),
        ({"response_format": {"type": "text"}}, True),
        ({"response_format": {"type": "json_object"}}, False),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}},
            False,
        ),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, False),
    ],
)
def test_only_text_replies_are_relayed(extra: dict, relayed: bool) -> None:
    """Tool calls and structured output are verified only once the reply is whole, so they are never relayed.
    ref: relayed-deltas.1, relayed-deltas.2"""
    assert relays_deltas(request(stream=True, **extra)) is relayed
    assert relays_deltas(request(stream=False, **extra)) is False
