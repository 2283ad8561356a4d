"""The host lane: a Django team follows the README's host-project section word for word, on the Django it runs.

For Django 5.2 LTS and for the newest Django the package's range allows: the wheel built from a fresh clone is
installed from PyPI into a venv of its own next to that Django (one ``pip install`` of both, :data:`PIP_INTO`), a
project is made with ``django-admin startproject``, the README's ``settings.py``, ``urls.py`` and ``asgi.py`` snippets
are added at the end of its files as the README says, and the README's ``uvicorn`` command serves it (only the port
changed) with the devhorde behind. A streamed chat completion, a Responses call, ``/readyz`` and ``/docs`` must
answer. The snippets are read from the README, so the test breaks when the README drifts from what works.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from devhorde.launch import free_port
from tests.conftest import REDIS_URL, ROOT, STREAM_REDIS_DB, Process, start_devhorde, start_process, wait_started
from tests.fresh_clone import fresh_clone
from tests.installed import build_wheel, interpreter

# One xdist worker runs the whole module: its module-scoped fixture builds venvs and servers that every worker
# would otherwise build again for the tests it drew.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("host_lane")]

SECTION = "## In your own Django project"
PROJECT = "mysite"
"""The project name the README's ``uvicorn`` command names."""

DJANGO_VERSIONS = {"django-5.2-lts": "Django>=5.2,<5.3", "django-newest": "Django"}
"""The Django each host runs: the LTS, and whatever newest release the package's range lets pip pick."""


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
    assert 'include("oaifront.operations_urls")' in found["urls.py"]


PIP_INTO = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "--no-input", "--python"]
"""This environment's pip installing into the venv whose ``python`` follows (pip's ``--python``): the venv is made
without a pip of its own (``--without-pip``, no ``ensurepip`` per venv). The Django and the wheel go in one call, so
pip resolves them together, and ``--no-compile`` (on ``install``) leaves byte-compiling to the first import."""


def run(args: list[str | Path], cwd: Path, timeout: float = 900) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    return build_wheel(fresh_clone(tmp / "clone"), tmp / "dist")


@pytest.fixture(scope="module", params=sorted(DJANGO_VERSIONS))
def host(request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp(request.param)
    venv = tmp / "venv"
    python = venv / "bin" / "python"
    run([interpreter(), "-m", "venv", "--without-pip", str(venv)], tmp)
    run([*PIP_INTO, python, "install", "--no-compile", DJANGO_VERSIONS[request.param], str(wheel)], tmp)
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
        front = start_process(
            [venv / "bin" / command[0], *command[1:]], {**env, "HORDE_URL": horde_url}, tmp / "host.log", cwd=project
        )
        processes.append(front)
        base = f"http://127.0.0.1:{port}"
        wait_started(front, f"{base}/healthz")
        yield base
    finally:
        for process in reversed(processes):
            process.stop()


def test_the_host_streams_a_chat_completion(host: str) -> None:
    client = openai.OpenAI(base_url=f"{host}/v1", api_key="0000000000", max_retries=0)
    stream = client.chat.completions.create(
        model="devhorde/tiny-1b",
        messages=[{"role": "user", "content": "Tell me about lighthouses."}],
        max_tokens=16,
        stream=True,
    )
    content = [chunk.choices[0].delta.content for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert len(content) > 1, "a relayed stream arrives in several chunks"


def test_the_host_answers_a_responses_call(host: str) -> None:
    client = openai.OpenAI(base_url=f"{host}/v1", api_key="0000000000", max_retries=0)
    response = client.responses.create(
        model="devhorde/tiny-1b", input="Tell me about lighthouses.", max_output_tokens=16
    )
    # The devhorde's reply is longer than 16 tokens: cut at the budget, as OpenAI reports it.
    assert (response.status, response.incomplete_details and response.incomplete_details.reason) == (
        "incomplete",
        "max_output_tokens",
    )
    assert response.output_text


def test_the_host_is_ready_and_serves_its_docs(host: str) -> None:
    ready = httpx.get(f"{host}/readyz", timeout=30)
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "checks": {"horde": "ok", "redis": "ok"}})
    docs = httpx.get(f"{host}/docs", timeout=30)
    assert (docs.status_code, docs.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert (
        httpx.get(f"{host}/openapi.json", timeout=30).json()["info"]["title"] == "AI Horde OpenAI-compatible chat front"
    )
