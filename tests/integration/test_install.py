"""``make install`` (behind ``make run`` and ``make test``) heals a broken ``.venv``: ``bin/ensure-venv`` finds what
is wrong, says so in one line and rebuilds it, from a fresh clone in a temporary directory.

A full install of ``requirements.txt`` downloads the whole lock on a cold cache, so each clone's ``requirements.txt``
is replaced by one line, ``pip``, which every new venv already satisfies (the installer itself, uv, comes from PyPI
through pip's cache): the tests exercise the detection, the rebuild, the installer and the stamp. The worktree's own
``.venv`` is never touched.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fresh_clone import fresh_clone

pytestmark = pytest.mark.integration

INSTALLING = "Installing the pinned requirements into .venv with uv (seconds from uv's cache, a minute the first time)"
CLEAN_ENV = {key: value for key, value in os.environ.items() if key not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
"""The environment without make's own variables, so ``make`` run from inside ``make test`` prints no
"Entering directory" lines."""


def interpreter() -> str:
    """The Python ``bin/ensure-venv`` creates venvs with (``bin/find-python``)."""
    return subprocess.run(
        [ROOT / "bin" / "find-python"], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``args`` in ``cwd`` with :data:`CLEAN_ENV` plus ``env``."""
    return subprocess.run(
        args, cwd=cwd, env={**CLEAN_ENV, **(env or {})}, capture_output=True, text=True, timeout=300, check=False
    )


def without_pip(venv: Path) -> None:
    """What a Ctrl-C during "Creating .venv" leaves: ``bin/python`` runs, but ``No module named pip``."""
    subprocess.run([interpreter(), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)


def ensure_venv(workdir: Path) -> subprocess.CompletedProcess[str]:
    (workdir / "requirements.txt").write_text("pip\n")
    return run([ROOT / "bin" / "ensure-venv", ".venv", "requirements.txt"], workdir)


def test_make_install_rebuilds_a_venv_left_without_pip_and_then_keeps_it(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    (clone / "requirements.txt").write_text("pip\n")
    without_pip(clone / ".venv")
    assert (
        run([clone / ".venv" / "bin" / "python", "-m", "pip", "--version"], clone)
        .stderr.strip()
        .endswith("No module named pip")
    )

    healed = run(["make", "install"], clone)
    assert healed.returncode == 0, healed.stderr
    assert healed.stdout.splitlines() == [
        '.venv is broken: it has no pip (an interrupted "Creating .venv"?); rebuilding it',
        f"Creating .venv with {interpreter()}",
        INSTALLING,
        "Installed; .venv is ready",
    ]
    assert run([clone / ".venv" / "bin" / "python", "-m", "pip", "--version"], clone).returncode == 0
    assert (clone / ".venv" / ".installed").is_file()

    marker = clone / ".venv" / "kept"
    marker.touch()
    again = run(["make", "install"], clone)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert marker.exists(), "a sound venv is kept"

    # requirements.txt changed after the install: installed again into the same venv, not rebuilt.
    os.utime(clone / ".venv" / ".installed", (1, 1))
    updated = run(["make", "install"], clone)
    assert updated.returncode == 0, updated.stderr
    assert updated.stdout.splitlines() == [INSTALLING, "Installed; .venv is ready"]
    assert marker.exists()


def test_a_venv_whose_install_did_not_finish_is_rebuilt(tmp_path: Path) -> None:
    """A Ctrl-C during the install leaves a venv with pip but without the stamp."""
    subprocess.run([interpreter(), "-m", "venv", str(tmp_path / ".venv")], check=True, timeout=120)
    (tmp_path / ".venv" / "half-installed").touch()
    result = ensure_venv(tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[0]
        == ".venv is broken: its install did not finish (no .venv/.installed); rebuilding it"
    )
    assert not (tmp_path / ".venv" / "half-installed").exists()
    assert (tmp_path / ".venv" / ".installed").is_file()


def test_a_venv_without_python_is_rebuilt(tmp_path: Path) -> None:
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("home = /nowhere\n")
    result = ensure_venv(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        ".venv is broken: it has no bin/python; rebuilding it",
        f"Creating .venv with {interpreter()}",
    ]
    assert run([tmp_path / ".venv" / "bin" / "python", "-m", "pip", "--version"], tmp_path).returncode == 0


def test_a_broken_venv_that_is_a_symbolic_link_is_left_alone(tmp_path: Path) -> None:
    """A linked venv may be shared: it is reported, never removed."""
    shared = tmp_path / "shared-venv"
    without_pip(shared)
    (tmp_path / ".venv").symlink_to(shared)
    result = ensure_venv(tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        '.venv is broken: it has no pip (an interrupted "Creating .venv"?); it is a symbolic link '
        f"(to {shared}), so it is left as it is: repair or remove it\n"
    )
    assert (tmp_path / ".venv").is_symlink()
    assert (shared / "bin" / "python").exists()


def test_make_install_installs_the_runtime_lock_and_make_install_dev_adds_the_tool_locks(tmp_path: Path) -> None:
    """``make run`` installs the runtime lock only; ``make test`` and ``make lint`` (``install-dev``) add the test and
    lint locks, and the stamp lists what is installed, so each is installed once."""
    clone = fresh_clone(tmp_path / "clone")
    (clone / "requirements.txt").write_text("pip\n")
    for lock in ("requirements-test.txt", "requirements-lint.txt"):
        (clone / lock).write_text("-r requirements.txt\n")

    runtime = run(["make", "install"], clone)
    assert runtime.returncode == 0, runtime.stderr
    assert runtime.stdout.splitlines()[-2:] == [INSTALLING, "Installed; .venv is ready"]
    assert (clone / ".venv" / ".installed").read_text().splitlines() == ["requirements.txt"]

    dev = run(["make", "install-dev"], clone)
    assert dev.returncode == 0, dev.stderr
    assert dev.stdout.splitlines() == [INSTALLING, "Installed; .venv is ready"]
    assert (clone / ".venv" / ".installed").read_text().splitlines() == [
        "requirements-lint.txt",
        "requirements-test.txt",
        "requirements.txt",
    ]
    assert [run(["make", target], clone).stdout for target in ("install", "install-dev")] == ["", ""]


def lock_pin(lock: Path, name: str) -> str:
    """The ``name==version`` line of ``lock``."""
    (pin,) = [line for line in lock.read_text().splitlines() if line.lower().startswith(f"{name}==")]
    return pin


def test_the_locks_go_in_with_the_pinned_uv_uncompiled_and_a_newer_installer_lock_installs_again(
    tmp_path: Path,
) -> None:
    """The venv's pip installs uv of ``requirements-installer.txt``; uv installs the locks without byte-compiling them
    (Python writes the bytecode of what it imports at the first import). A changed installer lock installs again into
    the same venv. ``loguru`` of the runtime lock stands for the lock: pure Python, no dependencies, in
    uv's cache since this suite's own install."""
    clone = fresh_clone(tmp_path / "clone")
    (clone / "requirements.txt").write_text(lock_pin(ROOT / "requirements.txt", "loguru") + "\n")
    installed = run(["make", "install"], clone)
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.splitlines()[-2:] == [INSTALLING, "Installed; .venv is ready"]

    uv_version = lock_pin(ROOT / "requirements-installer.txt", "uv").split("==")[1]
    version = run([clone / ".venv" / "bin" / "uv", "--version"], clone).stdout
    assert version.startswith(f"uv {uv_version} "), version
    (packages,) = (clone / ".venv" / "lib").glob("python3*/site-packages")
    assert not (packages / "loguru" / "__pycache__").exists()
    imported = run(
        [clone / ".venv" / "bin" / "python", "-c", "import loguru, sys; print(sys.implementation.cache_tag)"],
        clone,
        {"PYTHONDONTWRITEBYTECODE": ""},
    )
    assert sorted(path.name for path in (packages / "loguru" / "__pycache__").glob("__init__.*.pyc")) == [
        f"__init__.{imported.stdout.strip()}.pyc"
    ]

    marker = clone / ".venv" / "kept"
    marker.touch()
    # Everything else older than the stamp, the installer lock changed after it.
    now = time.time()
    for path, age in [("requirements.txt", 300), ("bin/find-python", 300), (".venv/.installed", 200)]:
        os.utime(clone / path, (now - age, now - age))
    os.utime(clone / "requirements-installer.txt", (now - 100, now - 100))
    again = run(["make", "install"], clone)
    assert (again.returncode, again.stdout.splitlines()) == (0, [INSTALLING, "Installed; .venv is ready"])
    assert marker.exists(), "the venv is kept, the locks installed again"
    assert [run(["make", "install"], clone).stdout] == [""]
