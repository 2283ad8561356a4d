"""The front's OpenAPI 3.1 document: its paths, info and security scheme (reference: API documentation).

drf-spectacular documents only DRF views, and the front's views are plain async Django views that read and validate
the body by hand (chat.reading.screening), so nothing is derived from them: :func:`add_front_paths`, a drf-spectacular
postprocessing hook (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``), adds every path (:func:`front_paths`) and every
component schema (:mod:`front_operations.openapi.schemas`) itself. There is no 422 response: the front never returns
one. Each route lists its responses by status with the error codes each status carries
(:mod:`front_operations.openapi.error_table`) and the ``Retry-After`` and ``x-should-retry`` headers
(:func:`error_response`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, Final

from pydantic import BaseModel

from chat.errors import FAILURES, error_type_for_status, reason_phrase
from chat.protocol.chat_request import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    OpenAIErrorEnvelope,
)
from chat.protocol.legacy_completion import CompletionRequest, TextCompletion
from chat.protocol.responses_api import ResponseObject, ResponsesRequest
from front_operations.openapi.error_table import (
    CHAT_COMPLETION_ERRORS,
    IMAGE_GENERATION_ERRORS,
    LEGACY_COMPLETION_ERRORS,
    MODEL_LIST_ERRORS,
    MODEL_RETRIEVE_ERRORS,
    RESPONSES_ERRORS,
    STORED_RESPONSE_ERRORS,
    DocumentedError,
    retry_headers,
)
from front_operations.openapi.schemas import (
    CHAT_REQUEST_EXAMPLE,
    IMAGE_REQUEST_EXAMPLE,
    IMAGE_SSE_DESCRIPTION,
    IMAGE_STREAM_EVENT,
    RESPONSE_STREAM_EVENT,
    RESPONSES_REQUEST_EXAMPLE,
    RESPONSES_SSE_DESCRIPTION,
    SCHEMA_REF,
    SSE_DESCRIPTION,
    STREAM_EVENT,
    TEXT_COMPLETION_STREAM_EVENT,
    component_schemas,
    image_stream_event_schema,
    response_stream_event_schema,
    schema_ref,
    stream_event_schema,
    text_completion_stream_event_schema,
)
from images.protocol import ImageGenerationRequest, ImagesResponse
from models_list.schema import ModelCard, ModelList

DOCS_URL: Final = "/docs/behaviour"
"""The front's behaviour guide (``docs/behaviour.md``: waiting and availability, streaming modes, errors and retries,
limits, the ``horde`` options), served by the front itself at this path
(:func:`front_operations.openapi.guides.behaviour_guide`) and linked from the document's ``info.description`` and
``externalDocs``. Relative, so the link works on whatever host serves the docs."""

CLIENTS_GUIDE_URL: Final = "/docs/clients"
"""The guide per client (``docs/clients.md``: base URL, key and the settings each chat UI or client library needs),
served by the front itself at this path (:func:`front_operations.openapi.guides.clients_guide`) and linked from
``info.description``."""


ERROR_CONTENT: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "application/json": {"schema": {"$ref": SCHEMA_REF.format(model=OpenAIErrorEnvelope.__name__)}},
    }
)


def error_response(
    status: int, documented: tuple[DocumentedError, ...], *, calls_the_horde: bool = True
) -> dict[str, Any]:
    """The response object of one error status: its codes in the description (with, on a route that calls the Horde,
    the Horde's own ``rc`` passed through), the envelope, and the retry headers its codes may send
    (:func:`front_operations.openapi.error_table.retry_headers`).
    """
    lines = [f"{reason_phrase(status)}. OpenAI's error envelope; `code` is:", ""]
    lines += [f"- `{error.code}`: {error.when}" for error in documented]
    if calls_the_horde:
        lines.append("- or the Horde's own `rc`, passed through with its message.")
    response: dict[str, Any] = {"description": "\n".join(lines), "content": copy.deepcopy(dict(ERROR_CONTENT))}
    response["content"]["application/json"]["examples"] = error_examples(status, documented)
    if headers := retry_headers(status, documented):
        response["headers"] = copy.deepcopy(headers)
    return response


def error_examples(status: int, documented: tuple[DocumentedError, ...]) -> dict[str, Any]:
    """One example envelope per code of the failure catalogue a status carries, in place of Swagger UI's generated
    ``"message": "string"``: its ``type`` and ``code`` as the front sends them, and as ``message`` when it is sent.
    """
    examples: dict[str, Any] = {}
    for error in documented:
        failure = FAILURES.get(error.code)
        error_type = failure.type if failure is not None else error_type_for_status(status)
        when = error.when.replace("`", "").rstrip(".")
        envelope = {"message": when[:1].upper() + when[1:] + ".", "type": error_type, "param": None, "code": error.code}
        examples[error.code] = {"summary": error.code, "value": {"error": envelope}}
    return examples


def route_responses(
    description: str,
    schema: Mapping[str, Any],
    errors_by_status: Mapping[int, tuple[DocumentedError, ...]],
    *,
    stream_event: str | None = None,
    calls_the_horde: bool = True,
) -> dict[str, Any]:
    """A route's responses: ``200`` with ``description`` and its JSON ``schema`` (and, with ``stream_event``, the
    ``text/event-stream`` of that component), then one :func:`error_response` per status of ``errors_by_status``
    (``calls_the_horde`` false for a route of the front's own store, whose errors pass no Horde ``rc`` through).
    """
    content: dict[str, Any] = {"application/json": {"schema": copy.deepcopy(dict(schema))}}
    if stream_event is not None:
        content["text/event-stream"] = {"schema": {"$ref": SCHEMA_REF.format(model=stream_event)}}
    responses: dict[str, Any] = {"200": {"description": description, "content": content}}
    responses |= {
        str(status): error_response(status, codes, calls_the_horde=calls_the_horde)
        for status, codes in errors_by_status.items()
    }
    return responses


def request_body(model: type[BaseModel], example: Mapping[str, Any]) -> dict[str, Any]:
    """A required JSON request body of ``model``'s component schema, with ``example``."""
    return {
        "required": True,
        "content": {"application/json": {"schema": schema_ref(model), "example": copy.deepcopy(dict(example))}},
    }


DELETED_RESPONSE_SCHEMA: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response", "type": "string"},
            "deleted": {"const": True, "type": "boolean"},
        },
    }
)
"""The body of ``DELETE /v1/responses/{response_id}``."""


def front_paths() -> dict[str, Any]:
    """The front's documented routes: ``POST /v1/chat/completions``, ``POST /v1/responses`` (and ``GET`` / ``DELETE
    /v1/responses/{response_id}``), ``POST /v1/completions``, ``POST /v1/images/generations``, ``GET /v1/models`` and
    ``GET /v1/models/{model}``.

    ``/healthz``, ``/``, ``/openapi.json``, ``/docs`` and ``/redoc`` are left out (reference: API documentation).
    """
    security: list[dict[str, list[str]]] = [{"HordeApiKey": []}, {}]
    chat_responses = route_responses(
        "The completion (`application/json`). " + SSE_DESCRIPTION,
        schema_ref(ChatCompletionResponse),
        CHAT_COMPLETION_ERRORS,
        stream_event=STREAM_EVENT,
    )
    models_responses = route_responses(
        "Every text model with at least one online chat worker.", schema_ref(ModelList), MODEL_LIST_ERRORS
    )
    model_responses = route_responses(
        "The model's card, as `GET /v1/models` lists it.", schema_ref(ModelCard), MODEL_RETRIEVE_ERRORS
    )
    responses_responses = route_responses(
        "The response (`application/json`). " + RESPONSES_SSE_DESCRIPTION,
        schema_ref(ResponseObject),
        RESPONSES_ERRORS,
        stream_event=RESPONSE_STREAM_EVENT,
    )
    stored_responses = route_responses(
        "The stored response object, as `POST /v1/responses` answered it.",
        schema_ref(ResponseObject),
        STORED_RESPONSE_ERRORS,
        calls_the_horde=False,
    )
    deleted_responses = route_responses(
        'The response was deleted: `{"id": "resp_...", "object": "response", "deleted": true}`.',
        DELETED_RESPONSE_SCHEMA,
        STORED_RESPONSE_ERRORS,
        calls_the_horde=False,
    )
    response_id_parameter = {
        "name": "response_id",
        "in": "path",
        "required": True,
        "description": "The `id` of a response stored with `store` true by the same API key (`resp_...`).",
        "schema": {"type": "string"},
    }
    legacy_responses = route_responses(
        "The `text_completion` (`application/json`). With `stream: true`, server-sent events: each `data:` line holds "
        'one `text_completion` chunk (the whole text, the finish chunk with `text: ""`, then the usage chunk when '
        "`stream_options.include_usage` is true), and `data: [DONE]` ends the stream; comment lines keep the "
        "connection alive while the request waits.",
        schema_ref(TextCompletion),
        LEGACY_COMPLETION_ERRORS,
        stream_event=TEXT_COMPLETION_STREAM_EVENT,
    )
    image_responses = route_responses(
        "OpenAI's `ImagesResponse` (`application/json`): one `data` entry per image, `b64_json` (PNG by default, "
        "converted from the Horde's WebP) or `url` (the Horde's own link, valid 30 minutes). " + IMAGE_SSE_DESCRIPTION,
        schema_ref(ImagesResponse),
        IMAGE_GENERATION_ERRORS,
        stream_event=IMAGE_STREAM_EVENT,
    )
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
                    "dropped; unknown keys elsewhere are refused. For a model served through the Horde's text "
                    "generation API (`x_horde.api: text`), `tools`, `tool_choice`, `parallel_tool_calls`, tool history "
                    "and a JSON `response_format` are prompted in the model family's own format (ChatML/Hermes/Qwen "
                    "`<tool_call>`, Llama 3.1+ JSON calls with `ipython` results, Mistral `[TOOL_CALLS]`; the ChatML "
                    "format for any other family) and the reply is parsed into `tool_calls` or JSON `content` and "
                    "validated; a malformed reply is asked again (`HORDE_OAI_TEXT_REPAIR_ATTEMPTS`), then 502 "
                    "`ModelReplyInvalid`. "
                    f"See the [documentation]({DOCS_URL}) for the details."
                ),
                "security": security,
                "requestBody": request_body(ChatCompletionRequest, CHAT_REQUEST_EXAMPLE),
                "responses": chat_responses,
            },
        },
        "/v1/responses": {
            "post": {
                "operationId": "createResponse",
                "tags": ["Responses"],
                "summary": "Create a response",
                "description": (
                    "OpenAI's Responses API, served over the same path as chat completions: `input` (with "
                    "`instructions`, after the stored conversation of `previous_response_id`) becomes the chat "
                    "messages, and the request is screened, validated, submitted, waited for and cancelled exactly as "
                    "a chat completion is, with the same errors; an error's `param` names the Responses field. With "
                    "`store` true (OpenAI's default) the response, its input and output items, is kept for "
                    "`HORDE_OAI_STORED_RESPONSE_SECONDS` (in the front's Redis, readable only with the same API key) "
                    "for `previous_response_id`, `item_reference` input items and `GET` / `DELETE "
                    "/v1/responses/{response_id}`; a streamed response is stored when it completes. `conversation`, "
                    "`background`, stored prompts, built-in tools and `include` values are refused. "
                    f"See the [documentation]({DOCS_URL}) for the details."
                ),
                "security": security,
                "requestBody": request_body(ResponsesRequest, RESPONSES_REQUEST_EXAMPLE),
                "responses": responses_responses,
            },
        },
        "/v1/responses/{response_id}": {
            "get": {
                "operationId": "retrieveResponse",
                "tags": ["Responses"],
                "summary": "Retrieve a stored response",
                "description": (
                    "The response `POST /v1/responses` stored (`store` true, OpenAI's default), within "
                    "`HORDE_OAI_STORED_RESPONSE_SECONDS`, for the API key that created it; 404 otherwise."
                ),
                "security": security,
                "parameters": [response_id_parameter],
                "responses": stored_responses,
            },
            "delete": {
                "operationId": "deleteResponse",
                "tags": ["Responses"],
                "summary": "Delete a stored response",
                "description": (
                    "Deletes a stored response and its output items (no `previous_response_id` or `item_reference` "
                    "finds them afterwards); 404 for a response this API key did not store."
                ),
                "security": security,
                "parameters": [response_id_parameter],
                "responses": deleted_responses,
            },
        },
        "/v1/completions": {
            "post": {
                "operationId": "createCompletion",
                "tags": ["Completions"],
                "summary": "Create a completion (legacy)",
                "description": (
                    "OpenAI's legacy completions, for every model: for a model the front reaches through the Horde's "
                    "text generation API (`x_horde.api: text` in `GET /v1/models`) the raw `prompt` goes to the text "
                    "API unchanged; on the native chat route the prompt is sent as one `user` message. The reply is "
                    "a `text_completion` either way. `echo` only false, `n` only 1; `best_of`, `frequency_penalty`, "
                    "`presence_penalty`, `logit_bias`, `logprobs`, `seed` and `suffix` only at OpenAI's default "
                    "(dropped); other keys the body does not define are refused like unknown keys."
                ),
                "security": security,
                "requestBody": request_body(
                    CompletionRequest, {"model": "example/model-7b", "prompt": "Once upon a time", "max_tokens": 64}
                ),
                "responses": legacy_responses,
            },
        },
        "/v1/images/generations": {
            "post": {
                "operationId": "createImage",
                "tags": ["Images"],
                "summary": "Create an image",
                "description": (
                    "OpenAI's image generation, served by the AI Horde's volunteer image workers (Stable Diffusion and "
                    "the other models they run). `model` is a Horde image model as `GET /v1/models` lists it or an "
                    "alias (`dall-e-2`, `dall-e-3`, `gpt-image-1`: `HORDE_OAI_IMAGE_MODEL_ALIASES`); the Horde's own "
                    "options go under `horde`, bounded as the Horde bounds them. With `horde.max_kudos` the Horde's "
                    "dry run comes first. The front submits, reads the Horde's check on the read schedule and the "
                    "images once at the end; a censored image is never a success (`content_policy_violation`), fewer "
                    "images than `n` is 502 `ImageRequestIncomplete`, and an abandoned request is cancelled at the "
                    "Horde. `POST /v1/images/edits` is not served. "
                    "See the [images guide](/docs/images) for the details."
                ),
                "security": security,
                "requestBody": request_body(ImageGenerationRequest, IMAGE_REQUEST_EXAMPLE),
                "responses": image_responses,
            },
        },
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "tags": ["Models"],
                "summary": "List the models",
                "description": (
                    "The Horde's text models that have at least one online chat worker, and its image models with an "
                    "online image worker (with the image aliases), as OpenAI model objects shaped like OpenRouter's "
                    "model cards, with the workers' limits and features."
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
    schemas[TEXT_COMPLETION_STREAM_EVENT] = text_completion_stream_event_schema()
    schemas[IMAGE_STREAM_EVENT] = image_stream_event_schema()
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
