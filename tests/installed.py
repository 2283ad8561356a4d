"""The distribution installed as a user installs it: built from a fresh clone, put in a venv of its own.

Installing the pinned dependencies anew would download and build for minutes, so the venv reuses this environment's
packages: a ``.pth`` file puts this interpreter's ``site-packages`` on its path, after its own. pip then sees the
runtime dependencies as installed and installs the project alone; the project's modules come from the venv's own
``site-packages`` (checked by :func:`imported_from`), never from the checkout, as long as the command does not run in
the checkout (``python -m`` puts the working directory first on the path): run them with ``cwd`` outside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from uv import find_uv_bin

from tests.conftest import ROOT
from tests.fresh_clone import fresh_clone

APPS = ("chat", "images", "models_list", "front_operations")
"""The distribution's top-level packages: the reusable apps and the operations routes a host includes (``oaifront``
and ``devhorde`` stay in the checkout)."""

STANDALONE = ("oaifront", "devhorde")
"""The packages the distribution leaves out: the standalone project and the development Horde, which run from a
directory of their own (the container image's working directory), beside the installed apps."""


def interpreter() -> str:
    """The Python ``make install`` creates venvs with (``bin/find-python``)."""
    found = subprocess.run([ROOT / "bin" / "find-python"], check=True, capture_output=True, text=True, timeout=60)
    return found.stdout.strip()


def site_packages(python: Path) -> str:
    """The ``purelib`` directory (site-packages) of the environment of ``python``."""
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()


def new_venv(venv: Path) -> Path:
    """A fresh venv that also sees this environment's packages; return its ``python``."""
    subprocess.run([interpreter(), "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    (Path(site_packages(python)) / "shared-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def install_into(python: Path, *requirements: str | Path) -> list[str | Path]:
    """The command of the installer ``make install`` uses (uv, ``requirements-installer.txt``) that installs
    ``requirements`` (arguments of ``uv pip install``) into the venv of ``python``, which needs no pip of its own
    (``--without-pip``); byte-compiling is left to the first import."""
    return [find_uv_bin(), "pip", "install", "--quiet", "--python", python, *requirements]


def pip_install(python: Path, target: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pip install target`` into the venv of ``python``: the dependencies are found installed, nothing downloaded."""
    return subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", str(target)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def build_wheel(clone: Path, dist: Path) -> Path:
    """``pip wheel --no-deps .`` in ``clone``; return the wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(dist), "."],
        cwd=clone,
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("*.whl")
    return wheel


def install_the_apps(tmp: Path) -> Path:
    """Build the wheel from a fresh clone, install it into a new venv; return the venv's ``python``."""
    wheel = build_wheel(fresh_clone(tmp / "clone"), tmp / "dist")
    python = new_venv(tmp / "venv")
    installed = pip_install(python, wheel, tmp)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


def wheel_top_levels(wheel: Path) -> set[str]:
    """The top-level names ``wheel`` installs into site-packages (its ``.dist-info`` directory aside)."""
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")}


def standalone_copy(clone: Path, destination: Path) -> Path:
    """``oaifront`` and ``devhorde`` copied from ``clone`` into ``destination``, as the container image lays them
    out: a command run there (``cwd``) imports them from it and the apps from the venv."""
    for name in STANDALONE:
        shutil.copytree(clone / name, destination / name)
    return destination


def imported_from(python: Path, cwd: Path, packages: tuple[str, ...] = APPS) -> dict[str, str]:
    """Where ``python`` run in ``cwd`` imports each of ``packages`` (the distribution's) from."""
    code = "import importlib, sys; [print(importlib.import_module(name).__file__) for name in sys.argv[1:]]"
    found = subprocess.run(
        [python, "-c", code, *packages], cwd=cwd, check=True, capture_output=True, text=True, timeout=120
    ).stdout.split()
    return dict(zip(packages, found, strict=True))
