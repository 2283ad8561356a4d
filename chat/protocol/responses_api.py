"""Pydantic models of the front's OpenAI Responses API (``POST /v1/responses``): the request and the ``response``.

Field docstrings are public API text: they become the field descriptions of ``/openapi.json``. They say where the
front differs from OpenAI's Responses reference.

A request carries its conversation in ``input`` (earlier ``function_call`` and ``function_call_output`` items
included), after the stored conversation of ``previous_response_id``; ``item_reference`` items and
``previous_response_id`` are resolved from the responses kept with ``store`` (chat.serving.stored_responses) before
this model validates the body. Features that need other state (``conversation``, ``background: true``, stored
prompts, built-in tools, ``include`` values) are refused by chat.reading.responses first. A validated request is
mapped onto a chat completions request (chat.reading.responses), so screening rules, the native
payload, the waiter, cancels and availability errors are those of ``POST /v1/chat/completions``.

Validation is strict, as in chat.protocol.chat_request. The top level, ``text``, ``text.format``, ``reasoning`` and the
tools refuse unknown keys; input items and their content parts drop them, because the OpenAI SDKs replay their own
output items (with ``id``, ``status``, ``annotations``, ``logprobs`` ...) as input.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
)
from horde_sdk.generation_parameters.text.chat_policy import ChatReasoningEffort
from pydantic import BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag

from chat.protocol.chat_completion import HordeExtras
from chat.protocol.chat_request import (
    INVALID_TAG_ERROR,
    ContextDiscriminator,
    HordeOptions,
    JsonSchemaObject,
    ModelId,
    ToolChoiceMode,
    by_json_type,
    openai_value_list,
)

INPUT_ITEM_TYPES: Final[tuple[str, ...]] = ("message", "function_call", "function_call_output", "reasoning")
"""The ``input`` item types the front serves. A ``reasoning`` item (an earlier reply's reasoning, replayed by the SDKs)
is accepted and not forwarded: workers read no earlier reasoning."""

INPUT_CONTENT_TYPES: Final[tuple[str, ...]] = ("input_text", "input_image", "output_text", "refusal")
"""The content part types of a message item: ``input_text`` and ``input_image`` in user, system and developer
messages, ``output_text`` and ``refusal`` in replayed assistant messages."""

INPUT_MESSAGE_ROLES: Final[tuple[str, ...]] = ("user", "assistant", "system", "developer")
"""The roles of a message item."""

TEXT_FORMAT_TYPES: Final[tuple[str, ...]] = ("text", "json_object", "json_schema")
"""The ``text.format.type`` values."""

RESPONSES_UNION_TAGS: Final[frozenset[str]] = frozenset(
    {
        "<string>",
        "<array>",
        "<object>",
        *(f"<{item_type}>" for item_type in INPUT_ITEM_TYPES),
        *(f"<{part_type}>" for part_type in INPUT_CONTENT_TYPES),
        *(f"<{format_type}>" for format_type in TEXT_FORMAT_TYPES),
    }
)
"""Every tag the request's unions put into a pydantic error location; none is a request key."""


def _by_type(values: tuple[str, ...], *, default: str | None = None) -> Discriminator:
    """Choose a union member by the object's ``type``; ``default`` is the type of an object without one (an input
    message may leave out ``type: message``).
    """

    def discriminate(value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get("type", default)
        else:
            tag = getattr(value, "type", None)
        return f"<{tag}>" if isinstance(tag, str) and tag in values else None

    return ContextDiscriminator(
        discriminate,
        custom_error_type=INVALID_TAG_ERROR,
        custom_error_message="Input should be an object with a valid 'type'",
        custom_error_context={"key": "type", "supported": openai_value_list(values)},
    )


class _Strict(BaseModel):
    """Refuses keys it does not define; reads JSON types strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class _Item(BaseModel):
    """Drops keys it does not define (the SDKs replay output items with ids, statuses and annotations)."""

    model_config = ConfigDict(extra="ignore", strict=True, use_attribute_docstrings=True)


# ---------------------------------------------------------------------------------------------------------------------
# Input items


class InputText(_Item):
    """A text part of a message item."""

    type: Literal["input_text"]
    """Always ``input_text``."""

    text: str
    """The text."""


class InputImage(_Item):
    """An image part of a user message item. Served only by workers that declare vision."""

    type: Literal["input_image"]
    """Always ``input_image``."""

    image_url: str
    """An ``https`` URL or a ``data:image/...;base64,`` URL. Required here: uploaded files (``file_id``) need
    OpenAI's file store."""

    detail: Literal["auto", "low", "high"] | None = None
    """OpenAI's detail hint; forwarded, workers may ignore it."""


class OutputText(_Item):
    """The text of an earlier assistant reply, as a response's ``output`` returns it."""

    type: Literal["output_text"]
    """Always ``output_text``."""

    text: str
    """The reply text."""


class Refusal(_Item):
    """A refusal of an earlier assistant reply; forwarded as the reply's text."""

    type: Literal["refusal"]
    """Always ``refusal``."""

    refusal: str
    """The refusal text."""


InputContentPart = Annotated[
    Annotated[InputText, Tag("<input_text>")]
    | Annotated[InputImage, Tag("<input_image>")]
    | Annotated[OutputText, Tag("<output_text>")]
    | Annotated[Refusal, Tag("<refusal>")],
    _by_type(INPUT_CONTENT_TYPES),
]
"""A content part of a message item, chosen by its ``type``."""

MessageContent = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[InputContentPart], Tag("<array>")],
    by_json_type("one of a string or array of objects"),
]
"""A message item's content: a string or an array of parts."""


class InputMessage(_Item):
    """A message of the conversation: ``{"role", "content"}``, with or without ``type: message``."""

    type: Literal["message"] = "message"
    """``message``; may be left out."""

    role: Literal["user", "assistant", "system", "developer"]
    """``user``, ``assistant`` (an earlier reply), ``system`` or ``developer`` (instructions)."""

    content: MessageContent
    """The text, or an array of parts: ``input_text`` and ``input_image`` (images need a worker with vision), and
    in assistant messages ``output_text`` and ``refusal``."""


class FunctionCallItem(_Item):
    """A function call of an earlier reply, replayed so its output can follow."""

    type: Literal["function_call"]
    """Always ``function_call``."""

    call_id: str
    """The call's id, answered by a ``function_call_output`` item with the same ``call_id``."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as the JSON text the model produced."""


FunctionOutput = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[InputContentPart], Tag("<array>")],
    by_json_type("one of a string or array of objects"),
]
"""A function's output: a string, or text parts (joined)."""


class FunctionCallOutputItem(_Item):
    """The output of a function call, answering a ``function_call`` item earlier in ``input``."""

    type: Literal["function_call_output"]
    """Always ``function_call_output``."""

    call_id: str
    """The ``call_id`` of the call this output answers."""

    output: FunctionOutput
    """The function's result: text, or an array of ``input_text`` parts."""


class ReasoningItem(_Item):
    """An earlier reply's reasoning, replayed by the SDKs. Accepted and not forwarded."""

    type: Literal["reasoning"]
    """Always ``reasoning``."""


InputItem = Annotated[
    Annotated[InputMessage, Tag("<message>")]
    | Annotated[FunctionCallItem, Tag("<function_call>")]
    | Annotated[FunctionCallOutputItem, Tag("<function_call_output>")]
    | Annotated[ReasoningItem, Tag("<reasoning>")],
    _by_type(INPUT_ITEM_TYPES, default="message"),
]
"""An ``input`` item, chosen by its ``type`` (a message may leave it out)."""

Input = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[list[InputItem], Field(min_length=1), Tag("<array>")],
    by_json_type("one of a string or array of objects"),
]
"""The conversation: a user message's text, or an array of items."""


# ---------------------------------------------------------------------------------------------------------------------
# Tools, text format, reasoning


class FunctionTool(_Strict):
    """A function the model may call. Built-in tools (``web_search``, ``file_search``, ``code_interpreter``, ...)
    are refused: they run on OpenAI's servers.
    """

    type: Literal["function"]
    """Always ``function``."""

    name: str
    """The function's name."""

    description: str | None = None
    """What the function does; rendered into the worker's prompt."""

    parameters: JsonSchemaObject | None = None
    """The arguments as a JSON Schema object, forwarded unchanged. It may nest at most 10 levels below its root."""

    strict: bool | None = None
    """OpenAI's strict function calling flag; forwarded."""


class FunctionToolChoice(_Strict):
    """A ``tool_choice`` that forces one function."""

    type: Literal["function"]
    """Always ``function``."""

    name: str
    """The function's name; must be one of ``tools``."""


ToolChoice = Annotated[
    Annotated[ToolChoiceMode, Tag("<string>")] | Annotated[FunctionToolChoice, Tag("<object>")],
    by_json_type("one of a string or object"),
]
"""``none``, ``auto``, ``required`` or ``{"type": "function", "name"}``."""


class TextFormatText(_Strict):
    """Plain text, the default."""

    type: Literal["text"]
    """Always ``text``."""


class TextFormatJsonObject(_Strict):
    """A JSON object reply (JSON mode)."""

    type: Literal["json_object"]
    """Always ``json_object``."""


class TextFormatJsonSchema(_Strict):
    """A reply satisfying a JSON Schema (Structured Outputs); ``responses.parse`` sends it."""

    type: Literal["json_schema"]
    """Always ``json_schema``."""

    name: str
    """The schema's name."""

    description: str | None = None
    """What the schema describes."""

    schema_: JsonSchemaObject = Field(alias="schema")
    """The JSON Schema the reply must satisfy. With ``strict: true`` every object sets ``additionalProperties:
    false`` and lists every property in ``required``, as OpenAI requires. It may nest at most 10 levels."""

    strict: bool | None = None
    """Strict adherence: needs a worker that guarantees structured output."""


TextFormat = Annotated[
    Annotated[TextFormatText, Tag("<text>")]
    | Annotated[TextFormatJsonObject, Tag("<json_object>")]
    | Annotated[TextFormatJsonSchema, Tag("<json_schema>")],
    _by_type(TEXT_FORMAT_TYPES),
]
"""The format of the reply, chosen by its ``type``."""


class TextConfig(_Strict):
    """Options of the reply's text."""

    format: TextFormat | None = None
    """``text`` (default), ``json_object`` or ``json_schema``; becomes the chat request's ``response_format``."""

    verbosity: Literal["medium"] | None = None
    """Only ``medium``, OpenAI's default: workers have no verbosity control."""


class ReasoningConfig(_Strict):
    """Reasoning options."""

    effort: ChatReasoningEffort | None = Field(default=None, strict=False)
    """How much the model reasons (``none``, ``minimal``, ``low``, ``medium``, ``high``, ``xhigh``); needs a worker
    that applies it."""

    summary: Literal["auto", "concise", "detailed"] | None = None
    """Accepted; the ``reasoning`` output item's summary is the worker's whole reasoning, whatever the value."""

    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    """OpenAI's deprecated name for ``summary``; accepted."""


class ResponsesStreamOptions(_Strict):
    """Options of a streamed response."""

    include_obfuscation: bool | None = None
    """Accepted and ignored: the front adds no obfuscation padding to its events."""


MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class ResponsesRequest(_Strict):
    """The body of ``POST /v1/responses`` (the conversation in ``input``, after a stored ``previous_response_id``)."""

    model: ModelId
    """The model to use (see ``GET /v1/models``), 1 to 255 characters. A model the Horde does not know is 400
    ``UnknownModel``."""

    input: Input
    """The conversation: a string (one user message), or an array of items: messages (``role`` and ``content``),
    the ``function_call`` and ``function_call_output`` items of earlier turns, and ``item_reference`` items
    (``{"type": "item_reference", "id": "msg_..."}``) naming an output item of a stored response (404
    ``item_not_found`` at ``input[<i>]`` when the front does not hold it). Required, even with
    ``previous_response_id``."""

    instructions: str | None = None
    """A system message placed before ``input``."""

    max_output_tokens: int | None = Field(default=None, ge=MIN_CHAT_MAX_TOKENS, le=MAX_CHAT_MAX_TOKENS)
    """The output limit in tokens, reasoning included: 16 to 16384 on the Horde. Absent, the Horde's default of 512
    applies."""

    temperature: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["temperature"][0], le=OPENAI_SAMPLING_RANGES["temperature"][1]
    )
    """Sampling temperature, 0 to 2."""

    top_p: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["top_p"][0], le=OPENAI_SAMPLING_RANGES["top_p"][1]
    )
    """Nucleus sampling, 0 to 1."""

    tools: list[FunctionTool] | None = None
    """Function tools the model may call. Built-in tools are refused."""

    tool_choice: ToolChoice | None = None
    """``none``, ``auto``, ``required`` or a function to call; only with ``tools``."""

    parallel_tool_calls: bool | None = None
    """Whether the reply may carry more than one function call; only with ``tools``."""

    text: TextConfig | None = None
    """The reply's format (``text.format``)."""

    reasoning: ReasoningConfig | None = None
    """Reasoning options (``reasoning.effort``)."""

    stream: bool | None = None
    """Stream the response as server-sent events of OpenAI's typed Responses events."""

    stream_options: ResponsesStreamOptions | None = None
    """Options of a streamed response."""

    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=16)
    """Up to 16 string tags; echoed on the response and not forwarded."""

    user: str | None = None
    """An end-user identifier; accepted and not forwarded."""

    safety_identifier: str | None = Field(default=None, max_length=128)
    """An end-user identifier for safety systems; accepted and not forwarded."""

    prompt_cache_key: str | None = None
    """A prompt cache key; accepted and not forwarded."""

    previous_response_id: str | None = None
    """The id of a response stored with ``store`` true (by the same API key, within
    ``HORDE_OAI_STORED_RESPONSE_SECONDS``): its conversation (input and output items) goes before ``input``. An id
    the front does not hold is 400 ``previous_response_not_found``."""

    store: bool | None = None
    """Whether to keep the response (true, OpenAI's default, when null) for ``previous_response_id``,
    ``item_reference`` items and ``GET`` / ``DELETE /v1/responses/{id}``: in the front's Redis for
    ``HORDE_OAI_STORED_RESPONSE_SECONDS``, readable only with the API key that created it, and not at all when larger
    than ``HORDE_OAI_STORED_RESPONSE_MAX_BYTES``. False stores nothing."""

    background: Literal[False] | None = None
    """Only false: background responses need a stored response to poll."""

    truncation: Literal["disabled"] | None = None
    """Only ``disabled``: the Horde refuses a prompt over the worker's context instead of dropping items."""

    service_tier: Literal["auto", "default"] | None = None
    """Only ``auto`` or ``default``: the Horde has one queue."""

    top_logprobs: Literal[0] | None = None
    """Only 0: workers return no log probabilities."""

    horde: HordeOptions | None = None
    """The Horde's own options, as in chat completions."""

    @property
    def is_stream(self) -> bool:
        """Whether the client asked for a streamed response."""
        return bool(self.stream)


# ---------------------------------------------------------------------------------------------------------------------
# The response


class _Response(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class ResponseOutputText(_Response):
    """The reply text of a message item."""

    type: Literal["output_text"]
    """Always ``output_text``."""

    text: str
    """The text."""

    annotations: list[dict[str, Any]]
    """Always empty: workers cite no files or URLs."""

    logprobs: list[dict[str, Any]]
    """Always empty: workers return no log probabilities."""


class ResponseOutputMessage(_Response):
    """The assistant's reply text."""

    id: str
    """``msg_`` and the Horde's request id."""

    type: Literal["message"]
    """Always ``message``."""

    role: Literal["assistant"]
    """Always ``assistant``."""

    status: Literal["in_progress", "completed", "incomplete"]
    """``incomplete`` when the worker stopped at the output limit."""

    content: list[ResponseOutputText]
    """One ``output_text`` part."""


class ReasoningSummaryText(_Response):
    """A summary part of a reasoning item."""

    type: Literal["summary_text"]
    """Always ``summary_text``."""

    text: str
    """The worker's reasoning, whole."""


class ResponseReasoningItem(_Response):
    """The worker's reasoning, when it reasons (unless ``horde.include_reasoning`` is false)."""

    id: str
    """``rs_`` and the Horde's request id."""

    type: Literal["reasoning"]
    """Always ``reasoning``."""

    summary: list[ReasoningSummaryText]
    """One ``summary_text`` part holding the worker's reasoning (workers do not summarise)."""

    status: Literal["in_progress", "completed", "incomplete"]
    """``completed``, or ``in_progress`` while streamed."""


class ResponseFunctionCallItem(_Response):
    """A function call of the reply; answer it with a ``function_call_output`` input item in the next request."""

    id: str
    """``fc_``, the Horde's request id and the call's position."""

    type: Literal["function_call"]
    """Always ``function_call``."""

    call_id: str
    """The call's id, as the worker submitted it."""

    name: str
    """The function's name."""

    arguments: str
    """The arguments as JSON text, as the worker submitted them."""

    status: Literal["in_progress", "completed", "incomplete"]
    """``completed``, or ``in_progress`` while streamed."""


ResponseOutputItem = Annotated[
    ResponseReasoningItem | ResponseOutputMessage | ResponseFunctionCallItem, Field(discriminator="type")
]
"""An output item: ``reasoning``, ``message`` or ``function_call``."""


class InputTokensDetails(_Response):
    """A breakdown of the input tokens."""

    cached_tokens: int
    """Always 0: workers keep no prompt cache."""

    cache_write_tokens: int
    """Always 0."""


class OutputTokensDetails(_Response):
    """A breakdown of the output tokens."""

    reasoning_tokens: int
    """Reasoning tokens: the worker's count, an estimate from the reasoning characters, or 0 without reasoning."""


class ResponseUsage(_Response):
    """Token counts, as chat completions count them (``x_horde.estimated_usage`` when a count is estimated)."""

    input_tokens: int
    """Prompt tokens."""

    input_tokens_details: InputTokensDetails
    """Always zero cached tokens."""

    output_tokens: int
    """Output tokens, reasoning and function calls included."""

    output_tokens_details: OutputTokensDetails
    """The reasoning tokens among them."""

    total_tokens: int
    """``input_tokens`` + ``output_tokens``."""


class IncompleteDetails(_Response):
    """Why a response is incomplete."""

    reason: Literal["max_output_tokens", "content_filter"]
    """``max_output_tokens`` when the worker stopped at the output limit."""


class ResponseObject(_Response):
    """A response (``object: response``): the output items, the usage and the request's settings echoed back."""

    id: str
    """``resp_`` and the Horde's request id: what ``previous_response_id`` and ``GET /v1/responses/{id}`` name when
    the response was stored."""

    object: Literal["response"]
    """Always ``response``."""

    created_at: int
    """Unix seconds when the front accepted the request."""

    completed_at: int | None
    """Unix seconds when the reply was complete; null while in progress."""

    status: Literal["in_progress", "completed", "incomplete"]
    """``completed``, ``incomplete`` (see ``incomplete_details``), or ``in_progress`` in the first stream events."""

    error: None
    """Always null: a failure is an error response, or an ``error`` event in a stream."""

    incomplete_details: IncompleteDetails | None
    """Why the response is incomplete; null when it is not."""

    model: str
    """The model that served the request."""

    output: list[ResponseOutputItem]
    """The ``reasoning`` item (when the worker reasons), the ``message`` item (when the reply has text, or has
    neither text nor calls), then one ``function_call`` item per call."""

    usage: ResponseUsage | None
    """Token counts; null until the response is complete."""

    instructions: str | None
    """The request's ``instructions``."""

    max_output_tokens: int | None
    """The request's ``max_output_tokens``."""

    metadata: dict[str, str]
    """The request's ``metadata`` (``{}`` without)."""

    parallel_tool_calls: bool
    """The request's ``parallel_tool_calls`` (true without)."""

    temperature: float | None
    """The request's ``temperature``."""

    top_p: float | None
    """The request's ``top_p``."""

    tool_choice: str | dict[str, Any]
    """The request's ``tool_choice`` (``auto`` without)."""

    tools: list[dict[str, Any]]
    """The request's ``tools`` (``[]`` without)."""

    text: dict[str, Any]
    """The request's ``text`` (``{"format": {"type": "text"}}`` without)."""

    reasoning: dict[str, Any]
    """The request's ``reasoning`` (``effort`` and ``summary``, null without)."""

    previous_response_id: str | None
    """The request's ``previous_response_id`` (null without)."""

    store: bool
    """Whether the response is stored (the request's ``store``; true unless it was false)."""

    background: Literal[False]
    """Always false."""

    truncation: Literal["disabled"]
    """Always ``disabled``."""

    service_tier: Literal["default"]
    """Always ``default``."""

    user: str | None
    """The request's ``user``."""

    x_horde: HordeExtras | None = None
    """The Horde's additions, as on a chat completion; omitted when none applies."""


__all__ = [
    "INPUT_CONTENT_TYPES",
    "INPUT_ITEM_TYPES",
    "RESPONSES_UNION_TAGS",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "FunctionTool",
    "FunctionToolChoice",
    "InputImage",
    "InputMessage",
    "InputText",
    "OutputText",
    "ReasoningConfig",
    "ReasoningItem",
    "Refusal",
    "ResponseFunctionCallItem",
    "ResponseObject",
    "ResponseOutputMessage",
    "ResponseOutputText",
    "ResponseReasoningItem",
    "ResponseUsage",
    "ResponsesRequest",
    "TextConfig",
    "TextFormatJsonObject",
    "TextFormatJsonSchema",
    "TextFormatText",
]
