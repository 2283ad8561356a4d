"""OpenAI request -> native payload, and native status -> OpenAI completion and chunks.

Reference sections: "Response shape" (assistant message, reasoning and usage, model and fingerprint), "Buffered
stream events", "Relayed deltas" (:func:`relays_deltas`); native-horde-chat.md "Submit" for the payload.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Final

from chat.horde_client import NativeGeneration, NativeStatus
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.schema import ChatCompletionRequest

CHARACTERS_PER_TOKEN: Final[float] = 4.0
"""The characters-per-token ratio of estimated usage: OpenAI's rule of thumb for English text (about 4 characters
per token). Estimates round up, so any text counts at least one token."""

EMPTY_REPLY_NOTICE: Final[str] = (
    "The worker returned no visible text and no tool calls. Raise max_tokens if the reasoning used the whole limit."
)
"""``x_horde.notice`` of a reply without visible text or tool calls (whitespace is not visible text)."""

HORDE_OPTION_KEYS: Final[tuple[str, ...]] = (
    "conformance",
    "openai_guards",
    "max_kudos",
    "trusted_workers",
    "slow_workers",
    "workers",
    "worker_blacklist",
)
"""``horde`` options forwarded as top-level native keys; ``max_context_length`` goes into ``params`` and
``include_reasoning`` and ``availability_mode`` are the front's own."""

SAMPLING_PARAM_KEYS: Final[tuple[str, ...]] = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "reasoning_effort",
)
"""Request keys forwarded unchanged into the native ``params``."""


def completion_limit(request: ChatCompletionRequest) -> int | None:
    """The client's completion limit: ``max_completion_tokens``, else ``max_tokens``, else None."""
    if request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens


def effective_completion_limit(request: ChatCompletionRequest, status: NativeStatus | None) -> int:
    """The completion limit a generation ran under, in tokens (reference: Reasoning and usage).

    Selected in this order: the lowered value of a ``worker_max_length`` context adjustment, then
    ``max_completion_tokens``, then ``max_tokens``, then the native default ``DEFAULT_CHAT_MAX_TOKENS`` (512).
    """
    for adjustment in (status.context_adjustments if status is not None else None) or []:
        if adjustment.get("kind") == "worker_max_length" and isinstance(adjustment.get("applied"), int):
            return adjustment["applied"]
    limit = completion_limit(request)
    return limit if limit is not None else DEFAULT_CHAT_MAX_TOKENS


def build_native_payload(request: ChatCompletionRequest, *, stream_progress: bool) -> dict[str, Any]:
    """Return the ``POST /v2/generate/chat/async`` body for a validated request.

    Keys the client did not send are omitted, never sent as null. ``stream`` is sent (true) only when
    ``stream_progress`` is set: a request :func:`relays_deltas` selects, on a front with Redis.
    """
    body = request.model_dump(exclude_none=True, by_alias=True)
    payload: dict[str, Any] = {
        "messages": body["messages"],
        "models": request.requested_models,
    }
    params: dict[str, Any] = {}
    limit = completion_limit(request)
    if limit is not None:
        params["max_length"] = limit
    horde = body.get("horde") or {}
    if "max_context_length" in horde:
        params["max_context_length"] = horde["max_context_length"]
    for key in SAMPLING_PARAM_KEYS:
        if key in body:
            params[key] = body[key]
    if "stop" in body:
        params["stop_sequence"] = [body["stop"]] if isinstance(body["stop"], str) else body["stop"]
    if params:
        payload["params"] = params
    for key in ("tools", "tool_choice", "parallel_tool_calls", "response_format"):
        if key in body:
            payload[key] = body[key]
    for key in HORDE_OPTION_KEYS:
        if key in horde:
            payload[key] = horde[key]
    if stream_progress:
        payload["stream"] = True
    return payload


def relays_deltas(request: ChatCompletionRequest) -> bool:
    """Whether a request's text is relayed live (reference: Relayed deltas).

    True for ``stream: true`` with no tools and no ``response_format`` other than ``text``: the Horde verifies tool
    calls and structured output only once the reply is complete, so relaying earlier could expose a refused reply.
    """
    if not request.is_stream or request.tools:
        return False
    return request.response_format is None or request.response_format.type == "text"


def build_system_fingerprint(worker_id: str | None, model: str | None) -> str | None:
    """``fp_`` + the first 10 hex digits of SHA-256 over the worker id and the model; None without a worker id.

    The digest input is the worker id followed by the model id (empty when unknown), as UTF-8.
    """
    if not worker_id:
        return None
    digest = hashlib.sha256(f"{worker_id}{model or ''}".encode()).hexdigest()
    return f"fp_{digest[:10]}"


def response_model(request: ChatCompletionRequest, generation: NativeGeneration | None) -> str:
    """The response's ``model``: the generation's, else the request's ``model`` or first entry of ``models``."""
    if generation is not None and generation.model:
        return generation.model
    return request.requested_models[0]


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: characters / :data:`CHARACTERS_PER_TOKEN`, rounded up; 0 for no text."""
    return math.ceil(len(text) / CHARACTERS_PER_TOKEN) if text else 0


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def estimate_prompt_tokens(request: ChatCompletionRequest) -> int:
    """Estimated prompt tokens over every message's text (used when the worker reported none)."""
    return sum(estimate_tokens(_message_text(message.content)) for message in request.messages)


def _tool_calls_text(tool_calls: list[dict[str, Any]]) -> str:
    return "".join(
        str(call.get("function", {}).get("name", "")) + str(call.get("function", {}).get("arguments", ""))
        for call in tool_calls
    )


def build_usage(
    request: ChatCompletionRequest, status: NativeStatus, generation: NativeGeneration
) -> tuple[dict[str, Any], bool]:
    """Return ``(usage, estimated)`` for a generation (reference: Reasoning and usage).

    Reported counts pass unchanged. A missing completion or reasoning count is estimated from characters (completion:
    reasoning + text + tool calls), each capped at :func:`effective_completion_limit`; ``estimated`` is True then.
    ``completion_tokens_details.reasoning_tokens`` is omitted when the reply has no reasoning and no reported count.
    """
    message = generation.message or {}
    reasoning = message.get("reasoning_content") or ""
    text = message.get("content") or ""
    tool_calls = message.get("tool_calls") or []
    cap = effective_completion_limit(request, status)
    estimated = False

    completion_tokens = generation.completion_tokens
    if completion_tokens is None:
        completion_tokens = min(cap, estimate_tokens(reasoning + text + _tool_calls_text(tool_calls)))
        estimated = True
    reasoning_tokens = generation.reasoning_tokens
    if reasoning_tokens is None and reasoning:
        reasoning_tokens = min(cap, estimate_tokens(reasoning))
        estimated = True
    prompt_tokens = generation.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = estimate_prompt_tokens(request)
        estimated = True
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage, estimated


def build_x_horde(status: NativeStatus, generation: NativeGeneration, *, estimated_usage: bool) -> dict[str, Any]:
    """``x_horde``: ``notice`` for a reply without visible text or calls, ``context_adjustments`` unchanged when the
    Horde adjusted the request, ``estimated_usage`` when a count was estimated."""
    extras: dict[str, Any] = {}
    message = generation.message or {}
    if not (message.get("content") or "").strip() and not message.get("tool_calls"):
        extras["notice"] = EMPTY_REPLY_NOTICE
    if status.context_adjustments:
        extras["context_adjustments"] = status.context_adjustments
    if estimated_usage:
        extras["estimated_usage"] = True
    return extras


def build_message(request: ChatCompletionRequest, generation: NativeGeneration) -> dict[str, Any]:
    """``choices[0].message``: content always present (null only with calls and no text), ``tool_calls`` only when
    returned, ``reasoning_content`` when submitted and not hidden by ``horde.include_reasoning: false``."""
    native = generation.message or {}
    tool_calls = native.get("tool_calls") or []
    content = native.get("content")
    if content is None and not tool_calls:
        content = ""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": call.get("function", {}).get("name"),
                    "arguments": call.get("function", {}).get("arguments"),
                },
            }
            for call in tool_calls
        ]
    reasoning = native.get("reasoning_content")
    if reasoning is not None and request.include_reasoning:
        message["reasoning_content"] = reasoning
    return message


def finish_reason_of(generation: NativeGeneration) -> str:
    """The OpenAI finish reason: the worker's when it is one of OpenAI's four, ``tool_calls`` with calls, else stop."""
    if generation.finish_reason in {"stop", "length", "content_filter", "tool_calls"}:
        return generation.finish_reason
    return "tool_calls" if (generation.message or {}).get("tool_calls") else "stop"


def completion_id(request_id: str) -> str:
    """The OpenAI completion id of a native request: ``chatcmpl-<request id>``."""
    return f"chatcmpl-{request_id}"


def build_completion(
    request: ChatCompletionRequest, status: NativeStatus, request_id: str, created: int
) -> dict[str, Any]:
    """The ``chat.completion`` of a finished native status. The status must carry a generation."""
    generation = status.finished_generation
    if generation is None:
        raise ValueError("A completion needs a finished generation.")
    usage, estimated = build_usage(request, status, generation)
    choice: dict[str, Any] = {
        "index": 0,
        "message": build_message(request, generation),
        "finish_reason": finish_reason_of(generation),
        "logprobs": None,
    }
    if generation.native_finish_reason is not None:
        choice["native_finish_reason"] = generation.native_finish_reason
    completion: dict[str, Any] = {
        "id": completion_id(request_id),
        "object": "chat.completion",
        "created": created,
        "model": response_model(request, generation),
        "system_fingerprint": build_system_fingerprint(generation.worker_id, generation.model),
        "choices": [choice],
        "usage": usage,
    }
    x_horde = build_x_horde(status, generation, estimated_usage=estimated)
    if x_horde:
        completion["x_horde"] = x_horde
    return completion


class ChunkFactory:
    """Builds ``chat.completion.chunk`` objects that share one id, ``created``, model and fingerprint."""

    def __init__(self, request_id: str, created: int, model: str, fingerprint: str | None) -> None:
        self.id = completion_id(request_id)
        self.created = created
        self.model = model
        self.fingerprint = fingerprint

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """A chunk with the given choices (and ``usage`` or other top-level keys)."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
            **extra,
        }

    def delta(self, delta: dict[str, Any], **choice_extra: Any) -> dict[str, Any]:
        """A one-choice chunk carrying ``delta`` (and ``finish_reason`` etc.)."""
        return self.chunk([{"index": 0, "delta": delta, "finish_reason": None, **choice_extra}])


def buffered_chunks(
    request: ChatCompletionRequest, status: NativeStatus, request_id: str, created: int
) -> list[dict[str, Any]]:
    """The chunks of a reply delivered whole, in the reference's order (Buffered stream events 1-6).

    Role chunk; reasoning chunk (when present and not hidden); content chunk (when the reply has text); tool-call
    chunk (each call whole with its 0-based index, no content); finish chunk with ``finish_reason``,
    ``native_finish_reason`` and ``x_horde``; usage chunk with ``choices: []`` when ``include_usage``.
    """
    completion = build_completion(request, status, request_id, created)
    factory = ChunkFactory(request_id, created, completion["model"], completion["system_fingerprint"])
    choice = completion["choices"][0]
    message = choice["message"]
    chunks = [factory.delta({"role": "assistant"})]
    if message.get("reasoning_content"):
        chunks.append(factory.delta({"reasoning_content": message["reasoning_content"]}))
    if message.get("content"):
        chunks.append(factory.delta({"content": message["content"]}))
    if message.get("tool_calls"):
        calls = [{"index": index, **call} for index, call in enumerate(message["tool_calls"])]
        chunks.append(factory.delta({"tool_calls": calls}))
    chunks.append(finish_chunk(factory, completion))
    if request.include_usage:
        chunks.append(factory.chunk([], usage=completion["usage"]))
    return chunks


def finish_chunk(factory: ChunkFactory, completion: dict[str, Any]) -> dict[str, Any]:
    """The finish chunk: ``delta: {}`` with ``finish_reason``, ``native_finish_reason`` and ``x_horde``."""
    choice = completion["choices"][0]
    return factory.chunk(
        [
            {
                "index": 0,
                "delta": {},
                "finish_reason": choice["finish_reason"],
                "native_finish_reason": choice.get("native_finish_reason"),
                "x_horde": completion.get("x_horde", {}),
            }
        ]
    )
