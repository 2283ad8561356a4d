"""A setting the front or the devhorde cannot use ends the process with ONE line naming the variable, the value and
what is expected, and status 1: through ``uvicorn oaifront.asgi:application``, ``manage.py``, ``python -m
devhorde`` and ``uvicorn devhorde.asgi:application`` (``make run`` is in test_make_run.py). Each case is a real
process; no traceback, nothing else on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.integration

REDIS_SCHEMES = "Redis URL must specify one of the following schemes (redis://, rediss://, unix://)"

FRONT_CASES = [
    (
        "HORDE_OAI_KEEPALIVE_SECONDS",
        "ten",
        "Invalid front configuration: HORDE_OAI_KEEPALIVE_SECONDS='ten': Input should be a valid number, unable to "
        "parse string as a number",
    ),
    (
        "HORDE_OAI_REDIS_URL",
        "127.0.0.1:6379",
        "Invalid front configuration: HORDE_OAI_REDIS_URL='127.0.0.1:6379': expected a Redis URL such as "
        f"redis://127.0.0.1:6379/0: {REDIS_SCHEMES}",
    ),
    (
        "HORDE_URL",
        "aihorde.net/api",
        "Invalid front configuration: HORDE_URL='aihorde.net/api': expected the Horde's API root as an http(s) URL, "
        "such as https://aihorde.net/api",
    ),
    (
        "DJANGO_SECURE_HSTS_SECONDS",
        "ten",
        "Invalid front configuration: DJANGO_SECURE_HSTS_SECONDS='ten': expected a whole number of seconds, 0 (off) "
        "or more",
    ),
    (
        "DJANGO_BEHIND_TLS_PROXY",
        "ture",
        "Invalid front configuration: DJANGO_BEHIND_TLS_PROXY='ture': expected true or false (also 1/0, yes/no, "
        "on/off), or unset for off",
    ),
]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """``args`` in the checkout with ``env`` over this environment (no Redis or Horde settings of its own)."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in {"HORDE_URL", "HORDE_OAI_REDIS_URL", "DEVHORDE_SCENARIO", "DJANGO_SETTINGS_MODULE"}
    }
    return subprocess.run(args, cwd=ROOT, env=clean | env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("variable", "value", "line"), FRONT_CASES, ids=[case[0] for case in FRONT_CASES])
def test_uvicorn_refuses_a_bad_setting_in_one_line(variable: str, value: str, line: str) -> None:
    result = run(
        [sys.executable, "-m", "uvicorn", "oaifront.asgi:application", "--port", str(free_port())], **{variable: value}
    )
    assert (result.returncode, result.stderr, result.stdout) == (1, line + "\n", "")


@pytest.mark.parametrize(("variable", "value", "line"), FRONT_CASES, ids=[case[0] for case in FRONT_CASES])
def test_manage_py_refuses_a_bad_setting_in_one_line(variable: str, value: str, line: str) -> None:
    result = run([sys.executable, "manage.py", "check"], **{variable: value})
    assert (result.returncode, result.stderr, result.stdout) == (1, line + "\n", "")


BUNDLED = "aihorde, busy, deep-queue, default, fast, flaky, images, older-horde, text-only"


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            [],
            {"DEVHORDE_SCENARIO": "buzy"},
            "Invalid devhorde configuration: DEVHORDE_SCENARIO='buzy': no such scenario file, and no bundled "
            f"scenario of that name: expected a scenario file or one of {BUNDLED}",
        ),
        (
            ["--scenario", "buzy"],
            {},
            "Invalid devhorde configuration: --scenario='buzy': no such scenario file, and no bundled scenario of "
            f"that name: expected a scenario file or one of {BUNDLED}",
        ),
        (
            [],
            {"DEVHORDE_PORT": "seven"},
            "Invalid devhorde configuration: DEVHORDE_PORT='seven': expected a whole number, 0 or more",
        ),
        (
            ["--redis-url", "127.0.0.1:6379"],
            {},
            "Invalid devhorde configuration: --redis-url='127.0.0.1:6379': expected a Redis URL such as "
            f"redis://127.0.0.1:6379/0: {REDIS_SCHEMES}",
        ),
    ],
    ids=["DEVHORDE_SCENARIO", "--scenario", "DEVHORDE_PORT", "--redis-url"],
)
def test_the_devhorde_refuses_a_bad_option_in_one_line(args: list[str], env: dict[str, str], line: str) -> None:
    result = run([sys.executable, "-m", "devhorde", "--check", *args], **env)
    assert (result.returncode, result.stderr, result.stdout) == (1, line + "\n", "")


def test_the_devhorde_check_accepts_a_bundled_scenario_by_name() -> None:
    result = run([sys.executable, "-m", "devhorde", "--check"], DEVHORDE_SCENARIO="busy")
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")


ASGI_DEVHORDE_CASES = [
    (
        "DEVHORDE_SCENARIO",
        "buzy",
        "Invalid devhorde configuration: DEVHORDE_SCENARIO='buzy': no such scenario file, and no bundled scenario of "
        f"that name: expected a scenario file or one of {BUNDLED}",
    ),
    (
        "DEVHORDE_REDIS_URL",
        "127.0.0.1:6379",
        "Invalid devhorde configuration: DEVHORDE_REDIS_URL='127.0.0.1:6379': expected a Redis URL such as "
        f"redis://127.0.0.1:6379/0: {REDIS_SCHEMES}",
    ),
    (
        "DEVHORDE_STREAM_REDIS_DB",
        "six",
        "Invalid devhorde configuration: DEVHORDE_STREAM_REDIS_DB='six': expected a whole number, 0 or more",
    ),
]


@pytest.mark.parametrize(
    ("variable", "value", "line"), ASGI_DEVHORDE_CASES, ids=[case[0] for case in ASGI_DEVHORDE_CASES]
)
def test_the_devhorde_asgi_entry_refuses_a_bad_variable_in_one_line(variable: str, value: str, line: str) -> None:
    """``uvicorn devhorde.asgi:application`` reads the devhorde's variables as ``python -m devhorde`` does and refuses
    a value it cannot use the same way: one line on stderr, status 1, no traceback (issue 25).
    """
    result = run(
        [sys.executable, "-m", "uvicorn", "devhorde.asgi:application", "--port", str(free_port())],
        **{variable: value},
    )
    assert (result.returncode, result.stderr, result.stdout) == (1, line + "\n", "")
