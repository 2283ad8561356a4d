"""The Redis database of the progress streams follows ``HORDE_OAI_REDIS_URL`` unless ``HORDE_OAI_STREAM_REDIS_DB``
is set, the start log line names it without a password, and ``HORDE_URL`` is checked before horde-sdk reads it."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from pydantic import ValidationError

from chat.horde.native import HordeApiRootWrong, HordeClient
from chat.settings import FrontSettings, describe_invalid_settings, redacted_url, redis_url_database
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("url", "database"),
    [
        ("redis://127.0.0.1:6379/6", 6),
        ("redis://127.0.0.1:6379", 0),
        ("redis://:secret@127.0.0.1:6379/2", 2),
        ("unix:///run/redis.sock?db=4", 4),
        (None, 0),
    ],
)
def test_the_stream_database_follows_the_url_when_the_variable_is_unset(
    url: str | None, database: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HORDE_OAI_STREAM_REDIS_DB", raising=False)
    if url is None:
        monkeypatch.delenv("HORDE_OAI_REDIS_URL", raising=False)
    else:
        monkeypatch.setenv("HORDE_OAI_REDIS_URL", url)
    assert FrontSettings().stream_redis_db == database
    assert redis_url_database(url) == database


def test_the_variable_wins_over_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HORDE_OAI_REDIS_URL", "redis://127.0.0.1:6379/6")
    monkeypatch.setenv("HORDE_OAI_STREAM_REDIS_DB", "0")
    settings = FrontSettings()
    assert settings.stream_redis_db == 0
    assert settings.describe_redis() == (
        "Redis: redis://127.0.0.1:6379/6; progress streams read on database 0 (HORDE_OAI_STREAM_REDIS_DB)"
    )


def test_the_start_line_never_shows_a_password() -> None:
    settings = FrontSettings(redis_url="redis://horde:s3cret@redis.example:6380/5")
    assert settings.describe_redis() == (
        "Redis: redis://horde:***@redis.example:6380/5; progress streams read on database 5 (the URL's database)"
    )
    assert redacted_url("rediss://:p@ss@h/1") == "rediss://:***@h/1"
    assert redacted_url("redis://h:6379/0") == "redis://h:6379/0"
    assert FrontSettings(redis_url=None).describe_redis() == (
        "Redis: none (HORDE_OAI_REDIS_URL unset): streams are delivered whole, the waiter re-reads on its timer"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not-a-url", "expected the Horde's API root as an http(s) URL, such as https://aihorde.net/api"),
        ("ftp://aihorde.net/api", "expected the Horde's API root as an http(s) URL, such as https://aihorde.net/api"),
        ("http://127.0.0.1:port/api", "not a URL (Port could not be cast to integer value as 'port')"),
    ],
)
def test_a_bad_horde_url_ends_in_the_fronts_one_line_error_before_horde_sdk_reads_it(value: str, problem: str) -> None:
    """``manage.py check`` (Django set up, settings read, apps imported) with a bad ``HORDE_URL``: the last line is
    the front's error and no frame of horde_model_reference's own settings appears."""
    env = {**os.environ, "HORDE_URL": value, "DJANGO_SETTINGS_MODULE": "oaifront.settings"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == (
        f"django.core.exceptions.ImproperlyConfigured: Invalid front configuration: HORDE_URL={value!r}: {problem}"
    )
    assert "horde_model_reference" not in result.stderr


def test_a_horde_url_set_in_settings_is_checked_too() -> None:
    with pytest.raises(ValidationError) as raised:
        FrontSettings(HORDE_URL="aihorde.net/api")
    assert describe_invalid_settings(raised.value) == (
        "Invalid front configuration: HORDE_URL='aihorde.net/api': expected the Horde's API root as an http(s) URL, "
        "such as https://aihorde.net/api"
    )


@pytest.mark.asyncio
async def test_a_404_without_the_hordes_body_says_the_api_root_looks_wrong() -> None:
    """A server answering 404 (HTML, or JSON without ``rc``) is not the Horde's API root: often ``/api`` is missing."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="<h1>Not Found</h1>")

    client = HordeClient("http://127.0.0.1:7001", "agent:1:x", 5, transport=httpx.MockTransport(handler))
    try:
        with pytest.raises(HordeApiRootWrong) as raised:
            await client.text_models()
    finally:
        await client.aclose()
    error = raised.value.to_error()
    assert (error.status, error.code) == (502, "HordeUnavailable")
    assert error.message == (
        "The Horde's API root looks wrong: http://127.0.0.1:7001 answered 404 Not Found to GET /v2/status/models. "
        "HORDE_URL must name the API root, which usually ends in /api (such as https://aihorde.net/api)."
    )
