"""A finished text status -> OpenAI's legacy ``text_completion`` and its chunks (pure)."""

from __future__ import annotations

from typing import Any

from chat.horde.native import NativeStatus
from chat.horde.native_payload import estimate_tokens
from chat.horde.text import PreparedTextRequest
from chat.protocol.legacy_completion import CompletionRequest
from chat.rendering.completion import build_system_fingerprint, reply_text


def build_text_completion(
    request: CompletionRequest,
    prepared: PreparedTextRequest,
    status: NativeStatus,
    request_id: str,
    created: int,
) -> dict[str, Any]:
    """OpenAI's ``text_completion`` of a finished text status (see the module docstring).

    Raises:
        ValueError: The status has no finished generation.
    """
    generation = status.finished_generation
    if generation is None:
        raise ValueError("A completion needs a finished generation.")
    text = reply_text(generation)
    completion_tokens = min(prepared.max_length, estimate_tokens(text))
    model = generation.model or request.model
    return {
        "id": f"cmpl-{request_id}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": build_system_fingerprint(generation.worker_id, model),
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": generation.finish_reason or "stop"}],
        "usage": {
            "prompt_tokens": prepared.estimated_prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prepared.estimated_prompt_tokens + completion_tokens,
        },
        "x_horde": {
            **status.front_x_horde,
            **({"context_adjustments": status.context_adjustments} if status.context_adjustments else {}),
            "estimated_usage": True,
        },
    }


def completion_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``text_completion`` chunks of a reply delivered whole: the text (when not empty), the finish chunk, and
    the usage chunk when asked for (the caller adds ``data: [DONE]``).
    """
    head = {key: completion[key] for key in ("id", "object", "created", "model", "system_fingerprint")}
    choice = completion["choices"][0]
    chunks = []
    if choice["text"]:
        chunks.append({**head, "choices": [{**choice, "finish_reason": None}]})
    chunks.append({**head, "choices": [{**choice, "text": ""}], "x_horde": completion["x_horde"]})
    return chunks


def text_completion_chunks(completion: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of a buffered ``text_completion`` stream: :func:`completion_chunks`, then, with
    ``stream_options.include_usage``, a chunk with ``choices: []`` and ``usage``.
    """
    listed = completion_chunks(completion)
    if include_usage:
        head = {key: completion[key] for key in ("id", "object", "created", "model", "system_fingerprint")}
        listed.append({**head, "choices": [], "usage": completion["usage"]})
    return listed
