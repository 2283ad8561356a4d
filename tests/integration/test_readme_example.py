"""The README's first example, run as written against the devhorde's ``default`` scenario (what ``make run``
serves) with Redis: the quick check answers ready, and the Python snippet (the official SDK, ``extra_body`` with
the ``horde`` options) prints the model list and two whole answers, not one cut at ``max_tokens`` by the reasoning.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT, Process, start_devhorde, start_front

pytestmark = pytest.mark.integration

README_URL = "http://127.0.0.1:8000"


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", (ROOT / "README.md").read_text(), flags=re.DOTALL | re.M)


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("readme")
    devhorde, horde_url = start_devhorde(tmp, scenario="default")
    processes: list[Process] = [devhorde]
    try:
        process, url = start_front(tmp, horde_url, env={"HORDE_OAI_KEEPALIVE_SECONDS": "10"})
        processes.append(process)
        yield url
    finally:
        for process in reversed(processes):
            process.stop()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_quick_check_answers_ready(front: str) -> None:
    (check,) = [block for block in readme_blocks("sh") if "/readyz" in block]
    assert check.strip() == f"curl -s {README_URL}/readyz"
    answer = subprocess.run(
        ["curl", "-s", f"{front}/readyz"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    assert json.loads(answer) == {"status": "ready", "checks": {"horde": "ok", "redis": "ok"}}


def test_the_python_example_prints_the_models_and_two_whole_answers(front: str) -> None:
    (snippet,) = [block for block in readme_blocks("python") if "extra_body" in block]
    assert 'extra_body={"horde": {' in snippet
    result = subprocess.run(
        [sys.executable, "-c", snippet.replace(README_URL, front)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    models, answer, streamed = result.stdout.splitlines()
    assert "devhorde/reasoner-8b" in models
    assert answer == streamed
    assert answer.endswith("."), f"cut: {answer!r}"
