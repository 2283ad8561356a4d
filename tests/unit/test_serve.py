"""Every way the front is served uses the same uvicorn options (oaifront.serve): the door, the accept loop, the
listen backlog (issue 23)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from chat.asgi import serve_lifespan
from chat.serving import runtime
from oaifront.serve import UVICORN_OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def option_pairs() -> list[str]:
    return [f"{name} {value}" for name, value in zip(UVICORN_OPTIONS[::2], UVICORN_OPTIONS[1::2], strict=True)]


@pytest.mark.parametrize("launcher", ["bin/run", "Dockerfile"])
def test_make_run_and_the_container_serve_with_the_options(launcher: str) -> None:
    text = " ".join((ROOT / launcher).read_text().replace("\\\n", " ").split())
    for pair in option_pairs():
        assert pair in text, f"{launcher} does not pass {pair}"


@pytest.mark.asyncio
async def test_lifespan_startup_makes_the_runtime_and_freezes_what_start_up_made() -> None:
    """The runtime (its Horde clients: SSL contexts, pools) is made at startup, not by the first request; what is
    alive then is kept out of the collector's passes (``gc.freeze``)."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[str] = []

    async def send(message: Any) -> None:
        sent.append(message["type"])

    await messages.put({"type": "lifespan.startup"})
    await messages.put({"type": "lifespan.shutdown"})
    loop = asyncio.get_running_loop()
    try:
        await serve_lifespan(messages.get, send)
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert loop not in runtime._runtimes  # closed at shutdown


@pytest.mark.asyncio
async def test_the_runtime_exists_once_startup_is_complete() -> None:
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started = asyncio.Event()

    async def send(message: Any) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    await messages.put({"type": "lifespan.startup"})
    task = asyncio.ensure_future(serve_lifespan(messages.get, send))
    try:
        await started.wait()
        assert asyncio.get_running_loop() in runtime._runtimes
    finally:
        await messages.put({"type": "lifespan.shutdown"})
        await task
        gc.unfreeze()


@pytest.mark.asyncio
async def test_shutdown_calls_run_once_the_runtime_is_closed() -> None:
    """The project's telemetry flush (oaifront.telemetry.flush_telemetry) runs at the lifespan shutdown, after the
    runtime closed: a front that ends on SIGTERM runs no exit handler, and the last requests' spans and metric
    points were lost when the next export interval had not come (tests/integration/test_otlp_export.py)."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    order: list[str] = []
    loop = asyncio.get_running_loop()

    async def send(message: Any) -> None:
        order.append(message["type"])

    def flush() -> None:
        order.append("runtime closed" if loop not in runtime._runtimes else "runtime open")

    await messages.put({"type": "lifespan.startup"})
    await messages.put({"type": "lifespan.shutdown"})
    try:
        await serve_lifespan(messages.get, send, [flush])
    finally:
        gc.unfreeze()
    assert order == ["lifespan.startup.complete", "runtime closed", "lifespan.shutdown.complete"]


def test_flush_telemetry_flushes_every_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    import oaifront.telemetry

    flushed: list[tuple[str, int]] = []

    class Provider:
        def __init__(self, name: str) -> None:
            self.name = name

        def force_flush(self, timeout_millis: int) -> bool:
            flushed.append((self.name, timeout_millis))
            return True

    monkeypatch.setattr(oaifront.telemetry.trace, "get_tracer_provider", lambda: Provider("traces"))
    monkeypatch.setattr(oaifront.telemetry.metrics, "get_meter_provider", lambda: Provider("metrics"))
    monkeypatch.setattr(oaifront.telemetry, "get_logger_provider", lambda: Provider("logs"))
    oaifront.telemetry.flush_telemetry()
    assert flushed == [("traces", 5000), ("metrics", 5000), ("logs", 5000)]
