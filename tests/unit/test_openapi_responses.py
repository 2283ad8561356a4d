"""``POST /v1/responses`` in ``/openapi.json``: the request as validated plus the state parameters at their only
accepted values, the ``response`` object and the typed event stream, the same error codes as chat completions."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from chat.errors import OpenAIError
from chat.horde.native import NativeStatus
from chat.reading.responses import RESPONSES_REQUEST_KEYS, STATEFUL_PARAMETERS, read_responses_request
from chat.rendering.completion import buffered_chunks, build_completion
from chat.rendering.responses_events import ResponseEventWriter, build_response
from front_operations.openapi.schemas import RESPONSE_EVENT_TYPES, RESPONSES_STATE_PARAMETER_SCHEMAS

RESPONSES = "/v1/responses"


def validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator of ``schema`` whose ``$ref`` values resolve inside the document."""
    return jsonschema.Draft202012Validator({**schema, "components": document["components"]})


def test_request_documents_every_key_the_handler_reads_and_no_other(document: dict[str, Any]) -> None:
    request = document["components"]["schemas"]["ResponsesRequest"]
    assert set(request["properties"]) == RESPONSES_REQUEST_KEYS | set(STATEFUL_PARAMETERS) | {"include"}
    assert request["additionalProperties"] is False
    assert request["required"] == ["model", "input"]
    for key, schema in RESPONSES_STATE_PARAMETER_SCHEMAS.items():
        assert request["properties"][key] == schema


def test_store_says_it_defaults_to_true_and_is_bounded(document: dict[str, Any]) -> None:
    store = document["components"]["schemas"]["ResponsesRequest"]["properties"]["store"]
    assert store["anyOf"] == [{"type": "boolean"}, {"type": "null"}]
    assert store["description"].startswith("Whether to keep the response (true, OpenAI's default, when null)")
    assert "HORDE_OAI_STORED_RESPONSE_SECONDS" in store["description"]
    assert "HORDE_OAI_STORED_RESPONSE_MAX_BYTES" in store["description"]


def test_stored_responses_have_their_paths(document: dict[str, Any]) -> None:
    path = document["paths"]["/v1/responses/{response_id}"]
    assert sorted(path) == ["delete", "get"]
    assert path["get"]["operationId"] == "retrieveResponse"
    assert path["delete"]["operationId"] == "deleteResponse"
    assert "response_not_found" in path["get"]["responses"]["404"]["description"]
    create = document["paths"]["/v1/responses"]["post"]["responses"]
    assert "previous_response_not_found" in create["400"]["description"]
    assert "item_not_found" in create["404"]["description"]


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        ({"model": "m", "input": "Hi", "previous_response_id": None, "include": []}, True),
        ({"model": "m", "input": "Hi", "previous_response_id": "resp_1"}, True),
        ({"model": "m", "input": "Hi", "include": ["reasoning.encrypted_content"]}, False),
        ({"model": "m", "input": "Hi", "store": True}, True),
        ({"model": "m", "input": "Hi", "background": True}, False),
        ({"model": "m", "input": "Hi", "top_k": 1}, False),
    ],
)
def test_state_parameters_behave_as_documented(document: dict[str, Any], body: dict[str, Any], accepted: bool) -> None:
    schema = validator(document, {"$ref": "#/components/schemas/ResponsesRequest"})
    assert schema.is_valid(body) is accepted
    try:
        read_responses_request(json.dumps(body).encode())
        handled = True
    except OpenAIError:
        handled = False
    assert handled is accepted


def test_response_and_events_match_their_schemas(document: dict[str, Any]) -> None:
    operation = document["paths"][RESPONSES]["post"]
    ok = operation["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ResponseObject"}
    assert ok["content"]["text/event-stream"]["schema"] == {"$ref": "#/components/schemas/ResponseStreamEvent"}
    assert "no `[DONE]` is sent" in ok["description"]
    request, chat_request, _ = read_responses_request(
        json.dumps({"model": "org/m", "input": "Hi", "stream": True}).encode()
    )
    native = NativeStatus.model_validate(
        {
            "done": True,
            "finished": 1,
            "generations": [
                {
                    "id": "g1",
                    "model": "org/m",
                    "message": {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet."},
                    "finish_reason": "stop",
                }
            ],
        }
    )
    response = build_response(request, build_completion(chat_request, native, "r1", 1), "r1", 1, 2)
    validator(document, {"$ref": "#/components/schemas/ResponseObject"}).validate(response)
    writer = ResponseEventWriter(request, "r1", 1, "org/m")
    events = writer.start()
    for chunk in buffered_chunks(chat_request, native, "r1", 1):
        events += writer.chunk(chunk)
    events += writer.finish(2)
    event_schema = document["components"]["schemas"]["ResponseStreamEvent"]
    data = validator(document, event_schema["properties"]["data"]["contentSchema"])
    for event in events:
        data.validate(event)
        assert event["type"] in RESPONSE_EVENT_TYPES
