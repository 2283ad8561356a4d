"""Shared fixtures: real processes on loopback for integration tests.

``live_stack`` starts, once per session (once per pytest-xdist worker), the development Horde and the front under
uvicorn as separate processes, both on free 127.0.0.1 ports and both using the Redis on 127.0.0.1:6379 (``make test``
starts one if none answers) on the worker's own databases (:func:`redis_databases`).
Tests change the devhorde's scenario through its control routes and call the front with the official ``openai`` SDK.
No test reaches any address but loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from chat.horde.worker_limits import UPTIMES_CACHE_KEY, WORKERS_CACHE_KEY
from devhorde.launch import START_UP_TIMEOUT_SECONDS, wait_http
from oaifront.serve import UVICORN_OPTIONS
from tests.loopback import CONTROL_CLIENT, free_port

ROOT = Path(__file__).resolve().parent.parent

UNREACHABLE_HORDE_URL = "http://127.0.0.1:9/api"
"""A closed loopback port: the ``HORDE_URL`` of the in-process tests (Django's test client), so that nothing they do,
such as ``/openapi.json`` looking up a served model for its example, can reach the public Horde, the default."""
SERIAL_REDIS_DATABASES = (0, 11)
"""The (cache, progress-stream) databases of a run without pytest-xdist workers."""
WORKER_REDIS_DATABASES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 15)
"""The databases pytest-xdist workers take two by two (``gw0`` the first pair, ``gw1`` the second...): every database
of a default 16-database Redis except the serial run's 0 and 11 and the ones the in-process Redis tests read (12,
``tests/unit/test_delta_stream.py``; 13, ``tests/devhorde``), whose keys are unique to each test. Six workers at
most."""


def redis_databases(worker: str | None) -> tuple[int, int]:
    """The (cache and pacing, progress-stream) databases of the pytest-xdist worker named ``worker`` (``gw3``;
    ``None`` outside xdist): each worker has its own pair, so the fronts and devhordes one worker starts never read
    another worker's pacing, cache or streams. Raises :class:`pytest.UsageError` past the sixth worker."""
    if not worker:
        return SERIAL_REDIS_DATABASES
    index = int(worker.removeprefix("gw"))
    if 2 * index + 1 >= len(WORKER_REDIS_DATABASES):
        raise pytest.UsageError(
            f"pytest-xdist worker {worker}: Redis databases for {len(WORKER_REDIS_DATABASES) // 2} workers only "
            f"(tests/conftest.py WORKER_REDIS_DATABASES); run with -n {len(WORKER_REDIS_DATABASES) // 2} or fewer"
        )
    return WORKER_REDIS_DATABASES[2 * index], WORKER_REDIS_DATABASES[2 * index + 1]


XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's pytest-xdist worker id (``gw0``...), ``None`` in a run without workers."""
CACHE_REDIS_DB, STREAM_REDIS_DB = redis_databases(XDIST_WORKER)
"""This process's databases: the front's cache and pacing (``REDIS_URL``'s) and the progress streams (devhorde
writes, the front reads)."""
REDIS_URL = f"redis://127.0.0.1:6379/{CACHE_REDIS_DB}"
"""The Redis of the fronts and devhordes this process starts, on its own cache database."""

FAST_FRONT_ENV = {
    "HORDE_OAI_SIGNAL_RECHECK_SECONDS": "0.2",
    "HORDE_OAI_SIGNAL_RECHECK_MAX_SECONDS": "1.0",
    "HORDE_OAI_KEEPALIVE_SECONDS": "0.5",
    "HORDE_OAI_FAIL_FAST_GRACE_SECONDS": "1.5",
    "HORDE_OAI_MODELS_CACHE_SECONDS": "0",
    "HORDE_OAI_CANCEL_RETRY_SECONDS": "0.5",
    "HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": "20",
    "HORDE_OAI_STREAM_TIMEOUT_SECONDS": "20",
}
"""Short intervals so the integration suite runs in seconds; each value is still exercised by its own rule."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests marked ``starts_first`` ahead of the rest, each part in its collection order (a stable sort).

    ``make test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder`` (bin/test-suite), which hands the
    files to the workers in this order: a file that keeps one worker for minutes (a queue longer than 120 s, the
    Horde's submit pacing, start-ups and installs) then runs beside the short files instead of alone at the end.
    """
    items.sort(key=lambda item: item.get_closest_marker("starts_first") is None)


@dataclass
class Process:
    """A child process with its log file."""

    popen: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_process(args: list[str], env: dict[str, str], log_path: Path, *, cwd: Path = ROOT) -> Process:
    """Start ``args`` in ``cwd`` with ``env`` added to this environment, output to ``log_path``."""
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    log = log_path.open("wb")
    popen = subprocess.Popen(args, cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    return Process(popen, log_path)


def start_devhorde(tmp: Path, *, redis: bool = True, scenario: Path | str | None = "fast") -> tuple[Process, str]:
    """Start the devhorde; return it and its API root (``HORDE_URL``)."""
    port = free_port()
    args = [sys.executable, "-m", "devhorde", "--host", "127.0.0.1", "--port", str(port)]
    if redis:
        args += ["--redis-url", REDIS_URL, "--stream-redis-db", str(STREAM_REDIS_DB)]
    if scenario is not None:
        args += ["--scenario", str(scenario)]
    process = start_process(args, {}, tmp / f"devhorde-{port}.log")
    api_root = f"http://127.0.0.1:{port}/api"
    wait_started(process, f"{api_root}/v2/status/models?type=text")
    return process, api_root


def wait_started(process: Process, url: str, *, timeout: float = START_UP_TIMEOUT_SECONDS) -> None:
    """Wait until ``process`` answers ``url`` (``devhorde.launch.wait_http``); stop it if it does not, so a failed
    start leaves no process behind."""
    try:
        wait_http(url, process.popen, timeout=timeout)
    except BaseException:
        process.stop()
        raise


def start_front(
    tmp: Path,
    horde_url: str,
    *,
    redis: bool = True,
    env: dict[str, str] | None = None,
    app: str = "oaifront.asgi:application",
    workers: int = 1,
    python: Path | str = sys.executable,
    cwd: Path = ROOT,
) -> tuple[Process, str]:
    """Start the front under uvicorn (``workers`` processes behind one port); return it and its base URL
    (``http://127.0.0.1:<port>``).

    ``app`` is the ASGI application uvicorn serves (another project's, such as ``tests.hostproject.asgi``, with its
    ``DJANGO_SETTINGS_MODULE`` in ``env``); the readiness probe is then the model list instead of ``/healthz``.
    ``python`` and ``cwd`` serve it from another environment (the apps installed in a venv, ``tests/installed.py``)."""
    port = free_port()
    front_env = {**FAST_FRONT_ENV, "HORDE_URL": horde_url, **(env or {})}
    if redis:
        front_env.setdefault("HORDE_OAI_REDIS_URL", REDIS_URL)
        front_env.setdefault("HORDE_OAI_STREAM_REDIS_DB", str(STREAM_REDIS_DB))
    args = [
        str(python),
        "-m",
        "uvicorn",
        app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
    ]
    if app == "oaifront.asgi:application":
        args += UVICORN_OPTIONS  # served as make run and the container serve it (oaifront.serve)
    if workers > 1:
        args += ["--workers", str(workers)]
    process = start_process(args, front_env, tmp / f"front-{port}.log", cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    # Each worker imports Django on its own: a loaded 2-core machine needs longer for several.
    probe = f"{base}/healthz" if app == "oaifront.asgi:application" else f"{base}/v1/models"
    wait_started(process, probe, timeout=START_UP_TIMEOUT_SECONDS * workers)
    return process, base


@dataclass
class LiveStack:
    """A running devhorde and front."""

    devhorde: Process
    horde_url: str
    front: Process
    front_url: str
    processes: list[Process] = field(default_factory=list)
    api: str = "chat"
    """How the front reaches the stack's models: ``chat`` (native chat routes) or ``text`` (the text generation
    API, the ``text-only`` scenario)."""

    @property
    def devhorde_control(self) -> str:
        """The devhorde's control root (``/_devhorde``)."""
        return self.horde_url.removesuffix("/api") + "/_devhorde"

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` an OpenAI SDK client takes."""
        return f"{self.front_url}/v1"

    def put_scenario(self, scenario: dict[str, Any]) -> None:
        """Replace the devhorde's scenario."""
        CONTROL_CLIENT.put(f"{self.devhorde_control}/scenario", json=scenario, timeout=5).raise_for_status()

    def get_scenario(self) -> dict[str, Any]:
        """The devhorde's current scenario."""
        return CONTROL_CLIENT.get(f"{self.devhorde_control}/scenario", timeout=5).json()

    def native_requests(self) -> list[dict[str, Any]]:
        """Every request the devhorde has seen."""
        body = CONTROL_CLIENT.get(f"{self.devhorde_control}/requests", timeout=5).json()
        return body["requests"] if isinstance(body, dict) else body

    def latest_native_request(self, response_id: str | None = None) -> dict[str, Any]:
        """The devhorde's latest native request: the one behind a response when a test makes one request at a time
        on this stack (a response's id is random and names no native request, issue 35). With ``response_id``, first
        checks that it is a response id (``resp_``) and does not carry the native id."""
        entry: dict[str, Any] = self.native_requests()[-1]
        if response_id is not None:
            assert response_id.startswith("resp_")
            assert entry["id"] not in response_id
        return entry

    def native_submits(self) -> list[dict[str, Any]]:
        """The latest submits the devhorde received, accepted or refused (``status``, ``rc``, ``id``, ``payload``)."""
        body: list[dict[str, Any]] = CONTROL_CLIENT.get(f"{self.devhorde_control}/submits", timeout=5).json()
        return body

    def reset(self) -> None:
        """Forget every request."""
        CONTROL_CLIENT.post(f"{self.devhorde_control}/reset", timeout=5).raise_for_status()

    def stop(self) -> None:
        for process in (self.front, self.devhorde, *self.processes):
            process.stop()


@pytest.fixture(scope="session", autouse=True)
def earlier_runs_worker_lists_forgotten() -> None:
    """In a pytest-xdist worker, delete from its cache database (:func:`redis_databases`) the worker lists and uptimes
    fronts keep by Horde URL (``chat.horde.worker_limits``, kept up to 15 minutes), before any of its servers starts:
    this run may serve a devhorde on a URL an earlier run's served, and its front would read that devhorde's uptimes as
    workers that stopped. Nothing else of the database is touched (the Redis may be one a developer's ``make run``
    also uses), and nothing when no Redis answers."""
    if XDIST_WORKER:
        forget_worker_lists(6379, CACHE_REDIS_DB)


def forget_worker_lists(port: int, database: int) -> None:
    """Delete the fronts' worker-list and uptime keys (``WORKERS_CACHE_KEY``, ``UPTIMES_CACHE_KEY``, any Horde URL,
    any cache key prefix) from ``database`` of the Redis on 127.0.0.1:``port``; nothing when it does not answer."""
    client = redis.Redis(host="127.0.0.1", port=port, db=database, socket_connect_timeout=2)
    try:
        for template in (WORKERS_CACHE_KEY, UPTIMES_CACHE_KEY):
            for key in client.scan_iter(match="*" + template.format(horde_url="*")):
                client.delete(key)
    except redis.RedisError:
        return
    finally:
        client.close()


@pytest.fixture(scope="session", autouse=True)
def in_process_horde_url() -> Iterator[None]:
    """Point the in-process front (Django's test client) at :data:`UNREACHABLE_HORDE_URL` unless the environment names
    a ``HORDE_URL``: Django's settings are read before this file, so the settings object is replaced here."""
    from django.conf import settings

    from chat.settings import front_settings

    configured = settings.HORDE_OAI
    if "HORDE_URL" not in os.environ:
        settings.HORDE_OAI = configured.model_copy(update={"horde_url": UNREACHABLE_HORDE_URL})
        front_settings.cache_clear()
    try:
        yield
    finally:
        settings.HORDE_OAI = configured
        front_settings.cache_clear()


@contextmanager
def running_stack(
    tmp: Path,
    *,
    scenario: Path | str = "fast",
    api: str = "chat",
    front_env: dict[str, str] | None = None,
    redis: bool = True,
) -> Iterator[LiveStack]:
    """Start the devhorde (serving ``scenario``) and a front on it (``front_env`` over :data:`FAST_FRONT_ENV`), both
    on the suite's Redis unless ``redis`` is false, logs in ``tmp``; yield them as a :class:`LiveStack` reaching its
    models by ``api``, and stop both on leaving. The devhorde is stopped at once when the front does not start."""
    devhorde, horde_url = start_devhorde(tmp, redis=redis, scenario=scenario)
    try:
        front, front_url = start_front(tmp, horde_url, redis=redis, env=front_env)
    except Exception:
        devhorde.stop()
        raise
    stack = LiveStack(devhorde, horde_url, front, front_url, api=api)
    try:
        yield stack
    finally:
        stack.stop()


@contextmanager
def scenario_restored(stack: LiveStack, *, forget_requests: bool = False) -> Iterator[LiveStack]:
    """Yield ``stack``; on leaving, put back its ``default_scenario`` (and, with ``forget_requests``, forget the
    requests the devhorde saw)."""
    try:
        yield stack
    finally:
        stack.put_scenario(stack.default_scenario)  # type: ignore[attr-defined]
        if forget_requests:
            stack.reset()


@pytest.fixture(scope="session")
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """The devhorde (with Redis, the bundled ``fast`` scenario) and the front, started once for the session."""
    with running_stack(tmp_path_factory.mktemp("live")) as stack:
        stack.default_scenario = stack.get_scenario()  # type: ignore[attr-defined]
        yield stack


@pytest.fixture(scope="session")
def text_live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """The devhorde serving the ``text-only`` scenario (text workers, no ``chat`` entries, as the public Horde today)
    and a front with the default ``HORDE_OAI_TEXT_API_FALLBACK``, started once for the session."""
    with running_stack(tmp_path_factory.mktemp("live-text"), scenario="text-only", api="text") as stack:
        stack.default_scenario = stack.get_scenario()  # type: ignore[attr-defined]
        yield stack


@pytest.fixture(params=["chat", "text"])
def any_api_stack(request: pytest.FixtureRequest) -> Iterator[LiveStack]:
    """The native stack (``live_stack``) and the text-only stack (``text_live_stack``) in turn, each with its default
    scenario restored after the test: for tests of what both ways of reaching a Horde serve alike."""
    live: LiveStack = request.getfixturevalue("live_stack" if request.param == "chat" else "text_live_stack")
    with scenario_restored(live):
        yield live


@pytest.fixture
def stack(live_stack: LiveStack) -> Iterator[LiveStack]:
    """The live stack with the default scenario restored after the test."""
    with scenario_restored(live_stack):
        yield live_stack
