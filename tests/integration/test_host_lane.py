"""The host lane: a Django team follows the README's host-project section word for word, on the Django it runs.

For Django 5.2 LTS and for the newest Django the package's range allows: the wheel built from a fresh clone is
installed from PyPI into a venv of its own next to that Django (one install of both with ``make install``'s uv;
``pip install`` of the wheel, the README's command, is :mod:`test_packaging`'s), a project is made with
``django-admin startproject``, the README's ``settings.py``, ``urls.py`` and ``asgi.py`` snippets are added at the end
of its files as the README says, and the README's ``uvicorn`` command serves it (only the port
changed) with the devhorde behind. A streamed chat completion, a Responses call, ``/readyz``, ``/docs`` and the guides
(package data of ``front_operations``) must answer, and the host's environment holds the apps only: no ``oaifront``,
``devhorde`` or ``docs`` package. The snippets are read from the README, so the test breaks when the README drifts
from what works.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import REDIS_URL, ROOT, STREAM_REDIS_DB, Process, free_port, start_devhorde, wait_started
from tests.fresh_clone import fresh_clone
from tests.installed import build_wheel, install_into, interpreter

# One xdist worker runs the whole module (``--dist loadfile``): its module-scoped fixture builds venvs and servers
# once.
pytestmark = [pytest.mark.integration, pytest.mark.starts_first]

SECTION = "## In your own Django project"
PROJECT = "mysite"
"""The project name the README's ``uvicorn`` command names."""

DJANGO_VERSIONS = {"django-5.2-lts": "Django>=5.2,<5.3", "django-newest": "Django"}
"""The Django each host runs: the LTS, and whatever newest release the package's range lets the installer pick."""


def host_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    return readme[start : end if end != -1 else None]


def snippets() -> dict[str, str]:
    """The section's code blocks by the file each goes into: the prose line before each names it."""
    found: dict[str, str] = {}
    for lead, language, code in re.findall(r"([^\n]*)\n\n```(python|sh)\n(.*?)^```$", host_section(), re.S | re.M):
        named = re.findall(r"`(settings\.py|urls\.py|asgi\.py)`", lead)
        found[named[-1] if named and language == "python" else language] = code
    return found


def test_the_readme_section_has_the_three_snippets_and_the_command() -> None:
    found = snippets()
    assert sorted(found) == ["asgi.py", "settings.py", "sh", "urls.py"]
    assert found["sh"].strip() == f"uvicorn {PROJECT}.asgi:application --host 127.0.0.1 --port 8000"
    assert 'include("front_operations.urls")' in found["urls.py"]


def run(args: list[str | Path], cwd: Path, timeout: float = 900) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    return build_wheel(fresh_clone(tmp / "clone"), tmp / "dist")


@dataclass(frozen=True)
class Host:
    """A host project served: its address, its venv's ``python`` and its directory (``manage.py`` is there)."""

    url: str
    python: Path
    project: Path


@pytest.fixture(scope="module", params=sorted(DJANGO_VERSIONS))
def host(request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp(request.param)
    venv = tmp / "venv"
    python = venv / "bin" / "python"
    run([interpreter(), "-m", "venv", "--without-pip", str(venv)], tmp)
    run(install_into(python, DJANGO_VERSIONS[request.param], str(wheel)), tmp)
    django = run([python, "-c", "import django; print(django.get_version())"], tmp).strip()
    assert django.startswith("5.2") if request.param == "django-5.2-lts" else int(django.split(".")[0]) >= 6

    run([venv / "bin" / "django-admin", "startproject", PROJECT], tmp)
    project = tmp / PROJECT
    for file, code in snippets().items():
        if file != "sh":
            with (project / PROJECT / file).open("a", encoding="utf-8") as target:
                target.write("\n" + code)

    port = free_port()
    command = shlex.split(snippets()["sh"].strip().replace("--port 8000", f"--port {port}"))
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "HORDE_OAI_REDIS_URL": REDIS_URL,
        "HORDE_OAI_STREAM_REDIS_DB": str(STREAM_REDIS_DB),
    }
    devhorde, horde_url = start_devhorde(tmp, scenario="default")
    processes: list[Process] = [devhorde]
    try:
        # A shell of the host's team: none of this test process's Django settings (pytest-django's
        # DJANGO_SETTINGS_MODULE would win over the setdefault of startproject's asgi.py and serve another project).
        shell = {key: value for key, value in os.environ.items() if key not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH"}}
        log_path = tmp / "host.log"
        popen = subprocess.Popen(
            [venv / "bin" / command[0], *command[1:]],
            cwd=project,
            env={**shell, **env, "HORDE_URL": horde_url, "PYTHONUNBUFFERED": "1"},
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        front = Process(popen, log_path)
        processes.append(front)
        base = f"http://127.0.0.1:{port}"
        wait_started(front, f"{base}/healthz")
        yield Host(base, python, project)
    finally:
        for process in reversed(processes):
            process.stop()


def test_the_host_streams_a_chat_completion(host: Host) -> None:
    client = openai.OpenAI(base_url=f"{host.url}/v1", api_key="0000000000", max_retries=0)
    stream = client.chat.completions.create(
        model="devhorde/tiny-1b",
        messages=[{"role": "user", "content": "Tell me about lighthouses."}],
        max_tokens=16,
        stream=True,
    )
    content = [chunk.choices[0].delta.content for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert len(content) > 1, "a relayed stream arrives in several chunks"


def test_the_host_answers_a_responses_call(host: Host) -> None:
    client = openai.OpenAI(base_url=f"{host.url}/v1", api_key="0000000000", max_retries=0)
    response = client.responses.create(
        model="devhorde/tiny-1b", input="Tell me about lighthouses.", max_output_tokens=16
    )
    # The devhorde's reply is longer than 16 tokens: cut at the budget, as OpenAI reports it.
    assert (response.status, response.incomplete_details and response.incomplete_details.reason) == (
        "incomplete",
        "max_output_tokens",
    )
    assert response.output_text


def test_the_host_is_ready_and_serves_its_docs(host: Host) -> None:
    ready = httpx.get(f"{host.url}/readyz", timeout=30)
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "checks": {"horde": "ok", "redis": "ok"}})
    docs = httpx.get(f"{host.url}/docs", timeout=30)
    assert (docs.status_code, docs.headers["content-type"]) == (200, "text/html; charset=utf-8")
    bundle = httpx.get(f"{host.url}/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js", timeout=30)
    assert (bundle.status_code, bundle.headers["content-type"].split(";")[0]) == (200, "text/javascript")
    assert (
        httpx.get(f"{host.url}/openapi.json", timeout=30).json()["info"]["title"]
        == "AI Horde OpenAI-compatible chat front"
    )


def test_the_host_serves_the_images_route(host: Host) -> None:
    """The README's host section includes the images app: its route answers in OpenAI's envelope, not Django's 404."""
    refused = httpx.post(f"{host.url}/v1/images/generations", json={"model": "dall-e-3"}, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "prompt"


def test_the_host_serves_its_own_project(host: Host) -> None:
    """The routes are the host's own (startproject's admin beside the front's), not another project's."""
    login = httpx.get(f"{host.url}/admin/login/", timeout=30)
    assert (login.status_code, login.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert "Django administration" in login.text


def test_the_host_serves_the_guides_from_the_installed_package(host: Host) -> None:
    """The guides are package data of ``front_operations``: the host, outside any checkout, serves the README's
    guide for it as written."""
    guide = httpx.get(f"{host.url}/docs/host-project?format=md", timeout=30)
    assert (guide.status_code, guide.text) == (200, (ROOT / "docs" / "host-project.md").read_text(encoding="utf-8"))
    page = httpx.get(f"{host.url}/docs/configuration", timeout=30)
    assert (page.status_code, page.headers["content-type"]) == (200, "text/html; charset=utf-8")


def test_the_host_gets_the_apps_and_nothing_of_the_standalone_project(host: Host) -> None:
    """The wheel installs the apps and the operations routes only: neither the front's own project, nor the devhorde,
    nor a ``docs`` package is importable in the host's environment."""
    code = (
        "import importlib.util, sys; "
        "print(*[name for name in sys.argv[1:] if importlib.util.find_spec(name) is not None])"
    )
    names = ["chat", "images", "models_list", "front_operations", "oaifront", "devhorde", "docs"]
    found = run([host.python, "-c", code, *names], host.project).split()
    assert found == ["chat", "images", "models_list", "front_operations"]
