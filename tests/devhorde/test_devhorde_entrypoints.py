"""Entry points: ``devhorde.asgi:application`` from the environment, the lifespan that cancels running jobs, the
``python -m devhorde`` command line, and the bundled scenarios."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys

import httpx
import pytest
from devhorde_helpers import API, chat, scenario, status, submit_ok, worker

from devhorde import __main__ as devhorde_main
from devhorde.app import create_app
from devhorde.chat_queue import RequestState
from devhorde.launch import wait_http
from devhorde.scenario import SCENARIOS_DIR, load_scenario
from tests.conftest import free_port
from tests.loopback import tls_contexts_counted


@pytest.mark.parametrize("path", sorted(SCENARIOS_DIR.glob("*.json")), ids=lambda path: path.stem)
def test_bundled_scenarios_load(path) -> None:
    loaded = load_scenario(path)
    assert loaded.workers


def test_default_scenario_has_the_demo_models() -> None:
    default = load_scenario()
    features = {worker.model: set(worker.features) for worker in default.workers}
    assert any("reasoning_effort" in declared for declared in features.values())
    assert any({"tools", "tool_choice_enforced"} <= declared for declared in features.values())
    assert any("vision" in declared for declared in features.values())
    for spec in default.workers:
        assert "prompt_overflow_refused" in spec.features
        assert 0.3 <= spec.post_interval_seconds <= 0.6


def test_asgi_module_reads_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("DEVHORDE_SCENARIO", "flaky")
    monkeypatch.setenv("DEVHORDE_STREAM_REDIS_DB", "13")
    monkeypatch.delenv("DEVHORDE_REDIS_URL", raising=False)
    sys.modules.pop("devhorde.asgi", None)
    module = importlib.import_module("devhorde.asgi")
    horde = module.application.state.horde
    assert horde.scenario.name == "flaky"
    assert horde.bus.enabled is False and horde.bus.stream_db == 13
    sys.modules.pop("devhorde.asgi", None)


def test_command_line_help(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        devhorde_main.main(["--help"])
    assert exit_info.value.code == 0
    assert "--stream-redis-db" in capsys.readouterr().out


@pytest.mark.asyncio
async def test_lifespan_cancels_running_jobs_on_shutdown() -> None:
    app = create_app(scenario(worker("w1", time_to_first_token_seconds=30.0)))
    horde = app.state.horde
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://devhorde") as client,
    ):
        request_id = await submit_ok(client, chat())
        assert (await status(client, request_id))["processing"] == 1
        task = horde.requests[request_id].task
    await asyncio.sleep(0)
    assert task is not None and task.done()
    assert horde.requests[request_id].state is RequestState.PROCESSING  # shutdown is not a cancel


@pytest.mark.asyncio
async def test_default_scenario_serves_a_readable_reply_at_reading_pace() -> None:
    app = create_app()
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://devhorde") as client,
    ):
        response = await client.get(f"{API}/status/models", params={"type": "text"})
        assert len([entry for entry in response.json() if "chat" in entry]) >= 3
        request_id = await submit_ok(client, chat("Tell me about volcanoes", models=["devhorde/tiny-1b"]))
        await asyncio.sleep(1.0)
        body = await status(client, request_id)
        assert body["processing"] == 1 and not body["done"]


def test_wait_http_asks_a_starting_server_through_one_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """``devhorde.launch.wait_http`` (every test's start-up wait) asks every 0.1 s until the server answers, through
    one client and so one TLS context: ``httpx.get`` would make one per probe, about 25 ms of CPU each."""
    made = tls_contexts_counted(monkeypatch)
    port = free_port()
    server = "import http.server, time; time.sleep(1); "
    server += f"http.server.HTTPServer(('127.0.0.1', {port}), http.server.BaseHTTPRequestHandler).serve_forever()"
    process = subprocess.Popen([sys.executable, "-c", server])
    try:
        wait_http(f"http://127.0.0.1:{port}/", process, timeout=60)
    finally:
        process.kill()
        process.wait(10)
    assert len(made) == 1
