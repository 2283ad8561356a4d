"""oaifront.telemetry's switches: off by default, OTEL_SDK_DISABLED wins, Pyroscope starts also without the SDK."""

from __future__ import annotations

from typing import Any

import pytest

import oaifront.telemetry
from oaifront.conf import FrontSettings
from oaifront.telemetry import configure_telemetry, pyroscope_options, sdk_disabled, service_name


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


def test_telemetry_is_configured_before_the_application_is_built() -> None:
    """oaifront.asgi calls configure_telemetry before it builds Django's handler, and instruments the built app only
    when telemetry was configured. ref: configuration.1"""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "oaifront" / "asgi.py"
    calls = [
        node.func.id
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    order = [name for name in calls if name in {"configure_telemetry", "FrontASGIHandler", "instrument_app"}]
    assert order.index("configure_telemetry") < order.index("FrontASGIHandler") < order.index("instrument_app")
