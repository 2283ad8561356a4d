"""The front's OpenAPI 3.1 description (reference: API documentation, Schema generation, Field descriptions).

drf-spectacular serves the document at ``/openapi.json``, Swagger UI at ``/docs`` and ReDoc at ``/redoc`` (their assets
come from drf-spectacular-sidecar through :class:`StaticAssetsMiddleware`, so the pages work with no internet). It
documents only DRF views, and the front's views are plain async Django views that read and validate the body by hand
(chat.screening), so nothing is derived from them: :func:`add_front_paths`, a drf-spectacular postprocessing hook
(``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``), adds every path and every component schema itself.

The component schemas are generated from the pydantic models: ``ChatCompletionRequest`` as validated, and
``ChatCompletionResponse``, ``ChatCompletionChunk``, ``OpenAIErrorEnvelope``, ``ModelList`` and ``ModelCard`` as
serialized, with :class:`DocumentedJsonSchema`. The document describes the handlers and does not change how they
behave; it adjusts the generated schemas where the handlers differ from the models:

- the request schema lists the keys of ``DEFAULT_NO_OP_PARAMETERS`` that are not request fields
  (:data:`NO_OP_PARAMETER_SCHEMAS`), each accepted only at its default;
- the objects whose unknown keys screening drops (:data:`KEY_DROPPING_MODELS`) allow other keys; the top level,
  ``stream_options``, ``response_format`` and ``horde`` do not;
- the request schema states the model selection rule (exactly one of ``model`` and ``models``, distinct
  ``models``: :data:`MODEL_SELECTION_SCHEMA`), which the model checks in a validator;
- there is no 422 response: the front never returns one.

Each field's description is its model field's docstring, passed through :func:`plain_description`. Each route lists
its responses by status with the error codes each status carries (:data:`CHAT_COMPLETION_ERRORS`,
:data:`MODEL_LIST_ERRORS`) and the ``Retry-After`` and ``x-should-retry`` headers.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template import engines
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularRedocView, SpectacularSwaggerView
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue, models_json_schema
from pydantic_core import CoreSchema
from rest_framework.renderers import TemplateHTMLRenderer
from whitenoise.middleware import WhiteNoiseMiddleware

from chat import errors, real_horde_answers
from chat.errors import OpenAIError, reason_phrase
from chat.legacy_completions import CompletionRequest, TextCompletion
from chat.responses import STATE_FLAGS, STATEFUL_PARAMETERS
from chat.responses_schema import ResponseObject, ResponsesRequest
from chat.schema import (
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
from chat.screening import DEFAULT_NO_OP_PARAMETERS, REQUEST_KEYS
from chat.waiter import QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS
from models_list.schema import ModelCard, ModelList
from models_list.views import served_model_list

DOCS_URL: Final = "/docs/behaviour"
"""The front's behaviour guide (``docs/behaviour.md``: waiting and availability, streaming modes, errors and retries,
limits, the ``horde`` options), served by the front itself at this path (:func:`behaviour_guide`) and linked from the
document's ``info.description`` and ``externalDocs``. Relative, so the link works on whatever host serves the docs."""

BEHAVIOUR_GUIDE: Final = Path(__file__).resolve().parent.parent / "docs" / "behaviour.md"
"""The guide's Markdown source in the repository."""

CLIENTS_GUIDE_URL: Final = "/docs/clients"
"""The guide per client (``docs/clients.md``: base URL, key and the settings each chat UI or client library needs),
served by the front itself at this path (:func:`clients_guide`) and linked from ``info.description``."""

CLIENTS_GUIDE: Final = BEHAVIOUR_GUIDE.parent / "clients.md"
"""The guide per client's Markdown source in the repository."""

SCHEMA_REF: Final = "#/components/schemas/{model}"
"""Where a component schema lives in the document; pydantic's ``ref_template``."""

REQUEST_MODELS: Final[tuple[type[BaseModel], ...]] = (ChatCompletionRequest, ResponsesRequest, CompletionRequest)
"""Models documented as validated (``mode="validation"``): what a client may send."""

RESPONSE_MODELS: Final[tuple[type[BaseModel], ...]] = (
    ChatCompletionResponse,
    ChatCompletionChunk,
    ResponseObject,
    OpenAIErrorEnvelope,
    ModelList,
    ModelCard,
    TextCompletion,
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
        if key not in REQUEST_KEYS
    }
)
"""The request-schema property of each ``DEFAULT_NO_OP_PARAMETERS`` key that is not a ``ChatCompletionRequest``
key (``chat.screening.REQUEST_KEYS``; reference: Schema generation): its default or null, the only values screening
accepts (and then drops), with the table's description."""


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
                "Only empty or null: the front stores no responses and runs no built-in tools, so it has no extra "
                "output data to include. A value is 400 `UnsupportedChatParameter` at `include[0]`."
            ),
        },
    }
)
"""The ``POST /v1/responses`` parameters that need state stored between requests, documented as the only values the
front accepts (``chat.responses.find_stateful_refusal`` refuses every other one before validation). ``store`` and
``background`` (:data:`chat.responses.STATE_FLAGS`) are request fields that take only false."""

assert set(STATE_FLAGS) <= set(ResponsesRequest.model_fields)


MODEL_SELECTION_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "oneOf": [
            {"title": "With model", "required": ["model"], "properties": {"model": {"type": "string"}}},
            {"title": "With models", "required": ["models"], "properties": {"models": {"type": "array"}}},
        ],
    }
)
"""Exactly one of ``model`` (a string) and ``models`` (an array), added to the request schema (reference: Model
selection). ``ChatCompletionRequest`` checks it, and that ``models`` holds distinct ids (``uniqueItems``), in a model
validator, which JSON Schema generation cannot see; the front refuses either break with 400 ``BadRequest``."""


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
    for variant in request["properties"]["models"].get("anyOf", [request["properties"]["models"]]):
        if variant.get("type") == "array":
            variant["uniqueItems"] = True
    for model in KEY_DROPPING_MODELS:
        schemas[model.__name__]["additionalProperties"] = True
    responses_request = schemas[ResponsesRequest.__name__]
    for key, schema in RESPONSES_STATE_PARAMETER_SCHEMAS.items():
        responses_request["properties"][key] = _plain_descriptions(copy.deepcopy(dict(schema)))
    return MappingProxyType(schemas)


# ---------------------------------------------------------------------------------------------------------------------
# Responses


@dataclass(frozen=True)
class DocumentedError:
    """One error code a status can carry, and when."""

    code: str
    """The ``error.code``."""
    when: str
    """When the front returns it (public text, Markdown)."""


INVALID_API_KEY: Final = "InvalidAPIKey"
"""The Horde's rc for a key it does not know, passed through."""
KUDOS_UPFRONT: Final = "KudosUpfront"
"""The Horde's rc for a request over the free output allowance without the kudos to hold upfront, passed through."""
REQUEST_NOT_FOUND: Final = "RequestNotFound"
"""The Horde's rc for a native request id it does not know (expired), passed through."""
TOO_MANY_PROMPTS: Final = "TooManyPrompts"
"""The Horde's rc for too many requests in flight for a key, passed through."""
MAINTENANCE_MODE: Final = "MaintenanceMode"
"""The Horde's rc while it accepts no new work, passed through."""

_MAINTENANCE = DocumentedError(MAINTENANCE_MODE, "The Horde accepts no new work for now.")
_FRONT_AT_CAPACITY = DocumentedError(
    errors.FRONT_AT_CAPACITY,
    "The front is serving as many requests from your address, or in total, as it accepts at once "
    "(`HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT`, `HORDE_OAI_MAX_IN_FLIGHT`); `Retry-After` says when to retry.",
)
_REQUEST_TOO_LARGE = DocumentedError(
    errors.REQUEST_TOO_LARGE,
    "The body is over the front's limit (`HORDE_OAI_MAX_BODY_BYTES`), refused from `Content-Length` or as soon as "
    "the bytes received pass it, before the body is read.",
)
_REQUEST_BODY_TIMEOUT = DocumentedError(
    errors.REQUEST_BODY_TIMEOUT, "The body did not arrive within `HORDE_OAI_BODY_TIMEOUT_SECONDS`."
)
_RATE_LIMITS = (
    DocumentedError(errors.RATE_LIMIT_EXCEEDED, "The Horde rate-limited the request without a code of its own."),
    DocumentedError(TOO_MANY_PROMPTS, "The key has too many requests in flight at the Horde."),
)
_HORDE_UNAVAILABLE = DocumentedError(
    errors.HORDE_UNAVAILABLE, "The Horde could not be reached, or answered outside its contract."
)

CHAT_COMPLETION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        400: (
            DocumentedError(
                errors.BAD_REQUEST,
                "The body is not a JSON object (NaN and Infinity count as invalid JSON) or fails validation, or the "
                "Horde refused the payload; `param` is the first failing field.",
            ),
            DocumentedError(
                errors.UNSUPPORTED_CHAT_PARAMETER,
                "An unknown top-level key, a no-op parameter at another value than its default, an unsupported role or "
                "content part type, a value outside OpenAI's range, a token limit below the Horde's floor, or a tool "
                "history or strict schema breaking OpenAI's rules; `param` is its path.",
            ),
            DocumentedError(
                errors.CHAT_REQUEST_CONFLICT,
                "`tool_choice` or `parallel_tool_calls` without `tools`, or, under `horde.openai_guards`, a "
                "`json_object` request whose messages do not contain the word json.",
            ),
            DocumentedError(
                errors.UNKNOWN_MODEL,
                "`model`, or an entry of `models`, is not a known text model; `param` is `model` or the entry's path.",
            ),
            DocumentedError(
                errors.NO_WORKER_SUPPORTS_LIMIT,
                "The request is over every online worker's completion limit or context length for its models, or, "
                "through the Horde's text generation API, over the server's 4096 tokens; `param` is `max_tokens` (or "
                "the key the client sent) or `horde.max_context_length`. Volunteer workers come and go: retrying is up "
                "to you.",
            ),
            DocumentedError(
                errors.MAX_KUDOS_EXCEEDED,
                "The kudos estimate is above `horde.max_kudos`; `metadata` holds `rc`, `kudos_estimate` and "
                "`max_kudos`.",
            ),
        ),
        401: (DocumentedError(INVALID_API_KEY, "The Horde does not know the bearer key."),),
        403: (
            DocumentedError(
                KUDOS_UPFRONT,
                "The request is over the free output allowance and the key lacks the kudos to hold upfront; `param` "
                "is the completion limit's key, `x-should-retry: false` and no `Retry-After`, and the message says "
                "how to get kudos.",
            ),
        ),
        404: (
            DocumentedError(
                errors.NO_WORKER_SUPPORTS_FEATURES,
                "No online worker serving the model declares a feature or guarantee the request needs (OpenRouter's "
                "status for no endpoint supporting the requested features); the message lists them, and "
                "`metadata.request_id` names the cancelled request.",
            ),
            DocumentedError(REQUEST_NOT_FOUND, "The Horde no longer knows the request (it expired)."),
        ),
        408: (
            DocumentedError(
                errors.CHAT_REQUEST_TIMEOUT,
                "No reply came within the front's timeout; the request was cancelled. `x-should-retry: false`: the "
                "request already waited its whole budget.",
            ),
            _REQUEST_BODY_TIMEOUT,
        ),
        413: (_REQUEST_TOO_LARGE,),
        429: _RATE_LIMITS,
        502: (
            DocumentedError(
                errors.CHAT_REQUEST_FAULTED,
                "The worker failed the request; `metadata.fault_reason` says why. With `prompt_overflow`, "
                "`x-should-retry: false`: the same prompt overflows again.",
            ),
            DocumentedError(
                errors.CHAT_REQUEST_NO_GENERATION, "The Horde ended the request without a reply; it was cancelled."
            ),
            DocumentedError(
                real_horde_answers.CHAT_REQUEST_CANCELLED,
                "The Horde cancelled or dropped the request before a worker finished it (its status reads nothing "
                "waiting, processing or finished). `x-should-retry: false`: send it again to start a new request.",
            ),
            _HORDE_UNAVAILABLE,
        ),
        503: (
            DocumentedError(
                errors.NO_ELIGIBLE_WORKER,
                "No online worker can serve the request: at submit (on a Horde without chat routes, answered from its "
                "model list before any submit), or after waiting for one to appear. `Retry-After: "
                f"{errors.NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS}` and `x-should-retry: false`: a retry within seconds "
                "meets the same online workers.",
            ),
            DocumentedError(
                errors.QUEUE_UNAVAILABLE,
                "With `horde.availability_mode: fail_fast`, no eligible worker thread exists or the estimated wait "
                "exceeds the front's timeout; `param` is `horde.availability_mode`.",
            ),
            _MAINTENANCE,
            DocumentedError(
                errors.FRONT_SHUTTING_DOWN,
                "The front is restarting: it stopped waiting for the request and cancelled it at the Horde. "
                f"`Retry-After: {errors.FRONT_SHUTDOWN_RETRY_AFTER_SECONDS}`. In a stream already open it is the "
                "error event before `data: [DONE]`.",
            ),
            _FRONT_AT_CAPACITY,
        ),
    }
)
"""The error statuses of ``POST /v1/chat/completions`` with the codes each carries (reference: Error attributes, No
eligible worker, Kudos cap, Refusal attributes). A streamed request gets them as plain JSON before any stream header;
an error after the stream's headers is an SSE ``error`` event instead."""

MODEL_LIST_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        429: _RATE_LIMITS,
        502: (_HORDE_UNAVAILABLE,),
        503: (_MAINTENANCE, _FRONT_AT_CAPACITY),
    }
)
"""The error statuses of ``GET /v1/models`` with the codes each carries."""

MODEL_RETRIEVE_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        404: (
            DocumentedError(
                errors.MODEL_NOT_FOUND,
                "`GET /v1/models` does not list the model: the Horde does not know it, or no online chat worker "
                "serves it. OpenAI's message: ``The model `<id>` does not exist or you do not have access to it.``; "
                "`param` is null.",
            ),
        ),
        **MODEL_LIST_ERRORS,
    }
)
"""The error statuses of ``GET /v1/models/{model}``: those of ``GET /v1/models`` and 404 ``model_not_found``."""

LEGACY_COMPLETION_ERRORS: Final[Mapping[int, tuple[DocumentedError, ...]]] = MappingProxyType(
    {
        **{status: codes for status, codes in CHAT_COMPLETION_ERRORS.items() if status != 404},
        404: (
            DocumentedError(
                errors.MODEL_NOT_FOUND,
                "The model is not served through the Horde's text generation API here (`x_horde.api` is not `text` "
                "in `GET /v1/models`); the message names `POST /v1/chat/completions`. `param` is `model`.",
            ),
        ),
    }
)
"""The error statuses of ``POST /v1/completions``: those of chat completions, with 404 ``model_not_found`` for a
model without a text API path."""

RETRY_HEADER_STATUSES: Final = frozenset({408, 429, 502, 503})
"""Statuses the official OpenAI SDKs retry by default, where ``Retry-After`` and ``x-should-retry`` tune the retry."""

RETRY_HEADERS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        "Retry-After": {
            "description": (
                f"Whole seconds to wait before retrying: {errors.NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS} with "
                "`no_eligible_worker`, the estimated wait (at most "
                f"{QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS}) with `queue_unavailable`, "
                f"{errors.FRONT_SHUTDOWN_RETRY_AFTER_SECONDS} with `FrontShuttingDown`, and the Horde's own value on a "
                "429 or 503 when it sent one (never on a permanent refusal)."
            ),
            "schema": {"type": "integer", "minimum": 0},
        },
        "x-should-retry": {
            "description": (
                "Whether the official OpenAI SDKs should retry; when present it decides alone. `false` with every "
                "`no_eligible_worker`, with `ChatRequestTimeout` and with a `ChatRequestFaulted` whose fault is "
                "`prompt_overflow`: a retry within seconds meets the same workers, waits the whole budget again, or "
                "overflows again; and with `KudosUpfront` and `ChatRequestCancelled`. Absent otherwise, so the SDKs' "
                "defaults apply."
            ),
            "schema": {"type": "string", "enum": ["true", "false"]},
        },
    }
)
"""The retry headers an error response may carry."""

ERROR_CONTENT: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "application/json": {"schema": {"$ref": SCHEMA_REF.format(model=OpenAIErrorEnvelope.__name__)}},
    }
)


def error_response(status: int, documented: tuple[DocumentedError, ...]) -> dict[str, Any]:
    """The response object of one error status: its codes in the description, the envelope, the retry headers."""
    lines = [f"{reason_phrase(status)}. OpenAI's error envelope; `code` is:", ""]
    lines += [f"- `{error.code}`: {error.when}" for error in documented]
    lines.append("- or the Horde's own `rc`, passed through with its message.")
    response: dict[str, Any] = {"description": "\n".join(lines), "content": copy.deepcopy(dict(ERROR_CONTENT))}
    if status in RETRY_HEADER_STATUSES:
        response["headers"] = copy.deepcopy(dict(RETRY_HEADERS))
    return response


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": SCHEMA_REF.format(model=model.__name__)}


EXAMPLE_MODEL: Final = "example/model-7b"
"""The request example's model id when the live model list is unavailable (no Horde reachable, or no model served);
:class:`FrontSchemaView` puts the first served model's id in its place."""

EXAMPLE_MODEL_LOOKUP_SECONDS: Final = 2.0
"""How long ``/openapi.json`` waits for the model list to fill the example's model before keeping the placeholder."""

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
                        "contentSchema": _ref(ChatCompletionChunk),
                    },
                    {
                        "description": (
                            "An error after the stream's headers, as JSON in OpenAI's envelope; `[DONE]` follows. "
                            "`metadata.retry_after` holds the seconds a `Retry-After` header would, and "
                            "`metadata.should_retry` the boolean an `x-should-retry` header would."
                        ),
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": _ref(OpenAIErrorEnvelope),
                    },
                    {"description": "The end of the stream.", "const": "[DONE]"},
                ],
            },
            "event": {"description": "Not sent, so the event type is `message`.", "const": "message"},
        },
        "additionalProperties": False,
    }


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
"""Every event type a streamed response sends (chat.responses.ResponseEventWriter)."""


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
                            **_ref(ResponseObject),
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


def front_paths() -> dict[str, Any]:
    """The front's documented routes: ``POST /v1/chat/completions``, ``POST /v1/responses``,
    ``POST /v1/completions``, ``GET /v1/models`` and ``GET /v1/models/{model}``.

    ``/healthz``, ``/``, ``/openapi.json``, ``/docs`` and ``/redoc`` are left out (reference: API documentation).
    """
    security: list[dict[str, list[str]]] = [{"HordeApiKey": []}, {}]
    chat_responses: dict[str, Any] = {
        "200": {
            "description": "The completion (`application/json`). " + SSE_DESCRIPTION,
            "content": {
                "application/json": {"schema": _ref(ChatCompletionResponse)},
                "text/event-stream": {"schema": {"$ref": SCHEMA_REF.format(model=STREAM_EVENT)}},
            },
        },
    }
    chat_responses |= {str(status): error_response(status, codes) for status, codes in CHAT_COMPLETION_ERRORS.items()}
    models_responses: dict[str, Any] = {
        "200": {
            "description": "Every text model with at least one online chat worker.",
            "content": {"application/json": {"schema": _ref(ModelList)}},
        },
    }
    models_responses |= {str(status): error_response(status, codes) for status, codes in MODEL_LIST_ERRORS.items()}
    model_responses: dict[str, Any] = {
        "200": {
            "description": "The model's card, as `GET /v1/models` lists it.",
            "content": {"application/json": {"schema": _ref(ModelCard)}},
        },
    }
    model_responses |= {str(status): error_response(status, codes) for status, codes in MODEL_RETRIEVE_ERRORS.items()}
    responses_responses: dict[str, Any] = {
        "200": {
            "description": "The response (`application/json`). " + RESPONSES_SSE_DESCRIPTION,
            "content": {
                "application/json": {"schema": _ref(ResponseObject)},
                "text/event-stream": {"schema": {"$ref": SCHEMA_REF.format(model=RESPONSE_STREAM_EVENT)}},
            },
        },
    }
    responses_responses |= {
        str(status): error_response(status, codes) for status, codes in CHAT_COMPLETION_ERRORS.items()
    }
    legacy_responses: dict[str, Any] = {
        "200": {
            "description": (
                "The `text_completion` (`application/json`). With `stream: true`, server-sent events: each `data:` "
                'line holds one `text_completion` chunk (the whole text, the finish chunk with `text: ""`, then the '
                "usage chunk when `stream_options.include_usage` is true), and `data: [DONE]` ends the stream; "
                "comment lines keep the connection alive while the request waits."
            ),
            "content": {
                "application/json": {"schema": _ref(TextCompletion)},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        },
    }
    legacy_responses |= {
        str(status): error_response(status, codes) for status, codes in LEGACY_COMPLETION_ERRORS.items()
    }
    return {
        "/v1/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "tags": ["Chat"],
                "summary": "Create a chat completion",
                "description": (
                    "OpenAI's chat completions, served by the AI Horde's volunteer text workers. The front screens "
                    "the body, validates it like OpenAI, submits it to the Horde, waits for a worker and answers with "
                    "a completion or a stream. Unknown keys inside messages, tool definitions and `tool_choice` are "
                    "dropped; unknown keys elsewhere are refused. "
                    f"See the [documentation]({DOCS_URL}) for the details."
                ),
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _ref(ChatCompletionRequest),
                            "example": dict(CHAT_REQUEST_EXAMPLE),
                        },
                    },
                },
                "responses": chat_responses,
            },
        },
        "/v1/responses": {
            "post": {
                "operationId": "createResponse",
                "tags": ["Responses"],
                "summary": "Create a response",
                "description": (
                    "OpenAI's Responses API, served statelessly over the same path as chat completions: `input` "
                    "(with `instructions`) becomes the chat messages, and the request is screened, validated, "
                    "submitted, waited for and cancelled exactly as a chat completion is, with the same errors; an "
                    "error's `param` names the Responses field. Nothing is stored (`store` is false by default and "
                    "only false), so `previous_response_id`, `conversation`, `background`, stored prompts, built-in "
                    "tools and `include` values are refused: send the whole conversation, earlier `function_call` and "
                    "`function_call_output` items included, in `input`. "
                    f"See the [documentation]({DOCS_URL}) for the details."
                ),
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _ref(ResponsesRequest),
                            "example": dict(RESPONSES_REQUEST_EXAMPLE),
                        },
                    },
                },
                "responses": responses_responses,
            },
        },
        "/v1/completions": {
            "post": {
                "operationId": "createCompletion",
                "tags": ["Completions"],
                "summary": "Create a completion (legacy)",
                "description": (
                    "OpenAI's legacy completions, for models the front reaches through the Horde's text generation "
                    "API (`x_horde.api: text` in `GET /v1/models`): the raw `prompt` goes to the text API unchanged. "
                    "Other models answer 404 `model_not_found` naming `POST /v1/chat/completions`. `echo` only false, "
                    "`n` only 1; keys the body does not define are refused like unknown keys."
                ),
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": _ref(CompletionRequest),
                            "example": {"model": "example/model-7b", "prompt": "Once upon a time", "max_tokens": 64},
                        },
                    },
                },
                "responses": legacy_responses,
            },
        },
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "tags": ["Models"],
                "summary": "List the models",
                "description": (
                    "The Horde's text models that have at least one online chat worker, as OpenAI model objects "
                    "shaped like OpenRouter's model cards, with the workers' limits and features."
                ),
                "security": security,
                "responses": models_responses,
            },
        },
        "/v1/models/{model}": {
            "get": {
                "operationId": "retrieveModel",
                "tags": ["Models"],
                "summary": "Retrieve a model",
                "description": (
                    "The card `GET /v1/models` lists for one model, or 404 `model_not_found` when the list does not "
                    "hold it (unknown to the Horde, or no online chat worker)."
                ),
                "security": security,
                "parameters": [
                    {
                        "name": "model",
                        "in": "path",
                        "required": True,
                        "description": (
                            "The model id, such as `example/model-7b`; its slash may be sent as is or as `%2F`."
                        ),
                        "schema": {"type": "string"},
                    },
                ],
                "responses": model_responses,
            },
        },
    }


INFO_DESCRIPTION: Final = (
    "An OpenAI-compatible chat completions API in front of the [AI Horde](https://aihorde.net)'s volunteer text "
    "workers. Point an OpenAI SDK at this server's `/v1` with your AI Horde API key as the bearer key (none: the "
    "anonymous key).\n\n"
    'Errors use OpenAI\'s envelope `{"error": {"message", "type", "param", "code"}}`, with `metadata` where '
    "it helps. Each response lists the codes the front returns at that status; the Horde's own codes (`rc`) pass "
    "through as well.\n\n"
    "Using it from a chat UI or a client library (SillyTavern, Open WebUI, KoboldAI Lite, LangChain, the Vercel AI "
    f"SDK, ...): the [guide per client]({CLIENTS_GUIDE_URL}) gives the settings each one needs.\n\n"
    f"Documentation: [{DOCS_URL}]({DOCS_URL})."
)

SECURITY_SCHEMES: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "HordeApiKey": {
            "type": "http",
            "scheme": "bearer",
            "description": "Your AI Horde API key, forwarded to the Horde. Without one, the anonymous key is used.",
        },
    }
)


@cache
def _front_document() -> tuple[dict[str, Any], dict[str, Any]]:
    schemas = {key: dict(value) for key, value in component_schemas().items()}
    schemas[STREAM_EVENT] = stream_event_schema()
    schemas[RESPONSE_STREAM_EVENT] = response_stream_event_schema()
    return front_paths(), schemas


def add_front_paths(
    result: dict[str, Any], generator: Any = None, request: Any = None, public: bool = True, **kwargs: Any
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the front's paths, component schemas, security scheme and info.

    drf-spectacular finds no operation of its own (the front has no DRF view in the description), so the paths it
    hands over are empty; the front's are added beside them.
    """
    paths, schemas = copy.deepcopy(_front_document())
    result["paths"] = {**result.get("paths", {}), **paths}
    components = result.setdefault("components", {})
    components["schemas"] = {**components.get("schemas", {}), **schemas}
    components["securitySchemes"] = {**components.get("securitySchemes", {}), **copy.deepcopy(dict(SECURITY_SCHEMES))}
    result.setdefault("info", {})["description"] = INFO_DESCRIPTION
    result["externalDocs"] = {"description": "The front's documentation", "url": DOCS_URL}
    return result


# ---------------------------------------------------------------------------------------------------------------------
# The pages and their assets


_REDOC_PAGE: Final = """{% extends "drf_spectacular/redoc.html" %}{% block head %}
    <title>{{ title|default:"Redoc" }}</title>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <style>body { margin: 0; padding: 0; }</style>
{% endblock head %}"""
"""drf-spectacular's ReDoc page without its Google Fonts links: every asset comes from this process."""


DOCS_CONTENT_SECURITY_POLICY: Final = "default-src 'self' 'unsafe-inline' 'unsafe-eval' blob: data:"
"""The ``Content-Security-Policy`` of ``/docs`` and ``/redoc``: the pages may load only from this process (plus
inline, ``blob:`` and ``data:`` content, which Swagger UI and ReDoc build), so reading the documentation tells no
third party about it and works with no internet. The one remote asset the ReDoc bundle names (its sidebar logo on
cdn.redoc.ly) is replaced in the bundle served at ``/docs/assets/redoc.standalone.js`` (:func:`redoc_bundle`), so the
policy refuses nothing and the console shows no error."""


class FrontSchemaView(SpectacularJSONAPIView):
    """``/openapi.json``, with the request example's model set to a model the Horde serves right now.

    "Try it out" in ``/docs`` then reaches a worker with the default example. The id is the first card of the live
    model list (``GET /v1/models``, its cache included), looked up for at most :data:`EXAMPLE_MODEL_LOOKUP_SECONDS`;
    without a list (Horde unreachable, nothing served) the example keeps :data:`EXAMPLE_MODEL`.
    """

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the document with the live example model."""
        response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        model = async_to_sync(served_example_model)()
        if model is not None:
            content = response.data["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]
            content["application/json"]["example"]["model"] = model
        return response


async def served_example_model() -> str | None:
    """The id of the first model the live model list serves, or None (no list within the lookup time, or empty)."""
    try:
        served = await asyncio.wait_for(served_model_list(), EXAMPLE_MODEL_LOOKUP_SECONDS)
    except (OpenAIError, TimeoutError):
        return None
    return next((str(card["id"]) for card in served["data"]), None)


class OfflineSwaggerView(SpectacularSwaggerView):
    """Swagger UI at ``/docs``, loading nothing from outside this process."""

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the page with :data:`DOCS_CONTENT_SECURITY_POLICY`."""
        response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


class _OfflineRedocRenderer(TemplateHTMLRenderer):
    def resolve_template(self, template_names: Any) -> Any:
        return engines["django"].from_string(_REDOC_PAGE)


class OfflineRedocView(SpectacularRedocView):
    """ReDoc at ``/redoc``, loading nothing from outside this process (the sidecar's bundle without its CDN logo,
    system fonts).
    """

    renderer_classes = [_OfflineRedocRenderer]  # noqa: RUF012 - DRF's API: a view's renderers are a class-level list

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the page with :data:`DOCS_CONTENT_SECURITY_POLICY` and the ReDoc bundle of :func:`redoc_bundle`."""
        response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        response.data["redoc_standalone"] = reverse("redoc-bundle")
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


REDOC_BUNDLE: Final = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
"""The sidecar's ReDoc bundle (a static file path)."""

REDOC_CDN_LOGO: Final = "https://cdn.redoc.ly/redoc/logo-mini.svg"
"""The one remote asset the ReDoc bundle names: the logo beside "API docs by Redocly" in its sidebar."""

EMPTY_IMAGE: Final = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='0' height='0'/%3E"
"""An empty SVG, put in the logo's place: the page requests nothing remote and the CSP refuses nothing."""

FAVICON: Final = "drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png"
"""The icon served at ``/favicon.ico`` (Swagger UI's, a PNG; browsers take the type from the response)."""

ASSET_CACHE_CONTROL: Final = "public, max-age=86400"
"""How long a browser may keep the docs' assets served by the views below."""


@cache
def _static_bytes(path: str) -> bytes:
    found = finders.find(path)
    if not isinstance(found, str):
        raise FileNotFoundError(path)
    return Path(found).read_bytes()


@cache
def redoc_bundle_source() -> bytes:
    """The sidecar's ReDoc bundle with :data:`REDOC_CDN_LOGO` replaced by :data:`EMPTY_IMAGE`.

    Raises:
        ValueError: The bundle does not name the logo (a new ReDoc): the replacement needs a look.
    """
    source = _static_bytes(REDOC_BUNDLE)
    if REDOC_CDN_LOGO.encode() not in source:
        raise ValueError(f"{REDOC_BUNDLE} no longer names {REDOC_CDN_LOGO}")
    return source.replace(REDOC_CDN_LOGO.encode(), EMPTY_IMAGE.encode())


async def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """``/docs/assets/redoc.standalone.js``: ReDoc without its remote logo (:func:`redoc_bundle_source`)."""
    source = await asyncio.to_thread(redoc_bundle_source)
    response = HttpResponse(source, content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = ASSET_CACHE_CONTROL
    return response


async def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: Swagger UI's icon, so a browser's automatic request for it (ReDoc's page declares no icon)
    does not end in a 404.
    """
    response = HttpResponse(await asyncio.to_thread(_static_bytes, FAVICON), content_type="image/png")
    response["Cache-Control"] = ASSET_CACHE_CONTROL
    return response


async def behaviour_guide(request: HttpRequest) -> HttpResponse:
    """``/docs/behaviour``: the front's behaviour guide (``docs/behaviour.md``), as Markdown text a browser shows."""
    text = await asyncio.to_thread(BEHAVIOUR_GUIDE.read_bytes)
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


async def clients_guide(request: HttpRequest) -> HttpResponse:
    """``/docs/clients``: the guide per client (``docs/clients.md``), as Markdown text a browser shows."""
    text = await asyncio.to_thread(CLIENTS_GUIDE.read_bytes)
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


class StaticAssetsMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, usable by the front's async middleware chain: serves the Swagger UI and ReDoc assets of
    drf-spectacular-sidecar under ``STATIC_URL`` in every mode, ``DEBUG`` or not.

    WhiteNoise's own middleware is synchronous; in an async chain Django would run it in a thread and call the rest of
    the chain (the async views) from there, which costs a thread per request and keeps a client's disconnect from
    cancelling the view. This subclass stays async: a static path is answered from WhiteNoise's file table with the file
    read in a worker thread, and any other request goes straight on. With ``WHITENOISE_USE_FINDERS`` the files come
    from the app finders, so no ``collectstatic`` step is needed.
    """

    async_capable = True
    sync_capable = True

    BLOCK_SIZE: Final = 64 * 1024
    """Bytes read per chunk of a static file."""

    def __init__(self, get_response: Any = None, **kwargs: Any) -> None:
        super().__init__(get_response, **kwargs)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        """Answer a static path, else pass the request on (awaitable in an async chain)."""
        if self.is_async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is None:
            passed_on: HttpResponseBase = await self.get_response(request)
            return passed_on
        served = await asyncio.to_thread(static_file.get_response, request.method, request.META)
        response = StreamingHttpResponse(self._chunks(served.file), status=int(served.status))
        del response["Content-Type"]
        for name, value in served.headers:
            response[name] = value
        return response

    async def _chunks(self, file: Any) -> AsyncIterator[bytes]:
        if file is None:
            return
        try:
            while chunk := await asyncio.to_thread(file.read, self.BLOCK_SIZE):
                yield chunk
        finally:
            await asyncio.to_thread(file.close)


__all__ = [
    "CHAT_COMPLETION_ERRORS",
    "CLIENTS_GUIDE_URL",
    "DOCS_CONTENT_SECURITY_POLICY",
    "DOCS_URL",
    "KEY_DROPPING_MODELS",
    "MODEL_LIST_ERRORS",
    "MODEL_SELECTION_SCHEMA",
    "NO_OP_PARAMETER_SCHEMAS",
    "DocumentedError",
    "DocumentedJsonSchema",
    "FrontSchemaView",
    "OfflineRedocView",
    "OfflineSwaggerView",
    "StaticAssetsMiddleware",
    "add_front_paths",
    "behaviour_guide",
    "clients_guide",
    "component_schemas",
    "favicon",
    "front_paths",
    "model_schemas",
    "plain_description",
    "redoc_bundle",
]
