"""Telemetry on, spans exported to memory (reference: Configuration, Spans, Delta read attributes).

The front runs under uvicorn in ``tests.integration.telemetry_front`` with ``HORDE_OAI_TELEMETRY_ENABLED=true``; its
spans go to an in-memory exporter that the process writes out when it stops. A non-streamed and a relayed streamed
request through the official SDK, then: one server span per request, the Horde calls as client spans under it whose
``traceparent`` (sent on the wire) names them, none for ``/healthz`` or ``/readyz``, the streamed request's span ending
after its last event, and one ``horde.oai.delta_read`` root span per non-empty read.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from devhorde.launch import wait_http
from tests.conftest import FAST_FRONT_ENV, REDIS_URL, STREAM_REDIS_DB, free_port, start_devhorde, start_process

pytestmark = pytest.mark.integration


BODY_LIMIT = 8192
"""``HORDE_OAI_MAX_BODY_BYTES``: a chat request fits; the refused request's body is one byte over."""


def run_front(tmp: Path, horde_url: str) -> dict[str, Any]:
    port = free_port()
    spans_file = tmp / "spans.json"
    env = {
        **FAST_FRONT_ENV,
        "HORDE_URL": horde_url,
        "HORDE_OAI_REDIS_URL": REDIS_URL,
        "HORDE_OAI_STREAM_REDIS_DB": str(STREAM_REDIS_DB),
        "HORDE_OAI_TELEMETRY_ENABLED": "true",
        "HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS": "0",
        "LOGFIRE_SEND_TO_LOGFIRE": "false",
        "HORDE_OAI_MAX_BODY_BYTES": str(BODY_LIMIT),
    }
    args = [sys.executable, "-m", "tests.integration.telemetry_front", "--port", str(port), "--spans", str(spans_file)]
    front = start_process(args, env, tmp / "telemetry-front.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", front.popen)
        httpx.get(f"{base}/readyz", timeout=10)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="0000000000", max_retries=0, timeout=30)
        model = client.models.list().data[0].id
        completion = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi."}])
        chunks = list(
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Tell me about tides."}], stream=True
            )
        )
        stream_ended = time.time_ns()
        refused = httpx.request("GET", f"{base}/v1/models", content=b"x" * (BODY_LIMIT + 1), timeout=10)
    finally:
        front.stop()
    result = json.loads(spans_file.read_text())
    result["completion_id"] = completion.id
    result["stream_id"] = chunks[0].id
    result["stream_ended"] = stream_ended
    result["refused_status"] = refused.status_code
    result["log"] = front.log()
    return result


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("telemetry")
    devhorde, horde_url = start_devhorde(tmp, scenario="fast")
    try:
        return run_front(tmp, horde_url)
    finally:
        devhorde.stop()


def server_spans(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for span in result["spans"] if span["kind"] == "SERVER"]


def test_one_server_span_per_request_and_none_for_the_probes(telemetry: dict[str, Any]) -> None:
    """ref: configuration.8, configuration.9"""
    routes = sorted(
        (
            span["attributes"].get("http.method"),
            span["attributes"].get("http.target") or span["attributes"].get("url.path"),
        )
        for span in server_spans(telemetry)
    )
    assert routes == sorted(
        [
            ("GET", "/v1/models"),
            ("GET", "/v1/models"),
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/chat/completions"),
        ]
    )
    for span in server_spans(telemetry):
        assert not any(key.startswith("http.request.header") for key in span["attributes"])


def test_horde_calls_are_client_spans_under_the_server_span_carrying_traceparent(telemetry: dict[str, Any]) -> None:
    """ref: configuration.3"""
    by_id = {span["span_id"]: span for span in telemetry["spans"]}
    posts = [span for span in server_spans(telemetry) if span["attributes"].get("http.method") == "POST"]
    clients = [span for span in telemetry["spans"] if span["kind"] == "CLIENT"]
    for server in posts:
        children = [
            span for span in clients if span["trace_id"] == server["trace_id"] and _ancestor(span, server, by_id)
        ]
        assert children, "a chat request's Horde calls are client spans in its trace"
    traceparents = {
        entry["traceparent"] for entry in telemetry["sent"] if entry["path"].endswith("/v2/generate/chat/async")
    }
    assert None not in traceparents
    # version 00, the client span's trace and span ids, and flags with the sampled bit (the SDK also sets W3C Trace
    # Context level 2's random-trace-id bit: 03)
    client_ids = {("00", span["trace_id"], span["span_id"]) for span in clients}
    assert {tuple(value.split("-")[:3]) for value in traceparents} <= client_ids
    assert all(int(value.split("-")[3], 16) & 1 for value in traceparents)


def test_the_streamed_request_span_lasts_until_the_stream_ends(telemetry: dict[str, Any]) -> None:
    """ref: configuration.10"""
    posts = sorted(
        (span for span in server_spans(telemetry) if span["attributes"].get("http.method") == "POST"),
        key=lambda span: span["start"],
    )
    streamed = posts[-1]
    stream_clients = [
        span for span in telemetry["spans"] if span["kind"] == "CLIENT" and span["trace_id"] == streamed["trace_id"]
    ]
    assert streamed["end"] >= max(span["end"] for span in stream_clients)


def test_one_delta_read_root_span_per_non_empty_read(telemetry: dict[str, Any]) -> None:
    """ref: spans.1, spans.2, delta-read-attributes.1, delta-read-attributes.2"""
    reads = [span for span in telemetry["spans"] if span["name"] == "horde.oai.delta_read"]
    assert reads
    for span in reads:
        assert span["parent_id"] is None
        assert span["attributes"]["horde.entries"] >= 1
        assert all(key.startswith("horde.") for key in span["attributes"] if not key.startswith("logfire."))


def test_a_refusal_of_the_admission_guards_has_its_server_span_and_its_log_line(telemetry: dict[str, Any]) -> None:
    """The guards sit under the instrumentation (issue 34): a 413 on the head is an answer like any other."""
    assert telemetry["refused_status"] == 413
    statuses = [
        span["attributes"].get("http.status_code", span["attributes"].get("http.response.status_code"))
        for span in server_spans(telemetry)
        if span["attributes"].get("http.method") == "GET"
    ]
    assert statuses == [200, 413]
    assert (
        "Request refused by the admission guards: method=GET status=413 code=RequestTooLarge retry_after=None"
        in telemetry["log"]
    )


def _ancestor(span: dict[str, Any], ancestor: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> bool:
    parent = span["parent_id"]
    while parent is not None:
        if parent == ancestor["span_id"]:
            return True
        parent = by_id.get(parent, {}).get("parent_id")
    return False
