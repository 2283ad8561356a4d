"""Pydantic models of the front's OpenAI chat completions request and response.

Field docstrings are public API text: they become the field descriptions of ``/openapi.json``. They say where the
front differs from OpenAI's chat completions reference. Details only maintainers need are comments above the field.

The request model validates a body that screening (chat.reading.screening) has already cleaned (reference: Request keys,
Parameter screening): unknown top-level keys are refused there, unknown keys inside messages, tools and
``tool_choice`` are dropped there. Every other object, and the top level, refuses unknown keys.

Validation is strict, as OpenAI's is: a string is never read as a number or a boolean, and a decimal is never read as
an integer. A union is chosen by the JSON type or tag of the value (``role`` of a message, ``type`` of a content part
or response format), so a failure names one path. The union tags below (``<user>``, ``<array>``, ...) are pydantic's
bookkeeping, listed in :data:`UNION_TAGS` so chat.reading.screening leaves them out of an error's ``param``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MAX_CHAT_STOP_SEQUENCES,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
    SUPPORTED_CHAT_CHOICE_COUNT,
    chat_schema_exceeds_nesting,
)
from horde_sdk.generation_parameters.text.chat_policy import (
    ChatConformance,
    ChatReasoningEffort,
    ChatResponseFormatType,
    ChatToolChoiceMode,
)
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from chat.limits import MAX_CHAT_MODEL_COUNT, MAX_MODEL_ID_LENGTH

# ---------------------------------------------------------------------------------------------------------------------
# Validation vocabulary shared with chat.reading.screening (which turns pydantic errors into OpenAI's wording)

MESSAGE_ROLES: Final[tuple[str, ...]] = ("system", "developer", "user", "assistant", "tool")
"""The message roles the front serves (reference: Message roles); OpenAI's deprecated ``function`` is refused."""

USER_CONTENT_PART_TYPES: Final[tuple[str, ...]] = ("text", "image_url")
"""The content part types of a user message; every other role takes ``text`` parts only, the assistant ``text`` and
``refusal`` parts."""

ASSISTANT_CONTENT_PART_TYPES: Final[tuple[str, ...]] = ("text", "refusal")
"""The content part types of an assistant message in the history (OpenAI's): text, and the refusal OpenAI's models
send in place of text."""

RESPONSE_FORMAT_TYPES: Final[tuple[str, ...]] = ("text", *(format_type.value for format_type in ChatResponseFormatType))
"""The ``response_format.type`` values OpenAI's chat completions define: the unconstrained ``text`` and horde-sdk's
``ChatResponseFormatType`` (which has no member for ``text``)."""

TOOL_CHOICE_MODES: Final[tuple[str, ...]] = tuple(
    mode.value for mode in ChatToolChoiceMode if mode is not ChatToolChoiceMode.FUNCTION
)
"""The string ``tool_choice`` values: horde-sdk's ``ChatToolChoiceMode`` without ``function``, which is only the
``type`` of the object form."""

if TYPE_CHECKING:
    ToolChoiceMode = str  # a Literal built at run time is opaque to a type checker; pydantic reads the real one
else:
    ToolChoiceMode = Literal[TOOL_CHOICE_MODES]

INVALID_JSON_TYPE_ERROR: Final = "invalid_json_type"
"""Pydantic error type of a value whose JSON type no member of a union takes; ``ctx.expected`` names the types."""

INVALID_TAG_ERROR: Final = "invalid_tagged_object"
"""Pydantic error type of a tagged object (message, content part, response format) without a valid tag;
``ctx.key`` is the tag key (``role`` or ``type``) and ``ctx.supported`` lists its values."""

REQUEST_RULE_ERROR: Final = "chat_request_rule"
"""Pydantic error type of a request rule broken across fields; ``ctx`` holds the OpenAI ``param``, ``code`` and the
whole ``message``."""

SCHEMA_NESTING_ERROR: Final = "schema_nesting"
"""Pydantic error type of a JSON Schema nested deeper than horde-sdk's ``MAX_CHAT_SCHEMA_NESTING``."""

UNION_TAGS: Final[frozenset[str]] = frozenset(
    {
        "<string>",
        "<array>",
        "<object>",
        *(f"<{role}>" for role in MESSAGE_ROLES),
        *(f"<{part_type}>" for part_type in (*USER_CONTENT_PART_TYPES, *ASSISTANT_CONTENT_PART_TYPES)),
        *(f"<{format_type}>" for format_type in RESPONSE_FORMAT_TYPES),
    }
)
"""Every tag the request's unions put into a pydantic error location; none is a request key."""


FUNCTION_NAME_PATTERN: Final[str] = r"^[a-zA-Z0-9_-]+$"
"""OpenAI's pattern of a function name and of a ``json_schema`` name: letters, digits, underscores and dashes."""

FUNCTION_NAME_MAX_LENGTH: Final[int] = 64
"""OpenAI's longest function name and ``json_schema`` name, in characters."""

FunctionName = Annotated[
    str, StringConstraints(min_length=1, max_length=FUNCTION_NAME_MAX_LENGTH, pattern=FUNCTION_NAME_PATTERN)
]
"""A name OpenAI accepts for a function or a response format schema: ``^[a-zA-Z0-9_-]{1,64}$``."""


def openai_value_list(values: Iterable[str]) -> str:
    """Render values as OpenAI lists them in an error: ``'a'``, ``'a' and 'b'``, ``'a', 'b', and 'c'``."""
    quoted = [f"'{value}'" for value in values]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def request_rule_error(param: str, message: str, code: str) -> PydanticCustomError:
    """A pydantic error for a rule across fields; chat.reading.screening reports ``message`` at ``param`` with
    ``code``.
    """
    return PydanticCustomError(REQUEST_RULE_ERROR, "{message}", {"param": param, "code": code, "message": message})


def _json_type_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "<string>"
    if isinstance(value, list):
        return "<array>"
    if isinstance(value, dict | BaseModel):
        return "<object>"
    return None


class ContextDiscriminator(Discriminator):
    """pydantic's :class:`~pydantic.Discriminator`, hashable although its ``custom_error_context`` is a dict.

    Python 3.12.0 to 3.12.2 hash every member of a union (``X | Y``) to weed out duplicates, and so the metadata of an
    ``Annotated`` member: the dataclass hash of a discriminator with an error context raised ``TypeError: unhashable
    type: 'dict'`` at import. This one hashes the context's items instead.
    """

    def __hash__(self) -> int:
        context = tuple(sorted((self.custom_error_context or {}).items()))
        return hash((self.discriminator, self.custom_error_type, self.custom_error_message, context))


def by_json_type(expected: str) -> Discriminator:
    """Choose a union member by the value's JSON type; another type is one error saying what was ``expected``."""
    return ContextDiscriminator(
        _json_type_tag,
        custom_error_type=INVALID_JSON_TYPE_ERROR,
        custom_error_message=f"Input should be {expected}",
        custom_error_context={"expected": expected},
    )


def _by_tag(key: str, values: tuple[str, ...]) -> Discriminator:
    """Choose a union member by the object's ``key`` (``role`` or ``type``)."""

    def discriminate(value: Any) -> str | None:
        tag = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        return f"<{tag}>" if isinstance(tag, str) and tag in values else None

    return ContextDiscriminator(
        discriminate,
        custom_error_type=INVALID_TAG_ERROR,
        custom_error_message=f"Input should be an object with a valid '{key}'",
        custom_error_context={"key": key, "supported": openai_value_list(values)},
    )


def _within_schema_nesting(schema: dict[str, Any]) -> dict[str, Any]:
    if chat_schema_exceeds_nesting(schema):
        raise PydanticCustomError(SCHEMA_NESTING_ERROR, "JSON Schema nested too deeply")
    return schema


JsonSchemaObject = Annotated[dict[str, Any], AfterValidator(_within_schema_nesting)]
"""A JSON Schema, forwarded unchanged, at most ``MAX_CHAT_SCHEMA_NESTING`` levels deep below its root."""


# ---------------------------------------------------------------------------------------------------------------------
# Request


class _Strict(BaseModel):
    """A model that refuses keys it does not define and reads JSON types strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


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
    """The image to show the model: its ``url`` and an optional ``detail`` hint."""


class RefusalContentPart(_Strict):
    """A refusal part of an assistant message in the history, as OpenAI's models send one in place of text."""

    type: Literal["refusal"]
    """Always ``refusal``."""

    refusal: str
    """The refusal's text; forwarded to the worker as that turn's text."""


ContentPart = Annotated[
    Annotated[TextContentPart, Tag("<text>")] | Annotated[ImageContentPart, Tag("<image_url>")],
    _by_tag("type", USER_CONTENT_PART_TYPES),
]
"""A user message's content part, chosen by its ``type``."""

TextContent = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[TextContentPart], Tag("<array>")],
    by_json_type("one of a string or array of objects"),
]
"""Message content of text only: a string or an array of text parts."""

AssistantContentPart = Annotated[
    Annotated[TextContentPart, Tag("<text>")] | Annotated[RefusalContentPart, Tag("<refusal>")],
    _by_tag("type", ASSISTANT_CONTENT_PART_TYPES),
]
"""An assistant message's content part, chosen by its ``type``."""

AssistantContent = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[AssistantContentPart], Tag("<array>")],
    by_json_type("one of a string or array of objects"),
]
"""Assistant message content: a string or an array of text and refusal parts."""

UserContent = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[ContentPart], Tag("<array>")],
    by_json_type("one of a string or array of objects"),
]
"""User message content: a string or an array of text and image parts."""


class FunctionCall(_Strict):
    """The function a history tool call invoked."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as the JSON text the model produced."""


class ToolCall(_Strict):
    """A tool call in an assistant message of the history."""

    id: str
    """The call's id, answered by a ``tool`` message's ``tool_call_id``."""

    type: Literal["function"]
    """Always ``function``; required, as OpenAI requires it."""

    function: FunctionCall
    """The function called and its arguments."""


class SystemMessage(_Strict):
    """A system message: instructions for the model."""

    role: Literal["system"]
    """Always ``system``."""

    content: TextContent
    """The instructions, as a string or text parts."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class DeveloperMessage(_Strict):
    """A developer message: OpenAI's newer name for system instructions."""

    role: Literal["developer"]
    """Always ``developer``."""

    content: TextContent
    """The instructions, as a string or text parts."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class UserMessage(_Strict):
    """A user message."""

    role: Literal["user"]
    """Always ``user``."""

    content: UserContent
    """The message, as a string or text and image parts. Image parts need a model with vision."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class AssistantMessage(_Strict):
    """An earlier assistant reply in the history.

    The fields the OpenAI SDKs add when they replay their own reply (``refusal``, ``audio``, ``annotations``,
    ``function_call``, ``parsed``) are dropped, not refused.
    """

    role: Literal["assistant"]
    """Always ``assistant``."""

    content: AssistantContent | None = None
    """The reply text, as a string or text and refusal parts (a refusal part's text is forwarded as text); may be
    missing, null, empty or blank on a turn that only calls tools."""

    tool_calls: list[ToolCall] | None = None
    """The tool calls the reply made; each must be answered by a following ``tool`` message."""

    name: str | None = None
    """An optional participant name; accepted and forwarded."""


class ToolMessage(_Strict):
    """A tool's result, answering one call of the preceding assistant message. A ``name`` key is dropped."""

    role: Literal["tool"]
    """Always ``tool``."""

    content: TextContent
    """The tool's result."""

    tool_call_id: str
    """The id of the call this message answers."""


Message = Annotated[
    Annotated[SystemMessage, Tag("<system>")]
    | Annotated[DeveloperMessage, Tag("<developer>")]
    | Annotated[UserMessage, Tag("<user>")]
    | Annotated[AssistantMessage, Tag("<assistant>")]
    | Annotated[ToolMessage, Tag("<tool>")],
    _by_tag("role", MESSAGE_ROLES),
]
"""A message of the conversation, chosen by its ``role``."""


class FunctionDefinition(_Strict):
    """A function the model may call."""

    name: FunctionName
    """The function's name: 1 to 64 letters, digits, underscores or dashes, as OpenAI requires."""

    description: str | None = None
    """What the function does; rendered into the worker's prompt."""

    parameters: JsonSchemaObject | None = None
    """The arguments as a JSON Schema object, forwarded unchanged (``$schema``, ``additionalProperties`` and every
    other keyword included). It may nest at most 10 levels below its root."""

    strict: bool | None = None
    """OpenAI's strict function calling flag; accepted and forwarded."""


class ToolDefinition(_Strict):
    """A tool offered to the model. Only function tools exist on the Horde."""

    type: Literal["function"]
    """Always ``function``."""

    function: FunctionDefinition
    """The function the model may call: its ``name``, and optionally a ``description``, a ``parameters`` schema and
    ``strict``."""


class ToolChoiceFunction(_Strict):
    """The function a ``tool_choice`` object forces."""

    name: str
    """The function's name; must be one of ``tools``."""


class NamedToolChoice(_Strict):
    """A ``tool_choice`` that forces one function."""

    type: Literal["function"]
    """Always ``function``."""

    function: ToolChoiceFunction
    """The function to call."""


ToolChoice = Annotated[
    Annotated[ToolChoiceMode, Tag("<string>")] | Annotated[NamedToolChoice, Tag("<object>")],
    by_json_type("one of a string or object"),
]
"""``none``, ``auto``, ``required`` or an object naming one function."""

Stop = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[str], Field(max_length=MAX_CHAT_STOP_SEQUENCES), Tag("<array>")],
    by_json_type("one of a string or array of strings"),
]
"""One stop sequence, or an array of at most four."""


class StreamOptions(_Strict):
    """Options of a streamed response. Unknown keys are refused at their path."""

    include_usage: bool | None = None
    """When true, a last chunk with ``choices: []`` carries ``usage`` before ``data: [DONE]``, and every chunk before
    it carries ``usage: null``."""

    include_obfuscation: bool | None = None
    """OpenAI's random padding of stream events against side-channel attacks. Accepted and ignored: the front sends
    no ``obfuscation`` field, whatever the value."""


class JsonSchemaFormat(_Strict):
    """The schema of a ``json_schema`` response format. Unknown keys are refused at their path."""

    name: FunctionName
    """The schema's name: 1 to 64 letters, digits, underscores or dashes, as OpenAI requires."""

    description: str | None = None
    """What the schema describes."""

    # The Python name ``schema_`` avoids BaseModel.schema; the JSON key is ``schema``, and a body sending
    # ``schema_`` is refused as an unknown key (populate-by-name is off).
    schema_: JsonSchemaObject = Field(alias="schema")
    """The JSON Schema the reply must satisfy. Required (OpenAI makes it optional). With ``strict: true`` it must
    follow OpenAI's structural rules: every object sets ``additionalProperties: false`` and lists every property in
    ``required``. It may nest at most 10 levels below its root."""

    strict: bool | None = None
    """Strict adherence: needs a worker that guarantees structured output under ``strict`` conformance."""


class TextResponseFormat(_Strict):
    """Plain text, the default."""

    type: Literal["text"]
    """Always ``text``."""


class JsonObjectResponseFormat(_Strict):
    """A JSON object reply (OpenAI's JSON mode)."""

    type: Literal["json_object"]
    """Always ``json_object``. Under ``horde.openai_guards`` the messages must contain the word "json", as OpenAI
    requires."""


class JsonSchemaResponseFormat(_Strict):
    """A reply satisfying a JSON Schema (OpenAI's Structured Outputs)."""

    type: Literal["json_schema"]
    """Always ``json_schema``."""

    json_schema: JsonSchemaFormat
    """The schema; required with ``json_schema``."""


ResponseFormat = Annotated[
    Annotated[TextResponseFormat, Tag("<text>")]
    | Annotated[JsonObjectResponseFormat, Tag("<json_object>")]
    | Annotated[JsonSchemaResponseFormat, Tag("<json_schema>")],
    _by_tag("type", RESPONSE_FORMAT_TYPES),
]
"""The format the reply must take, chosen by its ``type``."""


class HordeOptions(_Strict):
    """The Horde's own request options; not part of OpenAI's API. Unknown keys are refused at their path."""

    conformance: ChatConformance | None = Field(default=None, strict=False)
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

    workers: list[WorkerId] | None = None
    """Worker ids to serve on (or to avoid with ``worker_blacklist``)."""

    worker_blacklist: bool | None = None
    """Treat ``workers`` as a list to avoid."""

    include_reasoning: bool | None = None
    """False hides ``reasoning_content``; the reasoning token count is still reported. The front's own option."""

    availability_mode: Literal["wait", "fail_fast"] | None = None
    """``wait`` (default) queues on the volunteer network; ``fail_fast`` refuses at once with ``queue_unavailable``
    when no eligible worker thread exists or the estimated wait exceeds the front's timeout. The front's own option."""

    progress: bool | None = None
    """A streamed request's queue progress while it waits. Absent: each keepalive comment says the place
    (``: queue position 3, estimated wait 12 s``), and after ``HORDE_OAI_PROGRESS_CHUNK_SECONDS`` (60 s) without a
    chunk a chunk with ``choices: []`` and ``x_horde.queue`` goes out. ``true``: that chunk at every change of the
    place (at most one per keepalive interval). ``false``: bare ``: keepalive`` comments and no progress chunk. The
    front's own option."""


ModelId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_MODEL_ID_LENGTH)]
"""A model id: 1 to 255 characters (:data:`chat.limits.MAX_MODEL_ID_LENGTH`)."""

WorkerId = Annotated[str, StringConstraints(min_length=1)]
"""A worker id: not empty (the Horde's are UUIDs)."""

MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class ChatCompletionRequest(_Strict):
    """The body of ``POST /v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1)
    """The conversation, oldest first. Roles: ``system``, ``developer``, ``user``, ``assistant`` and ``tool``
    (OpenAI's deprecated ``function`` role is refused). Unknown keys inside a message are dropped."""

    model: ModelId | None = None
    """The model to use; a non-empty model id. Required unless ``models`` is given: send exactly one of ``model`` and
    ``models``. A model the Horde does not know is 400 ``UnknownModel`` at ``model`` (OpenAI answers 404
    ``model_not_found``)."""

    models: list[ModelId] | None = Field(default=None, min_length=1, max_length=MAX_CHAT_MODEL_COUNT)
    """1 to 5 non-empty, distinct model ids, any of which may serve the request (OpenRouter's fallback list);
    forwarded unchanged. Send exactly one of ``model`` and ``models``. An unknown entry refuses the whole request."""

    stream: bool | None = None
    """Stream the reply as server-sent events."""

    stream_options: StreamOptions | None = None
    """Options of a streamed reply. Accepted, and ignored, without ``stream: true`` (OpenAI refuses it there)."""

    max_tokens: int | None = Field(default=None, ge=MIN_CHAT_MAX_TOKENS, le=MAX_CHAT_MAX_TOKENS)
    """The completion limit in tokens. The Horde serves 16 to 16384 (OpenAI accepts any value from 1); absent, the
    Horde's default of 512 applies."""

    max_completion_tokens: int | None = Field(default=None, ge=MIN_CHAT_MAX_TOKENS, le=MAX_CHAT_MAX_TOKENS)
    """OpenAI's newer name for ``max_tokens``; takes precedence over it. The Horde serves 16 to 16384."""

    temperature: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["temperature"][0], le=OPENAI_SAMPLING_RANGES["temperature"][1]
    )
    """Sampling temperature, 0 to 2."""

    top_p: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["top_p"][0], le=OPENAI_SAMPLING_RANGES["top_p"][1]
    )
    """Nucleus sampling, 0 to 1."""

    frequency_penalty: float | None = Field(
        default=None,
        ge=OPENAI_SAMPLING_RANGES["frequency_penalty"][0],
        le=OPENAI_SAMPLING_RANGES["frequency_penalty"][1],
    )
    """-2 to 2; a non-zero value needs a worker that applies it."""

    presence_penalty: float | None = Field(
        default=None,
        ge=OPENAI_SAMPLING_RANGES["presence_penalty"][0],
        le=OPENAI_SAMPLING_RANGES["presence_penalty"][1],
    )
    """-2 to 2; a non-zero value needs a worker that applies it."""

    stop: Stop | None = None
    """One stop sequence, or an array of up to 4."""

    seed: int | None = None
    """A sampling seed; needs a worker that honours it."""

    n: int | None = Field(default=None, ge=1, le=SUPPORTED_CHAT_CHOICE_COUNT)
    """The number of choices; only 1 is served (OpenAI serves more)."""

    reasoning_effort: ChatReasoningEffort | None = Field(default=None, strict=False)
    """How much the model reasons; needs a worker that applies it."""

    tools: list[ToolDefinition] | None = None
    """Functions the model may call. Unknown keys inside a tool and its function are dropped."""

    tool_choice: ToolChoice | None = None
    """Whether and which tool the model must call; only with ``tools``."""

    parallel_tool_calls: bool | None = None
    """Whether the reply may carry more than one tool call; only with ``tools``."""

    response_format: ResponseFormat | None = None
    """The format of the reply. Unknown keys are refused at their path."""

    user: str | None = None
    """An end-user identifier. Accepted and not forwarded: the Horde does not bucket or cache by user, and the front
    does not log it."""

    safety_identifier: str | None = Field(default=None, max_length=128)
    """An end-user identifier for safety systems, at most 128 characters. Accepted and not forwarded."""

    prompt_cache_key: str | None = None
    """A prompt cache key. Accepted and not forwarded: workers keep no prompt cache across requests."""

    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=16)
    """Up to 16 string tags (keys up to 64 characters, values up to 512). Accepted and not forwarded: the front
    stores no completions."""

    horde: HordeOptions | None = None
    """The Horde's own options."""

    @model_validator(mode="after")
    def _exactly_one_model_key(self) -> ChatCompletionRequest:
        # Reference: Model selection. Codes come from chat.errors; the strings are repeated here to keep this module
        # free of the Django-side import (chat.errors imports django.http).
        if self.model is None and self.models is None:
            raise request_rule_error(
                "model", "Missing required parameter: 'model'. Send exactly one of 'model' and 'models'.", "BadRequest"
            )
        if self.model is not None and self.models is not None:
            raise request_rule_error(
                "models", "Invalid parameter: send exactly one of 'model' and 'models', not both.", "BadRequest"
            )
        seen: dict[str, int] = {}
        for index, model_id in enumerate(self.models or []):
            if model_id in seen:
                raise request_rule_error(
                    f"models[{index}]",
                    f"Invalid 'models[{index}]': duplicate value. Expected distinct model ids, but "
                    f"'{model_id}' is also 'models[{seen[model_id]}]'.",
                    "BadRequest",
                )
            seen[model_id] = index
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

    @property
    def progress_option(self) -> bool | None:
        """``horde.progress``: None (default), true or false (chat.streaming.progress)."""
        return self.horde.progress if self.horde is not None else None


# The response models live in chat.protocol.chat_completion; they are part of this module's public names.
from chat.protocol.chat_completion import (  # noqa: E402
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
    "ASSISTANT_CONTENT_PART_TYPES",
    "MESSAGE_ROLES",
    "RESPONSE_FORMAT_TYPES",
    "TOOL_CHOICE_MODES",
    "UNION_TAGS",
    "USER_CONTENT_PART_TYPES",
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
    "FunctionCall",
    "FunctionDefinition",
    "HordeExtras",
    "HordeOptions",
    "ImageContentPart",
    "ImageUrl",
    "JsonObjectResponseFormat",
    "JsonSchemaFormat",
    "JsonSchemaResponseFormat",
    "NamedToolChoice",
    "OpenAIErrorBody",
    "OpenAIErrorEnvelope",
    "RefusalContentPart",
    "ResponseFunctionCall",
    "ResponseToolCall",
    "StreamOptions",
    "SystemMessage",
    "TextContentPart",
    "TextResponseFormat",
    "ToolCall",
    "ToolChoiceFunction",
    "ToolDefinition",
    "ToolMessage",
    "Usage",
    "UserMessage",
]
