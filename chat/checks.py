"""System checks (``manage.py check``) of a project serving the chat apps: the front's settings checked against the
world (tag ``horde_oai``) and browser access through django-cors-headers as :mod:`chat.cors_settings` configures it
(tag ``security``).

- ``horde_oai.W001``: the Horde does not answer ``GET /v2/status/heartbeat`` at ``HORDE_URL`` (a warning: the Horde
  may come up after the front).
- ``horde_oai.W002``: Redis does not answer ``PING`` at ``HORDE_OAI_REDIS_URL`` (a warning, likewise).
- ``horde_oai.W003`` to ``W006``: limits that contradict each other (a per-client cap above the total cap, a keepalive
  interval or a recheck interval not shorter than the timeout it runs within, a grace not shorter than the stream
  timeout).
- ``horde_oai.W007``: a ``HORDE_OAI_*`` environment variable no setting reads (a typo), naming the closest one.
- ``horde_oai.W008``: a key of the ``HORDE_OAI`` settings dict that names no setting, naming the closest one.
- ``horde_oai.E002``: ``HORDE_OAI`` is neither a dict of settings nor a ``FrontSettings``.
- ``horde_oai.E003``: a setting's value is invalid (one line per value); the other front checks are skipped.
- ``horde_oai.W009``: ``manage.py runserver`` without an ASGI server behind it (Django's own is WSGI: every
  ``stream: true`` ends at once with ``FrontShuttingDown``); :data:`ASGI_COMMAND` serves the project instead.
- ``horde_oai.E001`` (``--deploy`` only): ``DJANGO_SECRET_KEY`` unset outside debug.
- ``chat.W001`` to ``chat.W004``: the project would not give browsers the access the front promises.

No message holds a Redis password or an API key: the Redis URL is shown without its credentials.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from pydantic_settings import BaseSettings
from redis import Redis

from chat import cors_settings
from chat.settings import FrontSettings, front_settings, unknown_keys, unknown_variables

CORS_MIDDLEWARE = "corsheaders.middleware.CorsMiddleware"
"""django-cors-headers' middleware path."""

HINT = (
    'Install django-cors-headers, add "corsheaders" to INSTALLED_APPS and its CorsMiddleware to MIDDLEWARE, and '
    "`from chat.cors_settings import *` in the settings module (see chat/cors_settings.py)."
)


def check_browser_access(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn (``chat.W001``-``chat.W004``) where the project would not give browsers the access the front promises."""
    problems: list[CheckMessage] = []
    if "corsheaders" not in settings.INSTALLED_APPS:
        problems.append(Warning("django-cors-headers is not in INSTALLED_APPS.", hint=HINT, id="chat.W001"))
    if CORS_MIDDLEWARE not in settings.MIDDLEWARE:
        problems.append(Warning(f"{CORS_MIDDLEWARE} is not in MIDDLEWARE.", hint=HINT, id="chat.W002"))
    if not getattr(settings, "CORS_ALLOW_ALL_ORIGINS", False):
        problems.append(
            Warning(
                "CORS_ALLOW_ALL_ORIGINS is not True: browser clients of the front are refused.",
                hint=HINT,
                id="chat.W003",
            )
        )
    exposed = {name.lower() for name in getattr(settings, "CORS_EXPOSE_HEADERS", ())}
    allowed = {name.lower() for name in getattr(settings, "CORS_ALLOW_HEADERS", ())}
    missing = [name for name in cors_settings.CORS_EXPOSE_HEADERS if name.lower() not in exposed]
    missing += [name for name in cors_settings.CORS_ALLOW_HEADERS if name not in allowed]
    if missing:
        problems.append(
            Warning(
                "CORS_EXPOSE_HEADERS or CORS_ALLOW_HEADERS lacks " + ", ".join(missing) + ".", hint=HINT, id="chat.W004"
            )
        )
    return problems


CHECK_TIMEOUT_SECONDS = 3.0
"""How long each reachability check waits."""


def redacted_url(url: str) -> str:
    """``url`` without its user and password (``redis://:secret@host:6379/0`` -> ``redis://host:6379/0``)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def limit_warnings(front: FrontSettings) -> list[CheckMessage]:
    """Settings that are each valid but contradict each other."""
    found: list[CheckMessage] = []
    if front.max_in_flight_per_client > front.max_in_flight:
        found.append(
            Warning(
                f"HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT ({front.max_in_flight_per_client}) is above "
                f"HORDE_OAI_MAX_IN_FLIGHT ({front.max_in_flight}); the total cap applies first.",
                id="horde_oai.W003",
            )
        )
    if front.keepalive_seconds >= front.stream_timeout_seconds:
        found.append(
            Warning(
                f"HORDE_OAI_KEEPALIVE_SECONDS ({front.keepalive_seconds:g}) is not shorter than "
                f"HORDE_OAI_STREAM_TIMEOUT_SECONDS ({front.stream_timeout_seconds:g}); a waiting stream sends no "
                "keepalive.",
                id="horde_oai.W004",
            )
        )
    shortest = min(front.nonstream_timeout_seconds, front.stream_timeout_seconds)
    if front.signal_recheck_seconds >= shortest:
        found.append(
            Warning(
                f"HORDE_OAI_SIGNAL_RECHECK_SECONDS ({front.signal_recheck_seconds:g}) is not shorter than the shortest "
                f"request timeout ({shortest:g}); without Redis signals a request is read once before it times out.",
                id="horde_oai.W005",
            )
        )
    if front.fail_fast_grace_seconds >= front.stream_timeout_seconds:
        found.append(
            Warning(
                f"HORDE_OAI_FAIL_FAST_GRACE_SECONDS ({front.fail_fast_grace_seconds:g}) is not shorter than "
                f"HORDE_OAI_STREAM_TIMEOUT_SECONDS ({front.stream_timeout_seconds:g}); the timeout ends the grace "
                "first.",
                id="horde_oai.W006",
            )
        )
    return found


def horde_warning(front: FrontSettings) -> list[CheckMessage]:
    """W001 when the Horde does not answer its heartbeat."""
    try:
        response = httpx.get(f"{front.horde_url}/v2/status/heartbeat", timeout=CHECK_TIMEOUT_SECONDS)
        response.raise_for_status()
    except (httpx.HTTPError, ValueError) as error:
        return [
            Warning(
                f"The Horde at {redacted_url(front.horde_url)} does not answer GET /v2/status/heartbeat "
                f"({type(error).__name__}).",
                hint="Start the Horde or set HORDE_URL; until then requests get 502 HordeUnavailable.",
                id="horde_oai.W001",
            )
        ]
    return []


def redis_warning(front: FrontSettings) -> list[CheckMessage]:
    """W002 when ``HORDE_OAI_REDIS_URL`` is set and Redis does not answer ``PING``."""
    if not front.redis_url:
        return []
    client = Redis.from_url(
        front.redis_url, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, socket_timeout=CHECK_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except Exception as error:  # noqa: BLE001 - any failure is the warning; its type names it
        return [
            Warning(
                f"Redis at {redacted_url(front.redis_url)} does not answer PING ({type(error).__name__}).",
                hint="Without it, streams are delivered whole and the waiter re-reads on its timer.",
                id="horde_oai.W002",
            )
        ]
    finally:
        client.close()
    return []


def did_you_mean(closest: str | None) -> str | None:
    """The hint naming the closest known name, if any."""
    return f"Did you mean {closest}?" if closest else None


def mistyped_settings() -> list[CheckMessage]:
    """W007 for each unknown ``HORDE_OAI_*`` variable, W008 for each unknown key of the ``HORDE_OAI`` dict."""
    found: list[CheckMessage] = [
        Warning(
            f"The environment variable {name} is not one of the front's settings; it is ignored.",
            hint=did_you_mean(known),
            id="horde_oai.W007",
        )
        for name, known in unknown_variables(os.environ)
    ]
    configured = getattr(settings, "HORDE_OAI", None)
    if isinstance(configured, dict):
        found += [
            Warning(
                f"HORDE_OAI[{key!r}] is not one of the front's settings; it is ignored.",
                hint=did_you_mean(known and repr(known)),
                id="horde_oai.W008",
            )
            for key, known in unknown_keys(configured)
        ]
    return found


ASGI_COMMAND: Final[str] = "uvicorn <project>.asgi:application --host 127.0.0.1 --port 8000"
"""How to serve a project with the apps (its ``asgi.py`` wraps Django's application with
``chat.asgi.with_front_lifespan``)."""

ASGI_RUNSERVER_APPS: Final[tuple[str, ...]] = ("daphne",)
"""Apps that make ``runserver`` serve ASGI (Daphne replaces the command)."""


def runserver_warning(argv: Sequence[str]) -> list[CheckMessage]:
    """W009 when the process is ``manage.py runserver`` and no app in :data:`ASGI_RUNSERVER_APPS` makes it ASGI."""
    if argv[1:2] != ["runserver"] or any(app in settings.INSTALLED_APPS for app in ASGI_RUNSERVER_APPS):
        return []
    return [
        Warning(
            "runserver serves WSGI: the chat apps need an ASGI server, and every stream: true request would end at "
            "once with FrontShuttingDown.",
            hint=f"Serve the project with {ASGI_COMMAND}.",
            id="horde_oai.W009",
        )
    ]


def front_checks(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    """The settings, reachability and consistency checks of the module docstring."""
    mistyped = [*mistyped_settings(), *runserver_warning(sys.argv)]
    configured = getattr(settings, "HORDE_OAI", None)
    try:
        front = front_settings()
    except ImproperlyConfigured as invalid:
        not_a_dict = configured is not None and not isinstance(configured, dict | BaseSettings)
        return [*mistyped, Error(str(invalid), id="horde_oai.E002" if not_a_dict else "horde_oai.E003")]
    return [*mistyped, *limit_warnings(front), *horde_warning(front), *redis_warning(front)]


def secret_key_check(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    """E001 (deploy): ``DJANGO_SECRET_KEY`` must be set outside debug."""
    if settings.DEBUG or getattr(settings, "SECRET_KEY_IS_SET", True):
        return []
    return [
        Error(
            "DJANGO_SECRET_KEY is not set; each process uses a random key of its own.",
            hint="Set DJANGO_SECRET_KEY to a long random value shared by every process of the deployment.",
            id="horde_oai.E001",
        )
    ]


def register_checks() -> None:
    """Register the checks (called from chat.apps.ChatConfig.ready)."""
    register(front_checks, "horde_oai")
    register(secret_key_check, Tags.security, deploy=True)
    register(check_browser_access, Tags.security)
