"""Usage counts: reported counts, estimates, their cap at the effective completion limit, and the estimate flag.

Reference section: Reasoning and usage. Estimates use ``CHARACTERS_PER_TOKEN`` (4 characters per token, rounded up).
The front's decision where the reference is silent: an estimated prompt count also sets ``x_horde.estimated_usage``
(the flag says that ``usage`` is not entirely the worker's own numbers).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from chat.horde.native import NativeStatus
from chat.horde.tokens import CHARACTERS_PER_TOKEN, estimate_prompt_tokens, estimate_tokens
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.protocol.chat_request import ChatCompletionRequest, ChatCompletionResponse
from chat.rendering.completion import build_completion, build_usage, effective_completion_limit

PROMPT = [{"role": "user", "content": "Tell me about tides."}]  # 20 characters: 5 estimated tokens
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}


def request(**extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "org/m", "messages": PROMPT, **extra})


def status(message: dict[str, Any], *, applied: int | None = None, **counts: Any) -> NativeStatus:
    """A done status; ``counts`` are the worker's reported counts (absent: not reported)."""
    body: dict[str, Any] = {
        "done": True,
        "finished": 1,
        "generations": [{"worker_id": "w", "model": "org/m", "message": message, "finish_reason": "stop", **counts}],
    }
    if applied is not None:
        body["context_adjustments"] = [{"kind": "worker_max_length", "requested": 99999, "applied": applied}]
    return NativeStatus.model_validate(body)


def completion(req: ChatCompletionRequest, st: NativeStatus) -> dict[str, Any]:
    result = build_completion(req, st, "r1", 1_700_000_000)
    model = ChatCompletionResponse.model_validate(copy.deepcopy(result))
    assert model.model_dump(mode="json", exclude_unset=True) == result
    return result


# ---------------------------------------------------------------------------------------------------------------------
# The effective completion limit


@pytest.mark.parametrize(
    ("extra", "applied", "expected"),
    [
        ({"max_completion_tokens": 1000, "max_tokens": 2000}, 300, 300),
        ({"max_completion_tokens": 1000, "max_tokens": 2000}, None, 1000),
        ({"max_tokens": 2000}, None, 2000),
        ({}, None, 512),
        ({}, 256, 256),
    ],
)
def test_effective_completion_limit_order(extra: dict, applied: int | None, expected: int) -> None:
    """ref: reasoning-and-usage.9, reasoning-and-usage.10, reasoning-and-usage.11, reasoning-and-usage.12,
    reasoning-and-usage.13, reasoning-and-usage.14, reasoning-and-usage.15, reasoning-and-usage.16"""
    assert effective_completion_limit(request(**extra), status({"content": "x"}, applied=applied)) == expected


def test_default_limit_is_the_native_default_and_other_adjustments_do_not_count() -> None:
    """ref: reasoning-and-usage.15"""
    assert DEFAULT_CHAT_MAX_TOKENS == 512
    other = NativeStatus.model_validate(
        {
            "context_adjustments": [
                {"kind": "max_context_length", "requested": 9000, "applied": 4096},
                {"kind": "worker_max_length", "requested": 4096},
            ]
        }
    )
    assert effective_completion_limit(request(max_tokens=700), other) == 700
    assert effective_completion_limit(request(max_tokens=700), None) == 700
    assert effective_completion_limit(request(), None) == 512


# ---------------------------------------------------------------------------------------------------------------------
# Estimates


def test_characters_per_token_ratio() -> None:
    """ref: reasoning-and-usage.4, reasoning-and-usage.8"""
    assert CHARACTERS_PER_TOKEN == 4.0
    assert [estimate_tokens(text) for text in ("", "a", "abcd", "abcde", "x" * 400, "é" * 9)] == [0, 1, 1, 2, 100, 3]


def test_estimated_completion_includes_reasoning_text_and_tool_calls() -> None:
    """ref: reasoning-and-usage.8, reasoning-and-usage.4, reasoning-and-usage.5"""
    message = {"role": "assistant", "content": "Sunny.!", "reasoning_content": "Weather?!!", "tool_calls": [CALL]}
    # reasoning 10 + text 7 + name 11 + arguments 15 = 43 characters -> 11 tokens; reasoning 10 -> 3 tokens
    result = completion(request(), status(message, prompt_tokens=30))
    assert result["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 11,
        "total_tokens": 41,
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    assert result["x_horde"] == {"estimated_usage": True}


def test_estimated_tool_call_reply_without_text() -> None:
    """ref: reasoning-and-usage.8"""
    result = completion(
        request(), status({"role": "assistant", "content": None, "tool_calls": [CALL, CALL]}, prompt_tokens=30)
    )
    assert result["usage"] == {"prompt_tokens": 30, "completion_tokens": math.ceil(52 / 4), "total_tokens": 43}


LONG = {"role": "assistant", "content": "t" * 3000, "reasoning_content": "r" * 3000}
"""3000 + 3000 characters: 1500 estimated completion tokens, 750 estimated reasoning tokens."""


@pytest.mark.parametrize(
    ("extra", "applied", "completion_tokens", "reasoning_tokens"),
    [
        ({"max_completion_tokens": 200, "max_tokens": 300}, 100, 100, 100),
        ({"max_completion_tokens": 200, "max_tokens": 300}, None, 200, 200),
        ({"max_tokens": 300}, None, 300, 300),
        ({}, None, 512, 512),
        ({"max_tokens": 1000}, None, 1000, 750),
        ({"max_tokens": 16384}, None, 1500, 750),
    ],
)
def test_estimates_are_capped_at_each_limit_source(
    extra: dict, applied: int | None, completion_tokens: int, reasoning_tokens: int
) -> None:
    """ref: reasoning-and-usage.9, reasoning-and-usage.11, reasoning-and-usage.12, reasoning-and-usage.13,
    reasoning-and-usage.15"""
    result = completion(request(**extra), status(LONG, applied=applied, prompt_tokens=10))
    assert result["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": completion_tokens,
        "total_tokens": 10 + completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }
    assert result["x_horde"]["estimated_usage"] is True


def test_reported_counts_pass_unchanged_even_above_the_limit() -> None:
    """ref: reasoning-and-usage.17, reasoning-and-usage.18"""
    st = status(LONG, applied=100, prompt_tokens=12345, completion_tokens=9999, reasoning_tokens=8888)
    result = completion(request(max_tokens=4096), st)
    assert result["usage"] == {
        "prompt_tokens": 12345,
        "completion_tokens": 9999,
        "total_tokens": 22344,
        "completion_tokens_details": {"reasoning_tokens": 8888},
    }
    assert "estimated_usage" not in result["x_horde"]


def test_reported_completion_with_estimated_reasoning() -> None:
    """ref: reasoning-and-usage.4, reasoning-and-usage.5, reasoning-and-usage.17"""
    st = status(
        {"role": "assistant", "content": "A.", "reasoning_content": "r" * 41}, prompt_tokens=4, completion_tokens=20
    )
    usage, estimated = build_usage(request(), st, st.generations[0])
    assert usage == {
        "prompt_tokens": 4,
        "completion_tokens": 20,
        "total_tokens": 24,
        "completion_tokens_details": {"reasoning_tokens": 11},
    }
    assert estimated is True


# ---------------------------------------------------------------------------------------------------------------------
# The reasoning count


def test_reported_reasoning_count_without_reasoning_text_is_returned() -> None:
    """ref: reasoning-and-usage.4, reasoning-and-usage.7"""
    st = status({"role": "assistant", "content": "A."}, prompt_tokens=4, completion_tokens=2, reasoning_tokens=0)
    result = completion(request(), st)
    assert result["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert "x_horde" not in result


def test_reasoning_count_omitted_without_reasoning_or_a_reported_count() -> None:
    """ref: reasoning-and-usage.7"""
    result = completion(request(), status({"role": "assistant", "content": "A."}, prompt_tokens=4, completion_tokens=2))
    assert result["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}


@pytest.mark.parametrize("reported", [None, 7])
def test_reasoning_count_returned_when_the_reasoning_is_hidden(reported: int | None) -> None:
    """ref: reasoning-and-usage.6, reasoning-and-usage.4, reasoning-and-usage.5"""
    counts = {"prompt_tokens": 4, "completion_tokens": 9}
    if reported is not None:
        counts["reasoning_tokens"] = reported
    st = status({"role": "assistant", "content": "A.", "reasoning_content": "r" * 24}, **counts)
    result = completion(request(horde={"include_reasoning": False}), st)
    assert "reasoning_content" not in result["choices"][0]["message"]
    assert result["usage"]["completion_tokens_details"] == {"reasoning_tokens": reported if reported else 6}
    assert ("x_horde" in result) is (reported is None)
    if reported is None:
        assert result["x_horde"] == {"estimated_usage": True}


# ---------------------------------------------------------------------------------------------------------------------
# The prompt estimate and the estimate flag


def test_prompt_estimate_counts_message_text_history_tool_calls_and_tools() -> None:
    """ref: reasoning-and-usage.5, reasoning-and-usage.18"""
    req = ChatCompletionRequest.model_validate(
        {
            "model": "org/m",
            "messages": [
                {"role": "system", "content": "Be brief."},  # 9
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look "},  # 5
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },  # 1 + 2
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},  # 5
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
    )
    tools_json = '[{"type":"function","function":{"name":"f"}}]'
    assert estimate_prompt_tokens(req) == math.ceil((9 + 5 + 3 + 5 + len(tools_json)) / 4)


def test_estimated_prompt_count_sets_estimated_usage() -> None:
    """ref: reasoning-and-usage.5"""
    result = completion(request(), status({"role": "assistant", "content": "A."}, completion_tokens=2))
    assert result["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert result["x_horde"] == {"estimated_usage": True}


def test_nothing_reported_everything_estimated() -> None:
    """ref: reasoning-and-usage.4, reasoning-and-usage.5, reasoning-and-usage.8"""
    result = completion(request(), status({"role": "assistant", "content": "x" * 18, "reasoning_content": "y" * 6}))
    assert result["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 6,
        "total_tokens": 11,
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    assert result["x_horde"] == {"estimated_usage": True}
