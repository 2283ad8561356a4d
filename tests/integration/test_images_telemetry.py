"""Telemetry of ``POST /v1/images/generations`` (issue 39): the image request is one server span, its Horde calls
(submit, check, status) are client spans under it whose ``traceparent`` goes on the wire, and its log line names its
outcome class; nothing of the prompt or key reaches a span or the log. The front runs under uvicorn in
``tests.integration.telemetry_front`` (spans in memory, written out at shutdown) on the devhorde's ``images``
scenario; one request through the official SDK.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai
import pytest

from devhorde.launch import wait_http
from tests.conftest import FAST_FRONT_ENV, free_port, start_devhorde, start_process

pytestmark = pytest.mark.integration

PROMPT = "a lighthouse at dusk, secret-prompt-words"
API_KEY = "0000000000"


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("images-telemetry")
    devhorde, horde_url = start_devhorde(tmp, scenario="images")
    try:
        port = free_port()
        spans_file = tmp / "spans.json"
        env = {
            **FAST_FRONT_ENV,
            "HORDE_URL": horde_url,
            "HORDE_OAI_TELEMETRY_ENABLED": "true",
            "LOGFIRE_SEND_TO_LOGFIRE": "false",
        }
        args = [sys.executable, "-m", "tests.integration.telemetry_front", "--port", str(port)]
        front = start_process([*args, "--spans", str(spans_file)], env, tmp / "telemetry-front.log")
        base = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{base}/healthz", front.popen)
            client = openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=30)
            answer = client.images.generate(model="dall-e-2", prompt=PROMPT, size="256x256")
        finally:
            front.stop()
        result: dict[str, Any] = json.loads(spans_file.read_text())
        result["images"] = len(answer.data)
        result["log"] = front.log()
        return result
    finally:
        devhorde.stop()


def test_the_image_request_is_a_server_span_with_its_horde_calls_as_client_spans_under_it(
    telemetry: dict[str, Any],
) -> None:
    assert telemetry["images"] == 1
    by_id = {span["span_id"]: span for span in telemetry["spans"]}
    (server,) = [
        span
        for span in telemetry["spans"]
        if span["kind"] == "SERVER"
        and (span["attributes"].get("http.target") or span["attributes"].get("url.path")) == "/v1/images/generations"
    ]
    assert server["attributes"].get("http.method", server["attributes"].get("http.request.method")) == "POST"
    clients = [span for span in telemetry["spans"] if span["kind"] == "CLIENT" and _under(span, server, by_id)]
    paths = {
        (span["attributes"].get("http.method") or span["attributes"].get("http.request.method"))
        + " "
        + (span["attributes"].get("http.url") or span["attributes"].get("url.full") or "")
        .split("/api", 1)[-1]
        .split("/generate/", 1)[-1]
        .split("/", 1)[0]
        for span in clients
    }
    assert {"POST async", "GET check", "GET status"} <= paths
    traceparents = [entry["traceparent"] for entry in telemetry["sent"] if entry["path"].endswith("/v2/generate/async")]
    assert traceparents and None not in traceparents
    client_ids = {(span["trace_id"], span["span_id"]) for span in clients}
    assert {tuple(value.split("-")[1:3]) for value in traceparents} <= client_ids
    assert server["end"] >= max(span["end"] for span in clients)


def test_no_prompt_or_key_reaches_a_span_and_the_log_line_names_the_outcome_class(telemetry: dict[str, Any]) -> None:
    spans = json.dumps(telemetry["spans"])
    assert "secret-prompt-words" not in spans
    assert "secret-prompt-words" not in telemetry["log"]
    assert (
        "Image request finished: status=200 code=- outcome_class=served model=stable_diffusion n=1"
        in (telemetry["log"])
    )


def _under(span: dict[str, Any], ancestor: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> bool:
    parent = span["parent_id"]
    while parent is not None:
        if parent == ancestor["span_id"]:
            return True
        parent = by_id.get(parent, {}).get("parent_id")
    return False
