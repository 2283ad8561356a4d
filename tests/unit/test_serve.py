"""Every way the front is served uses the same uvicorn options (oaifront.serve): uvicorn's documented bounds, the
concurrency limit sized from the front's cap (issue 34)."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chat.asgi import serve_lifespan
from chat.serving import runtime
from chat.settings import FrontSettings
from oaifront.serve import UVICORN_OPTIONS, uvicorn_options
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_the_options_bound_what_uvicorn_can() -> None:
    assert uvicorn_options(FrontSettings(max_in_flight=300)) == (
        "--ws",
        "none",
        "--backlog",
        "4096",
        "--timeout-keep-alive",
        "5",
        "--limit-concurrency",
        "600",
    )
    assert uvicorn_options(FrontSettings(max_in_flight=300))[: len(UVICORN_OPTIONS)] == UVICORN_OPTIONS


def test_python_m_oaifront_serve_prints_the_options_for_the_environment() -> None:
    env = {**os.environ, "HORDE_OAI_MAX_IN_FLIGHT": "40"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    printed = subprocess.run(
        [sys.executable, "-m", "oaifront.serve"], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert printed.stdout.split("\n") == [*UVICORN_OPTIONS, "--limit-concurrency", "80", ""]


@pytest.mark.parametrize(
    ("redis_url", "first_line"),
    [
        (None, ""),
        ("redis://127.0.0.1:{port}/0", "Error 111 connecting to 127.0.0.1:{port}. Connection refused."),
    ],
    ids=["no-redis", "redis-not-answering"],
)
def test_the_preflight_prints_the_redis_line_then_the_options(redis_url: str | None, first_line: str) -> None:
    """``python -m oaifront.preflight`` (bin/run's) prints why Redis does not answer (an empty line when it does or
    none is set), then :func:`uvicorn_options` for the same settings, one per line."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in {"HORDE_URL", "HORDE_OAI_REDIS_URL"}}
    env |= {"HORDE_OAI_MAX_IN_FLIGHT": "40"}
    if redis_url is not None:
        env["HORDE_OAI_REDIS_URL"] = redis_url.format(port=port)
    printed = subprocess.run(
        [sys.executable, "-m", "oaifront.preflight"], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    options = [*UVICORN_OPTIONS, "--limit-concurrency", "80"]
    assert printed.stdout.split("\n") == [first_line.format(port=port), *options, ""]


def test_a_setting_the_front_cannot_use_ends_it_in_one_line() -> None:
    env = {**os.environ, "HORDE_OAI_MAX_IN_FLIGHT": "zero"}
    printed = subprocess.run(
        [sys.executable, "-m", "oaifront.serve"], check=False, env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert printed.returncode == 1
    assert printed.stdout == ""
    assert printed.stderr.splitlines() == [
        "Invalid front configuration: HORDE_OAI_MAX_IN_FLIGHT='zero': Input should be a valid integer, unable to parse"
        " string as an integer"
    ]


LAUNCHES: dict[str, tuple[str, str]] = {
    "bin/run": (
        'preflight=$("$PY" -m oaifront.preflight) || exit 1 { IFS= read -r redis_trouble; mapfile -t serve_options; } '
        '<<<"$preflight"',
        '--no-access-log "${serve_options[@]}" --timeout-graceful-shutdown',
    ),
    "Dockerfile": (
        "options=$(python -m oaifront.serve) && exec uvicorn oaifront.asgi:application",
        "--no-access-log $options --timeout-graceful-shutdown 40",
    ),
}


@pytest.mark.parametrize("launcher", LAUNCHES)
def test_make_run_and_the_container_serve_with_the_options(launcher: str) -> None:
    """Each launcher passes the options to uvicorn: the container from ``python -m oaifront.serve``, bin/run from the
    lines after the first of ``python -m oaifront.preflight``, which reads the settings once for both
    (``test_the_preflight_prints_the_redis_line_then_the_options``)."""
    text = " ".join((ROOT / launcher).read_text().replace("\\\n", " ").split())
    for snippet in LAUNCHES[launcher]:
        assert snippet in text, f"{launcher}: {snippet}"


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
