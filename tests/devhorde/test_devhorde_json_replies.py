"""The devhorde answers a request that asks for JSON with JSON that fits it: ``json_object``, a ``json_schema``
format, or a prompt that names JSON (with a schema written into it, as instructor's JSON modes and the AI SDK's
``generateObject`` write one)."""

from __future__ import annotations

import json
from typing import Any

from devhorde.replies import asks_for_json, json_reply, prompt_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 1}},
    "required": ["city", "population"],
}
INSTRUCTOR_JSON_SYSTEM = (
    "As a genius expert, your task is to understand the content and provide the parsed objects in json that match "
    f"the following json_schema:\n\n{json.dumps(SCHEMA, indent=2)}\n\nMake sure to return an instance of the JSON, "
    "not the schema itself"
)


def test_a_prompt_naming_json_asks_for_json() -> None:
    assert asks_for_json([{"role": "user", "content": "Answer in JSON, please."}])
    assert asks_for_json([{"role": "system", "content": [{"type": "text", "text": "Reply with json only."}]}])
    assert not asks_for_json([{"role": "user", "content": "Tell me about lighthouses."}])
    assert not asks_for_json([{"role": "assistant", "content": "Here is JSON."}, {"role": "user", "content": "Hi"}])
    assert not asks_for_json([{"role": "user", "content": "Is jsonify a word?"}])


def test_the_schema_written_into_the_prompt_is_found() -> None:
    messages = [{"role": "system", "content": INSTRUCTOR_JSON_SYSTEM}, {"role": "user", "content": "Paris, 2.1M."}]
    assert prompt_schema(messages) == SCHEMA
    sdk_style = [{"role": "system", "content": f"JSON schema:\n{json.dumps(SCHEMA)}\nYou MUST answer with JSON."}]
    assert prompt_schema(sdk_style) == SCHEMA
    assert prompt_schema([{"role": "user", "content": 'Echo {"a": 1} as JSON.'}]) is None


def test_a_prompt_schema_is_followed() -> None:
    messages = [
        {"role": "system", "content": INSTRUCTOR_JSON_SYSTEM},
        {"role": "user", "content": "Tell me about the city of Paris."},
    ]
    value = json.loads(json_reply({}, messages, seed=1))
    assert set(value) == {"city", "population"}
    assert isinstance(value["city"], str) and value["city"]
    assert isinstance(value["population"], int) and value["population"] >= 1


def test_json_object_without_a_schema_is_topic_and_answer() -> None:
    value = json.loads(json_reply({"type": "json_object"}, [{"role": "user", "content": "Lighthouses as JSON"}], 3))
    assert sorted(value) == ["answer", "topic"]


def test_a_json_schema_format_wins_over_the_prompt() -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {
            "name": "n",
            "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
        },
    }
    messages = [{"role": "system", "content": INSTRUCTOR_JSON_SYSTEM}, {"role": "user", "content": "Paris"}]
    assert json.loads(json_reply(response_format, messages, 1)) == {"ok": True}
