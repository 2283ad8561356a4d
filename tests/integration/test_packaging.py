"""The distribution ``pyproject.toml`` declares, installed as a user installs it (``tests/installed.py``): from a
fresh clone in a temporary directory, ``pip install .`` and a wheel built with ``pip wheel --no-deps .`` each go into
a new venv, whose Python then imports the apps from its own ``site-packages``. The wheel installs the apps and the
operations routes only (no ``oaifront``, ``devhorde`` or ``docs`` at the top of ``site-packages``); the standalone
project and the devhorde, copied beside it as the container image lays them out, pass ``django check`` and serve the
front with the guides it reads from the installed ``front_operations``.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from devhorde.launch import START_UP_TIMEOUT_SECONDS, wait_http
from tests.conftest import UNREACHABLE_HORDE_URL, Process, free_port
from tests.fresh_clone import fresh_clone
from tests.installed import (
    APPS,
    STANDALONE,
    build_wheel,
    imported_from,
    new_venv,
    pip_install,
    site_packages,
    standalone_copy,
    wheel_top_levels,
)

pytestmark = pytest.mark.integration


def serve(python: Path, args: list[str], cwd: Path, env: dict[str, str], name: str) -> Process:
    log_path = cwd / f"{name}.log"
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    full_env.pop("PYTHONPATH", None)
    popen = subprocess.Popen(
        [python, *args], cwd=cwd, env=full_env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT
    )
    return Process(popen, log_path)


@dataclass(frozen=True)
class Built:
    """One fresh clone and the wheel ``pip wheel --no-deps .`` built from it."""

    clone: Path
    wheel: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Built once for the module: the tests that install, list or serve the wheel read it and never change it."""
    tmp = tmp_path_factory.mktemp("built")
    clone = fresh_clone(tmp / "clone")
    return Built(clone, build_wheel(clone, tmp / "dist"))


@pytest.mark.parametrize("form", ["wheel", "source"])
def test_the_distribution_installs_into_a_fresh_venv_and_passes_djangos_checks(
    tmp_path: Path, request: pytest.FixtureRequest, form: str
) -> None:
    """``pip install`` of the wheel or of a clone puts the apps alone into site-packages, and the standalone project
    beside them passes ``django check``. The source form installs a clone of its own: ``pip install .`` builds in the
    tree it is given."""
    built: Built | None = request.getfixturevalue("built") if form == "wheel" else None
    clone = built.clone if built is not None else fresh_clone(tmp_path / "clone")
    target = built.wheel if built is not None else clone
    python = new_venv(tmp_path / "venv")
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    installed = pip_install(python, target, outside)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert installed.stdout.splitlines()[-1] == "Successfully installed horde-oai-0.1.0"

    where = imported_from(python, outside)
    packages = site_packages(python)
    assert {name: Path(path).parent for name, path in where.items()} == {name: Path(packages) / name for name in APPS}
    assert sorted(path.name for path in Path(packages).iterdir() if path.name in {*STANDALONE, "docs"}) == []

    standalone_copy(clone, outside)
    checked = subprocess.run(
        [python, "-m", "django", "check", "--settings", "oaifront.settings"],
        cwd=outside,
        env={**os.environ, "HORDE_URL": UNREACHABLE_HORDE_URL, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert "horde_oai.W001" in checked.stderr, checked.stderr


def test_the_wheel_holds_the_apps_and_the_operations_routes_only(built: Built) -> None:
    """Nothing but the reusable apps at the top of site-packages; the guides are package data of the operations
    routes, the same files as the checkout's ``docs/``."""
    clone, wheel = built.clone, built.wheel
    assert sorted(wheel_top_levels(wheel)) == ["chat", "front_operations", "images", "models_list"]
    with zipfile.ZipFile(wheel) as archive:
        guides = {
            name.removeprefix("front_operations/guides/"): archive.read(name)
            for name in archive.namelist()
            if name.startswith("front_operations/guides/")
        }
        assert (
            archive.read("front_operations/openapi/guide.css")
            == (clone / "front_operations" / "openapi" / "guide.css").read_bytes()
        )
    assert guides == {path.name: path.read_bytes() for path in (clone / "docs").glob("*.md")}
    assert len(guides) > 10


def test_the_installed_wheel_serves_the_front_the_guides_and_the_devhorde(tmp_path: Path, built: Built) -> None:
    """The package data: the front reads its guides from the installed ``front_operations``; the standalone project
    and the devhorde (with its bundled ``fast`` scenario) run from a directory of their own beside it."""
    clone = built.clone
    python = new_venv(tmp_path / "venv")
    installed = pip_install(python, built.wheel, tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    outside = standalone_copy(clone, tmp_path / "elsewhere")
    packages = Path(site_packages(python))
    assert {name: Path(path).parent for name, path in imported_from(python, outside).items()} == {
        name: packages / name for name in APPS
    }

    horde_port, front_port = free_port(), free_port()
    horde_url = f"http://127.0.0.1:{horde_port}/api"
    devhorde = serve(
        python, ["-m", "devhorde", "--port", str(horde_port), "--scenario", "fast"], outside, {}, "devhorde"
    )
    front = serve(
        python,
        ["-m", "uvicorn", "oaifront.asgi:application", "--port", str(front_port), "--no-access-log"],
        outside,
        {"HORDE_URL": horde_url},
        "front",
    )
    try:
        wait_http(f"{horde_url}/v2/status/heartbeat", devhorde.popen, timeout=START_UP_TIMEOUT_SECONDS)
        base = f"http://127.0.0.1:{front_port}"
        wait_http(f"{base}/healthz", front.popen, timeout=START_UP_TIMEOUT_SECONDS)

        guide = httpx.get(f"{base}/docs/host-project?format=md", timeout=30)
        assert guide.status_code == 200
        assert guide.text == (clone / "docs" / "host-project.md").read_text(encoding="utf-8")
        guide = httpx.get(f"{base}/docs/behaviour?format=md", timeout=30)
        assert guide.status_code == 200
        assert guide.text == (clone / "docs" / "behaviour.md").read_text(encoding="utf-8")
        page = httpx.get(f"{base}/docs/behaviour", timeout=30)
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert '<h2 id="waiting-and-availability">' in page.text
        stylesheet = httpx.get(f"{base}/docs/assets/guide.css", timeout=30)
        assert stylesheet.status_code == 200
        assert stylesheet.text == (clone / "front_operations" / "openapi" / "guide.css").read_text()
        clients = httpx.get(f"{base}/docs/clients?format=md", timeout=30)
        assert clients.status_code == 200
        assert clients.text == (clone / "docs" / "clients.md").read_text(encoding="utf-8")

        client = openai.OpenAI(base_url=f"{base}/v1", api_key="0000000000", max_retries=0)
        assert "devhorde/tiny-1b" in [model.id for model in client.models.list()]
        reply = client.chat.completions.create(
            model="devhorde/tiny-1b", messages=[{"role": "user", "content": "Hello"}], max_tokens=16
        )
        assert reply.choices[0].message.content
    finally:
        front.stop()
        devhorde.stop()
