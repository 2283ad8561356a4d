"""The Vercel AI SDK's default OpenAI provider, ``openai(model)`` (which calls ``POST /v1/responses``), against the
live front: ``generateText``, ``streamText`` and a tool round trip with both.

The client is ``tests/js/ai_sdk_client.mjs`` run by Node.js; ``make test`` installs its locked packages with
``npm ci`` in ``tests/js``. Each scenario prints one JSON object, asserted here against the devhorde's records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, LiveStack

pytestmark = pytest.mark.integration

JS_DIR: Path = ROOT / "tests" / "js"
TEXT_MODEL = "devhorde/tiny-1b"
TOOL_MODEL = "devhorde/toolsmith-7b"
REASONING_MODEL = "devhorde/reasoner-8b"
SCENARIO_TIMEOUT_SECONDS = 120
"""A bound for one Node.js run (a few requests at machine speed), far above what it takes on a busy machine."""


def run_client(stack: LiveStack, scenario: str, **extra_env: str) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "@ai-sdk" / "openai").is_dir():
        pytest.fail("Node.js and tests/js/node_modules are needed: run `make test` (it runs `npm ci` in tests/js).")
    env = {
        **os.environ,
        "FRONT_BASE_URL": stack.openai_base_url,
        "TEXT_MODEL": TEXT_MODEL,
        "TOOL_MODEL": TOOL_MODEL,
        **extra_env,
    }
    completed = subprocess.run(
        [node, "ai_sdk_client.mjs", scenario],
        cwd=JS_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout)
    assert "error" not in result, result
    return result


def native_generation(stack: LiveStack, response_id: str) -> dict[str, Any]:
    request_id = stack.latest_native_request(response_id)["id"]
    status = httpx.get(f"{stack.horde_url}/v2/generate/chat/status/{request_id}", timeout=5).json()
    generation: dict[str, Any] = status["generations"][0]
    return generation


def test_generate_text(stack: LiveStack) -> None:
    result = run_client(stack, "generate")
    generation = native_generation(stack, result["responseId"])
    assert result["text"] == generation["message"]["content"] and result["text"].strip()
    assert result["modelId"] == TEXT_MODEL
    assert result["finishReason"] == ("length" if generation["finish_reason"] == "length" else "stop")
    assert result["usage"]["outputTokens"] == generation["completion_tokens"]
    assert result["usage"]["inputTokens"] == generation["prompt_tokens"]


def test_stream_text(stack: LiveStack) -> None:
    result = run_client(stack, "stream")
    assert result["text"].strip()
    assert result["deltas"] >= 1
    assert result["parts"][:3] == ["start", "start-step", "text-start"]
    assert result["parts"][-3:] == ["text-end", "finish-step", "finish"]
    assert result["finishReason"] in {"stop", "length"}
    assert result["usage"]["outputTokens"] > 0


@pytest.mark.parametrize("scenario", ["tools", "tools-stream"])
def test_tools_round_trip(stack: LiveStack, scenario: str) -> None:
    result = run_client(stack, scenario)
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls"
    assert first["toolCalls"] == [{"toolName": "weather", "input": {"city": "Paris"}}]
    assert first["toolResults"] == [
        {"toolName": "weather", "output": {"city": "Paris", "forecast": "sunny", "celsius": 21}}
    ]
    assert second["finishReason"] == "stop" and second["toolCalls"] == []
    assert '"forecast":"sunny"' in second["text"] and result["text"] == second["text"]


def native_messages(stack: LiveStack, response_id: str) -> list[dict[str, Any]]:
    """The chat messages the front submitted for one response (the devhorde's record of its request)."""
    messages: list[dict[str, Any]] = stack.latest_native_request(response_id)["payload"]["messages"]
    return messages


@pytest.mark.parametrize(
    ("scenario", "model"),
    [
        pytest.param("conversation", TEXT_MODEL, id="generate"),
        pytest.param("conversation-stream", REASONING_MODEL, id="stream-reasoning"),
    ],
)
def test_a_conversation_continues_through_the_sdks_item_references(stack: LiveStack, scenario: str, model: str) -> None:
    """issue 26, item 1: the AI SDK's default provider holds a conversation. Its second turn sends the first turn's
    ``response.messages`` back as ``item_reference`` items (its own request body, recorded by a ``fetch`` wrapper),
    the front resolves them from the stored response (``store`` defaults to true), and the Horde is sent the whole
    history: the user's first question, the first answer as the assistant's message, the second question. Plain
    ``generateText`` and a streamed reasoning conversation alike."""
    result = run_client(stack, scenario, CONVERSATION_MODEL=model, FRONT_API_KEY="ai-sdk-conversation-key")
    first, second = result["turns"]
    assert first["text"].strip() and second["text"].strip(), result["turns"]
    assert [url.rsplit("/", 1)[-1] for url in result["urls"]] == ["responses", "responses"]
    first_body, second_body = result["bodies"]
    assert "previous_response_id" not in second_body
    references = [item for item in second_body["input"] if item.get("type") == "item_reference"]
    assert references, second_body["input"]
    assert all(reference["id"].startswith(("msg_", "rs_")) for reference in references), references
    if model == REASONING_MODEL:
        assert first["reasoningText"], first
        assert {reference["id"][:3] for reference in references} == {"msg", "rs_"}, references
    history = native_messages(stack, second["responseId"])
    assert [m["role"] for m in history if m["role"] != "system"] == ["user", "assistant", "user"], history
    assistant = next(m for m in history if m["role"] == "assistant")
    assert assistant["content"] == first["text"]
    assert history[-1]["content"] == [{"type": "text", "text": "And who keeps them?"}]
    assert first_body["input"][-1]["content"][0]["text"] == "Tell me about lighthouses."
