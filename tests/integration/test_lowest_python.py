"""The lowest Python ``requires-python`` accepts (and ``bin/find-python`` picks) runs the front: the lowest such
interpreter installed here (on PATH or under pyenv) gets a venv with the runtime lock, imports the project and
validates a chat request and a Responses request. Skipped, saying so, when no interpreter older than the one running
the suite is installed (the suite's own run covers that one).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.installed import install_into

pytestmark = pytest.mark.integration

FLOOR = re.fullmatch(
    r">=(\d+)\.(\d+)", tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
)
"""``requires-python``'s floor (``>=3.12``)."""

PROBE = """
import django, os
os.environ["DJANGO_SETTINGS_MODULE"] = "oaifront.settings"
django.setup()
import oaifront.asgi, oaifront.urls
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.responses_api import ResponsesRequest
parts = [{"type": "text", "text": "hi"}]
request = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": parts}]})
print(request.messages[0].content[0].text, ResponsesRequest.model_validate({"model": "m", "input": "hi"}).input)
"""


def version_of(python: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys, venv; print(*sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    major, minor, micro = map(int, out.split())
    return major, minor, micro


def installed_pythons() -> dict[tuple[int, int, int], str]:
    """Every Python 3 on PATH or under pyenv that ``requires-python`` accepts, by version."""
    assert FLOOR is not None
    floor = (int(FLOOR[1]), int(FLOOR[2]), 0)
    candidates = [shutil.which(name) for name in ("python3", "python3.12", "python3.13", "python3.14")]
    candidates += [str(path) for path in (Path.home() / ".pyenv" / "versions").glob("3.*/bin/python3")]
    found = {version: path for path in candidates if path and (version := version_of(path))}
    return {version: path for version, path in found.items() if version >= floor}


def test_the_lowest_accepted_python_installed_imports_and_validates(tmp_path: Path) -> None:
    pythons = installed_pythons()
    lowest = min(pythons, default=None)
    if lowest is None or lowest >= sys.version_info[:3]:
        pytest.skip(f"no Python accepted by requires-python older than this one ({sys.version.split()[0]}) installed")
    venv = tmp_path / "venv"
    # No pip of the venv's own (ensurepip): the installer ``make install`` uses (uv) installs into it (``--python``),
    # and the modules are byte-compiled when the probe imports them.
    subprocess.run([pythons[lowest], "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        install_into(venv / "bin" / "python", "-r", "requirements.txt"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = subprocess.run(
        [venv / "bin" / "python", "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert (probe.returncode, probe.stdout, probe.stderr[-2000:]) == (0, "hi hi\n", "")
