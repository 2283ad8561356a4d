"""Pydantic models of the front's OpenAI chat completions request and response.

Field docstrings are public API text: they become the field descriptions of ``/openapi.json``. They say where the
front differs from OpenAI's chat completions reference. Details only maintainers need are comments above the field.

The request model validates a body that screening (chat.screening) has already cleaned: unknown top-level keys are
refused there, unknown keys inside messages, tools and ``tool_choice`` are dropped there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from horde_sdk.generation_parameters.text.chat_policy import ChatConformance, ChatReasoningEffort
from pydantic import BaseModel, ConfigDict, Field, model_validator

# ---------------------------------------------------------------------------------------------------------------------
# Request


class _Strict(BaseModel):
    """A model that refuses keys it does not define (screening reports them at their path first)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class TextContentPart(_Strict):
    """A text part of a message's content array."""

    type: Literal["text"]
    """Always ``text``."""

    text: str
    """The text."""


class ImageUrl(_Strict):
    """The image of an ``image_url`` content part."""

    url: str
    """An ``https`` URL or a ``data:image/...;base64,`` URL. Served only by workers that declare vision."""

    detail: Literal["auto", "low", "high"] | None = None
    """OpenAI's detail hint; accepted and forwarded, workers may ignore it."""


class ImageContentPart(_Strict):
    """An image part of a user message's content array."""

    type: Literal["image_url"]
    """Always ``image_url``."""

    image_url: ImageUrl
    """The image."""


ContentPart = Annotated[TextContentPart | ImageContentPart, Field(discriminator="type")]


class FunctionCall(_Strict):
    """The function a history tool call invoked."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as the JSON text the model produced."""


class ToolCall(_Strict):
    """A tool call in an assistant message of the history, or in a reply."""

    id: str
    """The call's id, answered by a ``tool`` message's ``tool_call_id``."""

    type: Literal["function"] = "function"
    """Always ``function``."""

    function: FunctionCall
    """The function called and its arguments."""


class SystemMessage(_Strict):
    """A system message: instructions for the model."""

    role: Literal["system"]
    """``system``."""

    content: str | list[TextContentPart]
    """The instructions, as a string or text parts."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class DeveloperMessage(_Strict):
    """A developer message: OpenAI's newer name for system instructions."""

    role: Literal["developer"]
    """``developer``."""

    content: str | list[TextContentPart]
    """The instructions, as a string or text parts."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class UserMessage(_Strict):
    """A user message."""

    role: Literal["user"]
    """``user``."""

    content: str | list[ContentPart]
    """The message, as a string or text and image parts. Image parts need a model with vision."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class AssistantMessage(_Strict):
    """An earlier assistant reply in the history."""

    role: Literal["assistant"]
    """``assistant``."""

    content: str | list[TextContentPart] | None = None
    """The reply text; may be missing, null or empty on a turn that only calls tools."""

    tool_calls: list[ToolCall] | None = None
    """The tool calls the reply made; each must be answered by a following ``tool`` message."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class ToolMessage(_Strict):
    """A tool's result, answering one call of the preceding assistant message."""

    role: Literal["tool"]
    """``tool``."""

    content: str | list[TextContentPart]
    """The tool's result."""

    tool_call_id: str
    """The id of the call this message answers."""


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class FunctionDefinition(_Strict):
    """A function the model may call."""

    name: str
    """The function's name."""

    description: str | None = None
    """What the function does; rendered into the worker's prompt."""

    parameters: dict[str, Any] | None = None
    """The arguments as a JSON Schema object, forwarded unchanged."""

    strict: bool | None = None
    """OpenAI's strict function calling flag; accepted and forwarded."""


class ToolDefinition(_Strict):
    """A tool offered to the model. Only function tools exist."""

    type: Literal["function"]
    """``function``."""

    function: FunctionDefinition
    """The function."""


class ToolChoiceFunction(_Strict):
    """The function a ``tool_choice`` object forces."""

    name: str
    """The function's name; must be one of ``tools``."""


class NamedToolChoice(_Strict):
    """A ``tool_choice`` that forces one function."""

    type: Literal["function"]
    """``function``."""

    function: ToolChoiceFunction
    """The function to call."""


class StreamOptions(_Strict):
    """Options of a streamed response."""

    include_usage: bool | None = None
    """When true, a last chunk with ``choices: []`` carries ``usage`` before ``data: [DONE]``."""


class JsonSchemaFormat(_Strict):
    """The schema of a ``json_schema`` response format."""

    name: str
    """The schema's name."""

    description: str | None = None
    """What the schema describes."""

    schema_: dict[str, Any] = Field(alias="schema")
    """The JSON Schema the reply must satisfy."""

    strict: bool | None = None
    """Strict adherence: needs a worker that guarantees structured output under ``strict`` conformance."""


class ResponseFormat(_Strict):
    """The format the reply must take."""

    type: Literal["text", "json_object", "json_schema"]
    """``text`` (the default), ``json_object`` or ``json_schema``."""

    json_schema: JsonSchemaFormat | None = None
    """The schema, required with ``json_schema``."""


class HordeOptions(_Strict):
    """The Horde's own request options; not part of OpenAI's API."""

    conformance: ChatConformance | None = None
    """``strict`` (default): only workers that guarantee every part of OpenAI's contract the request uses serve it.
    ``best_effort``: guarantees are not required."""

    openai_guards: bool | None = None
    """Apply OpenAI's request guards (such as the word "json" for ``json_object``)."""

    max_kudos: float | None = Field(default=None, ge=0)
    """The most kudos the request may cost; the Horde refuses it before creating it when its estimate is higher."""

    max_context_length: int | None = Field(default=None, ge=1)
    """The context length, in tokens, the serving worker must accept."""

    trusted_workers: bool | None = None
    """Serve only on trusted workers."""

    slow_workers: bool | None = None
    """Allow slow workers."""

    workers: list[str] | None = None
    """Worker ids to serve on (or to avoid with ``worker_blacklist``)."""

    worker_blacklist: bool | None = None
    """Treat ``workers`` as a list to avoid."""

    include_reasoning: bool | None = None
    """False hides ``reasoning_content``; the reasoning token count is still reported. The front's own option."""

    availability_mode: Literal["wait", "fail_fast"] | None = None
    """``wait`` (default) queues on the volunteer network; ``fail_fast`` refuses at once with ``queue_unavailable``
    when no eligible worker thread exists or the estimated wait exceeds the front's timeout. The front's own option."""


class ChatCompletionRequest(_Strict):
    """The body of ``POST /v1/chat/completions``."""

    messages: list[Message]
    """The conversation, oldest first."""

    model: str | None = None
    """The model to use. Send exactly one of ``model`` and ``models``."""

    models: list[str] | None = None
    """1 to 5 distinct model ids, any of which may serve the request (OpenRouter's fallback list). Send exactly
    one of ``model`` and ``models``."""

    stream: bool | None = None
    """Stream the reply as server-sent events."""

    stream_options: StreamOptions | None = None
    """Options of a streamed reply."""

    max_tokens: int | None = None
    """The completion limit in tokens (16 to 16384 on the Horde)."""

    max_completion_tokens: int | None = None
    """OpenAI's newer name for ``max_tokens``; takes precedence over it."""

    temperature: float | None = None
    """Sampling temperature, 0 to 2."""

    top_p: float | None = None
    """Nucleus sampling, 0 to 1."""

    frequency_penalty: float | None = None
    """-2 to 2; a non-zero value needs a worker that applies it."""

    presence_penalty: float | None = None
    """-2 to 2; a non-zero value needs a worker that applies it."""

    stop: str | list[str] | None = None
    """Up to 4 stop sequences."""

    seed: int | None = None
    """A sampling seed; needs a worker that honours it."""

    n: int | None = None
    """The number of choices; only 1 is served."""

    reasoning_effort: ChatReasoningEffort | None = None
    """How much the model reasons; needs a worker that applies it."""

    tools: list[ToolDefinition] | None = None
    """Functions the model may call."""

    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """Whether and which tool the model must call."""

    parallel_tool_calls: bool | None = None
    """Whether the reply may carry more than one tool call."""

    response_format: ResponseFormat | None = None
    """The format of the reply."""

    user: str | None = None
    """An end-user identifier. Accepted and not forwarded."""

    safety_identifier: str | None = None
    """An end-user identifier for safety systems. Accepted and not forwarded."""

    prompt_cache_key: str | None = None
    """A cache key. Accepted and not forwarded: workers keep no prompt cache across requests."""

    metadata: dict[str, str] | None = None
    """Key-value tags. Accepted and not forwarded."""

    horde: HordeOptions | None = None
    """The Horde's own options."""

    @model_validator(mode="after")
    def _exactly_one_model_key(self) -> ChatCompletionRequest:
        if (self.model is None) == (self.models is None):
            raise ValueError("Send exactly one of 'model' and 'models'.")
        return self

    @property
    def requested_models(self) -> list[str]:
        """The model ids asked for: ``[model]`` or ``models``."""
        return [self.model] if self.model is not None else list(self.models or [])

    @property
    def is_stream(self) -> bool:
        """Whether the client asked for a streamed reply."""
        return bool(self.stream)

    @property
    def include_usage(self) -> bool:
        """Whether a streamed reply ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def include_reasoning(self) -> bool:
        """Whether ``reasoning_content`` is returned (``horde.include_reasoning``, default true)."""
        return not (self.horde is not None and self.horde.include_reasoning is False)

    @property
    def availability_mode(self) -> str:
        """``wait`` or ``fail_fast`` (``horde.availability_mode``, default ``wait``)."""
        return (self.horde.availability_mode if self.horde is not None else None) or "wait"


# The response models live in chat.response_schema; they are part of this module's public names.
from chat.response_schema import (  # noqa: E402
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChunkChoice,
    ChunkDelta,
    CompletionChoice,
    CompletionMessage,
    CompletionTokensDetails,
    ContextAdjustment,
    HordeExtras,
    OpenAIErrorBody,
    OpenAIErrorEnvelope,
    ResponseFunctionCall,
    ResponseToolCall,
    Usage,
)

__all__ = [
    "AssistantMessage",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChunkChoice",
    "ChunkDelta",
    "CompletionChoice",
    "CompletionMessage",
    "CompletionTokensDetails",
    "ContextAdjustment",
    "DeveloperMessage",
    "HordeExtras",
    "HordeOptions",
    "OpenAIErrorBody",
    "OpenAIErrorEnvelope",
    "ResponseFunctionCall",
    "ResponseToolCall",
    "SystemMessage",
    "ToolMessage",
    "Usage",
    "UserMessage",
]
