"""The front under uvicorn with telemetry on and every span kept in memory.

``python -m tests.integration.telemetry_front --port PORT --spans FILE``. The environment configures the front as
usual (``HORDE_URL``, ``HORDE_OAI_*``, with ``HORDE_OAI_TELEMETRY_ENABLED=true``).
Before the application is built, this script adds an in-memory span exporter to ``configure_telemetry`` and records
the ``traceparent`` header of every HTTP request the front sends on the wire (at the httpx transport, beneath the
instrumentation). When uvicorn shuts down (SIGTERM), the lifespan shutdown writes
``{"spans": [...], "sent": [...]}`` to FILE.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from typing import Any

import httpx
import uvicorn
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sent: list[dict[str, Any]] = []
_handle = httpx.AsyncHTTPTransport.handle_async_request


async def recording_handle(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
    sent.append({"method": request.method, "path": request.url.path, "traceparent": request.headers.get("traceparent")})
    return await _handle(self, request)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--spans", required=True)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    httpx.AsyncHTTPTransport.handle_async_request = recording_handle  # type: ignore[method-assign]
    exporter = InMemorySpanExporter()

    import oaifront.telemetry

    oaifront.telemetry.configure_telemetry = functools.partial(  # type: ignore[assignment]
        oaifront.telemetry.configure_telemetry, additional_span_processors=[SimpleSpanProcessor(exporter)]
    )
    from oaifront.asgi import application
    from oaifront.serve import KEEP_ALIVE_SECONDS, LISTEN_BACKLOG

    def dump() -> None:
        spans = [
            {
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": f"{span.context.trace_id:032x}",
                "span_id": f"{span.context.span_id:016x}",
                "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
                "attributes": dict(span.attributes or {}),
                "start": span.start_time,
                "end": span.end_time,
            }
            for span in exporter.get_finished_spans()
        ]
        with open(args.spans, "w") as file:
            json.dump({"spans": spans, "sent": sent}, file, default=str)

    async def dumping(scope: Any, receive: Any, send: Any) -> None:
        async def send_then_dump(message: Any) -> None:
            if message.get("type") == "lifespan.shutdown.complete":
                dump()
            await send(message)

        await application(scope, receive, send_then_dump if scope["type"] == "lifespan" else send)

    # Served as make run serves the front (oaifront.serve).
    uvicorn.run(
        dumping,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        ws="none",
        backlog=LISTEN_BACKLOG,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


if __name__ == "__main__":
    main()
