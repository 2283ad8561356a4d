"""The OpenAPI description, /docs and /redoc (reference: API documentation, Schema generation, Field descriptions).

The document is fetched from the front's own ``/openapi.json`` view (Django's test client, ``DEBUG`` off, as in
production) and checked one adjustment at a time; the model list's pydantic models are checked against the cards
``models_list.cards`` builds.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpResponse
from django.test import AsyncClient, Client
from horde_sdk.generation_parameters.text.chat_policy import ChatResponseFormatType, ChatToolChoiceMode
from horde_sdk.worker.chat_declaration import ChatFinishReason
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from pydantic import BaseModel, ConfigDict, model_serializer
from pydantic.json_schema import GenerateJsonSchema

import chat.errors
import chat.protocol.chat_completion
import chat.protocol.chat_request
import chat.protocol.responses_api
import models_list.schema
from chat.errors import OpenAIError
from chat.protocol.chat_request import ChatCompletionRequest
from chat.reading.parameters import DEFAULT_NO_OP_PARAMETERS
from chat.reading.screening import read_chat_request
from front_operations.openapi import error_table
from front_operations.openapi.assets import StaticAssetsMiddleware
from front_operations.openapi.document import CLIENTS_GUIDE_URL, DOCS_URL
from front_operations.openapi.schemas import (
    KEY_DROPPING_MODELS,
    MODEL_SELECTION_KEYS,
    MODEL_SELECTION_SCHEMA,
    NO_OP_PARAMETER_SCHEMAS,
    SCHEMA_REF,
    DocumentedJsonSchema,
    model_schemas,
    plain_description,
    selected_property,
)
from images.protocol import ImageGenerationRequest, ImagesResponse
from models_list.cards import model_list
from models_list.schema import ModelCard, ModelList

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MODELS = "/v1/models"
MODEL = "/v1/models/{model}"
IMAGES = "/v1/images/generations"


def schemas(document: dict[str, Any]) -> dict[str, Any]:
    return document["components"]["schemas"]


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": SCHEMA_REF.format(model=model.__name__)}


def ref_name(schema: dict[str, Any]) -> str:
    return schema["$ref"].rsplit("/", 1)[-1]


# ---------------------------------------------------------------------------------------------------------------------
# The document, its routes and the pages


def test_document_is_a_valid_openapi_3_1_description(document: dict[str, Any]) -> None:
    """ref: api-documentation.1"""
    assert document["openapi"] == "3.1.0"
    validate(document, cls=OpenAPIV31SpecValidator)
    assert document["info"]["title"] == "AI Horde OpenAI-compatible chat front"


def test_document_lists_the_four_routes_and_leaves_out_health_and_docs(document: dict[str, Any]) -> None:
    """ref: api-documentation.1"""
    assert {path: sorted(operations) for path, operations in document["paths"].items()} == {
        CHAT: ["post"],
        RESPONSES: ["post"],
        f"{RESPONSES}/{{response_id}}": ["delete", "get"],
        "/v1/completions": ["post"],
        IMAGES: ["post"],
        MODELS: ["get"],
        MODEL: ["get"],
    }
    for left_out in ("/healthz", "/", "/openapi.json", "/docs", "/redoc"):
        assert left_out not in document["paths"]
    assert document["paths"][CHAT]["post"]["operationId"] == "createChatCompletion"
    assert document["paths"][RESPONSES]["post"]["operationId"] == "createResponse"
    assert document["paths"][MODELS]["get"]["operationId"] == "listModels"
    assert document["paths"][MODEL]["get"]["operationId"] == "retrieveModel"
    assert document["paths"][MODEL]["get"]["parameters"] == [
        {
            "name": "model",
            "in": "path",
            "required": True,
            "description": "The model id, such as `example/model-7b`; its slash may be sent as is or as `%2F`.",
            "schema": {"type": "string"},
        }
    ]


def test_root_redirects_to_docs() -> None:
    """ref: api-documentation.1"""
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/docs"


ASSET_PATTERN = re.compile(r'(?:src|href)="([^"]+)"')


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        (
            "/docs",
            [
                "/static/drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png",
                "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
                "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
                "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-standalone-preset.js",
            ],
        ),
        ("/redoc", ["/docs/assets/redoc.standalone.js"]),
    ],
)
def test_pages_load_every_asset_from_this_process(page: str, assets: list[str]) -> None:
    """ref: api-documentation.1"""
    assert settings.DEBUG is False
    response = Client().get(page)
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == "default-src 'self' 'unsafe-inline' 'unsafe-eval' blob: data:"
    html = response.content.decode()
    assert ASSET_PATTERN.findall(html) == assets
    assert "https://" not in html and "http://" not in html
    assert ('url: "/openapi.json"' if page == "/docs" else 'spec-url="/openapi.json"') in html


def test_the_redoc_bundle_is_the_sidecars_without_its_remote_logo() -> None:
    """The sidecar's ReDoc bundle names one remote asset, its sidebar logo; the served copy has an empty image there."""
    from django.contrib.staticfiles import finders

    from front_operations.openapi.assets import EMPTY_IMAGE, REDOC_BUNDLE, REDOC_CDN_LOGO

    response = Client().get("/docs/assets/redoc.standalone.js")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/javascript; charset=utf-8"
    original = Path(finders.find(REDOC_BUNDLE)).read_bytes()
    assert original.count(b"https://") >= 1 and original.count(REDOC_CDN_LOGO.encode()) == 1
    assert response.content == original.replace(REDOC_CDN_LOGO.encode(), EMPTY_IMAGE.encode())
    assert b"cdn.redoc.ly" not in response.content


def test_the_chat_example_names_a_served_model_or_keeps_the_placeholder() -> None:
    """Without a reachable Horde (the in-process tests' HORDE_URL is a closed loopback port) the example keeps
    ``example/model-7b``."""
    document = Client().get("/openapi.json").json()
    example = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["example"]
    assert example["model"] == "example/model-7b"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js", 'text/javascript; charset="utf-8"'),
        ("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css", 'text/css; charset="utf-8"'),
        ("/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js", 'text/javascript; charset="utf-8"'),
    ],
)
async def test_sidecar_assets_are_served_without_debug(path: str, content_type: str) -> None:
    """ref: api-documentation.1"""
    response = await AsyncClient().get(path)
    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    body = b"".join([chunk async for chunk in response.streaming_content])
    assert len(body) == int(response["Content-Length"]) > 1000


def test_static_assets_middleware_stays_async() -> None:
    """An async chain keeps running on the event loop (no thread per request, disconnects cancel the view)."""

    async def get_response(request: Any) -> HttpResponse:
        return HttpResponse()

    assert iscoroutinefunction(StaticAssetsMiddleware(get_response))
    # WhiteNoise's own advice: directly after SecurityMiddleware, before everything else.
    assert settings.MIDDLEWARE[:2] == [
        "oaifront.middleware.SecurityMiddleware",
        "front_operations.openapi.assets.StaticAssetsMiddleware",
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Component schemas


def plain_walk(value: Any) -> Any:
    """A pydantic schema as the document shows it: descriptions through plain_description."""
    if isinstance(value, dict):
        return {
            key: plain_description(item)
            if key == "description" and isinstance(item, str)
            else (item if key in {"const", "default", "enum", "examples"} else plain_walk(item))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [plain_walk(item) for item in value]
    return value


def generated(model: type[BaseModel], mode: str) -> dict[str, Any]:
    """The model's own schema and its dependencies, as pydantic generates them for ``mode``."""
    schema = model.model_json_schema(mode=mode, ref_template=SCHEMA_REF, schema_generator=DocumentedJsonSchema)
    definitions = schema.pop("$defs", {})
    return plain_walk({model.__name__: schema, **definitions})


@pytest.mark.parametrize(
    ("model", "mode"),
    [
        (chat.protocol.chat_request.ChatCompletionRequest, "validation"),
        (chat.protocol.chat_request.ChatCompletionResponse, "serialization"),
        (chat.protocol.chat_request.ChatCompletionChunk, "serialization"),
        (chat.protocol.chat_request.OpenAIErrorEnvelope, "serialization"),
        (ModelList, "serialization"),
        (ModelCard, "serialization"),
    ],
)
def test_component_schemas_are_generated_from_the_models(
    document: dict[str, Any], model: type[BaseModel], mode: str
) -> None:
    """ref: schema-generation.1, schema-generation.4"""
    components = schemas(document)
    for name, schema in generated(model, mode).items():
        documented = dict(components[name])
        if name == ChatCompletionRequest.__name__:
            documented["properties"] = {
                key: value for key, value in documented["properties"].items() if key not in NO_OP_PARAMETER_SCHEMAS
            }
            assert documented.pop("oneOf") == MODEL_SELECTION_SCHEMA["oneOf"]
            models = json.loads(json.dumps(documented["properties"]["models"]))
            assert models.pop("uniqueItems") is True
            documented["properties"] = {**documented["properties"], "models": models}
            for key in MODEL_SELECTION_KEYS:
                schema["properties"][key] = selected_property(schema["properties"][key])
        if name in {dropping.__name__ for dropping in KEY_DROPPING_MODELS}:
            assert schema.pop("additionalProperties") is False
            assert documented.pop("additionalProperties") is True
        assert documented == schema, name


def test_request_is_documented_as_validated_and_responses_as_serialized(document: dict[str, Any]) -> None:
    """ref: schema-generation.1"""
    components = schemas(document)
    # A field with a default is optional to send; in a response every key the front always writes is required.
    assert components["ChatCompletionRequest"]["required"] == ["messages"]
    assert set(components["ChatCompletionResponse"]["required"]) >= {"id", "object", "created", "model", "choices"}
    assert components["ModelList"]["required"] == ["object", "data"]


def test_model_is_documented_as_a_string_required_unless_models_is_given(document: dict[str, Any]) -> None:
    """The shape ReDoc renders honestly (a string, required in the "With model" variant; no "string or string,
    Default: null"), with the rule in the field's description. ref: model-selection.1"""
    request = schemas(document)["ChatCompletionRequest"]
    description = ChatCompletionRequest.model_fields["model"].description
    assert description is not None
    assert description.startswith("The model to use; a non-empty model id. Required unless ``models`` is given: ")
    assert request["properties"]["model"] == {"minLength": 1, "maxLength": 255, "description": description}
    assert set(request["properties"]["models"]) == {"items", "minItems", "maxItems", "uniqueItems", "description"}
    assert request["oneOf"] == [
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
    ]


@pytest.mark.parametrize(
    ("selection", "valid", "param"),
    [
        ({"model": "a"}, True, None),
        ({"models": ["a", "b"]}, True, None),
        ({"model": "a", "models": None}, True, None),
        ({"model": None, "models": ["a"]}, True, None),
        ({}, False, "model"),
        ({"model": None, "models": None}, False, "model"),
        ({"model": "a", "models": ["b"]}, False, "models"),
        ({"models": ["a", "a"]}, False, "models[1]"),
        ({"model": 5, "models": ["a"]}, False, "model"),
        ({"model": "", "models": None}, False, "model"),
    ],
)
def test_model_selection_rule_is_in_the_schema_as_the_handler_applies_it(
    document: dict[str, Any], selection: dict[str, Any], valid: bool, param: str | None
) -> None:
    """ref: schema-generation.3, model-selection.1, model-selection.2"""
    body = {"messages": [{"role": "user", "content": "Hi"}], **selection}
    root = {"components": document["components"], "$ref": "#/components/schemas/ChatCompletionRequest"}
    assert jsonschema.Draft202012Validator(root).is_valid(body) is valid
    if valid:
        read_chat_request(json.dumps(body).encode())
    else:
        with pytest.raises(OpenAIError) as refused:
            read_chat_request(json.dumps(body).encode())
        assert (refused.value.status, refused.value.code, refused.value.param) == (400, "BadRequest", param)


def reachable(components: dict[str, Any], root: str) -> set[str]:
    """Component names reachable from ``root`` through ``$ref``."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack += re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(components[name]))
    return seen


def object_schemas(components: dict[str, Any], names: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in sorted(names):
        if components[name].get("type") == "object":
            yield name, components[name]


def test_key_dropping_objects_allow_other_keys_and_the_rest_refuse_them(document: dict[str, Any]) -> None:
    """ref: schema-generation.6, schema-generation.7, parameter-screening.10"""
    components = schemas(document)
    dropping = {model.__name__ for model in KEY_DROPPING_MODELS}
    assert dropping == {
        "SystemMessage",
        "DeveloperMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "TextContentPart",
        "ImageContentPart",
        "RefusalContentPart",
        "ImageUrl",
        "ToolCall",
        "FunctionCall",
        "ToolDefinition",
        "FunctionDefinition",
        "NamedToolChoice",
        "ToolChoiceFunction",
    }
    request_objects = dict(object_schemas(components, reachable(components, "ChatCompletionRequest")))
    assert dropping <= set(request_objects)
    for name, schema in request_objects.items():
        assert schema["additionalProperties"] is (name in dropping), name
    for strict in ("ChatCompletionRequest", "StreamOptions", "HordeOptions", "JsonSchemaFormat"):
        assert components[strict]["additionalProperties"] is False
    response_format = components["ChatCompletionRequest"]["properties"]["response_format"]
    for variant in json.loads(json.dumps(response_format))["anyOf"][0]["oneOf"]:
        assert components[ref_name(variant)]["additionalProperties"] is False


def body_with_unknown_key(where: str) -> tuple[dict[str, Any], str]:
    """A valid request with an unknown key ``x_extra`` inside the object ``where``, and that key's path."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    path = {
        "SystemMessage": "messages[0]",
        "DeveloperMessage": "messages[0]",
        "UserMessage": "messages[0]",
        "TextContentPart": "messages[0].content[0]",
        "ImageContentPart": "messages[0].content[1]",
        "ImageUrl": "messages[0].content[1].image_url",
        "AssistantMessage": "messages[1]",
        "RefusalContentPart": "messages[1].content[0]",
        "ToolCall": "messages[1].tool_calls[0]",
        "FunctionCall": "messages[1].tool_calls[0].function",
        "ToolMessage": "messages[2]",
        "ToolDefinition": "tools[0]",
        "FunctionDefinition": "tools[0].function",
        "NamedToolChoice": "tool_choice",
        "ToolChoiceFunction": "tool_choice.function",
        "ChatCompletionRequest": "",
        "StreamOptions": "stream_options",
        "HordeOptions": "horde",
        "ResponseFormat": "response_format",
        "JsonSchemaFormat": "response_format.json_schema",
    }[where]
    if where == "SystemMessage":
        body["messages"].insert(0, {"role": "system", "content": "Be brief."})
    if where == "DeveloperMessage":
        body["messages"].insert(0, {"role": "developer", "content": "Be brief."})
    if where in {"TextContentPart", "ImageContentPart", "ImageUrl"}:
        body["messages"][0]["content"] = [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ]
    if where == "RefusalContentPart":
        body["messages"] += [
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
            {"role": "user", "content": "Why?"},
        ]
    if where in {"AssistantMessage", "ToolCall", "FunctionCall", "ToolMessage"}:
        body["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{}"},
        ]
        body["tools"] = [tool]
    if where in {"ToolDefinition", "FunctionDefinition", "NamedToolChoice", "ToolChoiceFunction"}:
        body["tools"] = [tool]
    if where in {"NamedToolChoice", "ToolChoiceFunction"}:
        body["tool_choice"] = {"type": "function", "function": {"name": "lookup"}}
    if where == "StreamOptions":
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    if where == "HordeOptions":
        body["horde"] = {"trusted_workers": False}
    if where == "ResponseFormat":
        body["response_format"] = {"type": "json_object"}
        body["messages"][0]["content"] = "Answer in json."
    if where == "JsonSchemaFormat":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
    target: Any = body
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        target = target[int(part[1:-1])] if part.startswith("[") else target[part]
    target["x_extra"] = 1
    return body, f"{path}.x_extra" if path else "x_extra"


@pytest.mark.parametrize("model", [model.__name__ for model in KEY_DROPPING_MODELS])
def test_key_dropping_models_match_screening(model: str) -> None:
    """ref: schema-generation.3, schema-generation.6, parameter-screening.5"""
    body, _ = body_with_unknown_key(model)
    read_chat_request(json.dumps(body).encode())


@pytest.mark.parametrize(
    "model", ["ChatCompletionRequest", "StreamOptions", "HordeOptions", "ResponseFormat", "JsonSchemaFormat"]
)
def test_objects_documented_closed_refuse_unknown_keys_at_their_path(model: str) -> None:
    """ref: schema-generation.3, schema-generation.7, parameter-screening.10, parameter-screening.11"""
    body, path = body_with_unknown_key(model)
    with pytest.raises(OpenAIError) as refused:
        read_chat_request(json.dumps(body).encode())
    assert (refused.value.status, refused.value.param) == (400, path)


def test_request_schema_lists_the_no_op_parameters_at_their_defaults(document: dict[str, Any]) -> None:
    """ref: schema-generation.5"""
    properties = schemas(document)["ChatCompletionRequest"]["properties"]
    fields = {field.alias or name for name, field in ChatCompletionRequest.model_fields.items()}
    expected = {key: parameter for key, parameter in DEFAULT_NO_OP_PARAMETERS.items() if key not in fields}
    assert sorted(expected) == [
        "audio",
        "logit_bias",
        "logprobs",
        "modalities",
        "prediction",
        "service_tier",
        "store",
        "top_logprobs",
        "verbosity",
        "web_search_options",
    ]
    assert sorted(NO_OP_PARAMETER_SCHEMAS) == sorted(expected)
    assert properties["logprobs"] == {
        "anyOf": [{"const": False}, {"type": "null"}],
        "description": DEFAULT_NO_OP_PARAMETERS["logprobs"].description,
    }
    assert properties["modalities"]["anyOf"] == [{"const": ["text"]}, {"type": "null"}]
    assert properties["audio"] == {"type": "null", "description": DEFAULT_NO_OP_PARAMETERS["audio"].description}
    assert properties["logit_bias"]["anyOf"] == [{"const": {}}, {"type": "null"}]
    assert "A deliberate deviation from the reference" in properties["logit_bias"]["description"]
    assert "sends {} by default" in properties["logit_bias"]["description"]
    for key, parameter in expected.items():
        assert properties[key] == dict(NO_OP_PARAMETER_SCHEMAS[key])
        assert properties[key]["description"] == plain_description(parameter.description)
    for key in set(DEFAULT_NO_OP_PARAMETERS) & fields:
        assert key not in NO_OP_PARAMETER_SCHEMAS


@pytest.mark.parametrize("key", sorted(NO_OP_PARAMETER_SCHEMAS))
def test_no_op_parameters_behave_as_documented(key: str) -> None:
    """ref: schema-generation.3, schema-generation.5, parameter-screening.2, parameter-screening.4"""
    base = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    default = DEFAULT_NO_OP_PARAMETERS[key].default
    for accepted in (default, None):
        assert read_chat_request(json.dumps({**base, key: accepted}).encode()).model_dump(
            exclude_unset=True
        ) == ChatCompletionRequest.model_validate(base).model_dump(exclude_unset=True)
    with pytest.raises(OpenAIError) as refused:
        read_chat_request(json.dumps({**base, key: "not the default"}).encode())
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "UnsupportedChatParameter", key)


# ---------------------------------------------------------------------------------------------------------------------
# Operations, responses and headers


def test_chat_request_body_is_the_validated_request(document: dict[str, Any]) -> None:
    """ref: schema-generation.2"""
    body = document["paths"][CHAT]["post"]["requestBody"]
    assert body["required"] is True
    assert list(body["content"]) == ["application/json"]
    assert body["content"]["application/json"]["schema"] == ref(ChatCompletionRequest)
    example = body["content"]["application/json"]["example"]
    assert read_chat_request(json.dumps(example).encode()).model == "example/model-7b"
    assert "requestBody" not in document["paths"][MODELS]["get"]
    assert "requestBody" not in document["paths"][MODEL]["get"]


def test_horde_sdk_vocabularies_are_the_documented_enums(document: dict[str, Any]) -> None:
    """The string ``tool_choice`` values, the ``response_format`` types and the finish reasons are built from
    horde-sdk's enums, and the document lists exactly OpenAI's values in OpenAI's order.

    ref: schema-generation.1, assistant-message-and-adjustments.3"""
    request = schemas(document)["ChatCompletionRequest"]["properties"]
    tool_choice_modes = [mode.value for mode in ChatToolChoiceMode if mode is not ChatToolChoiceMode.FUNCTION]
    assert tool_choice_modes == ["none", "auto", "required"]
    assert request["tool_choice"]["anyOf"][0]["oneOf"][0] == {"enum": tool_choice_modes, "type": "string"}

    format_types = ["text", *(format_type.value for format_type in ChatResponseFormatType)]
    assert format_types == ["text", "json_object", "json_schema"]
    formats = [
        schemas(document)[branch["$ref"].rsplit("/", 1)[1]]
        for branch in request["response_format"]["anyOf"][0]["oneOf"]
    ]
    assert [response_format["properties"]["type"]["const"] for response_format in formats] == format_types

    finish_reasons = [reason.value for reason in ChatFinishReason]
    assert finish_reasons == ["stop", "length", "content_filter", "tool_calls"]
    assert schemas(document)["CompletionChoice"]["properties"]["finish_reason"]["enum"] == finish_reasons
    assert schemas(document)["ChunkChoice"]["properties"]["finish_reason"]["anyOf"] == [
        {"enum": finish_reasons, "type": "string"},
        {"type": "null"},
    ]


def test_the_chunk_schema_requires_the_null_fields_every_chunk_carries(document: dict[str, Any]) -> None:
    """Every chunk choice carries ``logprobs: null``, as the completion's choice does, so the schema requires it on
    both; ``usage`` stays optional on a chunk (only sent with ``stream_options.include_usage``).

    ref: schema-generation.2, buffered-stream-events.1"""
    chunk_choice = schemas(document)["ChunkChoice"]
    assert chunk_choice["required"] == ["index", "delta", "logprobs", "finish_reason"]
    assert chunk_choice["properties"]["logprobs"]["type"] == "null"
    assert "logprobs" in schemas(document)["CompletionChoice"]["required"]
    assert "usage" not in schemas(document)["ChatCompletionChunk"]["required"]


def test_success_responses_are_the_completion_the_event_stream_and_the_model_list(document: dict[str, Any]) -> None:
    """ref: schema-generation.1, schema-generation.2"""
    chat_ok = document["paths"][CHAT]["post"]["responses"]["200"]
    assert chat_ok["content"] == {
        "application/json": {"schema": ref(chat.protocol.chat_request.ChatCompletionResponse)},
        "text/event-stream": {"schema": {"$ref": "#/components/schemas/ChatCompletionStreamEvent"}},
    }
    assert "`data: [DONE]` ends the stream" in chat_ok["description"]
    event = schemas(document)["ChatCompletionStreamEvent"]
    assert event["required"] == ["data"]
    assert event["additionalProperties"] is False
    assert [
        (branch.get("contentMediaType"), branch.get("contentSchema"), branch.get("const"))
        for branch in event["properties"]["data"]["anyOf"]
    ] == [
        ("application/json", ref(chat.protocol.chat_request.ChatCompletionChunk), None),
        ("application/json", ref(chat.protocol.chat_request.OpenAIErrorEnvelope), None),
        (None, None, "[DONE]"),
    ]
    assert event["properties"]["data"]["anyOf"][1]["description"] == (
        "An error after the stream's headers, as JSON in OpenAI's envelope; `[DONE]` follows. `metadata.retry_after` "
        "holds the seconds a `Retry-After` header would, and `metadata.should_retry` the boolean an `x-should-retry` "
        "header would."
    )
    assert "headers" not in chat_ok
    models_ok = document["paths"][MODELS]["get"]["responses"]["200"]
    assert models_ok["content"] == {"application/json": {"schema": ref(ModelList)}}
    assert schemas(document)["ModelList"]["properties"]["data"]["items"] == ref(ModelCard)
    model_ok = document["paths"][MODEL]["get"]["responses"]["200"]
    assert model_ok["content"] == {"application/json": {"schema": ref(ModelCard)}}
    assert model_ok["description"] == "The model's card, as `GET /v1/models` lists it."


def test_the_images_route_is_described_with_its_request_answer_stream_and_errors(document: dict[str, Any]) -> None:
    """``POST /v1/images/generations``: the request schema with OpenAI's keys and the ``horde`` options within the
    Horde's bounds, ``ImagesResponse`` and the image stream event, and the failure catalogue's examples (issue 39)."""
    operation = document["paths"][IMAGES]["post"]
    assert (operation["operationId"], operation["tags"]) == ("createImage", ["Images"])
    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"] == ref(ImageGenerationRequest)
    assert body["example"]["model"] == "dall-e-2"
    request = schemas(document)["ImageGenerationRequest"]
    assert request["required"] == ["prompt"]
    assert request["additionalProperties"] is False
    assert {"prompt", "model", "n", "size", "quality", "response_format", "output_format", "stream", "horde"} <= set(
        request["properties"]
    )
    assert request["properties"]["prompt"] == {"type": "string", "minLength": 1, "maxLength": 32000}
    n = request["properties"]["n"]["anyOf"][0]
    assert (n["type"], n["minimum"], n["maximum"]) == ("integer", 1, 10)
    assert request["properties"]["horde"]["$ref"] == SCHEMA_REF.format(model="HordeImageOptions")
    horde = schemas(document)["HordeImageOptions"]["properties"]
    assert {key: horde[key]["anyOf"][0] for key in ("steps", "cfg_scale", "clip_skip")} == {
        "steps": {"type": "integer", "minimum": 1, "maximum": 500},
        "cfg_scale": {"type": "number", "minimum": 0, "maximum": 100.0},
        "clip_skip": {"type": "integer", "minimum": 1, "maximum": 12},
    }
    assert horde["nsfw"]["default"] is False
    assert {"max_kudos", "allow_downgrade", "trusted_workers", "loras", "sampler_name"} <= set(horde)
    ok = operation["responses"]["200"]
    assert ok["content"] == {
        "application/json": {"schema": ref(ImagesResponse)},
        "text/event-stream": {"schema": {"$ref": "#/components/schemas/ImageGenerationStreamEvent"}},
    }
    assert set(schemas(document)["ImagesResponse"]["required"]) == {
        "created",
        "data",
        "background",
        "output_format",
        "size",
    }
    # The url's lifetime is documented where a client reads the answer (issue 39).
    assert " ".join(schemas(document)["ImageData"]["properties"]["url"]["description"].split()) == (
        "The Horde's own link to its WebP (``response_format: url``): a presigned URL of its image store, valid 30 "
        "minutes."
    )
    completed = schemas(document)["ImageGenerationStreamEvent"]["properties"]["data"]["anyOf"][0]
    assert completed["contentSchema"]["properties"]["type"] == {"const": "image_generation.completed"}
    examples = operation["responses"]["400"]["content"]["application/json"]["examples"]
    assert examples["content_policy_violation"]["value"] == {
        "error": {
            "message": "A worker's NSFW censor blanked an image: never returned as a success, whatever the other "
            "images; metadata.request_id names the request.",
            "type": "invalid_request_error",
            "param": None,
            "code": "content_policy_violation",
        }
    }
    unavailable = operation["responses"]["503"]
    assert next(iter(unavailable["content"]["application/json"]["examples"])) == "no_eligible_worker"
    assert sorted(unavailable["headers"]) == ["Retry-After", "x-should-retry"]


def test_the_served_openapi_json_holds_the_images_path(document: dict[str, Any]) -> None:
    """What ``/openapi.json`` serves names the images path, its request fields and an error example."""
    served = json.dumps(document)
    assert '"/v1/images/generations"' in served
    assert '"HordeImageOptions"' in served
    assert '"ImageRequestIncomplete"' in served


CHAT_ERROR_CODES = {
    "400": [
        "BadRequest",
        "UnsupportedChatParameter",
        "ChatRequestConflict",
        "UnknownModel",
        "no_worker_supports_limit",
        "context_length_exceeded",
        "max_kudos_exceeded",
    ],
    "401": ["InvalidAPIKey"],
    "403": ["KudosUpfront"],
    "404": ["no_worker_supports_features", "RequestNotFound"],
    "408": ["ChatRequestTimeout", "RequestBodyTimeout"],
    "413": ["RequestTooLarge"],
    "429": ["rate_limit_exceeded", "TooManyPrompts"],
    "502": [
        "ChatRequestFaulted",
        "ChatRequestNoGeneration",
        "ChatRequestCancelled",
        "ModelReplyInvalid",
        "HordeUnavailable",
    ],
    "503": ["no_eligible_worker", "queue_unavailable", "MaintenanceMode", "FrontShuttingDown", "FrontAtCapacity"],
}
MODEL_LIST_ERROR_CODES = {
    "429": ["rate_limit_exceeded", "TooManyPrompts"],
    "502": ["HordeUnavailable"],
    "503": ["MaintenanceMode", "FrontAtCapacity"],
}
MODEL_RETRIEVE_ERROR_CODES = {"404": ["model_not_found"], **MODEL_LIST_ERROR_CODES}
RESPONSES_ERROR_CODES = {
    **CHAT_ERROR_CODES,
    "400": [*CHAT_ERROR_CODES["400"], "previous_response_not_found"],
    "404": [*CHAT_ERROR_CODES["404"], "item_not_found"],
}
STORED_RESPONSE_ERROR_CODES = {
    "401": ["InvalidAPIKey"],
    "404": ["response_not_found"],
    "503": ["FrontAtCapacity"],
}
"""The front's own store: the in-flight caps apply, and no Horde ``rc`` can pass through (it never calls the Horde)."""
IMAGE_ERROR_CODES = {
    "400": ["BadRequest", "UnsupportedChatParameter", "content_policy_violation", "max_kudos_exceeded"],
    "401": ["InvalidAPIKey"],
    "403": ["KudosUpfront"],
    "404": ["RequestNotFound"],
    "408": ["ChatRequestTimeout", "RequestBodyTimeout"],
    "413": ["RequestTooLarge"],
    "429": ["rate_limit_exceeded", "TooManyPrompts"],
    "502": ["ChatRequestCancelled", "ImageRequestIncomplete", "HordeUnavailable"],
    "503": ["no_eligible_worker", "MaintenanceMode", "FrontShuttingDown", "FrontAtCapacity"],
}
"""``POST /v1/images/generations`` (docs/images.md, "Errors")."""


@pytest.mark.parametrize(
    ("path", "method", "expected"),
    [
        (CHAT, "post", CHAT_ERROR_CODES),
        (RESPONSES, "post", RESPONSES_ERROR_CODES),
        (f"{RESPONSES}/{{response_id}}", "get", STORED_RESPONSE_ERROR_CODES),
        (f"{RESPONSES}/{{response_id}}", "delete", STORED_RESPONSE_ERROR_CODES),
        (MODELS, "get", MODEL_LIST_ERROR_CODES),
        (MODEL, "get", MODEL_RETRIEVE_ERROR_CODES),
        (IMAGES, "post", IMAGE_ERROR_CODES),
    ],
)
def test_error_responses_by_status_with_their_codes(
    document: dict[str, Any], path: str, method: str, expected: dict[str, list[str]]
) -> None:
    """ref: schema-generation.2, schema-generation.8, error-attributes.1, kudos-cap.2, size-limit-gaps.4,
    declaration-gaps.1, model-availability.2"""
    responses = document["paths"][path][method]["responses"]
    assert sorted(responses) == sorted(["200", *expected])
    for status, codes in expected.items():
        response = responses[status]
        assert list(response["content"]) == ["application/json"]
        assert response["content"]["application/json"]["schema"] == ref(chat.protocol.chat_request.OpenAIErrorEnvelope)
        # One real example per code (the catalogue's type and code), not Swagger UI's "message": "string".
        examples = response["content"]["application/json"]["examples"]
        assert list(examples) == codes, status
        for code, example in examples.items():
            error = example["value"]["error"]
            failure = chat.errors.FAILURES.get(code)
            assert (error["code"], error["param"]) == (code, None)
            assert error["type"] == (failure.type if failure else chat.errors.error_type_for_status(int(status)))
            assert error["message"] and error["message"] != "string" and not error["message"].endswith("..")
        listed = re.findall(r"^- `([^`]+)`: ", response["description"], flags=re.MULTILINE)
        assert listed == codes, status
        passed_through = response["description"].endswith("- or the Horde's own `rc`, passed through with its message.")
        assert passed_through is (expected is not STORED_RESPONSE_ERROR_CODES), status


def test_the_admission_guards_responses_are_listed(document: dict[str, Any]) -> None:
    """The guards' refusals (oaifront.guards) are in the description: 413 and 408 ``RequestBodyTimeout`` on the chat
    route, which takes a body, 503 ``FrontAtCapacity`` with ``Retry-After`` on every capped route (every route of
    the API; the probes and the documentation are not capped).

    ref: schema-generation.2, refusal-attributes.1"""
    chat = document["paths"][CHAT]["post"]["responses"]
    assert "RequestTooLarge" in chat["413"]["description"]
    assert "RequestBodyTimeout" in chat["408"]["description"]
    stored = f"{RESPONSES}/{{response_id}}"
    capped = (
        (CHAT, "post"),
        (RESPONSES, "post"),
        (IMAGES, "post"),
        (MODELS, "get"),
        (MODEL, "get"),
        (stored, "get"),
        (stored, "delete"),
    )
    for path, method in capped:
        response = document["paths"][path][method]["responses"]["503"]
        assert "FrontAtCapacity" in response["description"]
        assert "Retry-After" in response["headers"]


def test_no_422_response_anywhere(document: dict[str, Any]) -> None:
    """ref: schema-generation.8"""
    for operations in document["paths"].values():
        for operation in operations.values():
            assert "422" not in operation["responses"]
    assert "422" not in json.dumps(document["paths"])


BODY_ROUTE_RETRY_HEADERS = {
    "401": ["x-should-retry"],
    "403": ["x-should-retry"],
    "408": ["x-should-retry"],
    "429": ["Retry-After"],
    "502": ["x-should-retry"],
    "503": ["Retry-After", "x-should-retry"],
}
"""The retry headers each error status of the chat, Responses and legacy routes may carry, by the failure catalogue
(chat.errors.FAILURES): ``x-should-retry: false`` of ``InvalidAPIKey``, ``KudosUpfront``, ``ChatRequestTimeout``,
``ChatRequestFaulted`` (``prompt_overflow``), ``ChatRequestCancelled``, ``ModelReplyInvalid`` and
``no_eligible_worker``; ``Retry-After`` of
the 503s and of the Horde's 429 / 503 (chat.horde.real_horde_answers.RETRY_LATER_STATUSES); none on a 400, 404 or
413."""
MODEL_ROUTE_RETRY_HEADERS = {"429": ["Retry-After"], "503": ["Retry-After", "x-should-retry"]}
"""The model routes' 503s are ``MaintenanceMode`` and ``FrontAtCapacity`` (``x-should-retry: true``, issue 35); their
502 ``HordeUnavailable`` sends no retry header."""


@pytest.mark.parametrize(
    ("path", "method", "expected"),
    [
        (CHAT, "post", BODY_ROUTE_RETRY_HEADERS),
        (RESPONSES, "post", BODY_ROUTE_RETRY_HEADERS),
        ("/v1/completions", "post", BODY_ROUTE_RETRY_HEADERS),
        (IMAGES, "post", BODY_ROUTE_RETRY_HEADERS),
        (f"{RESPONSES}/{{response_id}}", "get", {"401": ["x-should-retry"], "503": ["Retry-After", "x-should-retry"]}),
        (
            f"{RESPONSES}/{{response_id}}",
            "delete",
            {"401": ["x-should-retry"], "503": ["Retry-After", "x-should-retry"]},
        ),
        (MODELS, "get", MODEL_ROUTE_RETRY_HEADERS),
        (MODEL, "get", MODEL_ROUTE_RETRY_HEADERS),
    ],
)
def test_retry_headers_where_the_catalogue_sends_them(
    document: dict[str, Any], path: str, method: str, expected: dict[str, list[str]]
) -> None:
    """Each error status documents exactly the retry headers one of its codes sends (chat.errors.FAILURES).

    ref: schema-generation.2, native-admission-refusals.4, browser-access.1"""
    for status, response in document["paths"][path][method]["responses"].items():
        headers = response.get("headers", {})
        assert sorted(headers) == expected.get(status, []), status
        if "Retry-After" in headers:
            assert headers["Retry-After"]["schema"] == {"type": "integer", "minimum": 0}
            assert headers["Retry-After"]["description"] == (
                "Whole seconds to wait before retrying: 30 with `no_eligible_worker`, the estimated wait (at most 60) "
                "with `queue_unavailable`, `HORDE_OAI_CAPACITY_RETRY_AFTER_SECONDS` with `FrontAtCapacity`, 5 with "
                "`FrontShuttingDown`, and the Horde's own value on a 429 or 503 when it sent one (never on a "
                "permanent refusal)."
            )
        if "x-should-retry" in headers:
            assert headers["x-should-retry"]["schema"] == {"type": "string", "enum": ["true", "false"]}
            assert headers["x-should-retry"]["description"] == (
                "Whether the official OpenAI SDKs should retry; when present it decides alone. `false` with every "
                "`no_eligible_worker`, with `ChatRequestTimeout` and with a `ChatRequestFaulted` whose fault is "
                "`prompt_overflow`: a retry within seconds meets the same workers, waits the whole budget again, or "
                "overflows again; and with `InvalidAPIKey`, `KudosUpfront`, `ChatRequestCancelled` and "
                "`ModelReplyInvalid`. `true` with `FrontAtCapacity`: the front is busy for a moment, and a retry "
                "after `Retry-After` is served. Absent "
                "otherwise, so the SDKs' defaults apply."
            )


def test_bearer_key_is_optional(document: dict[str, Any]) -> None:
    assert document["components"]["securitySchemes"] == {
        "HordeApiKey": {
            "type": "http",
            "scheme": "bearer",
            "description": "Your AI Horde API key, forwarded to the Horde. Without one, the anonymous key is used.",
        }
    }
    for path, method in ((CHAT, "post"), (RESPONSES, "post"), (IMAGES, "post"), (MODELS, "get"), (MODEL, "get")):
        assert document["paths"][path][method]["security"] == [{"HordeApiKey": []}, {}]


# ---------------------------------------------------------------------------------------------------------------------
# Descriptions


def documented_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model of the request, response and model list modules, by class name."""
    found: dict[str, type[BaseModel]] = {}
    for module in (
        chat.protocol.chat_request,
        chat.protocol.chat_completion,
        chat.protocol.responses_api,
        models_list.schema,
    ):
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == module.__name__:
                found[value.__name__] = value
    return found


def test_every_field_description_is_its_docstring(document: dict[str, Any]) -> None:
    """ref: field-descriptions.1, field-descriptions.2, field-descriptions.3"""
    models = documented_models()
    components = schemas(document)
    undocumented = []
    checked = 0
    for name, schema in components.items():
        model = models.get(name)
        if model is None:
            continue
        if model.__doc__:
            assert schema["description"] == plain_description(inspect.cleandoc(model.__doc__)), name
        for field_name, field in model.model_fields.items():
            key = field.alias or field_name
            if not field.description:
                undocumented.append(f"{name}.{key}")
                continue
            assert schema["properties"][key]["description"] == plain_description(field.description), (name, key)
            checked += 1
    assert undocumented == []
    assert checked > 100


def test_info_description_links_to_the_documentation(document: dict[str, Any]) -> None:
    """ref: field-descriptions.5"""
    assert DOCS_URL == "/docs/behaviour"
    assert f"[{DOCS_URL}]({DOCS_URL})" in document["info"]["description"]
    assert document["externalDocs"] == {"description": "The front's documentation", "url": DOCS_URL}


def test_info_description_links_to_the_guide_per_client_which_the_front_serves(document: dict[str, Any]) -> None:
    """The docs page links the guide per client (issue 16), served by the front at ``/docs/clients`` as the file in
    the repository (as Markdown to a client that asks for it; tests/unit/test_guides.py has the page).

    ref: field-descriptions.5"""
    assert CLIENTS_GUIDE_URL == "/docs/clients"
    assert f"the [guide per client]({CLIENTS_GUIDE_URL})" in document["info"]["description"]
    response = Client().get(CLIENTS_GUIDE_URL, headers={"Accept": "text/markdown"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    repository = Path(__file__).resolve().parents[2]
    assert response.content == (repository / "docs" / "clients.md").read_bytes()
    assert response.content.startswith(b"# Using the front from chat UIs and client libraries")


@pytest.mark.parametrize(
    ("docstring", "plain"),
    [
        (
            "The effective limit (see "
            "[`effective_completion_limit`][chat.rendering.completion.effective_completion_limit]).",
            "The effective limit.",
        ),
        (
            "Relayed when [`relays_deltas`][chat.horde.native_payload.relays_deltas] selects the request.",
            "Relayed when `relays_deltas` selects the request.",
        ),
        ("An autorefs shorthand: [`ChatConformance`][].", "An autorefs shorthand: `ChatConformance`."),
        ("Both [`a`][x.a] and [`b`][x.b] (see [`c`][x.c]), then more.", "Both `a` and `b`, then more."),
        (
            "Plain ``code`` and a [link](https://example.com) stay.",
            "Plain ``code`` and a [link](https://example.com) stay.",
        ),
        ("A parenthetical (see the README) stays.", "A parenthetical (see the README) stays."),
    ],
)
def test_plain_description(docstring: str, plain: str) -> None:
    """ref: field-descriptions.2"""
    assert plain_description(docstring) == plain


class CrossReferenced(BaseModel):
    """A model whose docstrings hold cross-references (see [`plain_description`][front_operations.openapi.schemas])."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    limit: int
    """Lowered by [`effective_completion_limit`][chat.rendering.completion.effective_completion_limit]
    (see [`mapping`][chat.rendering.completion])."""


class WrapSerialized(BaseModel):
    """A reply part whose serializer leaves out null keys."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    text: str
    """The text."""

    note: str | None = None
    """A note; left out when null."""

    @model_serializer(mode="wrap")
    def _drop_nulls(self, handler: Any) -> dict[str, object]:
        return {key: value for key, value in handler(self).items() if value is not None}


class HoldsWrapSerialized(BaseModel):
    """Uses the wrap-serialized model."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    part: WrapSerialized
    """The part."""


def test_generated_descriptions_go_through_plain_description() -> None:
    """ref: field-descriptions.2"""
    generated_schemas = model_schemas([(CrossReferenced, "validation")])
    assert generated_schemas["CrossReferenced"]["description"] == "A model whose docstrings hold cross-references."
    assert generated_schemas["CrossReferenced"]["properties"]["limit"] == {
        "description": "Lowered by `effective_completion_limit`.",
        "type": "integer",
    }


def test_wrap_serialized_models_are_documented_by_their_fields() -> None:
    """ref: field-descriptions.4"""
    assert WrapSerialized.model_json_schema(mode="serialization", schema_generator=GenerateJsonSchema) == {
        "additionalProperties": True,
        "type": "object",
    }
    generated_schemas = model_schemas([(HoldsWrapSerialized, "serialization")])
    assert generated_schemas["WrapSerialized"] == {
        "description": "A reply part whose serializer leaves out null keys.",
        "properties": {
            "text": {"description": "The text.", "type": "string"},
            "note": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "description": "A note; left out when null.",
            },
        },
        "required": ["text"],
        "title": "WrapSerialized",
        "type": "object",
    }
    assert generated_schemas["HoldsWrapSerialized"]["properties"]["part"] == {
        "$ref": "#/components/schemas/WrapSerialized",
        "description": "The part.",
    }


# ---------------------------------------------------------------------------------------------------------------------
# The model list's models match the cards


def native_entry(name: str, features: list[str], **chat_entry: Any) -> dict[str, Any]:
    return {
        "name": name,
        "count": 2,
        "performance": 21.5,
        "queued": 4096,
        "jobs": 3.0,
        "eta": 12,
        "type": "text",
        "chat": {
            "workers": 2,
            "threads": 3,
            "max_length": 1024,
            "max_context_length": 8192,
            "features": features,
            "image_transports": [],
            **chat_entry,
        },
    }


NATIVE_ENTRIES = [
    native_entry("org/vision-4b", ["vision", "seed", "prompt_overflow_refused"], image_transports=["url", "base64"]),
    native_entry("org/tools-7b", ["tools", "tool_choice_enforced", "json_object", "json_schema"]),
    native_entry("org/reasoner-8b", ["reasoning_effort", "frequency_penalty", "presence_penalty"]),
    {"name": "org/sparse-1b", "chat": {"workers": 1}},
    {"name": "org/offline-13b", "count": 0, "type": "text"},
    {"name": "org/no-workers", "chat": {"workers": 0}},
]


def test_model_list_output_matches_its_models(document: dict[str, Any]) -> None:
    """ref: schema-generation.1, model-card-fields.2"""
    listed = model_list(NATIVE_ENTRIES)
    assert [card["id"] for card in listed["data"]] == [
        "org/reasoner-8b",
        "org/sparse-1b",
        "org/tools-7b",
        "org/vision-4b",
    ]
    # Every key is a field (extra keys are refused) and every field comes back unchanged.
    assert ModelList.model_validate(listed).model_dump(mode="json") == listed
    # The document's ModelList schema describes the same output.
    root = {"components": document["components"], "$ref": "#/components/schemas/ModelList"}
    jsonschema.Draft202012Validator(root).validate(listed)
    for card in listed["data"]:
        assert ModelCard.model_validate(card).model_dump(mode="json") == card


def test_model_card_refuses_a_key_the_cards_do_not_produce() -> None:
    """The card models are exact: a key model_card does not write is an error, not silently documented."""
    card = model_list(NATIVE_ENTRIES)["data"][0]
    with pytest.raises(ValueError, match="extra_forbidden"):
        ModelCard.model_validate({**card, "description": "not produced"})
    with pytest.raises(ValueError, match="extra_forbidden"):
        ModelCard.model_validate({**card, "x_horde": {**card["x_horde"], "speed": 1}})


def test_openapi_module_constants_come_from_chat_errors() -> None:
    """The status table names the front's codes through chat.errors' constants (ref: error-attributes.1)."""
    from chat import errors

    table_codes = {error.code for codes in error_table.CHAT_COMPLETION_ERRORS.values() for error in codes}
    for constant in (
        "BAD_REQUEST",
        "UNSUPPORTED_CHAT_PARAMETER",
        "CHAT_REQUEST_CONFLICT",
        "NO_ELIGIBLE_WORKER",
        "NO_WORKER_SUPPORTS_FEATURES",
        "NO_WORKER_SUPPORTS_LIMIT",
        "QUEUE_UNAVAILABLE",
        "RATE_LIMIT_EXCEEDED",
        "CHAT_REQUEST_TIMEOUT",
        "CHAT_REQUEST_FAULTED",
        "CHAT_REQUEST_NO_GENERATION",
        "HORDE_UNAVAILABLE",
        "MAX_KUDOS_EXCEEDED",
        "UNKNOWN_MODEL",
    ):
        assert getattr(errors, constant) in table_codes
