"""docs/clients.md: every client it names has a conformance case, and each statement it makes about the front's
behaviour holds against the real front and devhorde.

The statements about the clients themselves (their defaults and settings) come from the clients' public source and
documentation and are not the front's behaviour; the conformance cases (``clients/*.json``) name that source.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat.settings import FrontSettings
from tests.conformance.cases import (
    FEATURED_MODEL,
    PLAIN_MODEL,
    SLOW_FIRST_TOKEN_SECONDS,
    SLOW_MODEL,
    load_cases,
    read_stream,
)
from tests.conftest import LiveStack

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
README = Path(__file__).resolve().parents[2] / "README.md"
CASES = load_cases()
HI = [{"role": "user", "content": "Hi"}]
KEY = {"Authorization": "Bearer 0000000000"}


def guide_text() -> str:
    return GUIDE.read_text()


def guide_clients() -> list[str]:
    """The ``###`` headings of the guide's "Clients" section."""
    section = guide_text().split("\n## Clients\n", 1)[1]
    return re.findall(r"^### (.+)$", section, flags=re.MULTILINE)


def test_every_client_in_the_guide_has_a_conformance_case() -> None:
    """Issue 16: each client the guide names has at least one default body in tests/conformance/clients, and each
    case's client has its section in the guide."""
    named = guide_clients()
    assert len(named) >= 12
    cased = {case.client for case in CASES}
    assert sorted(set(named) - cased) == []
    assert sorted(cased - set(named)) == []


def test_readme_links_the_guide() -> None:
    """The README links docs/clients.md."""
    assert "](docs/clients.md)" in README.read_text()


def test_guide_states_the_waits_the_front_has() -> None:
    """The guide's waits are the settings' defaults (FrontSettings)."""
    text = " ".join(guide_text().split())
    defaults = FrontSettings()
    for variable, value in (
        ("HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS", defaults.nonstream_timeout_seconds),
        ("HORDE_OAI_STREAM_TIMEOUT_SECONDS", defaults.stream_timeout_seconds),
        ("HORDE_OAI_KEEPALIVE_SECONDS", defaults.keepalive_seconds),
    ):
        assert f"`{variable}` ({value:g}" in text


@pytest.mark.integration
def test_key_is_passed_to_the_horde(front: httpx.Client, conformance: LiveStack) -> None:
    """ "Key: your AI Horde API key ... the front passes it to the Horde." """
    reply = front.post(
        "/chat/completions",
        json={"model": PLAIN_MODEL, "messages": HI, "max_tokens": 16},
        headers={"Authorization": "Bearer horde-key-of-a-user"},
    )
    assert reply.status_code == 200, reply.text
    assert conformance.native_requests()[0]["apikey"] == "horde-key-of-a-user"


@pytest.mark.integration
def test_cards_list_declared_parameters_only(front: httpx.Client) -> None:
    """ "max_tokens, temperature, top_p and stop are always there; seed, frequency_penalty, presence_penalty, ...
    tools and response_format are there only when the model's online workers declare them"; opencode's
    ``limit.output`` is the card's ``top_provider.max_completion_tokens``, the largest limit the workers declare."""
    cards = {card["id"]: card for card in front.get("/models", headers=KEY).json()["data"]}
    plain = cards[PLAIN_MODEL]["supported_parameters"]
    featured = cards[FEATURED_MODEL]["supported_parameters"]
    assert plain[:4] == featured[:4] == ["max_tokens", "temperature", "top_p", "stop"]
    assert plain == ["max_tokens", "temperature", "top_p", "stop", "seed"]
    for parameter in ("frequency_penalty", "presence_penalty", "tools", "response_format"):
        assert parameter in featured
        assert parameter not in plain
    assert cards[PLAIN_MODEL]["top_provider"]["max_completion_tokens"] == 1024
    assert cards[PLAIN_MODEL]["context_length"] == 8192


@pytest.mark.integration
@pytest.mark.parametrize("penalty", ["frequency_penalty", "presence_penalty"])
def test_penalty_above_zero_needs_a_declaring_model(front: httpx.Client, penalty: str) -> None:
    """SillyTavern's penalties: 0 is served on every model; above 0 only where the card lists the penalty, else
    404 naming it. ref: declaration-gaps.1, declaration-gaps.2, declaration-gaps.3"""
    case = next(case for case in CASES if case.name == "sillytavern-custom")
    body = {**case.body("non_streamed"), penalty: 0.5}
    refused = front.post("/chat/completions", json={**body, "model": PLAIN_MODEL}, headers=KEY)
    assert refused.status_code == 404
    error = refused.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("not_found_error", "no_worker_supports_features", None)
    assert error["message"] == (
        f"No worker can serve this request: no online worker serving the model declares {penalty}. "
        "The request was cancelled."
    )
    served = front.post("/chat/completions", json={**body, "model": FEATURED_MODEL}, headers=KEY)
    assert served.status_code == 200, served.text
    assert served.json()["choices"][0]["message"]["content"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "key", ["top_k", "min_p", "top_a", "typical", "tfs", "rep_pen", "repetition_penalty", "num_ctx"]
)
def test_keys_of_other_backends_are_refused(front: httpx.Client, conformance: LiveStack, key: str) -> None:
    """ "sampler keys that OpenAI does not define ... get 400 UnsupportedChatParameter with OpenAI's own message, at
    the first such key" (Lite's non-standard params, litellm's undropped top_k and repetition_penalty).
    ref: parameter-screening.2, parameter-screening.3"""
    body = {"model": PLAIN_MODEL, "messages": HI, key: 1, "mirostat": 0}
    reply = front.post("/chat/completions", json=body, headers=KEY)
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": f"Unrecognized request argument supplied: {key}",
        "type": "invalid_request_error",
        "param": key,
        "code": "UnsupportedChatParameter",
    }
    assert conformance.native_requests() == []


@pytest.mark.integration
def test_lite_with_non_standard_params_is_refused_at_its_first_sampler_key(front: httpx.Client) -> None:
    """KoboldAI Lite's "non-standard params" add native sampler keys: refused at the first one."""
    case = next(case for case in CASES if case.name == "koboldai-lite-penalties-declared")
    body = {**case.body("non_streamed"), "top_k": 100, "top_a": 0, "typical": 1, "tfs": 1, "rep_pen": 1.07}
    reply = front.post("/chat/completions", json=body, headers=case.headers())
    assert reply.status_code == 400
    assert (reply.json()["error"]["param"], reply.json()["error"]["message"]) == (
        "top_k",
        "Unrecognized request argument supplied: top_k",
    )


@pytest.mark.integration
def test_limit_above_the_workers_is_lowered_by_the_horde(front: httpx.Client, conformance: LiveStack) -> None:
    """Continue's default ``max_tokens`` 4096 on a model whose workers declare 1024: served, the limit lowered.
    ref: completion-limit-source.3"""
    case = next(case for case in CASES if case.name == "continue")
    reply = front.post("/chat/completions", json=case.body("non_streamed"), headers=case.headers())
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] <= 1024
    assert conformance.native_requests()[0]["payload"]["params"]["max_length"] == 4096


@pytest.mark.integration
def test_user_is_accepted_and_not_passed_on(front: httpx.Client, conformance: LiveStack) -> None:
    """LibreChat's ``user`` is accepted and not passed to the Horde."""
    case = next(case for case in CASES if case.name == "librechat")
    reply = front.post("/chat/completions", json=case.body("non_streamed"), headers=case.headers())
    assert reply.status_code == 200, reply.text
    assert "user" not in conformance.native_requests()[0]["payload"]


@pytest.mark.integration
@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_usage_only_when_asked(front: httpx.Client, include_usage: bool) -> None:
    """ "a stream ends with a usage chunk only when the request asks for it" (LangChain's stream_usage, the Vercel
    provider's includeUsage)."""
    body: dict[str, Any] = {"model": PLAIN_MODEL, "messages": HI, "max_tokens": 16, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    with front.stream("POST", "/chat/completions", json=body, headers=KEY) as response:
        assert response.status_code == 200
        events = read_stream(response)
    chunks = [payload for kind, payload in events if kind == "data"]
    usage = [chunk for chunk in chunks if not chunk["choices"] and chunk.get("usage")]
    assert len(usage) == (1 if include_usage else 0)
    if include_usage:
        assert chunks[-1] is usage[0]
        assert usage[0]["usage"]["completion_tokens"] > 0


@pytest.mark.integration
def test_waiting_stream_sends_keepalives_and_its_first_data_chunk_when_the_reply_starts(
    front: httpx.Client, conformance: LiveStack
) -> None:
    """While a stream waits for its reply, only keepalive comments, each with the place (``: processing`` once the
    worker took it); the first data chunk comes when the reply starts: a wait shorter than
    ``HORDE_OAI_PROGRESS_CHUNK_SECONDS`` (60 s) sends no progress chunk
    (tests/integration/test_queue_progress_live.py has a longer one). The worker's first token comes after
    SLOW_FIRST_TOKEN_SECONDS, several keepalive intervals."""
    body = {"model": SLOW_MODEL, "messages": HI, "max_tokens": 16, "stream": True}
    with front.stream("POST", "/chat/completions", json=body, headers=KEY) as response:
        assert response.status_code == 200
        events = []
        started = time.monotonic()
        first_data_at = None
        for event in read_stream_timed(response):
            events.append(event[0])
            if event[0][0] == "data" and first_data_at is None:
                first_data_at = event[1] - started
    first_data = next(index for index, (kind, _) in enumerate(events) if kind == "data")
    assert first_data >= 2
    assert all(kind == "comment" for kind, _ in events[:first_data])
    texts = [text for _, text in events[:first_data]]
    assert [text for index, text in enumerate(texts) if index == 0 or texts[index - 1] != text] in (
        ["processing"],
        ["waiting for a worker", "processing"],
    )
    assert first_data_at is not None and first_data_at >= SLOW_FIRST_TOKEN_SECONDS * 0.9
    assert events[-1] == ("done", None)


def read_stream_timed(response: httpx.Response) -> list[tuple[tuple[str, Any], float]]:
    """:func:`read_stream`'s events, each with the monotonic time its line arrived."""
    timed = []
    for line in response.iter_lines():
        now = time.monotonic()
        if line.startswith(":"):
            timed.append((("comment", line[1:].strip()), now))
        elif line.startswith("data:"):
            payload = line.removeprefix("data:").strip()
            timed.append((("done", None) if payload == "[DONE]" else ("data", json.loads(payload)), now))
    return timed


@pytest.mark.integration
def test_client_that_gives_up_has_its_request_cancelled(conformance: LiveStack) -> None:
    """ "When a client gives up and closes the connection, the front cancels the request at the Horde" (LlamaIndex's
    60 s timeout and retries)."""
    conformance.reset()
    body = {"model": SLOW_MODEL, "messages": HI, "max_tokens": 16}
    with (
        httpx.Client(base_url=conformance.openai_base_url, timeout=1.0) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        impatient.post("/chat/completions", json=body, headers=KEY)
    deadline = time.monotonic() + SLOW_FIRST_TOKEN_SECONDS + 10
    requests: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        requests = conformance.native_requests()
        if requests and requests[0]["cancelled"]:
            break
        time.sleep(0.1)
    assert len(requests) == 1
    assert requests[0]["cancelled"] is True


@pytest.mark.integration
@pytest.mark.parametrize(
    "response_format",
    [
        {
            "type": "json_schema",
            "json_schema": {
                "name": "response",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        },
        {"type": "json_object"},
    ],
    ids=["json_schema", "json_object"],
)
def test_structured_output_needs_a_model_listing_response_format(
    front: httpx.Client, response_format: dict[str, Any]
) -> None:
    """The Vercel provider's ``generateObject``: ``json_schema`` (supportsStructuredOutputs) or ``json_object``,
    served as JSON on a model whose card lists ``response_format``, refused with 404 on one whose card does not."""
    case = next(case for case in CASES if case.name == "vercel-ai-openai-compatible")
    body = {**case.body("non_streamed"), "response_format": response_format, "max_tokens": 256}
    messages = [{"role": "user", "content": "Name a city, as JSON."}]
    served = front.post("/chat/completions", json={**body, "messages": messages, "model": FEATURED_MODEL}, headers=KEY)
    assert served.status_code == 200, served.text
    assert isinstance(json.loads(served.json()["choices"][0]["message"]["content"]), dict)
    refused = front.post("/chat/completions", json={**body, "messages": messages, "model": PLAIN_MODEL}, headers=KEY)
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "no_worker_supports_features"
    assert refused.json()["error"]["message"].startswith(
        f"No worker can serve this request: no online worker serving the model declares {response_format['type']}"
    )


@pytest.mark.parametrize("name", ["opencode", "open-webui-ollama-keys", "koboldai-lite"])
def test_refusals_the_guide_quotes_are_the_conformance_outcomes(name: str) -> None:
    """The refusal messages the guide quotes are those the conformance cases assert (the front's own wording, before
    "The request was cancelled.")."""
    case = next(case for case in CASES if case.name == name)
    message = case.data["expected"]["message"].removesuffix(" The request was cancelled.")
    assert message in " ".join(guide_text().split())
