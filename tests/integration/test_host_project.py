"""The chat apps dropped into a Django team's own project (``tests/hostproject``): ``startproject``'s default apps and
middleware, ``chat`` and ``models_list`` in ``INSTALLED_APPS``, their URLs included, django-cors-headers configured
from :mod:`chat.cors_settings`, and the ASGI application wrapped by :func:`chat.asgi.with_front_lifespan`. Nothing
is copied from ``oaifront``.

The apps come installed, as a team installs them: the distribution is built into a wheel from a fresh clone and
installed into a venv of its own (``tests/installed.py``), and the host project, copied out of the checkout, is served
from its own directory by that venv's Python, so nothing is imported from the checkout.

The project is served by uvicorn in front of the devhorde (``default`` scenario, Redis on 127.0.0.1:6379: its
``devhorde/tiny-1b`` posts a few words every 0.35 s, so a relayed stream arrives in several chunks), called with
the official ``openai`` SDK, and called cross-origin from headless Chromium with the headers the Node SDK sends, so
the browser must pass a preflight first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.browser.conftest import chromium  # noqa: F401 - the module-scoped headless Chromium fixture
from tests.conftest import ROOT, Process, start_devhorde, start_front
from tests.installed import imported_from, install_the_apps

# One xdist worker runs the whole module (``--dist loadfile``): its module-scoped fixture builds venvs and servers
# once.
pytestmark = [pytest.mark.integration]

HOST_SETTINGS = "tests.hostproject.settings"
HOST_APP = "tests.hostproject.asgi:application"
API_KEY = "0000000000"
PROMPT = [{"role": "user", "content": "Tell me about lighthouses."}]
MODEL = "devhorde/tiny-1b"
"""The default scenario's small model: no reasoning, 10 tokens a second, so 16 tokens take about two seconds."""
NODE_SDK_HEADERS = {
    "x-stainless-lang": "js",
    "x-stainless-package-version": "5.0.0",
    "x-stainless-os": "Linux",
    "x-stainless-arch": "x64",
    "x-stainless-runtime": "browser:chrome",
    "x-stainless-runtime-version": "156.0.0",
    "x-stainless-retry-count": "0",
    "x-stainless-timeout": "600",
}
"""What the official Node SDK adds to each call in a browser (``dangerouslyAllowBrowser``): none is a CORS-safelisted
header, so each needs the preflight to allow it."""


@dataclass
class Installed:
    """The apps installed in a venv (``python``) and the host project copied out of the checkout (``project``)."""

    python: Path
    project: Path


@dataclass
class HostProject:
    front: Process
    front_url: str
    devhorde: Process
    horde_url: str
    installed: Installed


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("installed")
    python = install_the_apps(tmp)
    project = tmp / "project"
    shutil.copytree(ROOT / "tests" / "hostproject", project / "tests" / "hostproject")
    for name, path in imported_from(python, project).items():
        assert not Path(path).is_relative_to(ROOT), f"{name} imported from the checkout: {path}"
    return Installed(python, project)


def serve_host_project(tmp: Path, horde_url: str, installed: Installed, *, redis: bool = True) -> tuple[Process, str]:
    return start_front(
        tmp,
        horde_url,
        redis=redis,
        env={"DJANGO_SETTINGS_MODULE": HOST_SETTINGS, "HOST_PROJECT_DIR": str(tmp)},
        app=HOST_APP,
        python=installed.python,
        cwd=installed.project,
    )


@pytest.fixture(scope="module")
def host_project(tmp_path_factory: pytest.TempPathFactory, installed: Installed) -> Iterator[HostProject]:
    tmp = tmp_path_factory.mktemp("hostproject")
    devhorde, horde_url = start_devhorde(tmp, scenario="default")
    try:
        front, front_url = serve_host_project(tmp, horde_url, installed)
    except Exception:
        devhorde.stop()
        raise
    try:
        yield HostProject(front, front_url, devhorde, horde_url, installed)
    finally:
        front.stop()
        devhorde.stop()


def test_the_host_project_passes_djangos_checks_with_the_apps_installed(host_project: HostProject) -> None:
    """``manage.py check`` of the host project: django-cors-headers is configured as the chat app's checks ask, and
    the front's settings checks find the Horde (the running devhorde) answering its heartbeat.
    """
    env = {**os.environ, "HORDE_URL": host_project.horde_url}
    result = subprocess.run(
        [host_project.installed.python, "-m", "django", "check", "--settings", HOST_SETTINGS],
        check=False,
        cwd=host_project.installed.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."


def test_the_sdk_lists_completes_and_streams_through_the_host_project(host_project: HostProject) -> None:
    client = openai.OpenAI(base_url=f"{host_project.front_url}/v1", api_key=API_KEY, max_retries=0)
    assert MODEL in [model.id for model in client.models.list()]
    assert client.models.retrieve(MODEL).id == MODEL

    reply = client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=16)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.content

    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=PROMPT, max_tokens=16, stream=True
    ) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.headers["access-control-allow-origin"] == "*"
        chunks = [chunk for chunk in raw.parse() if chunk.choices and chunk.choices[0].delta.content]
    assert len(chunks) > 1, "the relay through Redis sends the content in several paced chunks"

    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("devhorde/no-such-model")
    assert missing.value.code == "model_not_found"
    assert missing.value.response.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize(
    ("path", "status", "content_type"),
    [
        ("/healthz", 200, "application/json"),
        ("/readyz", 200, "application/json"),
        ("/openapi.json", 200, "application/vnd.oai.openapi+json"),
        ("/docs", 200, "text/html; charset=utf-8"),
        ("/redoc", 200, "text/html; charset=utf-8"),
        ("/docs/behaviour", 200, "text/html; charset=utf-8"),
        ("/metrics", 404, "application/json"),
    ],
)
def test_the_operations_routes_answer_in_the_host_project(
    host_project: HostProject, path: str, status: int, content_type: str
) -> None:
    """One include gives the host the operations routes, whatever its REST framework settings (DRF's own schema class
    made /docs and /openapi.json answer 500); /metrics is the unknown-route 404 until HORDE_OAI_METRICS_ENDPOINT."""
    response = httpx.get(f"{host_project.front_url}{path}", timeout=30)
    assert (response.status_code, response.headers["content-type"]) == (status, content_type)
    if path == "/openapi.json":
        project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        assert response.json()["info"]["version"] == project["version"]


def test_the_lifespan_runs_at_start_and_at_shutdown(tmp_path: Path, installed: Installed) -> None:
    """Without the wrapper uvicorn logs "ASGI 'lifespan' protocol appears unsupported" and skips it; with it the start
    line names the Redis and shutdown completes after closing the runtime."""
    devhorde, horde_url = start_devhorde(tmp_path, redis=False)
    try:
        front, front_url = serve_host_project(tmp_path, horde_url, installed, redis=False)
        client = openai.OpenAI(base_url=f"{front_url}/v1", api_key=API_KEY, max_retries=0)
        assert client.chat.completions.create(model="devhorde/reasoner-8b", messages=PROMPT, max_tokens=16).choices
        front.stop()
    finally:
        devhorde.stop()
    log = front.log()
    assert "ASGI 'lifespan' protocol appears unsupported" not in log, log
    assert "Redis: none (HORDE_OAI_REDIS_URL unset): streams are delivered whole" in log
    assert "Application startup complete." in log
    assert "Application shutdown complete." in log
    assert "shutdown failed" not in log.lower()


CROSS_ORIGIN_FETCH = """
async ([url, headers, body]) => {
  const response = await fetch(url, {method: "POST", headers, body: JSON.stringify(body)});
  return {
    status: response.status,
    retryAfter: response.headers.get("retry-after"),
    shouldRetry: response.headers.get("x-should-retry"),
    text: await response.text(),
  };
}
"""


def test_a_browser_on_another_origin_passes_the_preflight_and_reads_streams_and_retry_headers(
    host_project: HostProject,
    chromium: Any,  # noqa: F811
) -> None:
    """ref: browser-access.1 — a page served by the devhorde (another origin) calls the host project with a bearer key
    and the Node SDK's ``x-stainless-*`` headers: the preflight passes, the stream is readable, and a
    ``no_eligible_worker`` error's ``Retry-After`` and ``x-should-retry`` are readable by the page."""
    context = chromium.new_context(service_workers="block")
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    try:
        page.goto(f"{host_project.horde_url}/v2/status/heartbeat")
        headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json", **NODE_SDK_HEADERS}
        url = f"{host_project.front_url}/v1/chat/completions"
        streamed = page.evaluate(
            CROSS_ORIGIN_FETCH,
            [url, headers, {"model": MODEL, "messages": PROMPT, "max_tokens": 16, "stream": True}],
        )
        assert streamed["status"] == 200
        assert streamed["text"].count('"content":"') > 1
        assert streamed["text"].rstrip().endswith("data: [DONE]")

        body = {"model": "devhorde/offline-13b", "messages": PROMPT, "max_tokens": 64}
        refused = page.evaluate(CROSS_ORIGIN_FETCH, [url, headers, body])
        direct = httpx.post(url, json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
        assert direct.status_code == refused["status"] == 503
        assert '"code": "no_eligible_worker"' in refused["text"] or '"code":"no_eligible_worker"' in refused["text"]
        assert refused["retryAfter"] == direct.headers["retry-after"] == "30"
        assert refused["shouldRetry"] is not None
        assert refused["shouldRetry"] == direct.headers["x-should-retry"]
    finally:
        context.close()
    # The 503 is logged by Chromium as a failed resource load; no CORS error may appear.
    assert [text for text in console_errors if "CORS" in text or "Access-Control" in text] == []
