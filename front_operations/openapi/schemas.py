"""The component schemas of the front's OpenAPI document, generated from the pydantic models (reference: Schema
generation, Field descriptions).

``ChatCompletionRequest``, ``ResponsesRequest``, ``CompletionRequest`` and ``ImageGenerationRequest`` are documented
as validated, the replies (``ChatCompletionResponse``, ``ChatCompletionChunk``, ``ResponseObject``,
``OpenAIErrorEnvelope``, ``ModelList``, ``ModelCard``, ``TextCompletion``, ``ImagesResponse``) as serialized, with
:class:`DocumentedJsonSchema`. The generated schemas are adjusted where the handlers differ from the models: the no-op
parameters (:data:`NO_OP_PARAMETER_SCHEMAS`), the objects whose unknown keys screening drops
(:data:`KEY_DROPPING_MODELS`), the model selection rule (:data:`MODEL_SELECTION_SCHEMA`).
Each field's description is its model field's docstring, passed through :func:`plain_description`. The stream event
schemas (:func:`stream_event_schema`, :func:`response_stream_event_schema`, :func:`image_stream_event_schema`)
and the request examples live here too.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue, models_json_schema
from pydantic_core import CoreSchema

from chat.protocol.chat_request import (
    AssistantMessage,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    DeveloperMessage,
    FunctionCall,
    FunctionDefinition,
    ImageContentPart,
    ImageUrl,
    NamedToolChoice,
    OpenAIErrorEnvelope,
    RefusalContentPart,
    SystemMessage,
    TextContentPart,
    ToolCall,
    ToolChoiceFunction,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from chat.protocol.legacy_completion import CompletionRequest, TextCompletion
from chat.protocol.responses_api import ResponseObject, ResponsesRequest
from chat.reading.parameters import CHAT_REQUEST_KEYS, DEFAULT_NO_OP_PARAMETERS
from chat.reading.responses import INCLUDE_REASON, STATE_FLAGS, STATEFUL_PARAMETERS
from images.protocol import ImageGenerationRequest, ImagesResponse
from models_list.schema import ModelCard, ModelList

SCHEMA_REF: Final = "#/components/schemas/{model}"
"""Where a component schema lives in the document; pydantic's ``ref_template``."""

REQUEST_MODELS: Final[tuple[type[BaseModel], ...]] = (
    ChatCompletionRequest,
    ResponsesRequest,
    CompletionRequest,
    ImageGenerationRequest,
)
"""Models documented as validated (``mode="validation"``): what a client may send."""

RESPONSE_MODELS: Final[tuple[type[BaseModel], ...]] = (
    ChatCompletionResponse,
    ChatCompletionChunk,
    ResponseObject,
    OpenAIErrorEnvelope,
    ModelList,
    ModelCard,
    TextCompletion,
    ImagesResponse,
)
"""Models documented as serialized (``mode="serialization"``): what the front answers."""

KEY_DROPPING_MODELS: Final[tuple[type[BaseModel], ...]] = (
    SystemMessage,
    DeveloperMessage,
    UserMessage,
    AssistantMessage,
    ToolMessage,
    TextContentPart,
    ImageContentPart,
    RefusalContentPart,
    ImageUrl,
    ToolCall,
    FunctionCall,
    ToolDefinition,
    FunctionDefinition,
    NamedToolChoice,
    ToolChoiceFunction,
)
"""The request objects whose unknown keys ``drop_unknown_nested_keys`` drops instead of refusing (reference: Parameter
screening, Message roles): the messages and the objects inside them (tool calls and their functions, content parts,
the ``image_url`` object), the tool definitions and their functions, and the ``tool_choice`` object and its function.
Their schemas allow other keys; every other request object, the top level included, does not."""


def _no_op_parameter_schema(default: object, description: str) -> dict[str, Any]:
    """The schema of a no-op parameter: its default, or null (screening reads an explicit null as the default)."""
    if default is None:
        return {"type": "null", "description": description}
    return {"anyOf": [{"const": default}, {"type": "null"}], "description": description}


NO_OP_PARAMETER_SCHEMAS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        key: _no_op_parameter_schema(parameter.default, parameter.description)
        for key, parameter in DEFAULT_NO_OP_PARAMETERS.items()
        if key not in CHAT_REQUEST_KEYS
    }
)
"""The request-schema property of each ``DEFAULT_NO_OP_PARAMETERS`` key that is not a ``ChatCompletionRequest``
key (``chat.reading.parameters.CHAT_REQUEST_KEYS``; reference: Schema generation): its default or null, the only
values screening accepts (and then drops), with the table's description."""


RESPONSES_STATE_PARAMETER_SCHEMAS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        **{
            key: {
                "type": "null",
                "description": f"Only null: {reason}. Any other value is 400 `UnsupportedChatParameter` at `{key}`.",
            }
            for key, reason in STATEFUL_PARAMETERS.items()
        },
        "include": {
            "anyOf": [{"type": "array", "items": {"type": "string"}, "maxItems": 0}, {"type": "null"}],
            "description": (
                f"Only empty or null: {INCLUDE_REASON}. A value is 400 `UnsupportedChatParameter` at `include[0]`."
            ),
        },
    }
)
"""The ``POST /v1/responses`` parameters that need state stored between requests, documented as the only values the
front accepts (``chat.reading.responses.find_stateful_refusal`` refuses every other one before validation).
``background`` (:data:`chat.reading.responses.STATE_FLAGS`) is a request field that takes only false; ``store`` and
``previous_response_id`` are request fields (chat.serving.stored_responses)."""

assert set(STATE_FLAGS) <= set(ResponsesRequest.model_fields)


MODEL_SELECTION_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "oneOf": [
            {
                "title": "With model",
                "required": ["model"],
                "properties": {"model": {"type": "string"}, "models": {"type": "null"}},
            },
            {
                "title": "With models",
                "required": ["models"],
                "properties": {"models": {"type": "array"}, "model": {"type": "null"}},
            },
        ],
    }
)
"""Exactly one of ``model`` (a string) and ``models`` (an array), the other left out or null, added to the request
schema (reference: Model selection). ``ChatCompletionRequest`` checks it, and that ``models`` holds distinct ids
(``uniqueItems``), in a model validator, which JSON Schema generation cannot see; the front refuses either break with
400 ``BadRequest``. The types live in the variants (:func:`selected_property`)."""

MODEL_SELECTION_KEYS: Final = ("model", "models")
"""The request properties :data:`MODEL_SELECTION_SCHEMA` selects between, each documented by
:func:`selected_property`."""


def selected_property(schema: Mapping[str, Any]) -> dict[str, Any]:
    """One of :data:`MODEL_SELECTION_KEYS` in the request's properties: its value's constraints and description
    (``{"minLength": 1, "maxLength": 255, "description": ...}``), with no ``type`` and none of pydantic's ``anyOf`` of
    the value and null or ``default: null``; each :data:`MODEL_SELECTION_SCHEMA` variant gives the type.

    ReDoc shows each variant merged into the request's properties. Merged into pydantic's ``anyOf``, the variant's
    ``"type": "string"`` overwrote the null branch and ``/redoc`` showed ``model`` as "string or string, Default:
    null" although a request needs it; merged into this, the "With model" variant shows ``model`` as a required
    string and ``models`` as null, the "With models" one the other way round. What validates is unchanged.
    """
    rest = {key: value for key, value in schema.items() if key not in {"anyOf", "default"}}
    (value,) = [variant for variant in schema["anyOf"] if variant != {"type": "null"}]
    return {key: item for key, item in value.items() if key != "type"} | rest


# ---------------------------------------------------------------------------------------------------------------------
# Descriptions

_SEE_REFERENCE = re.compile(r"\s*\(see \[`[^`\]]+`\]\[[^\]]*\]\)")
_INLINE_REFERENCE = re.compile(r"\[`([^`\]]+)`\]\[[^\]]*\]")


def plain_description(text: str) -> str:
    """Return a docstring as public description text (reference: Field descriptions).

    A parenthetical ``(see [`name`][path])`` cross-reference is dropped, and an inline ``[`name`][path]`` one is
    rendered as `` `name` ``: the cross-reference paths point into the maintainers' documentation, not the API's.
    """
    return _INLINE_REFERENCE.sub(r"`\1`", _SEE_REFERENCE.sub("", text))


class DocumentedJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema generator with the document's conventions.

    - A model serialized through a wrap (or plain) ``model_serializer`` that returns ``dict[str, object]`` is
      documented by its fields: pydantic would otherwise document it as any object, since the return annotation is
      all it knows. Such serializers only leave keys out (such as null ones), so the fields describe the output.
    - Fields get no generated ``title`` (``"Max Tokens"``): the property name and the docstring say it better.
    """

    def generate_inner(self, schema: Any) -> JsonSchemaValue:
        """Document a plain-dict serializer's model by its fields (see the class docstring)."""
        if self.mode == "serialization" and _serializes_to_plain_dict(schema):
            schema = {key: value for key, value in schema.items() if key != "serialization"}
        return super().generate_inner(schema)

    def field_title_should_be_set(self, schema: Any) -> bool:
        """Never: fields get no generated ``title``."""
        return False


def _serializes_to_plain_dict(schema: CoreSchema | Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") != "model":
        return False
    serialization = schema.get("serialization")
    if not isinstance(serialization, dict) or serialization.get("type") not in {"function-wrap", "function-plain"}:
        return False
    returned = serialization.get("return_schema") or {}
    return returned.get("type") == "dict" and (returned.get("values_schema") or {}).get("type") in {None, "any"}


_NOT_SCHEMAS: Final = frozenset({"const", "default", "enum", "examples", "example"})
"""Keys whose values are data, not schemas: a ``description`` inside them is left alone."""


def _plain_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: plain_description(item)
            if key == "description" and isinstance(item, str)
            else (item if key in _NOT_SCHEMAS else _plain_descriptions(item))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_plain_descriptions(item) for item in value]
    return value


# ---------------------------------------------------------------------------------------------------------------------
# Component schemas


def model_schemas(inputs: list[tuple[type[BaseModel], JsonSchemaMode]]) -> dict[str, dict[str, Any]]:
    """Return the component schemas of ``inputs`` (each model with its mode) and of every model they use.

    Generated together with ``models_json_schema`` and :class:`DocumentedJsonSchema`, so a model used both ways gets
    ``-Input`` and ``-Output`` names instead of colliding; every description is passed through
    :func:`plain_description`.
    """
    _, document = models_json_schema(inputs, ref_template=SCHEMA_REF, schema_generator=DocumentedJsonSchema)
    definitions: dict[str, dict[str, Any]] = _plain_descriptions(document.get("$defs", {}))
    return definitions


@cache
def component_schemas() -> Mapping[str, Mapping[str, Any]]:
    """Return ``components.schemas``: the pydantic models' schemas with the document's adjustments (generated once
    per process).
    """
    inputs: list[tuple[type[BaseModel], JsonSchemaMode]] = [(model, "validation") for model in REQUEST_MODELS]
    inputs += [(model, "serialization") for model in RESPONSE_MODELS]
    schemas = model_schemas(inputs)

    request = schemas[ChatCompletionRequest.__name__]
    for key, schema in NO_OP_PARAMETER_SCHEMAS.items():
        request["properties"][key] = _plain_descriptions(dict(schema))
    request |= copy.deepcopy(dict(MODEL_SELECTION_SCHEMA))
    for key in MODEL_SELECTION_KEYS:
        request["properties"][key] = selected_property(request["properties"][key])
    request["properties"]["models"]["uniqueItems"] = True
    for model in KEY_DROPPING_MODELS:
        schemas[model.__name__]["additionalProperties"] = True
    responses_request = schemas[ResponsesRequest.__name__]
    for key, schema in RESPONSES_STATE_PARAMETER_SCHEMAS.items():
        responses_request["properties"][key] = _plain_descriptions(copy.deepcopy(dict(schema)))
    return MappingProxyType(schemas)


def schema_ref(model: type[BaseModel]) -> dict[str, str]:
    """A ``$ref`` to the component schema of ``model``."""
    return {"$ref": SCHEMA_REF.format(model=model.__name__)}


EXAMPLE_MODEL: Final = "example/model-7b"
"""The request example's model id when the live model list is unavailable (no Horde reachable, or no model served);
:class:`FrontSchemaView` puts the first served model's id in its place."""

CHAT_REQUEST_EXAMPLE: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "model": EXAMPLE_MODEL,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello in one sentence."},
        ],
        "max_tokens": 128,
    }
)

RESPONSES_REQUEST_EXAMPLE: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "model": "example/model-7b",
        "instructions": "You are a helpful assistant.",
        "input": "Say hello in one sentence.",
        "max_output_tokens": 128,
    }
)

IMAGE_REQUEST_EXAMPLE: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "model": "dall-e-2",
        "prompt": "A lighthouse at dusk, oil painting.",
        "n": 1,
        "size": "512x512",
        "horde": {"steps": 20, "max_kudos": 20},
    }
)

STREAM_EVENT: Final = "ChatCompletionStreamEvent"
"""The component name of one server-sent event of a streamed completion."""


def stream_event_schema() -> dict[str, Any]:
    """One server-sent event of a streamed completion, as an event-stream parser reads it (``data`` and the default
    ``event`` type): ``data`` is a chunk, an error envelope, or ``[DONE]``. Keepalive comment lines are no events.

    OpenAPI 3.1 has no item schema for ``text/event-stream`` (3.2's ``itemSchema``), so the response's ``schema``
    describes one event, as OpenAPI 3.2 and schemathesis read it; the JSON in ``data`` is described with JSON Schema's
    ``contentMediaType`` and ``contentSchema``.
    """
    return {
        "title": STREAM_EVENT,
        "description": (
            "One server-sent event of a streamed completion: a `data:` line holding a `chat.completion.chunk`, an "
            "error, or `[DONE]`, then a blank line."
        ),
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "description": "The event's payload.",
                "anyOf": [
                    {
                        "description": "A chunk, as JSON.",
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": schema_ref(ChatCompletionChunk),
                    },
                    {
                        "description": (
                            "An error after the stream's headers, as JSON in OpenAI's envelope; `[DONE]` follows. "
                            "`metadata.retry_after` holds the seconds a `Retry-After` header would, and "
                            "`metadata.should_retry` the boolean an `x-should-retry` header would."
                        ),
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": schema_ref(OpenAIErrorEnvelope),
                    },
                    {"description": "The end of the stream.", "const": "[DONE]"},
                ],
            },
            "event": {"description": "Not sent, so the event type is `message`.", "const": "message"},
        },
        "additionalProperties": False,
    }


TEXT_COMPLETION_STREAM_EVENT: Final = "TextCompletionStreamEvent"
"""The component name of one server-sent event of a streamed legacy completion (``POST /v1/completions``)."""


def stream_event_variant(title: str, description: str, data: dict[str, Any]) -> dict[str, Any]:
    """:func:`stream_event_schema` with its ``title`` and ``description`` replaced and ``data`` (the JSON carried by a
    ``data:`` line, as a ``contentSchema`` string) in the chunk's place, the error envelope and ``[DONE]`` kept.
    """
    schema = stream_event_schema()
    schema["title"] = title
    schema["description"] = description
    schema["properties"]["data"]["anyOf"][0] = data
    return schema


def text_completion_stream_event_schema() -> dict[str, Any]:
    """One server-sent event of a streamed legacy completion, described as :func:`stream_event_schema` describes a
    chat completion's: ``data`` is a ``text_completion`` chunk (the text, the finish chunk, the usage chunk or a
    progress chunk with ``choices: []``), an error envelope, or ``[DONE]``.
    """
    chunk = {
        "description": "A `text_completion` chunk, as JSON.",
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {
            "type": "object",
            "required": ["id", "object", "choices"],
            "properties": {
                "id": {"type": "string"},
                "object": {"const": "text_completion"},
                "choices": {"type": "array", "items": {"type": "object"}},
            },
        },
    }
    return stream_event_variant(
        TEXT_COMPLETION_STREAM_EVENT,
        "One server-sent event of a streamed legacy completion: a `data:` line holding a `text_completion` chunk, an "
        "error, or `[DONE]`, then a blank line.",
        chunk,
    )


IMAGE_STREAM_EVENT: Final = "ImageGenerationStreamEvent"
"""The component name of one server-sent event of a streamed image request (``POST /v1/images/generations``)."""


def image_stream_event_schema() -> dict[str, Any]:
    """One server-sent event of a streamed image request, described as :func:`stream_event_schema` describes a chat
    completion's: ``data`` is an ``image_generation.completed`` event (one per image; OpenAI's
    ``ImageGenCompletedEvent`` without ``usage``), an error envelope, or ``[DONE]``.
    """
    completed = {
        "description": "One image, as JSON (images.service.completed_event).",
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {
            "type": "object",
            "required": ["type", "b64_json", "created_at", "size", "quality", "background", "output_format"],
            "properties": {
                "type": {"const": "image_generation.completed"},
                "b64_json": {"type": "string", "description": "The image, base64, in `output_format`."},
                "created_at": {"type": "integer", "description": "Unix seconds."},
                "size": {"type": "string", "description": "`WIDTHxHEIGHT`."},
                "quality": {"enum": ["low", "medium", "high", "xhigh", "max", "auto"]},
                "background": {"enum": ["transparent", "opaque"]},
                "output_format": {"enum": ["png", "jpeg", "webp"]},
            },
            "additionalProperties": False,
        },
    }
    return stream_event_variant(
        IMAGE_STREAM_EVENT,
        "One server-sent event of a streamed image request: a `data:` line holding an `image_generation.completed` "
        "event, an error, or `[DONE]`, then a blank line.",
        completed,
    )


IMAGE_SSE_DESCRIPTION: Final = (
    "With `stream: true`, server-sent events (`text/event-stream`): a `: keepalive` comment line every "
    "`HORDE_OAI_KEEPALIVE_SECONDS` while the request waits, then one `image_generation.completed` event per image, "
    "then `data: [DONE]`. No `image_generation.partial_image` event: the Horde's workers send none. An error after the "
    "headers is one `data:` event holding OpenAI's error envelope, followed by `data: [DONE]`."
)


RESPONSE_STREAM_EVENT: Final = "ResponseStreamEvent"
"""The component name of one server-sent event of a streamed response (``POST /v1/responses``)."""

RESPONSE_EVENT_TYPES: Final[tuple[str, ...]] = (
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "error",
)
"""Every event type a streamed response sends (chat.rendering.responses_events.ResponseEventWriter)."""


def response_stream_event_schema() -> dict[str, Any]:
    """One server-sent event of a streamed response: ``event`` is the event's type and ``data`` its JSON."""
    return {
        "title": RESPONSE_STREAM_EVENT,
        "description": (
            "One server-sent event of a streamed response: an `event:` line naming its type and a `data:` line "
            "holding the event as JSON, then a blank line."
        ),
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"description": "The event's type, as in `data.type`.", "enum": list(RESPONSE_EVENT_TYPES)},
            "data": {
                "description": "The event, as JSON.",
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {
                    "type": "object",
                    "required": ["type", "sequence_number"],
                    "properties": {
                        "type": {"description": "The event's type.", "enum": list(RESPONSE_EVENT_TYPES)},
                        "sequence_number": {
                            "description": "The event's position in the stream, from 0.",
                            "type": "integer",
                            "minimum": 0,
                        },
                        "response": {
                            "description": (
                                "The response: `in_progress` with no output on `response.created` and "
                                "`response.in_progress`, whole on `response.completed` and `response.incomplete`."
                            ),
                            **schema_ref(ResponseObject),
                        },
                    },
                },
            },
        },
        "additionalProperties": False,
    }


RESPONSES_SSE_DESCRIPTION: Final = (
    "With `stream: true`, server-sent events (`text/event-stream`) of OpenAI's typed Responses events, each an "
    "`event:` line and a `data:` line, in OpenAI's order: `response.created`, `response.in_progress`; per output item "
    "`response.output_item.added`, its part (`response.reasoning_summary_part.added` or "
    "`response.content_part.added`), its deltas (`response.reasoning_summary_text.delta`, "
    "`response.output_text.delta` as the worker writes when the relay runs, or "
    "`response.function_call_arguments.delta`) and their `...done` events, `response.output_item.done`; then "
    "`response.completed`, or `response.incomplete` when the worker stopped at `max_output_tokens`. Comment lines "
    "keep the connection alive while the request waits for a worker. A failure after the headers is one `error` "
    "event (`code`, `message`, `param`, and `metadata` where the chat error has it), which ends the stream; no "
    "`[DONE]` is sent."
)

SSE_DESCRIPTION: Final = (
    "With `stream: true`, server-sent events (`text/event-stream`): each `data:` line holds one "
    "`chat.completion.chunk` (the role chunk, reasoning and content chunks, a tool-call chunk, the finish chunk, then "
    "the usage chunk when `stream_options.include_usage` is true), and `data: [DONE]` ends the stream. Comment lines "
    "keep the connection alive while the request waits for a worker. An error after the headers is one `data:` event "
    "holding OpenAI's error envelope, followed by `data: [DONE]`."
)
