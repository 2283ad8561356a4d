"""Hostile clients against the running front (issue 35): what a log reader or a trace reader must never learn.

The front runs under uvicorn with JSON logs (``HORDE_OAI_LOG_JSON=true``), a proxy passkey, and telemetry exported
over OTLP/HTTP to a receiver of this test's own (tests/integration/otlp_receiver.py). A client on its own loopback
address (127.0.0.2) lists the models with a query string, asks a chat completion and stores a response with a key of
its own, then reads the stored response back by its id. Everything the front wrote and exported is then searched.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import start_devhorde, start_front
from tests.integration.otlp_receiver import running_receiver

pytestmark = pytest.mark.integration

CLIENT_ADDRESS = "127.0.0.2"
"""The client's own loopback address: the front binds 127.0.0.1, so this one appears only if the client's is shown."""


@dataclass
class Captured:
    """What the front wrote (its log, JSON lines) and exported (every OTLP export, as protobuf text), and the values
    that must appear in neither."""

    log: str
    exported: str
    secrets: dict[str, str]
    stored: dict[str, Any]
    """The first stored response."""
    over_quota: dict[str, Any]
    """The key's second response, past its quota of one (``HORDE_OAI_STORED_RESPONSES_PER_KEY=1``)."""


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Captured:
    tmp: Path = tmp_path_factory.mktemp("hostile")
    key = f"hostilekey{secrets.token_hex(8)}"
    passkey = f"passkey{secrets.token_hex(8)}"
    prompt = f"zebrafinch{secrets.token_hex(6)}"
    query = f"querymark{secrets.token_hex(6)}"
    with running_receiver() as otlp:
        devhorde, horde_url = start_devhorde(tmp, scenario="fast")
        try:
            env = {
                **otlp.env,
                "HORDE_OAI_LOG_JSON": "true",
                "HORDE_OAI_PROXY_PASSKEY": passkey,
                "HORDE_OAI_STORED_RESPONSES_PER_KEY": "1",
                "HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS": "0",
            }
            front, base = start_front(tmp, horde_url, env=env)
            try:
                transport = httpx.HTTPTransport(local_address=CLIENT_ADDRESS)
                headers = {"Authorization": f"Bearer {key}"}
                with httpx.Client(base_url=base, transport=transport, headers=headers, timeout=30) as client:
                    models = client.get(f"/v1/models?apikey={query}")
                    assert models.status_code == 200, models.text
                    model = models.json()["data"][0]["id"]
                    message = {"role": "user", "content": f"Tell me about {prompt}."}
                    completion = client.post("/v1/chat/completions", json={"model": model, "messages": [message]})
                    assert completion.status_code == 200, completion.text
                    stored = client.post("/v1/responses", json={"model": model, "input": f"And {prompt}?"})
                    assert stored.status_code == 200, stored.text
                    response_id = stored.json()["id"]
                    read_back = client.get(f"/v1/responses/{response_id}?include={query}")
                    assert read_back.status_code == 200, read_back.text
                    over_quota = client.post("/v1/responses", json={"model": model, "input": "Once more?"})
                    assert over_quota.status_code == 200, over_quota.text
            finally:
                front.stop()
        finally:
            devhorde.stop()
    received = otlp.received
    exported = "\n".join(str(message) for exports in received.exports.values() for message in exports)
    return Captured(
        log=front.log(),
        exported=exported,
        stored=stored.json(),
        over_quota=over_quota.json(),
        secrets={
            "key": key,
            "passkey": passkey,
            "prompt": prompt,
            "reply": completion.json()["choices"][0]["message"]["content"][:40],
            "stored reply": stored.json()["output"][-1]["content"][0]["text"][:40],
            "client address": CLIENT_ADDRESS,
            "query string": query,
            "response id": response_id.removeprefix("resp_"),
        },
    )


def test_the_capture_holds_the_requests(captured: Captured) -> None:
    """The search below reads real output: the JSON finished-request lines and the server spans are there."""
    assert '"Chat request ' in captured.log
    assert 'name: "POST /v1/responses"' in captured.exported
    assert 'name: "GET /v1/responses/{response_id}"' in captured.exported
    assert 'string_value: "/v1/responses/{response_id}"' in captured.exported  # http.route, and the path shown


@pytest.mark.parametrize(
    "what", ["key", "passkey", "prompt", "reply", "stored reply", "client address", "query string", "response id"]
)
def test_no_capability_or_personal_datum_in_the_logs_or_exports(captured: Captured, what: str) -> None:
    """The key, the passkey, the prompt, the replies, the client's address, a query string and a stored response's
    id appear in no log line (JSON; uvicorn's access log stays off) and no span, metric or log record exported."""
    secret = captured.secrets[what]
    assert secret not in captured.log
    assert secret not in captured.exported


def test_a_response_past_the_keys_quota_is_answered_and_says_it_was_not_stored(captured: Captured) -> None:
    """Issue 35, finding 3: a key's responses are bounded; past the bound the response is served and says ``store``
    did not hold (``store: false``, ``x_horde.store: over_quota``), where the first says ``store: true``."""
    assert captured.stored["store"] is True
    assert "store" not in captured.stored.get("x_horde", {})
    assert captured.over_quota["status"] == "completed"
    assert captured.over_quota["store"] is False
    assert captured.over_quota["x_horde"]["store"] == "over_quota"
