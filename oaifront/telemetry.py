"""Traces, metrics, logs and profiles of the front (reference: Telemetry, Configuration, Metrics).

:func:`configure_telemetry` runs before the application is built (oaifront.asgi):

- With ``HORDE_OAI_TELEMETRY_ENABLED=true`` and ``OTEL_SDK_DISABLED`` not ``true``, it configures Logfire with the
  standard ``LOGFIRE_*`` / ``OTEL_*`` variables (nothing leaves the process unless a token or an OTLP endpoint is
  set), the service name ``horde-oai`` unless ``OTEL_SERVICE_NAME`` sets another, and the histogram views of
  :func:`chat.metrics.histogram_views`; it bridges Loguru records to OpenTelemetry logs and instruments httpx, so
  each call to the Horde is a client span whose ``traceparent`` header the Horde continues. It returns True, and
  :func:`instrument_app` then adds the server spans (the OpenTelemetry ASGI middleware), ``/healthz`` and
  ``/readyz`` excluded, no header or body captured; a streamed request's span lasts until its stream ends.
- With ``HORDE_OAI_METRICS_ENDPOINT=true`` the instruments are also read by a Prometheus reader that
  ``GET /metrics`` serves (oaifront.urls), with or without the rest of telemetry.
- With ``PYROSCOPE_ENABLED=true`` it starts Pyroscope (``pyroscope-io``) with the ``PYROSCOPE_*`` variables and the
  service name as application name, also when ``OTEL_SDK_DISABLED=true``.

Off (the default), nothing is configured: the OpenTelemetry API's no-op providers record nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from loguru import logger
from opentelemetry import metrics

from chat.metrics import configure_metrics, histogram_views
from chat.settings import FrontSettings

DEFAULT_SERVICE_NAME: Final[str] = "horde-oai"
"""The service name unless ``OTEL_SERVICE_NAME`` sets another."""

EXCLUDED_URLS: Final[str] = "/healthz,/readyz"
"""Paths without server spans: the listener and the container poll them every few seconds."""

_prometheus_reader: Any = None


def sdk_disabled() -> bool:
    """Whether ``OTEL_SDK_DISABLED`` is ``true`` (case-insensitive), as the OpenTelemetry SDK reads it."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def service_name() -> str:
    """``OTEL_SERVICE_NAME``, else :data:`DEFAULT_SERVICE_NAME`."""
    return os.environ.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME


def pyroscope_enabled() -> bool:
    """Whether ``PYROSCOPE_ENABLED`` is ``true``."""
    return os.environ.get("PYROSCOPE_ENABLED", "").strip().lower() == "true"


def pyroscope_options() -> dict[str, Any]:
    """``pyroscope.configure`` arguments from ``PYROSCOPE_SERVER_ADDRESS`` (default ``http://localhost:4040``),
    ``PYROSCOPE_BASIC_AUTH_USERNAME``, ``PYROSCOPE_BASIC_AUTH_PASSWORD``, ``PYROSCOPE_TENANT_ID`` and
    ``PYROSCOPE_SAMPLE_RATE`` (default 100), with the service name as application name.
    """
    return {
        "application_name": service_name(),
        "server_address": os.environ.get("PYROSCOPE_SERVER_ADDRESS", "http://localhost:4040"),
        "basic_auth_username": os.environ.get("PYROSCOPE_BASIC_AUTH_USERNAME", ""),
        "basic_auth_password": os.environ.get("PYROSCOPE_BASIC_AUTH_PASSWORD", ""),
        "tenant_id": os.environ.get("PYROSCOPE_TENANT_ID", ""),
        "sample_rate": int(os.environ.get("PYROSCOPE_SAMPLE_RATE", "100")),
    }


def start_pyroscope() -> None:
    """Start the Pyroscope profiler (``pyroscope-io``) with :func:`pyroscope_options`."""
    import pyroscope  # type: ignore[import-untyped]  # noqa: PLC0415 - loaded only when profiling is on

    options = pyroscope_options()
    pyroscope.configure(**options)
    logger.info("Pyroscope profiling started for {}", options["application_name"])


def prometheus_reader() -> Any:
    """The process's Prometheus metric reader (made once; it registers with prometheus_client's registry)."""
    global _prometheus_reader  # noqa: PLW0603 - one reader per process: it registers with a global registry
    if _prometheus_reader is None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: PLC0415 - only when served

        _prometheus_reader = PrometheusMetricReader()
    return _prometheus_reader


def configure_telemetry(
    settings: FrontSettings,
    *,
    additional_span_processors: Sequence[Any] = (),
    metric_readers: Sequence[Any] = (),
) -> bool:
    """Configure what ``settings`` and the environment enable (see the module docstring); True when telemetry (Logfire)
    was configured, so the caller adds the server spans with :func:`instrument_app`.

    ``additional_span_processors`` and ``metric_readers`` let tests export to memory.
    """
    if pyroscope_enabled():
        start_pyroscope()
    readers = list(metric_readers)
    if settings.metrics_endpoint:
        readers.append(prometheus_reader())
    if not settings.telemetry_enabled or sdk_disabled():
        if readers:
            from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415 - the SDK only when metrics are read
            from opentelemetry.sdk.resources import Resource  # noqa: PLC0415 - likewise

            provider = MeterProvider(
                metric_readers=readers,
                views=histogram_views(),
                resource=Resource.create({"service.name": service_name()}),
            )
            metrics.set_meter_provider(provider)
            configure_metrics(provider)
        return False

    import logfire  # noqa: PLC0415 - configured only when telemetry is on

    logfire.configure(
        service_name=service_name(),
        send_to_logfire="if-token-present",
        console=False,
        inspect_arguments=False,
        additional_span_processors=list(additional_span_processors) or None,
        metrics=logfire.MetricsOptions(
            additional_readers=readers, views=[*logfire.MetricsOptions.DEFAULT_VIEWS, *histogram_views()]
        ),
    )
    configure_metrics()
    logger.add(**logfire.loguru_handler(), level=settings.log_level)
    logfire.instrument_httpx(capture_headers=False)
    return True


def instrument_app(app: Any) -> Any:
    """Wrap the ASGI ``app`` with the OpenTelemetry ASGI middleware through Logfire: one server span per request,
    none for :data:`EXCLUDED_URLS`, no header or body captured.
    """
    import logfire  # noqa: PLC0415 - configured only when telemetry is on

    return logfire.instrument_asgi(app, capture_headers=False, excluded_urls=EXCLUDED_URLS)
