"""Pydantic models of the front's OpenAI chat completions responses: completion, chunk, error envelope.

Field docstrings are public API text (they become ``/openapi.json`` descriptions). ``chat.protocol.chat_request``
re-exports these models, so ``chat.protocol.chat_request.ChatCompletionResponse`` names the same class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from horde_sdk.worker.chat_declaration import ChatFinishReason
from pydantic import BaseModel, ConfigDict


class _Response(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


if TYPE_CHECKING:
    FinishReason = str  # a Literal built at run time is opaque to a type checker; pydantic reads the real one
else:
    FinishReason = Literal[tuple(reason.value for reason in ChatFinishReason)]
    """OpenAI's finish reasons: the values of horde-sdk's ``ChatFinishReason``."""


class ResponseFunctionCall(_Response):
    """The function a reply's tool call invokes."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as JSON text, as the worker submitted them."""


class ResponseToolCall(_Response):
    """A tool call of a reply, as the worker submitted it."""

    id: str
    """The call's id; answer it with a ``tool`` message's ``tool_call_id``."""

    type: Literal["function"]
    """Always ``function``."""

    function: ResponseFunctionCall
    """The function called and its arguments."""


class CompletionMessage(_Response):
    """The assistant's reply."""

    role: Literal["assistant"]
    """Always ``assistant``."""

    content: str | None
    """The reply text. Always present; null only when the worker returned tool calls without text, and an empty
    string when it returned neither text nor calls (see ``x_horde.notice``)."""

    tool_calls: list[ResponseToolCall] | None = None
    """The tool calls, as the worker submitted them; present only when the worker returned calls."""

    reasoning_content: str | None = None
    """The model's reasoning, separate from ``content``, as DeepSeek and OpenRouter return it (not an OpenAI field).
    Present when the worker submitted reasoning, unless ``horde.include_reasoning`` is false."""


class ContextAdjustment(_Response):
    """A change the Horde made to the request at submit, passed through unchanged."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    kind: str
    """The adjustment, such as ``worker_max_length`` (the completion limit lowered to the largest one an online
    worker for the model declares); through the Horde's text generation API also ``kudos_upfront`` (the completion
    limit lowered to the Horde's ceiling for a user without the upfront kudos) and ``worker_max_context_length``
    (``horde.max_context_length`` lowered to the largest one an online worker declares)."""

    requested: int | None = None
    """The value the request asked for, such as its ``max_tokens``."""

    applied: int | None = None
    """The value the request ran under."""


class HordeExtras(_Response):
    """The Horde's additions to a completion or finish chunk; not part of OpenAI's API. Only the keys that apply
    are present.
    """

    notice: str | None = None
    """Present when the reply has no visible text (whitespace is not visible text) and no tool calls, such as a
    reply whose reasoning used the whole completion limit."""

    context_adjustments: list[ContextAdjustment] | None = None
    """The Horde's changes to the request, such as a lowered completion limit, unchanged from the native status;
    omitted when the Horde adjusted nothing."""

    estimated_usage: bool | None = None
    """True when a count in ``usage`` (prompt, completion or reasoning tokens) is estimated from characters
    (about 4 per token) because the worker did not report it; omitted when every count was reported."""

    api: Literal["text"] | None = None
    """``text`` when the model was served through the Horde's text generation API (the model has text workers but
    no chat worker, and ``HORDE_OAI_TEXT_API_FALLBACK`` allows it); omitted on the native chat route."""

    prompt_template: str | None = None
    """On the text API: the prompt format the messages were rendered with (``chatml``, ``llama-3``, ``mistral``,
    ``alpaca``, ``generic-instruct`` or a ``horde_model_reference`` guidance profile id)."""

    max_context_length: int | None = None
    """On the text API: the context length, in tokens, the request asked of the worker (the prompt plus the
    completion limit fit in it)."""

    dropped_messages: int | None = None
    """On the text API: how many of the oldest non-system messages were left out so the prompt fits
    ``max_context_length``; omitted when none were."""


class CompletionChoice(_Response):
    """The one choice of a completion."""

    index: int
    """Always 0: the Horde serves one choice."""

    message: CompletionMessage
    """The reply."""

    logprobs: None
    """Always null: log probabilities are not served."""

    finish_reason: FinishReason
    """Why the worker stopped: ``stop``, ``length``, ``content_filter`` or ``tool_calls``."""

    native_finish_reason: str | None
    """The backend's own finish reason, as the worker reported it (as OpenRouter returns it); null when the worker
    reported none."""


class CompletionTokensDetails(_Response):
    """A breakdown of the completion tokens."""

    reasoning_tokens: int
    """Reasoning tokens: the worker's count, or an estimate from the reasoning characters (then
    ``x_horde.estimated_usage`` is true). Returned even when ``horde.include_reasoning`` hides the reasoning."""


class Usage(_Response):
    """Token counts. Informational: the Horde charges and rewards on the measured reply, reasoning included."""

    prompt_tokens: int
    """Prompt tokens: the worker's count, or an estimate from the request's characters."""

    completion_tokens: int
    """Completion tokens, reasoning and tool calls included: the worker's count, or an estimate from the
    characters capped at the completion limit the request ran under."""

    total_tokens: int
    """``prompt_tokens`` + ``completion_tokens``."""

    completion_tokens_details: CompletionTokensDetails | None = None
    """Present when the reply has reasoning or the worker reported a reasoning count."""


class ChatCompletionResponse(_Response):
    """A completion (``object: chat.completion``)."""

    id: str
    """``chatcmpl-`` followed by the Horde's request id."""

    object: Literal["chat.completion"]
    """Always ``chat.completion``."""

    created: int
    """Unix seconds when the front accepted the request."""

    model: str
    """The model that served the request: with ``models``, the listed model the worker ran."""

    system_fingerprint: str | None
    """``fp_`` and 10 hex digits identifying the worker and model that served the request; null when the Horde did
    not report a worker."""

    choices: list[CompletionChoice]
    """One choice."""

    usage: Usage
    """Token counts."""

    x_horde: HordeExtras | None = None
    """The Horde's additions; omitted when none applies."""


class ChunkFunctionCall(_Response):
    """The function of a streamed tool call, whole."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as JSON text, whole."""


class ChunkToolCall(_Response):
    """A tool call in a stream chunk. The front sends each call whole in one chunk."""

    index: int
    """The call's 0-based position in the reply's ``tool_calls``."""

    id: str
    """The call's id."""

    type: Literal["function"]
    """Always ``function``."""

    function: ChunkFunctionCall
    """The function called and its arguments."""


class ChunkDelta(_Response):
    """The increment of a stream chunk; only the keys the chunk carries are present."""

    role: Literal["assistant"] | None = None
    """``assistant``, on the first chunk."""

    content: str | None = None
    """Reply text."""

    reasoning_content: str | None = None
    """Reasoning text, before the reply text (as DeepSeek and OpenRouter stream it); left out when
    ``horde.include_reasoning`` is false."""

    tool_calls: list[ChunkToolCall] | None = None
    """The reply's tool calls, each whole with its 0-based ``index``, in one chunk without ``content``."""


class ChunkChoice(_Response):
    """The choice of a stream chunk."""

    index: int
    """Always 0."""

    delta: ChunkDelta
    """The increment; ``{}`` on the finish chunk."""

    logprobs: None
    """Always null, on every chunk choice: workers do not return log probabilities."""

    finish_reason: FinishReason | None
    """Null until the finish chunk, which carries ``stop``, ``length``, ``content_filter`` or ``tool_calls``."""

    native_finish_reason: str | None = None
    """The backend's own finish reason; on the finish chunk only (null when the worker reported none)."""

    x_horde: HordeExtras | None = None
    """The Horde's additions, as on a completion; on the finish chunk only (``{}`` when none applies)."""


class ChatCompletionChunk(_Response):
    """A stream event (``object: chat.completion.chunk``)."""

    id: str
    """The completion id, the same on every chunk."""

    object: Literal["chat.completion.chunk"]
    """Always ``chat.completion.chunk``."""

    created: int
    """Unix seconds, the same on every chunk."""

    model: str
    """The model that serves the request, the same on every chunk."""

    system_fingerprint: str | None
    """The same on every chunk: ``fp_`` and 10 hex digits identifying the worker and model, or null when the Horde
    did not report a worker."""

    choices: list[ChunkChoice]
    """One choice, or none on the usage chunk."""

    usage: Usage | None = None
    """Sent only when ``stream_options.include_usage`` is true: the counts on the usage chunk (``choices: []``), the
    last before ``data: [DONE]``, and null on every chunk that has a choice, as OpenAI sends it."""


class OpenAIErrorBody(_Response):
    """Why the front refused or failed the request, in OpenAI's error shape: a message, OpenAI's error type, the
    request path at fault and a code, plus ``metadata`` on the errors that carry more facts.
    """

    message: str
    """What went wrong."""

    type: str
    """OpenAI's error type, such as ``invalid_request_error`` or ``api_error``."""

    param: str | None
    """The request path at fault, or null."""

    code: str | None
    """The error code, such as ``UnsupportedChatParameter`` or ``no_eligible_worker``."""

    metadata: dict[str, Any] | None = None
    """Extra facts, each present only on the errors it applies to: ``request_id`` (the native request's id, on most
    errors after the Horde accepted the request); ``retry_after`` (whole seconds, on an error inside a stream that
    would otherwise carry a ``Retry-After`` header); ``should_retry`` (a boolean, on an error inside a stream that would
    otherwise carry an ``x-should-retry`` header); ``rc``, ``kudos_estimate`` and ``max_kudos`` (with
    ``max_kudos_exceeded``); ``reason``, ``eligible_worker_threads``, ``wait_time`` and ``remaining_budget_seconds``
    (with ``queue_unavailable``); ``fault_reason`` (with ``ChatRequestFaulted``). Absent when there is none."""


class OpenAIErrorEnvelope(_Response):
    """OpenAI's error envelope."""

    error: OpenAIErrorBody
    """What went wrong: ``message``, ``type``, ``param`` and ``code``, with ``metadata`` where it applies."""
