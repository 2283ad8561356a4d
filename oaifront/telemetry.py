"""Traces, metrics, logs and profiles of the front (reference: Telemetry, Configuration, Metrics).

:func:`configure_telemetry` runs before the application is built (oaifront.asgi):

- With ``HORDE_OAI_TELEMETRY_ENABLED=true`` and ``OTEL_SDK_DISABLED`` not ``true``, it configures the providers:
  Logfire when the operator gives it a token (``LOGFIRE_TOKEN``), with the standard ``LOGFIRE_*`` / ``OTEL_*``
  variables and no console (:func:`configure_logfire`); otherwise the OpenTelemetry SDK's own tracer, meter and
  logger providers with the same ``OTEL_*`` variables, each signal batched to OTLP/HTTP when an OTLP endpoint is set
  and kept in the process otherwise (:func:`configure_opentelemetry`: without Logfire's span wrappers, scrubbing and
  HTTP-span processors, which cost as much CPU as the spans themselves; no exemplars unless
  ``OTEL_METRICS_EXEMPLAR_FILTER`` asks, no ``http.client.*`` metrics beside ``horde.oai.horde.call.duration``).
  Either way: the service name ``horde-oai`` unless ``OTEL_SERVICE_NAME`` sets another, and exactly the histogram views
  of :func:`chat.metrics.histogram_views` (Logfire's default views are left out: they would add an exponential histogram
  beside each explicit-bucket one, which Prometheus cannot read); it bridges Loguru records to OpenTelemetry logs
  (:class:`LoguruToOpenTelemetry`: the bound values become the log record's attributes) and instruments httpx, so
  each call to the Horde is a client span whose ``traceparent`` header the Horde continues (its URL shows ``{id}``
  for the native request id: :func:`without_request_ids` through Logfire, :class:`HttpxClientSpans` on the SDK's
  providers). It returns True, and
  :func:`instrument_app` then adds the server spans (the OpenTelemetry ASGI middleware behind
  :class:`PrivateScopeTracing`), named by route (``POST /v1/chat/completions``, ``GET /v1/models``) with
  ``http.route``, none for ``/healthz``, ``/readyz`` or ``/metrics``, no header, body, query string, client address
  or user agent captured; a streamed request's span lasts until its stream ends.
- With ``HORDE_OAI_METRICS_ENDPOINT=true`` the instruments are also read by a Prometheus reader that
  ``GET /metrics`` serves (oaifront.urls), with or without the rest of telemetry.
- With ``PYROSCOPE_ENABLED=true`` it starts Pyroscope (``pyroscope-io``) with the ``PYROSCOPE_*`` variables and the
  service name as application name, also when ``OTEL_SDK_DISABLED=true``.

Off (the default), nothing is configured: the OpenTelemetry API's no-op providers record nothing.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

from django.core.exceptions import ImproperlyConfigured
from django.urls import Resolver404, resolve
from loguru import logger
from opentelemetry import metrics, trace
from opentelemetry._logs import Logger, LoggerProvider, SeverityNumber, get_logger_provider
from opentelemetry.propagate import get_global_textmap
from opentelemetry.semconv.attributes import code_attributes

from chat.metrics import configure_metrics, histogram_views
from chat.settings import FrontSettings

if TYPE_CHECKING:
    from loguru import Message

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_SERVICE_NAME: Final[str] = "horde-oai"
"""The service name unless ``OTEL_SERVICE_NAME`` sets another."""

UNTRACED_PATHS: Final[frozenset[str]] = frozenset({"/healthz", "/readyz", "/metrics"})
"""Paths without server spans: the listener and the container poll the probes every few seconds, and Prometheus
scrapes ``/metrics``."""

LOG_SCOPE: Final[str] = "horde.oai"
"""The instrumentation scope of the log records bridged from Loguru."""

SEVERITY_BY_LEVEL: Final[Mapping[str, SeverityNumber]] = MappingProxyType(
    {
        "TRACE": SeverityNumber.TRACE,
        "DEBUG": SeverityNumber.DEBUG,
        "INFO": SeverityNumber.INFO,
        "SUCCESS": SeverityNumber.INFO2,
        "WARNING": SeverityNumber.WARN,
        "ERROR": SeverityNumber.ERROR,
        "CRITICAL": SeverityNumber.FATAL,
    }
)
"""The OpenTelemetry severity of each of Loguru's levels (a custom level counts as INFO)."""

_ORIGINAL_SCOPE: Final[str] = "horde.oai.original_scope"
"""The key under which :class:`PrivateScopeTracing` hands the request's own scope past the instrumentation."""

_ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")

NATIVE_REQUEST_ID: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
"""A native request id (a UUID) in a Horde URL (``/v2/generate/chat/status/<id>``)."""

REQUEST_ID_PLACEHOLDER: Final[str] = "{id}"
"""What a Horde call's span shows in place of the native request id."""

URL_ATTRIBUTES: Final[tuple[str, ...]] = ("http.url", "url.full", "http.target", "url.path")
"""The client span attributes that hold the Horde call's URL or path (old and stable HTTP conventions)."""

_prometheus_reader: Any = None
_through_logfire = False
"""Whether :func:`configure_telemetry` configured Logfire (a token was given) rather than the SDK's own providers."""


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
        "sample_rate": pyroscope_sample_rate(),
    }


def pyroscope_sample_rate() -> int:
    """``PYROSCOPE_SAMPLE_RATE``: samples a second, a whole number of 1 or more (default 100).

    Raises:
        ImproperlyConfigured: One line naming the variable, its value and what is expected (oaifront.startup prints it
            alone and exits 1), such as ``Invalid front configuration: PYROSCOPE_SAMPLE_RATE='ten': ...``.
    """
    raw = os.environ.get("PYROSCOPE_SAMPLE_RATE", "")
    value = raw.strip() or "100"
    if not value.isdecimal() or int(value) < 1:
        message = (
            f"Invalid front configuration: PYROSCOPE_SAMPLE_RATE={raw!r}: expected a whole number of samples a "
            "second, 1 or more (default 100)"
        )
        raise ImproperlyConfigured(message)
    return int(value)


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

    global _through_logfire  # noqa: PLW0603 - how the process was configured decides how instrument_app wraps
    _through_logfire = logfire_token_configured()
    if _through_logfire:
        configure_logfire(additional_span_processors, readers)
    else:
        configure_opentelemetry(additional_span_processors, readers)
    configure_metrics()
    logger.add(LoguruToOpenTelemetry(get_logger_provider()), level=settings.log_level, format="{message}")
    return True


def logfire_token_configured() -> bool:
    """Whether the operator gave Logfire a token (``LOGFIRE_TOKEN``), so that telemetry goes to Logfire."""
    return bool(os.environ.get("LOGFIRE_TOKEN", "").strip())


def configure_logfire(additional_span_processors: Sequence[Any], readers: Sequence[Any]) -> None:
    """Logfire with the ``LOGFIRE_*`` / ``OTEL_*`` variables, no console, and the front's views; httpx instrumented
    through it.
    """
    import logfire  # noqa: PLC0415 - configured only when telemetry goes to Logfire

    logfire.configure(
        service_name=service_name(),
        send_to_logfire="if-token-present",
        console=False,
        inspect_arguments=False,
        additional_span_processors=list(additional_span_processors) or None,
        metrics=logfire.MetricsOptions(additional_readers=list(readers), views=histogram_views()),
    )
    logfire.instrument_httpx(
        capture_headers=False, request_hook=without_request_ids, async_request_hook=async_without_request_ids
    )


def otlp_endpoint_configured(signal_variable: str) -> bool:
    """Whether ``OTEL_EXPORTER_OTLP_ENDPOINT`` or the signal's own endpoint variable names a receiver."""
    from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_ENDPOINT  # noqa: PLC0415 - telemetry on

    return any(os.environ.get(name, "").strip() for name in (OTEL_EXPORTER_OTLP_ENDPOINT, signal_variable))


def configure_opentelemetry(additional_span_processors: Sequence[Any], readers: Sequence[Any]) -> None:
    """The OpenTelemetry SDK's own providers, without Logfire's wrappers and processors (no Logfire token).

    The resource is the service name with ``OTEL_RESOURCE_ATTRIBUTES`` (``Resource.create``), the sampler the SDK's
    ``OTEL_TRACES_SAMPLER``; each signal is exported over OTLP/HTTP in batches (``OTEL_BSP_*``, ``OTEL_BLRP_*``,
    ``OTEL_METRIC_EXPORT_INTERVAL``) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or its own endpoint variable is set, and
    recorded for nothing else otherwise. httpx calls are client spans of :func:`instrument_httpx` (the httpx
    instrumentation's spans, with its per-call URL re-parsing and header normalisation left out).
    """
    # The SDK and its exporters are imported only when telemetry is on.
    from opentelemetry._logs import set_logger_provider  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk._logs import LoggerProvider as SdkLoggerProvider  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk.environment_variables import (  # noqa: PLC0415 - the SDK only with telemetry on
        OTEL_EXPORTER_OTLP_LOGS_ENDPOINT,
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        OTEL_METRICS_EXEMPLAR_FILTER,
    )
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - the SDK only with telemetry on
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415 - the SDK only with telemetry on

    resource = Resource.create({"service.name": service_name()})
    tracer_provider = TracerProvider(resource=resource)
    for processor in additional_span_processors:
        tracer_provider.add_span_processor(processor)
    if otlp_endpoint_configured(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415 - the SDK only with telemetry on

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracer_provider)

    metric_readers = list(readers)
    if otlp_endpoint_configured(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # noqa: PLC0415 - the SDK only with telemetry on

        metric_readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    # Exemplars (a sampled span's ids kept per histogram bucket) only when OTEL_METRICS_EXEMPLAR_FILTER asks for them:
    # the SDK's default (trace_based) samples one on every measurement inside a span.
    exemplar_filter = None if os.environ.get(OTEL_METRICS_EXEMPLAR_FILTER) else AlwaysOffExemplarFilter()
    meter_provider = MeterProvider(
        metric_readers=metric_readers, views=histogram_views(), resource=resource, exemplar_filter=exemplar_filter
    )
    metrics.set_meter_provider(meter_provider)

    logger_provider = SdkLoggerProvider(resource=resource)
    if otlp_endpoint_configured(OTEL_EXPORTER_OTLP_LOGS_ENDPOINT):
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # noqa: PLC0415 - the SDK only with telemetry on

        logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    set_logger_provider(logger_provider)

    instrument_httpx(tracer_provider)


class HttpxClientSpans:
    """A client span per httpx call, with the ``traceparent`` header of its context on the request (reference:
    Configuration): the spans of ``opentelemetry-instrumentation-httpx`` (its name, kind, tracer scope, semantic
    conventions per ``OTEL_SEMCONV_STABILITY_OPT_IN``, request and response attributes, status and exception), made
    from request attributes cached per method and URL with :data:`REQUEST_ID_PLACEHOLDER` in place of the native
    request id (at most :data:`ATTRIBUTE_CACHE_SIZE` URLs).

    Why not the instrumentation's own wrapper: per call it parses the request's URL twice more and normalises the
    request and response headers it never captures (no header is: reference, Configuration), about two thirds of the
    CPU telemetry added per request (``bench.telemetry_profile``); it has no option to skip either. Nothing is
    recorded when HTTP instrumentation is suppressed in the context, and no ``http.client.*`` metric is recorded:
    ``horde.oai.horde.call.duration`` times every Horde call already.
    """

    def __init__(self, tracer_provider: Any) -> None:
        import httpx  # noqa: PLC0415 - telemetry on
        from opentelemetry.instrumentation import httpx as instrumentation  # noqa: PLC0415 - telemetry on
        from opentelemetry.instrumentation._semconv import (  # noqa: PLC0415 - telemetry on
            _get_schema_url,
            _OpenTelemetrySemanticConventionStability,
            _OpenTelemetryStabilitySignalType,
        )
        from opentelemetry.instrumentation.httpx import version  # noqa: PLC0415 - telemetry on
        from opentelemetry.propagate import inject  # noqa: PLC0415 - telemetry on
        from opentelemetry.trace import SpanKind, get_tracer  # noqa: PLC0415 - telemetry on

        _OpenTelemetrySemanticConventionStability._initialize()  # type: ignore[no-untyped-call]
        self._mode = _OpenTelemetrySemanticConventionStability._get_opentelemetry_stability_opt_in_mode(
            _OpenTelemetryStabilitySignalType.HTTP
        )
        self._tracer = get_tracer(
            instrumentation.__name__,
            instrumenting_library_version=version.__version__,
            tracer_provider=tracer_provider,
            schema_url=_get_schema_url(self._mode),
        )
        self._inject = inject
        self._client_kind = SpanKind.CLIENT
        self._instrumentation: Any = instrumentation  # its helpers are private, typed for its own module object
        self._httpx: Any = httpx
        self._attributes: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = {}

    def request_details(self, request: Any) -> tuple[str, Mapping[str, Any]]:
        """The span name and attributes of ``request`` (cached per method and URL without request ids)."""
        method = request.method
        full = str(request.url)
        url = NATIVE_REQUEST_ID.sub(REQUEST_ID_PLACEHOLDER, full)
        found = self._attributes.get((method, url))
        if found is None:
            attributes: dict[str, Any] = {}
            self._instrumentation._apply_request_client_attributes_to_span(
                attributes, {}, full, method, self._mode, self._httpx
            )
            for key in URL_ATTRIBUTES:
                value = attributes.get(key)
                if isinstance(value, str):
                    attributes[key] = NATIVE_REQUEST_ID.sub(REQUEST_ID_PLACEHOLDER, value)
            found = (self._instrumentation._get_default_span_name(method), MappingProxyType(attributes))
            if len(self._attributes) >= ATTRIBUTE_CACHE_SIZE:
                self._attributes.clear()
            self._attributes[(method, url)] = found
        return found

    def start(self, request: Any) -> Any:
        """The current client span of ``request`` (a context manager), its ``traceparent`` set on the request."""
        name, attributes = self.request_details(request)
        return self._tracer.start_as_current_span(name, kind=self._client_kind, attributes=attributes)

    def inject(self, request: Any) -> None:
        """Set the current context's propagation headers (``traceparent``) on ``request``."""
        self._inject(request.headers)

    def finish(self, span: Any, response: Any) -> None:
        """The response's attributes and status on ``span``."""
        if span.is_recording():
            self._instrumentation._apply_response_client_attributes_to_span(
                span, response.status_code, response.http_version, self._mode, self._httpx
            )

    def failed(self, span: Any, exception: BaseException) -> None:
        """``error.type`` of a call that raised, under the new conventions (the span records the exception)."""
        from opentelemetry.instrumentation._semconv import _report_new  # noqa: PLC0415 - telemetry on

        if span.is_recording() and _report_new(self._mode):
            span.set_attribute("error.type", type(exception).__qualname__)


ATTRIBUTE_CACHE_SIZE: Final[int] = 256
"""How many (method, URL) request attribute sets :class:`HttpxClientSpans` keeps (the front's Horde calls need about
ten; a full cache is emptied)."""

_httpx_spans: HttpxClientSpans | None = None
_httpx_originals: dict[str, Any] = {}


def instrument_httpx(tracer_provider: Any) -> None:
    """Make every httpx transport call (``HTTPTransport`` and ``AsyncHTTPTransport``, where the OpenTelemetry httpx
    instrumentation hooks in) a client span of :class:`HttpxClientSpans` from ``tracer_provider``; called again, it
    only replaces the provider.
    """
    import httpx  # noqa: PLC0415 - telemetry on
    from opentelemetry.instrumentation.utils import is_http_instrumentation_enabled  # noqa: PLC0415 - telemetry on

    global _httpx_spans  # noqa: PLW0603 - one instrumentation per process, as the httpx instrumentor keeps
    _httpx_spans = HttpxClientSpans(tracer_provider)
    if _httpx_originals:
        return
    sync_call = _httpx_originals["sync"] = httpx.HTTPTransport.handle_request
    async_call = _httpx_originals["async"] = httpx.AsyncHTTPTransport.handle_async_request

    def handle_request(transport: Any, request: Any) -> Any:
        spans = _httpx_spans
        if spans is None or not is_http_instrumentation_enabled():
            return sync_call(transport, request)
        with spans.start(request) as span:
            spans.inject(request)
            try:
                response = sync_call(transport, request)
            except Exception as exc:
                spans.failed(span, exc)
                raise
            spans.finish(span, response)
            return response

    async def handle_async_request(transport: Any, request: Any) -> Any:
        spans = _httpx_spans
        if spans is None or not is_http_instrumentation_enabled():
            return await async_call(transport, request)
        with spans.start(request) as span:
            spans.inject(request)
            try:
                response = await async_call(transport, request)
            except Exception as exc:
                spans.failed(span, exc)
                raise
            spans.finish(span, response)
            return response

    httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign,assignment]
    httpx.AsyncHTTPTransport.handle_async_request = handle_async_request  # type: ignore[method-assign,assignment]


def without_request_ids(span: Any, request: Any) -> None:
    """Httpx request hook: the client span's URL attributes with :data:`REQUEST_ID_PLACEHOLDER` in place of the
    native request id, so no span attribute holds a request id (reference: Metrics).
    """
    attributes = getattr(span, "attributes", None) or {}
    for key in URL_ATTRIBUTES:
        value = attributes.get(key)
        if isinstance(value, str) and NATIVE_REQUEST_ID.search(value):
            span.set_attribute(key, NATIVE_REQUEST_ID.sub(REQUEST_ID_PLACEHOLDER, value))


async def async_without_request_ids(span: Any, request: Any) -> None:
    """:func:`without_request_ids` for the async client."""
    without_request_ids(span, request)


class LoguruToOpenTelemetry:
    """A Loguru sink that writes each record as an OpenTelemetry log record (reference: Configuration).

    The body is the record's message, the severity its level, and the attributes the values bound to its ``extra``
    (the finished-request and no-visible-text lines bind theirs; a ``None`` value is left out, as OpenTelemetry has
    no null) with the code location. The log record joins the active span's trace, if any. Nothing becomes a span.
    """

    def __init__(self, provider: LoggerProvider) -> None:
        self._provider = provider
        self._loggers: dict[str, Logger] = {}

    def _logger(self, name: str) -> Logger:
        found = self._loggers.get(name)
        if found is None:
            found = self._loggers[name] = self._provider.get_logger(name or LOG_SCOPE)
        return found

    def __call__(self, message: Message) -> None:
        """Emit ``message``'s record."""
        record = message.record
        attributes: dict[str, Any] = {
            key: value for key, value in record["extra"].items() if isinstance(value, str | bool | int | float)
        }
        attributes[code_attributes.CODE_FILE_PATH] = record["file"].path
        attributes[code_attributes.CODE_FUNCTION_NAME] = record["function"]
        attributes[code_attributes.CODE_LINE_NUMBER] = record["line"]
        exception = record["exception"]
        self._logger(record["name"] or LOG_SCOPE).emit(
            timestamp=int(record["time"].timestamp() * 1e9),
            severity_number=SEVERITY_BY_LEVEL.get(record["level"].name, SeverityNumber.INFO),
            severity_text=record["level"].name,
            body=record["message"],
            attributes=attributes,
            exception=exception.value if exception is not None else None,
        )


def route_of(scope: Mapping[str, Any]) -> str | None:
    """The URL pattern that serves the request's path (``/v1/chat/completions``, ``/v1/models/{model}``), or None."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    try:
        match = resolve(path.removeprefix(root) or "/")
    except Resolver404:
        return None
    return "/" + _ROUTE_PARAMETER.sub(r"{\1}", match.route)


def span_details(scope: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The server span's name and extra attributes: ``POST /v1/chat/completions`` with ``http.route``, or the method
    alone for a path no route serves (so the name stays bounded). The route lookup is cached per method and path
    (:data:`SPAN_DETAILS_CACHE_SIZE` of the latest), so a request pays for no URL resolution.
    """
    name, route = _span_details(
        str(scope.get("method", "HTTP")), str(scope.get("path", "")), str(scope.get("root_path", ""))
    )
    return name, ({} if route is None else {"http.route": route})


SPAN_DETAILS_CACHE_SIZE: Final[int] = 256
"""How many (method, path) span names :func:`span_details` keeps: the front's routes take a handful; a path with a
model name or response id in it takes one each, the least recently used dropped."""


@functools.lru_cache(maxsize=SPAN_DETAILS_CACHE_SIZE)
def _span_details(method: str, path: str, root_path: str) -> tuple[str, str | None]:
    route = route_of({"path": path, "root_path": root_path})
    return (method, None) if route is None else (f"{method} {route}", route)


UNMATCHED_PATH: Final[str] = "/{unmatched}"
"""The path a server span shows for a request no route serves (the path itself is the client's text)."""


class PrivateScopeTracing:
    """The OpenTelemetry ASGI middleware, shown a scope without the client's address, query string or headers (but
    the trace context's), and with the route's template as its path (``/v1/responses/{response_id}``, never the
    stored response's id, which is the only key to it for the anonymous key; :data:`UNMATCHED_PATH` when no route
    serves it), so neither the server spans (``url.full``, ``http.target``, ``url.path``) nor the ``http.server.*``
    metrics carry a client address, user agent, ``Host`` value, other header or path parameter: their labels stay
    bounded. The application behind it gets the request's
    own scope back. :data:`UNTRACED_PATHS` skip the instrumentation.
    """

    def __init__(self, app: ASGIApp, instrument: Callable[[ASGIApp], ASGIApp]) -> None:
        self._app = app
        self.__wrapped__ = app
        """The application behind it."""
        self._traced = instrument(self._restore)
        self._kept_headers = frozenset(name.encode() for name in get_global_textmap().fields)

    async def _restore(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope[_ORIGINAL_SCOPE], receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one connection: an HTTP request through the instrumentation unless untraced."""
        if scope["type"] != "http" or scope.get("path") in UNTRACED_PATHS:
            await self._app(scope, receive, send)
            return
        shown = {
            key: value
            for key, value in scope.items()
            if key not in {"client", "headers", "query_string", "state", "raw_path"}
        }
        root_path = str(scope.get("root_path", ""))
        route = _span_details(str(scope.get("method", "HTTP")), str(scope.get("path", "")), root_path)[1]
        shown["path"] = root_path + (route or UNMATCHED_PATH)
        shown["headers"] = [(name, value) for name, value in scope.get("headers", ()) if name in self._kept_headers]
        shown["query_string"] = b""
        shown[_ORIGINAL_SCOPE] = scope
        await self._traced(shown, receive, send)


FLUSH_TIMEOUT_MILLIS = 5000
"""How long :func:`flush_telemetry` waits for each provider's exporters."""


def flush_telemetry() -> None:
    """Export what the tracer, meter and logger providers still hold (``force_flush``), at the lifespan shutdown: the
    spans, metric points and log records of the last requests would otherwise wait for the next batch or interval,
    and a process that ends on a signal runs no exit handler to send them.
    """
    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider(), get_logger_provider()):
        flush = getattr(provider, "force_flush", None)
        if callable(flush):
            flush(FLUSH_TIMEOUT_MILLIS)


def instrument_app(app: Any) -> Any:
    """Wrap the ASGI ``app`` with the OpenTelemetry ASGI middleware through Logfire, behind
    :class:`PrivateScopeTracing`: one server span per request named by its route, none for :data:`UNTRACED_PATHS`,
    no header, body or client address captured.
    """
    if _through_logfire:
        import logfire  # noqa: PLC0415 - configured only when telemetry goes to Logfire

        def instrument(inner: ASGIApp) -> ASGIApp:
            traced: Any = logfire.instrument_asgi(
                cast("Any", inner), capture_headers=False, default_span_details=span_details
            )
            return cast("ASGIApp", traced)

    else:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware  # noqa: PLC0415 - telemetry on

        def instrument(inner: ASGIApp) -> ASGIApp:
            # No internal spans per ``receive`` and ``send`` (Logfire's instrumentation drops them too).
            traced: Any = OpenTelemetryMiddleware(
                cast("Any", inner), default_span_details=span_details, exclude_spans=["receive", "send"]
            )
            return cast("ASGIApp", traced)

    return PrivateScopeTracing(app, instrument)
