"""Real clients' default requests, end to end (issue: the chat UIs people use work on their default settings).

Each ``clients/*.json`` file holds one client's default body, reconstructed from the client's public source (its
``source`` names the version and file), in its streamed and non-streamed forms. Each form is sent as raw JSON, with
the client's own headers, to the real front (uvicorn) in front of the real devhorde, and its outcome is asserted
exactly: a served completion or stream with content, or the reference's refusal (status, type, code, param,
message).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conformance.cases import ANONYMOUS_KEY, MODELS, ClientCase, StreamReply, load_cases, read_stream
from tests.conftest import LiveStack

pytestmark = pytest.mark.integration

CASES = load_cases()
FORMS = ("streamed", "non_streamed")


def send(front: httpx.Client, case: ClientCase, form: str) -> httpx.Response | StreamReply:
    """Send ``case``'s body in ``form``; a served stream comes back read whole."""
    body = case.body(form)
    if body.get("stream") is True:
        with front.stream("POST", "/chat/completions", json=body, headers=case.headers()) as response:
            if response.status_code != 200:
                response.read()
                return response
            return StreamReply(response.status_code, response.headers, read_stream(response))
    return front.post("/chat/completions", json=body, headers=case.headers())


def assert_served(reply: httpx.Response | StreamReply, body: dict[str, Any]) -> None:
    """A completion (or a stream) with content, for the model asked, in OpenAI's shape."""
    if isinstance(reply, StreamReply):
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.events[-1] == ("done", None)
        chunks = reply.chunks
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        assert {chunk["model"] for chunk in chunks} == {body["model"]}
        calls = [choice["delta"].get("tool_calls") for chunk in chunks for choice in chunk["choices"]]
        assert reply.content.strip() or any(calls)
        finishes = [
            choice["finish_reason"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]
        ]
        assert finishes in (["stop"], ["length"], ["tool_calls"])
        usage_chunks = [chunk for chunk in chunks if chunk.get("usage") and not chunk["choices"]]
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        assert len(usage_chunks) == (1 if wants_usage else 0)
        return
    assert reply.status_code == 200, reply.text
    completion = reply.json()
    assert completion["object"] == "chat.completion"
    assert completion["model"] == body["model"]
    assert completion["choices"][0]["message"]["role"] == "assistant"
    message = completion["choices"][0]["message"]
    if completion["choices"][0]["finish_reason"] == "tool_calls":
        assert message["tool_calls"] and all(call["function"]["name"] for call in message["tool_calls"])
    else:
        assert message["content"].strip()
        assert completion["choices"][0]["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_client_default_body(front: httpx.Client, conformance: LiveStack, case: ClientCase, form: str) -> None:
    """The client's default body in ``form`` is served, or refused with the reference's exact error.
    ref: parameter-screening.2, parameter-screening.4, declaration-gaps.1"""
    body = case.body(form)
    expected = case.expected(form)
    reply = send(front, case, form)
    if "Origin" in case.headers():
        assert reply.headers["access-control-allow-origin"] == "*"
    if expected["status"] == 200:
        assert_served(reply, body)
        sent = conformance.native_requests()
        assert len(sent) == 1
        assert sent[0]["payload"]["models"] == [body["model"]]
        return
    assert isinstance(reply, httpx.Response)
    assert reply.status_code == expected["status"], reply.text
    error = reply.json()["error"]
    assert {key: error[key] for key in ("type", "code", "param", "message")} == {
        key: expected[key] for key in ("type", "code", "param", "message")
    }
    assert sorted(error.get("metadata", {})) == expected.get("metadata_keys", [])
    if expected["status"] == 400:
        assert conformance.native_requests() == []


def test_suite_covers_at_least_twelve_clients() -> None:
    """Issue 16: the suite holds at least 12 clients' default bodies, each with its source and expected outcome."""
    assert len({case.client for case in CASES}) >= 12
    for case in CASES:
        assert case.data["source"] and case.data["setting"]
        assert case.data["model"] in MODELS
        assert case.data["expected"]["status"] in (200, 400, 404)
        assert case.data["body"]["messages"]


def test_sillytavern_custom_default_is_served_both_ways(front: httpx.Client) -> None:
    """Issue 16's first "Done when": SillyTavern's Custom default body, with ``logit_bias: {}``, is served streamed
    and not. ref: parameter-screening.4"""
    case = next(case for case in CASES if case.name == "sillytavern-custom")
    assert case.data["body"]["logit_bias"] == {}
    for form in FORMS:
        assert_served(send(front, case, form), case.body(form))


def test_anonymous_key_is_used_without_one(front: httpx.Client, conformance: LiveStack) -> None:
    """A client that sends no key (KoboldAI Lite's default) is served with the Horde's anonymous key."""
    case = next(case for case in CASES if case.name == "koboldai-lite-penalties-declared")
    assert "Authorization" not in case.headers()
    assert_served(send(front, case, "non_streamed"), case.body("non_streamed"))
    assert conformance.native_requests()[0]["apikey"] == ANONYMOUS_KEY
