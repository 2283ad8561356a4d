"""oaifront.telemetry's switches (off by default, OTEL_SDK_DISABLED wins, Pyroscope starts also without the SDK), the
server span names, the scope the instrumentation sees, and the Loguru bridge to OpenTelemetry logs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loguru import logger
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

import oaifront.telemetry
from chat.settings import FrontSettings
from oaifront.telemetry import (
    LoguruToOpenTelemetry,
    PrivateScopeTracing,
    configure_telemetry,
    pyroscope_options,
    sdk_disabled,
    service_name,
    span_details,
)


def test_service_name_defaults_to_horde_oai(monkeypatch: pytest.MonkeyPatch) -> None:
    """ref: configuration.2"""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert service_name() == "horde-oai"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "chat-front-eu")
    assert service_name() == "chat-front-eu"


@pytest.mark.parametrize(("value", "disabled"), [("true", True), ("TRUE", True), ("false", False), ("", False)])
def test_otel_sdk_disabled(monkeypatch: pytest.MonkeyPatch, value: str, disabled: bool) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", value)
    assert sdk_disabled() is disabled


def test_off_by_default_and_with_the_sdk_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """ref: configuration.2"""
    monkeypatch.delenv("PYROSCOPE_ENABLED", raising=False)
    assert configure_telemetry(FrontSettings()) is False
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert configure_telemetry(FrontSettings(telemetry_enabled=True)) is False


def test_pyroscope_starts_even_when_the_sdk_is_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """ref: configuration.5, configuration.6"""
    started: list[dict[str, Any]] = []
    import pyroscope

    monkeypatch.setattr(pyroscope, "configure", lambda **options: started.append(options))
    monkeypatch.setenv("PYROSCOPE_ENABLED", "true")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.setenv("PYROSCOPE_SERVER_ADDRESS", "http://127.0.0.1:4040")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert configure_telemetry(FrontSettings(telemetry_enabled=True)) is False
    assert started == [pyroscope_options()]
    assert started[0]["application_name"] == "horde-oai"
    assert started[0]["server_address"] == "http://127.0.0.1:4040"
    assert oaifront.telemetry.pyroscope_enabled()


@pytest.mark.parametrize(
    ("method", "path", "name", "route"),
    [
        ("POST", "/v1/chat/completions", "POST /v1/chat/completions", "/v1/chat/completions"),
        ("GET", "/v1/models", "GET /v1/models", "/v1/models"),
        ("GET", "/v1/models/org/some-model-7b", "GET /v1/models/{model}", "/v1/models/{model}"),
        ("GET", "/v1/embeddings", "GET", None),
    ],
)
def test_server_spans_are_named_by_route(method: str, path: str, name: str, route: str | None) -> None:
    """ref: configuration.8 (a path no route serves keeps the method alone, so span names stay bounded)"""
    assert span_details({"type": "http", "method": method, "path": path}) == (
        name,
        {"http.route": route} if route is not None else {},
    )


def test_the_instrumentation_sees_no_client_address_query_or_headers_and_the_app_its_own_scope() -> None:
    """ref: configuration.9"""
    shown: list[dict[str, Any]] = []
    served: list[dict[str, Any]] = []

    def instrument(inner: Any) -> Any:
        async def traced(scope: Any, receive: Any, send: Any) -> None:
            shown.append(dict(scope))
            await inner(scope, receive, send)

        return traced

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(scope)

    headers = [
        (b"host", b"evil.example"),
        (b"user-agent", b"curl/8"),
        (b"authorization", b"Bearer sk-secret"),
        (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "query_string": b"key=sk-secret",
        "client": ("203.0.113.7", 51234),
        "server": ("127.0.0.1", 8000),
        "headers": headers,
    }
    tracing = PrivateScopeTracing(app, instrument)
    asyncio.run(tracing(scope, None, None))
    assert served == [scope]
    (seen,) = shown
    assert seen["headers"] == [headers[-1]]
    assert seen["query_string"] == b""
    assert "client" not in seen
    for path in ("/healthz", "/readyz", "/metrics"):
        asyncio.run(tracing({**scope, "path": path}, None, None))
    assert len(shown) == 1
    assert len(served) == 4


def test_loguru_records_become_opentelemetry_log_records_with_the_bound_values() -> None:
    """ref: configuration.3, finished-request-log-line.6"""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    sink = logger.add(LoguruToOpenTelemetry(provider), level="INFO", format="{message}")
    try:
        logger.bind(request_id="abc", status=200, streamed=False, woke_at=None).info("Chat request abc finished: x")
        logger.debug("not at the level")
    finally:
        logger.remove(sink)
    (exported,) = exporter.get_finished_logs()
    record = exported.log_record
    assert record.body == "Chat request abc finished: x"
    assert record.severity_text == "INFO"
    assert record.severity_number == SeverityNumber.INFO
    attributes = dict(record.attributes or {})
    assert {key: attributes[key] for key in ("request_id", "status", "streamed")} == {
        "request_id": "abc",
        "status": 200,
        "streamed": False,
    }
    assert "woke_at" not in attributes
    assert (
        attributes["code.function.name"] == "test_loguru_records_become_opentelemetry_log_records_with_the_bound_values"
    )
    assert exported.instrumentation_scope is not None
    assert exported.instrumentation_scope.name == __name__


def test_telemetry_is_configured_before_the_application_is_built() -> None:
    """oaifront.asgi calls configure_telemetry before it builds Django's handler, and instruments the built app only
    when telemetry was configured. ref: configuration.1"""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "oaifront" / "asgi.py"
    calls = [
        node.func.id
        for node in sorted(
            (node for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.Call)),
            key=lambda node: (node.lineno, node.col_offset),
        )
        if isinstance(node.func, ast.Name)
    ]
    order = [name for name in calls if name in {"configure_telemetry", "get_asgi_application", "instrument_app"}]
    assert order.index("configure_telemetry") < order.index("get_asgi_application") < order.index("instrument_app")
