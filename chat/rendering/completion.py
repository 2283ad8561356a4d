"""Native status -> OpenAI completion and chunks (the request -> payload direction is chat.horde.native_payload).

Reference sections: "Response shape" with its subsections "Assistant message and adjustments", "Reasoning and usage",
"Model and fingerprint" and "Buffered stream events"; "Relayed deltas" (:func:`relays_deltas`); native-horde-chat.md
"Submit" for the payload and "Status" for the generation read here.

Where the pieces sit (the reference's paths, and OpenRouter's for ``native_finish_reason``):

- a completion: ``choices[0]`` holds ``message``, ``finish_reason``, ``native_finish_reason`` (null when the worker
  reported none) and ``logprobs`` (null); the top level holds ``model``, ``system_fingerprint``, ``usage`` and
  ``x_horde`` (left out when it would be empty);
- a stream: every chunk shares ``id``, ``created``, ``model`` and ``system_fingerprint``; every chunk choice holds
  ``logprobs: null``; with ``stream_options.include_usage`` every chunk with a choice holds ``usage: null``; the finish
  chunk's choice holds ``delta: {}``, ``finish_reason``, ``native_finish_reason`` and ``x_horde`` (``{}`` when it is
  empty); the usage chunk holds ``choices: []`` and ``usage``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, Literal

from horde_sdk.worker.chat_declaration import ChatFinishReason

from chat.horde.native import NativeGeneration, NativeStatus
from chat.horde.tokens import completion_limit, estimate_prompt_tokens, estimate_tokens, tool_calls_text
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.protocol.chat_request import ChatCompletionRequest

OPENAI_FINISH_REASONS: Final[frozenset[str]] = frozenset(reason.value for reason in ChatFinishReason)
"""``stop``, ``length``, ``content_filter`` and ``tool_calls``: horde-sdk's ``ChatFinishReason``, OpenAI's set."""

WORKER_MAX_LENGTH_ADJUSTMENT: Final[str] = "worker_max_length"
"""The ``context_adjustments[].kind`` of a completion limit the Horde lowered at submit (its ``applied`` value)."""

KUDOS_UPFRONT_ADJUSTMENT: Final[str] = "kudos_upfront"
"""The ``context_adjustments[].kind`` of a completion limit the front lowered on the text path to the Horde's ceiling
for a user without the upfront kudos (chat.horde.upfront_kudos)."""

COMPLETION_LIMIT_ADJUSTMENTS: Final[frozenset[str]] = frozenset(
    {WORKER_MAX_LENGTH_ADJUSTMENT, KUDOS_UPFRONT_ADJUSTMENT}
)
"""The adjustment kinds whose ``applied`` value is the completion limit a generation ran under."""

NoVisibleTextContent = Literal["reasoning_only", "empty"]
"""The content of a reply without visible text or tool calls (the ``content`` of Completion attributes)."""

REASONING_ONLY_NOTICE: Final[str] = "The reply has reasoning but no visible text and no tool calls."
"""``x_horde.notice`` of a reply whose only visible text is its reasoning (whitespace is not visible text)."""

EMPTY_REPLY_NOTICE: Final[str] = "The reply has no visible text and no tool calls."
"""``x_horde.notice`` of a reply without visible text, reasoning or tool calls."""

LENGTH_NOTICE_SUFFIX: Final[str] = (
    " The worker stopped at the completion limit of {limit} tokens; retry with a higher max_tokens{effort}."
)
"""Added to the notice when ``finish_reason`` is ``length``: the output budget ran out before a visible reply (the
OpenAI API cannot resume that reasoning). ``{effort}`` is ``" or a lower reasoning_effort"`` for a reasoning-only
reply, else empty."""


def lowered_completion_limit(status: NativeStatus | None) -> int | None:
    """The smallest ``applied`` value of the status's :data:`COMPLETION_LIMIT_ADJUSTMENTS` (``worker_max_length``,
    and ``kudos_upfront`` on the text path), or None when the limit was not lowered or no status was read.
    """
    applied = [
        adjustment.get("applied")
        for adjustment in (status.context_adjustments if status is not None else None) or []
        if isinstance(adjustment, dict) and adjustment.get("kind") in COMPLETION_LIMIT_ADJUSTMENTS
    ]
    values = [value for value in applied if isinstance(value, int) and not isinstance(value, bool)]
    return min(values) if values else None


def effective_completion_limit(request: ChatCompletionRequest, status: NativeStatus | None) -> int:
    """The completion limit a generation ran under, in tokens (reference: Reasoning and usage).

    Selected in this order: the lowered value (``applied``) of a ``worker_max_length`` context adjustment of the
    native status (the smallest, with the text path's ``kudos_upfront``: :func:`lowered_completion_limit`), then
    ``max_completion_tokens``, then ``max_tokens``, then the native default ``DEFAULT_CHAT_MAX_TOKENS`` (512).
    ``status`` may be None (no status read yet).
    """
    lowered = lowered_completion_limit(status)
    if lowered is not None:
        return lowered
    limit = completion_limit(request)
    return limit if limit is not None else DEFAULT_CHAT_MAX_TOKENS


def build_system_fingerprint(worker_id: str | None, model: str | None) -> str | None:
    """``fp_`` + the first 10 hex digits of SHA-256 over the worker id and the model; None without a worker id.

    Reference: Model and fingerprint. The digest input is the worker id immediately followed by the model id (the
    empty string when None), encoded as UTF-8: ``sha256(f"{worker_id}{model}".encode()).hexdigest()[:10]``. Worker
    ids are UUIDs of fixed length, so the concatenation is unambiguous. Callers pass the model the response names
    (:func:`response_model`), so a buffered and a relayed stream of the same worker and model agree.
    """
    if not worker_id:
        return None
    digest = hashlib.sha256(f"{worker_id}{model or ''}".encode()).hexdigest()
    return f"fp_{digest[:10]}"


def response_model(request: ChatCompletionRequest, generation: NativeGeneration | None) -> str:
    """The response's ``model``: the first generation's model (with ``models``, the listed one that served the
    request), else the request's ``model`` or the first entry of ``models`` (reference: Model and fingerprint).
    """
    if generation is not None and generation.model:
        return generation.model
    return request.requested_models[0]


def reply_reasoning(generation: NativeGeneration) -> str:
    """The reasoning the worker submitted (``message.reasoning_content``), or ``""`` without any."""
    reasoning = (generation.message or {}).get("reasoning_content")
    return reasoning if isinstance(reasoning, str) else ""


def reply_text(generation: NativeGeneration) -> str:
    """The reply text the worker submitted (``message.content``), or ``""`` when it is null or absent."""
    content = (generation.message or {}).get("content")
    return content if isinstance(content, str) else ""


def reply_tool_calls(generation: NativeGeneration) -> list[dict[str, Any]]:
    """The tool calls the worker submitted (``message.tool_calls``), or ``[]``."""
    calls = (generation.message or {}).get("tool_calls")
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def no_visible_text_content(generation: NativeGeneration) -> NoVisibleTextContent | None:
    """``reasoning_only`` or ``empty`` for a reply without visible text or tool calls, else None.

    Whitespace is not visible text. Reasoning is read from the native generation, so ``horde.include_reasoning:
    false`` does not change the category (reference: Completion attributes).
    """
    if reply_text(generation).strip() or reply_tool_calls(generation):
        return None
    return "reasoning_only" if reply_reasoning(generation).strip() else "empty"


def build_usage(
    request: ChatCompletionRequest, status: NativeStatus | None, generation: NativeGeneration
) -> tuple[dict[str, Any], bool]:
    """Return ``(usage, estimated)`` for a generation (reference: Reasoning and usage).

    Counts the worker reported pass unchanged. A missing count is estimated at chat.horde.tokens.CHARACTERS_PER_TOKEN:
    ``completion_tokens`` from the reasoning, reply text and tool calls together, ``reasoning_tokens`` from the
    reasoning characters, each capped at :func:`effective_completion_limit`; ``prompt_tokens`` from the request
    (:func:`estimate_prompt_tokens`, not capped). ``total_tokens`` is their sum.
    ``completion_tokens_details.reasoning_tokens`` is present when the worker reported a count or the reply has
    reasoning, whether or not ``reasoning_content`` is returned, and omitted otherwise.

    ``estimated`` is True when any of the three counts is an estimate, the prompt count included: it sets
    ``x_horde.estimated_usage`` and tells the client that ``usage`` is not entirely the worker's own numbers.
    """
    reasoning = reply_reasoning(generation)
    cap = effective_completion_limit(request, status)
    estimated = False

    completion_tokens = generation.completion_tokens
    if completion_tokens is None:
        characters = reasoning + reply_text(generation) + tool_calls_text(reply_tool_calls(generation))
        completion_tokens = min(cap, estimate_tokens(characters))
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


def build_notice(generation: NativeGeneration, finish_reason: str, limit: int) -> str | None:
    """``x_horde.notice`` for a reply without visible text or tool calls, else None.

    :data:`REASONING_ONLY_NOTICE` or :data:`EMPTY_REPLY_NOTICE`, followed by :data:`LENGTH_NOTICE_SUFFIX` when the
    worker stopped at the completion limit ``limit`` (``finish_reason: length``).
    """
    content = no_visible_text_content(generation)
    if content is None:
        return None
    notice = REASONING_ONLY_NOTICE if content == "reasoning_only" else EMPTY_REPLY_NOTICE
    if finish_reason == ChatFinishReason.LENGTH.value:
        effort = " or a lower reasoning_effort" if content == "reasoning_only" else ""
        notice += LENGTH_NOTICE_SUFFIX.format(limit=limit, effort=effort)
    return notice


def build_x_horde(
    request: ChatCompletionRequest,
    status: NativeStatus,
    generation: NativeGeneration,
    *,
    estimated_usage: bool,
) -> dict[str, Any]:
    """``x_horde``, with only the keys that apply, in this order (reference: Assistant message and adjustments):

    ``notice`` for a reply without visible text or tool calls (:func:`build_notice`); ``context_adjustments``, the
    native status's list unchanged, when the Horde adjusted the request (left out when the list is absent or empty);
    ``estimated_usage: true`` when a usage count is an estimate (:func:`build_usage`); then the front's own keys for
    the request (``NativeStatus.front_x_horde``: ``api``, ``prompt_template``, ... on the text API path).
    """
    extras: dict[str, Any] = {}
    notice = build_notice(generation, finish_reason_of(generation), effective_completion_limit(request, status))
    if notice is not None:
        extras["notice"] = notice
    if status.context_adjustments:
        extras["context_adjustments"] = status.context_adjustments
    if estimated_usage:
        extras["estimated_usage"] = True
    extras.update(status.front_x_horde)
    return extras


def build_message(request: ChatCompletionRequest, generation: NativeGeneration) -> dict[str, Any]:
    """``choices[0].message`` (reference: Assistant message and adjustments, Reasoning and usage).

    ``{"role": "assistant", "content": ...}`` with ``content`` always present: the worker's text, null only when
    the worker returned tool calls without text (null or empty content), ``""`` when it returned neither. Then
    ``tool_calls``, only when the worker returned calls, each ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` as submitted; then ``reasoning_content`` when the worker submitted reasoning, unless
    ``horde.include_reasoning`` is false.
    """
    tool_calls = reply_tool_calls(generation)
    text = reply_text(generation)
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls and not text else text}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": (call.get("function") or {}).get("name"),
                    "arguments": (call.get("function") or {}).get("arguments"),
                },
            }
            for call in tool_calls
        ]
    reasoning = reply_reasoning(generation)
    if reasoning and request.include_reasoning:
        message["reasoning_content"] = reasoning
    return message


def finish_reason_of(generation: NativeGeneration) -> str:
    """The OpenAI ``finish_reason``: the worker's when it is one of :data:`OPENAI_FINISH_REASONS` (the worker
    normalises it on submit); otherwise ``tool_calls`` when the reply has calls, else ``stop``.
    """
    reason = generation.finish_reason
    if reason is not None and reason in OPENAI_FINISH_REASONS:
        return reason
    fallback: str = ChatFinishReason.TOOL_CALLS.value if reply_tool_calls(generation) else ChatFinishReason.STOP.value
    return fallback


def completion_id(request_id: str) -> str:
    """The OpenAI completion id of a native request: ``chatcmpl-<request id>``."""
    return f"chatcmpl-{request_id}"


def build_completion(
    request: ChatCompletionRequest, status: NativeStatus, request_id: str, created: int
) -> dict[str, Any]:
    """The ``chat.completion`` of a finished native status, built from its first generation.

    Shape (see the module docstring): ``id``, ``object``, ``created``, ``model`` (:func:`response_model`),
    ``system_fingerprint`` (:func:`build_system_fingerprint` over the generation's worker id and that model),
    ``choices`` (one: ``index``, ``message``, ``logprobs``, ``finish_reason``, ``native_finish_reason``), ``usage``
    (:func:`build_usage`) and ``x_horde`` (:func:`build_x_horde`, left out when empty).

    Raises:
        ValueError: The status has no finished generation; the front never returns a completion without one
            (reference: Completion without a generation).
    """
    generation = status.finished_generation
    if generation is None:
        raise ValueError("A completion needs a finished generation.")
    usage, estimated = build_usage(request, status, generation)
    model = response_model(request, generation)
    choice: dict[str, Any] = {
        "index": 0,
        "message": build_message(request, generation),
        "logprobs": None,
        "finish_reason": finish_reason_of(generation),
        "native_finish_reason": generation.native_finish_reason,
    }
    completion: dict[str, Any] = {
        "id": completion_id(request_id),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": build_system_fingerprint(generation.worker_id, model),
        "choices": [choice],
        "usage": usage,
    }
    x_horde = build_x_horde(request, status, generation, estimated_usage=estimated)
    if x_horde:
        completion["x_horde"] = x_horde
    return completion


class ChunkFactory:
    """Builds ``chat.completion.chunk`` objects that share one id, ``created``, model and fingerprint.

    Reference: Model and fingerprint ("every stream chunk uses the same fingerprint"). A buffered stream takes the
    model and fingerprint of its completion; a relayed stream takes them from its first delta and keeps them for the
    final chunks. Every chunk choice carries ``logprobs: null``, as the completion's choice does; with
    ``include_usage`` (``stream_options.include_usage``) every chunk that has a choice carries ``usage: null``, as
    OpenAI sends it, so a client reading ``chunk["usage"]`` finds the key on every chunk.
    """

    def __init__(
        self, request_id: str, created: int, model: str, fingerprint: str | None, *, include_usage: bool = False
    ) -> None:
        self.id = completion_id(request_id)
        self.created = created
        self.model = model
        self.fingerprint = fingerprint
        self.include_usage = include_usage

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """A chunk with the given choices (and ``usage`` or other top-level keys); ``usage: null`` when
        ``include_usage`` and ``choices`` is not empty and no ``usage`` is given.
        """
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
            **extra,
        }
        if self.include_usage and choices:
            chunk.setdefault("usage", None)
        return chunk

    def delta(self, delta: dict[str, Any], **choice_extra: Any) -> dict[str, Any]:
        """A one-choice chunk ``{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}`` (plus
        ``choice_extra``).
        """
        return self.chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, **choice_extra}])


def tool_call_deltas(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``delta.tool_calls`` of a tool-call chunk: each call whole, ``{"index", "id", "type", "function"}``, with
    its 0-based index (reference: Buffered stream events 4).
    """
    return [{"index": index, **call} for index, call in enumerate(tool_calls)]


def buffered_chunks(
    request: ChatCompletionRequest, status: NativeStatus, request_id: str, created: int
) -> list[dict[str, Any]]:
    """The chunks of a reply delivered whole, in the reference's order (Buffered stream events 1-6).

    1. ``delta: {"role": "assistant"}``;
    2. ``delta: {"reasoning_content": <whole>}`` when the message has reasoning and it is not hidden;
    3. ``delta: {"content": <whole>}`` when the reply has text;
    4. ``delta: {"tool_calls": [...]}`` when the reply has calls (:func:`tool_call_deltas`), without ``content``;
    5. the finish chunk (:func:`finish_chunk`);
    6. ``choices: []`` with ``usage`` when ``stream_options.include_usage`` is true (:func:`usage_chunk`).

    Every chunk has the completion's id, ``created``, model and fingerprint. The caller sends ``data: [DONE]`` after.
    """
    completion = build_completion(request, status, request_id, created)
    factory = ChunkFactory(
        request_id,
        created,
        completion["model"],
        completion["system_fingerprint"],
        include_usage=request.include_usage,
    )
    message = completion["choices"][0]["message"]
    chunks = [factory.delta({"role": "assistant"})]
    if message.get("reasoning_content"):
        chunks.append(factory.delta({"reasoning_content": message["reasoning_content"]}))
    if message.get("content"):
        chunks.append(factory.delta({"content": message["content"]}))
    if message.get("tool_calls"):
        chunks.append(factory.delta({"tool_calls": tool_call_deltas(message["tool_calls"])}))
    chunks.append(finish_chunk(factory, completion))
    if request.include_usage:
        chunks.append(usage_chunk(factory, completion))
    return chunks


def finish_chunk(factory: ChunkFactory, completion: dict[str, Any]) -> dict[str, Any]:
    """The finish chunk: one choice with ``delta: {}``, ``logprobs: null``, the completion's ``finish_reason`` and
    ``native_finish_reason``, and its ``x_horde`` (``{}`` when the completion has none).
    """
    choice = completion["choices"][0]
    return factory.chunk(
        [
            {
                "index": 0,
                "delta": {},
                "logprobs": None,
                "finish_reason": choice["finish_reason"],
                "native_finish_reason": choice.get("native_finish_reason"),
                "x_horde": completion.get("x_horde", {}),
            }
        ]
    )


def usage_chunk(factory: ChunkFactory, completion: dict[str, Any]) -> dict[str, Any]:
    """The usage chunk: ``choices: []`` and the completion's ``usage`` (sent when ``include_usage`` is true)."""
    return factory.chunk([], usage=completion["usage"])
