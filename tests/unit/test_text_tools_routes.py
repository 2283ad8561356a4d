"""Tools and structured output on the text path through the views (Django's test client) against a scripted text API
(tests/unit/fake_real_horde.py): the completion and its buffered stream carry the calls as the native path does, the
repair turn is a submit of its own, an invalid reply after the last repair is 502 ``ModelReplyInvalid``, the Responses
API serves function tools, and the finished-request line reports the repairs."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.test import AsyncClient
from loguru import logger

from tests.unit.fake_real_horde import DONE_STATUS, MODEL, RealHorde, installed

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
MALFORMED = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris",}}\n</tool_call>'
GOOD = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_ID = re.compile(r"^call_[A-Za-z0-9]{24}$")
REPAIR_TEXT = (
    "Your previous reply was not valid: a <tool_call> block does not hold valid JSON (Illegal trailing comma before "
    "end of object). Reply again, following the format exactly."
)


@dataclass
class ScriptedTextHorde(RealHorde):
    """Each text submit gets ``text-<n>``; the status of ``text-<n>`` finishes with ``replies[n - 1]``."""

    replies: list[str | None] = field(default_factory=list)
    """None: that request never finishes (a waiting status)."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api")
        if path == "/v2/generate/text/async":
            self.calls.append((request.method, path))
            self.submitted.append(json.loads(request.content))
            return self.json(202, {"id": f"text-{len(self.submitted)}", "kudos": 1.0})
        if path.startswith("/v2/generate/text/status/"):
            self.calls.append((request.method, path))
            if request.method == "DELETE":
                return self.json(200, {**DONE_STATUS, "generations": []})
            text = self.replies[int(path.rsplit("-", 1)[-1]) - 1]
            if text is None:
                waiting = {"done": False, "finished": 0, "processing": 0, "waiting": 1, "queue_position": 1}
                return self.json(200, {**DONE_STATUS, **waiting, "generations": []})
            generation = {**DONE_STATUS["generations"][0], "text": text}
            return self.json(200, {**DONE_STATUS, "generations": [generation]})
        return super().handle(request)


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], **extra}


@pytest.mark.asyncio
async def test_a_repaired_tool_call_is_a_tool_calls_completion() -> None:
    horde = ScriptedTextHorde(replies=[MALFORMED, GOOD])
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}", level="INFO")
    try:
        with installed(horde):
            response = await AsyncClient().post(
                "/v1/chat/completions", chat_body(tools=[WEATHER]), content_type="application/json"
            )
    finally:
        logger.remove(sink)
    assert response.status_code == 200
    body = response.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    [call] = choice["message"]["tool_calls"]
    assert CALL_ID.match(call["id"])
    assert (call["type"], call["function"]) == ("function", {"name": "get_weather", "arguments": '{"city":"Paris"}'})
    assert body["x_horde"]["repair_attempts"] == 1
    assert body["x_horde"]["prompted_output"] == "tools"
    assert len(horde.submitted) == 2
    assert horde.submitted[1]["prompt"].endswith(
        f"<|im_start|>assistant\n{MALFORMED}<|im_end|>\n<|im_start|>user\n{REPAIR_TEXT}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    [finished] = [line for line in lines if " finished: " in line]
    assert finished.rstrip("\n").endswith("prompted_output=tools repair_attempts=1")


@pytest.mark.asyncio
async def test_a_streamed_tool_call_is_one_tool_calls_chunk_as_on_the_native_path() -> None:
    horde = ScriptedTextHorde(replies=[GOOD])
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", chat_body(tools=[WEATHER], stream=True), content_type="application/json"
        )
        raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    events = [line.removeprefix("data: ") for line in raw.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(event)["choices"][0] for event in events[:-1]]
    assert [list(choice["delta"]) for choice in deltas] == [["role"], ["content"], ["tool_calls"], []]
    assert deltas[1]["delta"]["content"] == "Let me look."
    [call] = deltas[2]["delta"]["tool_calls"]
    assert (call["index"], call["type"], call["function"]["arguments"]) == (0, "function", '{"city":"Paris"}')
    assert deltas[3]["finish_reason"] == "tool_calls"


@pytest.mark.asyncio
async def test_without_repairs_an_invalid_reply_is_model_reply_invalid() -> None:
    horde = ScriptedTextHorde(replies=[MALFORMED])
    with installed(horde, text_repair_attempts=0):
        response = await AsyncClient().post(
            "/v1/chat/completions", chat_body(tools=[WEATHER], tool_choice="required"), content_type="application/json"
        )
    assert response.status_code == 502
    assert response.headers["x-should-retry"] == "false"
    assert response.json() == {
        "error": {
            "message": "The model's reply is not valid: a <tool_call> block does not hold valid JSON (Illegal "
            "trailing comma before end of object). The model was asked for tool calls or JSON in its prompt (the text "
            "generation API has no constrained output); send the request again, or use another model.",
            "type": "api_error",
            "param": None,
            "code": "ModelReplyInvalid",
        }
    }
    assert len(horde.submitted) == 1


@pytest.mark.asyncio
async def test_a_json_schema_reply_is_its_json_only() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    horde = ScriptedTextHorde(replies=['Sure! Here it is:\n```json\n{"city": "Paris"}\n```'])
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions",
            chat_body(response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}),
            content_type="application/json",
        )
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ('{"city": "Paris"}', "stop")


@pytest.mark.asyncio
async def test_the_responses_api_serves_function_tools_on_the_text_path() -> None:
    horde = ScriptedTextHorde(replies=[GOOD])
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/responses",
            {"model": MODEL, "input": "Weather in Paris?", "tools": [tool]},
            content_type="application/json",
        )
    assert response.status_code == 200
    output = response.json()["output"]
    calls = [item for item in output if item["type"] == "function_call"]
    assert [(item["name"], item["arguments"]) for item in calls] == [("get_weather", '{"city":"Paris"}')]
    assert CALL_ID.match(calls[0]["call_id"])


@pytest.mark.asyncio
async def test_function_call_output_input_renders_as_a_tool_response() -> None:
    horde = ScriptedTextHorde(replies=["It is 12C in Paris."])
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    items = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "12C"},
    ]
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/responses", {"model": MODEL, "input": items, "tools": [tool]}, content_type="application/json"
        )
    assert response.status_code == 200
    [message] = [item for item in response.json()["output"] if item["type"] == "message"]
    assert [part["text"] for part in message["content"]] == ["It is 12C in Paris."]
    assert horde.submitted[0]["prompt"].endswith(
        '<|im_start|>assistant\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n12C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.asyncio
async def test_a_request_left_during_its_repair_cancels_the_repair_at_the_horde() -> None:
    horde = ScriptedTextHorde(replies=[MALFORMED, None])
    with installed(horde, nonstream_timeout_seconds=1):
        response = await AsyncClient().post(
            "/v1/chat/completions", chat_body(tools=[WEATHER]), content_type="application/json"
        )
        for _ in range(200):
            if ("DELETE", "/v2/generate/text/status/text-2") in horde.calls:
                break
            await asyncio.sleep(0.01)
    assert (response.status_code, response.json()["error"]["code"]) == (408, "ChatRequestTimeout")
    assert [call for call in horde.calls if call[0] == "DELETE"] == [("DELETE", "/v2/generate/text/status/text-2")]


@pytest.mark.asyncio
async def test_a_streamed_request_is_repaired_before_its_calls_go_out() -> None:
    horde = ScriptedTextHorde(replies=[MALFORMED, GOOD])
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", chat_body(tools=[WEATHER], stream=True), content_type="application/json"
        )
        raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    chunks = [json.loads(line[6:]) for line in raw.split("\n\n") if line.startswith("data: {")]
    deltas = [chunk["choices"][0] for chunk in chunks if chunk.get("choices")]
    assert [list(choice["delta"]) for choice in deltas] == [["role"], ["content"], ["tool_calls"], []]
    assert deltas[-1]["finish_reason"] == "tool_calls"
    assert len(horde.submitted) == 2
