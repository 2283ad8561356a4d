"""Settings that cannot be mistyped silently (chat.checks, chat.settings): an unknown ``HORDE_OAI_*`` variable or
``HORDE_OAI`` key is a warning naming the closest setting, ``HORDE_OAI`` of another type is an error, an invalid
value is one line, and ``HORDE_OAI_LOG_LEVEL`` governs the front's Loguru records in a host project.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from chat.checks import front_checks, mistyped_settings
from chat.settings import FrontSettings, front_settings, unknown_keys, unknown_variables

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_front_settings() -> Iterator[None]:
    front_settings.cache_clear()
    yield
    front_settings.cache_clear()


def test_an_unknown_variable_is_a_warning_naming_the_closest_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HORDE_OAI_KEEPALIVE_SECOND", "5")
    monkeypatch.setenv("HORDE_OAI_ZQX", "1")
    monkeypatch.setenv("HORDE_OAI_KEEPALIVE_SECONDS", "5")
    assert unknown_variables({"HORDE_OAI_KEEPALIVE_SECOND": "5", "HORDE_URL": "x", "OTHER": "y"}) == [
        ("HORDE_OAI_KEEPALIVE_SECOND", "HORDE_OAI_KEEPALIVE_SECONDS")
    ]
    warnings = [(w.id, w.msg, w.hint) for w in mistyped_settings()]
    assert warnings == [
        (
            "horde_oai.W007",
            "The environment variable HORDE_OAI_KEEPALIVE_SECOND is not one of the front's settings; it is ignored.",
            "Did you mean HORDE_OAI_KEEPALIVE_SECONDS?",
        ),
        (
            "horde_oai.W007",
            "The environment variable HORDE_OAI_ZQX is not one of the front's settings; it is ignored.",
            None,
        ),
    ]


def test_an_unknown_settings_dict_key_is_a_warning_naming_the_closest_field() -> None:
    assert unknown_keys({"keepalive_second": 5, "horde_url": "x"}) == [("keepalive_second", "keepalive_seconds")]
    with override_settings(HORDE_OAI={"keepalive_second": 5}):
        assert [(w.id, w.msg, w.hint) for w in mistyped_settings()] == [
            (
                "horde_oai.W008",
                "HORDE_OAI['keepalive_second'] is not one of the front's settings; it is ignored.",
                "Did you mean 'keepalive_seconds'?",
            )
        ]


def test_settings_given_as_a_string_are_an_error_not_the_public_horde() -> None:
    with override_settings(HORDE_OAI="http://127.0.0.1:7001/api"):
        with pytest.raises(ImproperlyConfigured) as caught:
            front_settings()
        assert str(caught.value) == (
            "HORDE_OAI must be a dict of the front's settings (such as {'horde_url': ...}) or a "
            "chat.settings.FrontSettings, not str"
        )
        assert [(e.id, e.msg) for e in front_checks(None)] == [("horde_oai.E002", str(caught.value))]


def test_a_bad_value_is_one_check_error_of_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HORDE_OAI_KEEPALIVE_SECONDS", "abc")
    with override_settings(HORDE_OAI=None):
        [error] = front_checks(None)
    assert (error.id, error.msg) == (
        "horde_oai.E003",
        "Invalid front configuration: HORDE_OAI_KEEPALIVE_SECONDS='abc': Input should be a valid number, unable to "
        "parse string as a number",
    )


def test_a_settings_dict_is_read_over_the_environment() -> None:
    with override_settings(HORDE_OAI={"keepalive_seconds": 7}):
        assert front_settings().keepalive_seconds == 7
    assert isinstance(FrontSettings(), FrontSettings)


LOG_PROBE = """
import sys
from loguru import logger
from chat.apps import apply_front_log_level
assert apply_front_log_level(sys.argv[1])
assert not apply_front_log_level(sys.argv[1])  # once only: the default handler is gone
front = ("chat.views.responses", "front_operations.readiness", "images.views", "horde_sdk.ai_horde_api")
names = (*front, "hostapp.views")
for name in names:
    log = logger.patch(lambda record, name=name: record.update(name=name))
    log.debug("debug from " + name)
    log.warning("warning from " + name)
"""


def test_the_log_level_governs_the_fronts_records_only() -> None:
    """In a fresh interpreter (Loguru's default handler in place, as in a host project): the front's modules and the
    Horde SDK write from ``HORDE_OAI_LOG_LEVEL`` up; another module's DEBUG records pass as before."""
    result = subprocess.run(
        [sys.executable, "-c", LOG_PROBE, "WARNING"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    messages = [line.rsplit(" - ", 1)[1] for line in result.stderr.splitlines()]
    assert messages == [
        "warning from chat.views.responses",
        "warning from front_operations.readiness",
        "warning from images.views",
        "warning from horde_sdk.ai_horde_api",
        "debug from hostapp.views",
        "warning from hostapp.views",
    ]


def host_process(args: list[str], variables: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HORDE_OAI")}
    env |= {"DJANGO_SETTINGS_MODULE": "tests.hostproject.settings", "HOST_PROJECT_DIR": str(tmp), **variables}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_host_projects_asgi_module_refuses_a_bad_value_in_one_line(tmp_path: Path) -> None:
    result = host_process(["-c", "import tests.hostproject.asgi"], {"HORDE_OAI_KEEPALIVE_SECONDS": "abc"}, tmp_path)
    assert (result.returncode, result.stderr) == (
        1,
        "Invalid front configuration: HORDE_OAI_KEEPALIVE_SECONDS='abc': Input should be a valid number, unable to "
        "parse string as a number\n",
    )


def test_a_host_projects_check_names_the_bad_value_and_the_typo_without_a_traceback(tmp_path: Path) -> None:
    variables = {"HORDE_OAI_KEEPALIVE_SECONDS": "abc", "HORDE_OAI_KEEPALIVE_SECOND": "3"}
    result = host_process(["-m", "django", "check"], variables, tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert (
        "?: (horde_oai.E003) Invalid front configuration: HORDE_OAI_KEEPALIVE_SECONDS='abc': Input should be a valid "
        "number, unable to parse string as a number\n" in result.stderr
    )
    assert (
        "?: (horde_oai.W007) The environment variable HORDE_OAI_KEEPALIVE_SECOND is not one of the front's settings; "
        "it is ignored.\n\tHINT: Did you mean HORDE_OAI_KEEPALIVE_SECONDS?\n" in result.stderr
    )
