"""A finished text status -> OpenAI's legacy ``text_completion`` and its chunks (pure); and a chat completion (a
legacy completion served on the native chat route) -> the same shapes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from chat.horde.native import NativeStatus
from chat.horde.text import PreparedTextRequest
from chat.horde.tokens import estimate_tokens
from chat.protocol.legacy_completion import CompletionRequest
from chat.rendering.completion import build_system_fingerprint, reply_text
from chat.rendering.sse import DONE_EVENT, KEEPALIVE_COMMENT, data_event


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


# ---------------------------------------------------------------------------------------------------------------------
# A legacy completion served on the native chat route (the prompt as one user message)

_HEAD_KEYS = ("id", "object", "created", "model", "system_fingerprint")


def text_completion_of_chat(completion: Mapping[str, Any], request_id: str) -> dict[str, Any]:
    """The ``text_completion`` of a ``chat.completion`` (a legacy completion served on the native chat route): the
    message's ``content`` as ``text``, the same ``finish_reason``, ``usage`` and ``x_horde``; ``id`` ``cmpl-<request
    id>``. Reasoning and tool calls have no place in a ``text_completion`` and are left out.
    """
    choice = completion["choices"][0]
    text_completion: dict[str, Any] = {
        "id": f"cmpl-{request_id}",
        "object": "text_completion",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": completion.get("system_fingerprint"),
        "choices": [
            {
                "text": choice["message"].get("content") or "",
                "index": 0,
                "logprobs": None,
                "finish_reason": choice.get("finish_reason") or "stop",
            }
        ],
        "usage": completion.get("usage"),
    }
    if completion.get("x_horde"):
        text_completion["x_horde"] = completion["x_horde"]
    return text_completion


def text_chunk_of_chat(chunk: Mapping[str, Any], request_id: str) -> dict[str, Any] | None:
    """The ``text_completion`` chunk of a ``chat.completion.chunk``, or None for a chunk with nothing to say (the
    role chunk, a reasoning delta): a content delta is ``text``; the finish chunk is ``text: ""`` with its
    ``finish_reason`` (and ``x_horde``); the usage chunk keeps ``choices: []`` and ``usage``.
    """
    head = {key: chunk.get(key) for key in _HEAD_KEYS} | {"id": f"cmpl-{request_id}", "object": "text_completion"}
    choices = chunk.get("choices") or []
    if not choices:
        return {**head, "choices": [], "usage": chunk.get("usage")} if chunk.get("usage") else None
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") or ""
    finish_reason = choice.get("finish_reason")
    if not text and finish_reason is None:
        return None
    converted: dict[str, Any] = {
        **head,
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}],
    }
    if finish_reason is not None and choice.get("x_horde"):
        converted["x_horde"] = choice["x_horde"]
    return converted


async def text_events_of_chat(chat_events: AsyncIterator[bytes], request_id: str) -> AsyncIterator[bytes]:
    """A chat completion event stream as ``text_completion`` events: keepalive comments, ``data: [DONE]`` and a
    stream error's ``data: {"error": ...}`` pass through; each chunk becomes :func:`text_chunk_of_chat`'s.
    """
    try:
        async for raw in chat_events:
            if raw in (KEEPALIVE_COMMENT, DONE_EVENT):
                yield raw
                continue
            out = b""
            for line in raw.split(b"\n"):
                if line == DONE_EVENT.strip():
                    out += DONE_EVENT
                elif line.startswith(b"data: "):
                    payload = json.loads(line[len(b"data: ") :])
                    if isinstance(payload, dict) and "error" in payload:
                        out += data_event(payload)
                    elif (converted := text_chunk_of_chat(payload, request_id)) is not None:
                        out += data_event(converted)
            if out:
                yield out
    finally:
        if isinstance(chat_events, AsyncGenerator):
            await chat_events.aclose()  # its own finally ends the wait and the relay (and cancels when not terminal)
