"""Telemetry on, exported over OTLP/HTTP to a receiver of this test's own on loopback (reference: Configuration,
Spans, Metrics, Histogram buckets, Finished-request log line).

The front runs under uvicorn with ``HORDE_OAI_TELEMETRY_ENABLED=true``, ``HORDE_OAI_METRICS_ENDPOINT=true`` and
``OTEL_EXPORTER_OTLP_ENDPOINT`` naming the receiver (tests/integration/otlp_receiver.py), which decodes every export
(traces, metrics, logs) with opentelemetry-proto. The test drives the model list, a non-streamed and a streamed chat
completion (a prompt and a key of its own, and a user agent and ``Host`` headers of its own on some requests), scrapes
``/metrics`` and polls the probes, stops the front (which flushes its exporters) and reads what arrived.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client.parser import text_string_to_metric_families

from chat.metrics import (
    BUCKETS_BODY_BYTES,
    BUCKETS_REQUEST_LIFECYCLE_SECONDS,
    BUCKETS_SECONDS,
    HISTOGRAM_BOUNDARIES,
)
from tests.conftest import start_devhorde, start_front
from tests.integration.otlp_receiver import Received, running_receiver

pytestmark = pytest.mark.integration

PROMPT_MARKER = f"tides-{uuid.uuid4().hex}"
"""A word of the test's prompts: it must appear in no attribute."""
API_KEY = "0000000000"
USER_AGENT = f"otlp-test-agent/{uuid.uuid4().hex[:12]}"
HOSTS = [f"host-{index}-{uuid.uuid4().hex[:6]}.example" for index in range(5)]
"""``Host`` headers of the test's own (the spans and metrics must not carry them)."""


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: value_of(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind is not None else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Exported:
    spans: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    """One entry per metric per export: name, unit, data kind, points (attributes, explicit bounds)."""
    logs: list[dict[str, Any]]
    metrics_on: httpx.Response
    request_ids: list[str]
    """The native request ids of the two completions (their ids are ``chatcmpl-<native id>``)."""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    tmp: Path = tmp_path_factory.mktemp("otlp")
    with running_receiver() as otlp:
        devhorde, horde_url = start_devhorde(tmp, scenario="fast")
        try:
            env = {
                **otlp.env,
                "HORDE_OAI_METRICS_ENDPOINT": "true",
                "HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS": "0",
            }
            front, base = start_front(tmp, horde_url, env=env)
            try:
                headers = {"User-Agent": USER_AGENT}
                client = openai.OpenAI(
                    base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=30, default_headers=headers
                )
                model = client.models.list().data[0].id
                completion = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": f"Say hi. {PROMPT_MARKER}"}]
                )
                chunks = list(
                    client.chat.completions.create(
                        model=model,
                        messages=[{"role": "user", "content": f"Tell me about {PROMPT_MARKER}."}],
                        stream=True,
                    )
                )
                for host in HOSTS:
                    refused = httpx.get(f"{base}/v1/models", headers={"Host": host, **headers}, timeout=10)
                    assert refused.status_code == 200
                for probe in ("/healthz", "/readyz"):
                    httpx.get(f"{base}{probe}", timeout=10)
                metrics_on = httpx.get(f"{base}/metrics", timeout=10)
            finally:
                front.stop()
        finally:
            devhorde.stop()
    received = otlp.received
    native_ids = [completion.id.removeprefix("chatcmpl-"), chunks[0].id.removeprefix("chatcmpl-")]
    return decode(received, metrics_on, native_ids)


def decode(received: Received, metrics_on: httpx.Response, request_ids: list[str]) -> Exported:
    spans = [
        {
            "name": span.name,
            "kind": Span.SpanKind.Name(span.kind),
            "attributes": attributes_of(span.attributes),
            "events": [attributes_of(event.attributes) for event in span.events],
        }
        for export in received.exports["/v1/traces"]
        for resource in export.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    metrics = []
    for export in received.exports["/v1/metrics"]:
        for resource in export.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    points = getattr(metric, kind).data_points
                    metrics.append(
                        {
                            "name": metric.name,
                            "unit": metric.unit,
                            "kind": kind,
                            "scope": scope.scope.name,
                            "export": id(export),
                            "points": [
                                {
                                    "attributes": attributes_of(point.attributes),
                                    "bounds": list(getattr(point, "explicit_bounds", [])),
                                }
                                for point in points
                            ],
                        }
                    )
    logs = [
        {
            "body": value_of(record.body),
            "severity": record.severity_text,
            "attributes": attributes_of(record.attributes),
            "trace_id": record.trace_id.hex(),
        }
        for export in received.exports["/v1/logs"]
        for resource in export.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]
    return Exported(spans, metrics, logs, metrics_on, request_ids)


def server_spans(exported: Exported) -> list[dict[str, Any]]:
    return [span for span in exported.spans if span["kind"] == "SPAN_KIND_SERVER"]


def test_metrics_endpoint_parses_with_telemetry_on(exported: Exported) -> None:
    """``/metrics`` answers 200 with telemetry on, and prometheus_client's parser reads it."""
    assert exported.metrics_on.status_code == 200
    names = {family.name for family in text_string_to_metric_families(exported.metrics_on.text)}
    assert "horde_oai_request_duration_seconds" in names


def test_each_front_histogram_is_exported_once_with_the_reference_buckets(exported: Exported) -> None:
    """ref: configuration.2, histogram-buckets.1, histogram-buckets.2, histogram-buckets.3"""
    front = [metric for metric in exported.metrics if metric["name"].startswith("horde.oai.")]
    assert front
    per_export: dict[tuple[int, str], int] = {}
    for metric in front:
        key = (metric["export"], metric["name"])
        per_export[key] = per_export.get(key, 0) + 1
    assert set(per_export.values()) == {1}
    histograms = {metric["name"]: metric for metric in front if metric["name"] in HISTOGRAM_BOUNDARIES}
    assert "horde.oai.request.duration" in histograms
    for name, metric in histograms.items():
        assert metric["kind"] == "histogram", name
        for point in metric["points"]:
            assert point["bounds"] == [float(bound) for bound in HISTOGRAM_BOUNDARIES[name]], name
    assert all(metric["kind"] != "exponential_histogram" for metric in exported.metrics)
    for name, bounds in (
        ("horde.oai.horde.call.duration", BUCKETS_SECONDS),
        ("horde.oai.request.duration", BUCKETS_REQUEST_LIFECYCLE_SECONDS),
        ("horde.oai.request.body_size", BUCKETS_BODY_BYTES),
    ):
        assert histograms[name]["points"][0]["bounds"] == [float(bound) for bound in bounds]


def test_units_and_kinds(exported: Exported) -> None:
    """The instruments arrive with their units and kinds, and nothing but the front's and the HTTP
    instrumentations'."""
    found = {metric["name"]: (metric["kind"], metric["unit"]) for metric in exported.metrics}
    assert all(name.startswith(("horde.oai.", "http.server.", "http.client.")) for name in found), sorted(found)
    assert found["http.server.duration"] == ("histogram", "ms")
    assert found["horde.oai.request.duration"] == ("histogram", "s")
    assert found["horde.oai.request.body_size"] == ("histogram", "By")
    assert found["horde.oai.horde.call.duration"] == ("histogram", "s")
    assert found["horde.oai.completions"] == ("sum", "{completion}")


def test_loguru_records_arrive_as_opentelemetry_logs(exported: Exported) -> None:
    """The finished-request lines are log records whose attributes are the bound values, not spans (ref:
    configuration.3, finished-request-log-line.6)."""
    finished = [log for log in exported.logs if " finished: streamed=" in str(log["body"])]
    assert len(finished) == 2
    for log in finished:
        assert log["severity"] == "INFO"
        assert str(log["body"]).startswith(f"Chat request {log['attributes']['request_id']} finished: ")
        assert {"streamed", "status", "waited", "max_tokens", "max_tokens_source"} <= set(log["attributes"])
        assert log["attributes"]["status"] == 200
    assert sorted(log["attributes"]["streamed"] for log in finished) == [False, True]
    for span in exported.spans:
        assert "Chat request" not in span["name"]
        assert not any(request_id in span["name"] for request_id in exported.request_ids)


def test_server_spans_are_named_by_route_and_none_for_probes_or_scrapes(exported: Exported) -> None:
    """ref: configuration.8, configuration.9"""
    names = sorted(span["name"] for span in server_spans(exported))
    assert names == sorted(
        ["GET /v1/models", "POST /v1/chat/completions", "POST /v1/chat/completions"] + ["GET /v1/models"] * len(HOSTS)
    )
    for span in server_spans(exported):
        assert span["attributes"]["http.route"] == span["name"].split(" ", 1)[1]
    targets = {span["attributes"].get("http.target") for span in exported.spans}
    assert not targets & {"/metrics", "/healthz", "/readyz"}


FORBIDDEN_KEYS = {
    "net.peer.ip",
    "net.peer.port",
    "net.sock.peer.addr",
    "client.address",
    "client.port",
    "network.peer.address",
    "http.user_agent",
    "user_agent.original",
    "http.server_name",
    "http.client_ip",
}


def test_no_client_address_user_agent_host_or_header_attributes(exported: Exported) -> None:
    """ref: configuration.9, metrics.7"""
    for span in exported.spans:
        keys = set(span["attributes"])
        assert not keys & FORBIDDEN_KEYS, span["name"]
        assert not any(key.startswith(("http.request.header", "http.response.header")) for key in keys)
    for metric in exported.metrics:
        for point in metric["points"]:
            assert not set(point["attributes"]) & FORBIDDEN_KEYS, metric["name"]


def test_http_server_metric_labels_are_bounded(exported: Exported) -> None:
    """No ``http.server.*`` label takes the client's ``Host`` header (ref: metrics.7)."""
    server_metrics = [metric for metric in exported.metrics if metric["name"].startswith("http.server.")]
    values = {
        str(value) for metric in server_metrics for point in metric["points"] for value in point["attributes"].values()
    }
    assert not any(host in value for host in HOSTS for value in values)


def everything_exported(exported: Exported) -> list[tuple[str, str, Any]]:
    """(where, key, value) for every attribute of every span, span event and metric point."""
    found = [(span["name"], key, value) for span in exported.spans for key, value in span["attributes"].items()]
    found += [
        (span["name"], key, value)
        for span in exported.spans
        for event in span["events"]
        for key, value in event.items()
    ]
    found += [
        (metric["name"], key, value)
        for metric in exported.metrics
        for point in metric["points"]
        for key, value in point["attributes"].items()
    ]
    return found


def test_no_key_prompt_address_or_request_id_in_span_or_metric_attributes(exported: Exported) -> None:
    """ref: metrics.7, finished-request-log-line.6 (the log records carry ``request_id``, which the reference binds
    to the finished line's extra; nothing else does)."""
    secrets = [API_KEY, PROMPT_MARKER, USER_AGENT, *HOSTS, *exported.request_ids]
    for where, key, value in everything_exported(exported):
        assert not any(secret in str(value) for secret in secrets), (where, key)
    for log in exported.logs:
        values = [value for key, value in log["attributes"].items() if key != "request_id"]
        assert not any(secret in str(value) for secret in secrets for value in values), log["body"]
        assert PROMPT_MARKER not in str(log["body"])
