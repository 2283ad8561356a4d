"""Pydantic models of the front's OpenAI chat completions responses: completion, chunk, error envelope.

Field docstrings are public API text (they become ``/openapi.json`` descriptions). ``chat.schema`` re-exports
these models, so ``chat.schema.ChatCompletionResponse`` names the same class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict



class _Response(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class ResponseFunctionCall(_Response):
    """The function a reply's tool call invokes."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as JSON text, as the worker submitted them."""


class ResponseToolCall(_Response):
    """A tool call of a reply, as the worker submitted it."""

    id: str
    """The call's id."""

    type: Literal["function"] = "function"
    """``function``."""

    function: ResponseFunctionCall
    """The function called."""


class CompletionMessage(_Response):
    """The assistant's reply."""

    role: Literal["assistant"] = "assistant"
    """``assistant``."""

    content: str | None
    """The reply text; always present, null only when the worker returned tool calls without text."""

    tool_calls: list[ResponseToolCall] | None = None
    """The tool calls, present only when the worker returned calls."""

    reasoning_content: str | None = None
    """The model's reasoning, as DeepSeek and OpenRouter return it; present when the worker submitted reasoning,
    unless ``horde.include_reasoning`` is false."""


class ContextAdjustment(_Response):
    """A change the Horde made to the request, such as a lowered completion limit."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    kind: str
    """The adjustment, such as ``worker_max_length``."""


class HordeExtras(_Response):
    """The Horde's additions to a completion."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    notice: str | None = None
    """Set when the reply has no visible text and no tool calls."""

    context_adjustments: list[ContextAdjustment] | None = None
    """The native status's adjustments, unchanged; omitted when the Horde adjusted nothing."""

    estimated_usage: bool | None = None
    """True when a token count was estimated from characters rather than reported by the worker."""


class CompletionChoice(_Response):
    """One choice of a completion; the Horde serves one."""

    index: int
    """0."""

    message: CompletionMessage
    """The reply."""

    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"]
    """Why the worker stopped."""

    native_finish_reason: str | None = None
    """The backend's own finish reason, as OpenRouter reports it."""

    logprobs: None = None
    """Always null: log probabilities are not served."""


class CompletionTokensDetails(_Response):
    """A breakdown of the completion tokens."""

    reasoning_tokens: int | None = None
    """Reasoning tokens, reported by the worker or estimated from the reasoning characters."""


class Usage(_Response):
    """Token counts; informational (the Horde charges on the measured reply)."""

    prompt_tokens: int
    """Prompt tokens."""

    completion_tokens: int
    """Completion tokens, reasoning included."""

    total_tokens: int
    """Their sum."""

    completion_tokens_details: CompletionTokensDetails | None = None
    """The reasoning share, when the reply has reasoning or the worker reported a count."""


class ChatCompletionResponse(_Response):
    """A completion (``object: chat.completion``)."""

    id: str
    """``chatcmpl-`` followed by the native request id."""

    object: Literal["chat.completion"] = "chat.completion"
    """``chat.completion``."""

    created: int
    """Unix seconds when the front accepted the request."""

    model: str
    """The model that served the request."""

    system_fingerprint: str | None
    """``fp_`` and 10 hex digits identifying the worker and model; null without a worker id."""

    choices: list[CompletionChoice]
    """One choice."""

    usage: Usage
    """Token counts."""

    x_horde: HordeExtras | None = None
    """The Horde's additions."""


class ChunkDelta(_Response):
    """The increment of a stream chunk."""

    role: Literal["assistant"] | None = None
    """``assistant``, on the first chunk."""

    content: str | None = None
    """Reply text."""

    reasoning_content: str | None = None
    """Reasoning text."""

    tool_calls: list[dict[str, Any]] | None = None
    """Tool calls, each whole with its 0-based ``index``."""


class ChunkChoice(_Response):
    """The choice of a stream chunk."""

    index: int
    """0."""

    delta: ChunkDelta
    """The increment."""

    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"] | None = None
    """Set on the finish chunk."""

    native_finish_reason: str | None = None
    """The backend's own finish reason, on the finish chunk."""

    x_horde: HordeExtras | None = None
    """The Horde's additions, on the finish chunk."""


class ChatCompletionChunk(_Response):
    """A stream event (``object: chat.completion.chunk``)."""

    id: str
    """The completion id, the same on every chunk."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    """``chat.completion.chunk``."""

    created: int
    """Unix seconds, the same on every chunk."""

    model: str
    """The model that serves the request."""

    system_fingerprint: str | None
    """The same on every chunk."""

    choices: list[ChunkChoice]
    """One choice, or none on the usage chunk."""

    usage: Usage | None = None
    """On the last chunk when ``stream_options.include_usage`` is true."""


class OpenAIErrorBody(_Response):
    """An error."""

    message: str
    """What went wrong."""

    type: str
    """OpenAI's error type, such as ``invalid_request_error`` or ``api_error``."""

    param: str | None
    """The request path at fault, or null."""

    code: str | None
    """The error code, such as ``UnsupportedChatParameter`` or ``no_eligible_worker``."""

    metadata: dict[str, Any] | None = None
    """Extra facts: ``request_id``, ``retry_after``, ``rc``, ..."""


class OpenAIErrorEnvelope(_Response):
    """OpenAI's error envelope."""

    error: OpenAIErrorBody
    """The error."""
