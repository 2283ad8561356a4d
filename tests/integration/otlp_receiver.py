"""An OTLP/HTTP receiver of a test's own on loopback: it decodes every export (traces, metrics, logs) with
opentelemetry-proto, and :func:`running_receiver` gives the front's environment that exports to it.

Shared by tests/integration/test_otlp_export.py and tests/integration/test_hostile_live.py.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

REQUESTS: dict[str, type[Message]] = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
    "/v1/logs": ExportLogsServiceRequest,
}
"""The export message of each signal path."""


@dataclass
class Received:
    """Every export the receiver decoded, by signal path."""

    exports: dict[str, list[Any]] = field(default_factory=lambda: {path: [] for path in REQUESTS})
    lock: threading.Lock = field(default_factory=threading.Lock)


def receiver(received: Received) -> ThreadingHTTPServer:
    """The receiver on 127.0.0.1 at a port the OS picks, not yet serving; each decoded export goes into
    ``received``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            kind = REQUESTS.get(self.path)
            if kind is None:
                self.send_response(404)
                self.end_headers()
                return
            message = kind()
            message.ParseFromString(body)
            with received.lock:
                received.exports[self.path].append(message)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@dataclass
class RunningReceiver:
    """A serving receiver: what it decoded, and the front's environment that exports to it."""

    received: Received
    port: int

    @property
    def env(self) -> dict[str, str]:
        """Telemetry on, exported over OTLP/HTTP protobuf to this receiver every 500 ms (metrics) and 200 ms (spans,
        logs), nothing sent to Logfire."""
        return {
            "HORDE_OAI_TELEMETRY_ENABLED": "true",
            "LOGFIRE_SEND_TO_LOGFIRE": "false",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_BLRP_SCHEDULE_DELAY": "200",
        }


@contextmanager
def running_receiver() -> Iterator[RunningReceiver]:
    """A :func:`receiver` serving in a daemon thread until the block ends."""
    received = Received()
    server = receiver(received)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield RunningReceiver(received, server.server_address[1])
    finally:
        server.shutdown()
