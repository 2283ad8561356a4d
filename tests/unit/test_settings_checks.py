"""Settings that cannot hurt: validation at start, ``manage.py check`` and ``check --deploy`` (chat.checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings
from pydantic import ValidationError

from chat.checks import horde_warning, limit_warnings, redacted_url, redis_warning, secret_key_check
from chat.settings import FrontSettings, describe_invalid_settings
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("HORDE_OAI_SIGNAL_RECHECK_SECONDS", "0", "Input should be greater than 0"),
        ("HORDE_OAI_KEEPALIVE_SECONDS", "-1", "Input should be greater than 0"),
        ("HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS", "nan", "Input should be a finite number"),
        ("HORDE_OAI_HORDE_TIMEOUT_SECONDS", "ten", "Input should be a valid number"),
        ("HORDE_OAI_MAX_IN_FLIGHT", "0", "Input should be greater than 0"),
        ("HORDE_OAI_FAIL_FAST_GRACE_SECONDS", "-0.5", "Input should be greater than or equal to 0"),
        ("HORDE_OAI_LOG_LEVEL", "LOUD", "Input should be 'TRACE'"),
        ("HORDE_OAI_REDIS_URL", "127.0.0.1:6379", "expected a Redis URL such as redis://127.0.0.1:6379/0: Redis URL"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        FrontSettings()
    line = describe_invalid_settings(caught.value)
    assert "\n" not in line
    assert line.startswith(f"Invalid front configuration: {variable}={value!r}: {message}")


@pytest.mark.parametrize("variable", ["HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS", "HORDE_OAI_MODELS_CACHE_SECONDS"])
def test_zero_is_allowed_where_it_means_off(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "0")
    FrontSettings()


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        (
            {"HORDE_OAI_SIGNAL_RECHECK_SECONDS": "0"},
            "Invalid front configuration: HORDE_OAI_SIGNAL_RECHECK_SECONDS='0': Input should be greater than 0",
        ),
        (
            {"PYROSCOPE_ENABLED": "true", "PYROSCOPE_SAMPLE_RATE": "ten"},
            "Invalid front configuration: PYROSCOPE_SAMPLE_RATE='ten': expected a whole number of samples a second, "
            "1 or more (default 100)",
        ),
    ],
    ids=["front-setting", "pyroscope-sample-rate"],
)
def test_the_process_refuses_to_start_with_one_line(variables: dict[str, str], line: str) -> None:
    """A setting read while ``oaifront.asgi`` starts, the front's own or telemetry's (``PYROSCOPE_SAMPLE_RATE``, read
    only with ``PYROSCOPE_ENABLED=true``): one line, status 1, no traceback."""
    env = {**os.environ, **variables, "DJANGO_SETTINGS_MODULE": "oaifront.settings"}
    result = subprocess.run(
        [sys.executable, "-c", "import oaifront.asgi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stderr) == (1, line + "\n")


def test_contradicting_limits_are_warnings() -> None:
    front = FrontSettings(
        max_in_flight=10,
        max_in_flight_per_client=20,
        keepalive_seconds=700,
        signal_recheck_seconds=400,
        fail_fast_grace_seconds=600,
    )
    assert [warning.id for warning in limit_warnings(front)] == [
        "horde_oai.W003",
        "horde_oai.W004",
        "horde_oai.W005",
        "horde_oai.W006",
    ]
    assert limit_warnings(FrontSettings()) == []


def test_unreachable_horde_and_redis_are_warnings_without_credentials() -> None:
    front = FrontSettings(
        horde_url=f"http://127.0.0.1:{free_port()}/api", redis_url=f"redis://:pw-secret@127.0.0.1:{free_port()}/0"
    )
    [horde] = horde_warning(front)
    [redis] = redis_warning(front)
    assert (horde.id, redis.id) == ("horde_oai.W001", "horde_oai.W002")
    assert "pw-secret" not in redis.msg and "127.0.0.1" in redis.msg
    assert redacted_url("redis://user:pw@example.org:6380/2") == "redis://example.org:6380/2"
    assert redis_warning(FrontSettings(redis_url=None)) == []


def test_the_secret_key_is_required_by_the_deploy_check_outside_debug() -> None:
    with override_settings(DEBUG=False, SECRET_KEY_IS_SET=False):
        assert [error.id for error in secret_key_check(None)] == ["horde_oai.E001"]
    with override_settings(DEBUG=True, SECRET_KEY_IS_SET=False):
        assert secret_key_check(None) == []
    with override_settings(DEBUG=False, SECRET_KEY_IS_SET=True):
        assert secret_key_check(None) == []


def test_check_deploy_is_clean_with_the_projects_settings() -> None:
    env = {
        **os.environ,
        "DJANGO_SECRET_KEY": "a-long-random-deployment-key-" + "x" * 40,
        "HORDE_URL": f"http://127.0.0.1:{free_port()}/api",
    }
    env.pop("HORDE_OAI_REDIS_URL", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING", "--tag", "security"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("", False),
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("on", True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("Off", False),
    ],
)
def test_a_django_switch_reads_true_and_false(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    """``DJANGO_DEBUG``, ``DJANGO_SECURE_SSL_REDIRECT`` and ``DJANGO_BEHIND_TLS_PROXY`` (oaifront.settings.switch):
    ``false`` is off (``DJANGO_BEHIND_TLS_PROXY=false`` once trusted the proxy header, as any non-empty value did)."""
    from oaifront.settings import switch

    monkeypatch.setenv("DJANGO_BEHIND_TLS_PROXY", value)
    assert switch("DJANGO_BEHIND_TLS_PROXY") is on


def test_a_django_switch_refuses_anything_else_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from oaifront.settings import switch

    monkeypatch.setenv("DJANGO_DEBUG", "ture")
    with pytest.raises(ImproperlyConfigured) as refused:
        switch("DJANGO_DEBUG")
    assert str(refused.value) == (
        "Invalid front configuration: DJANGO_DEBUG='ture': expected true or false (also 1/0, yes/no, on/off), or "
        "unset for off"
    )
