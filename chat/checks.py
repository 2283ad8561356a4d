"""System checks (``manage.py check``) of a project serving the chat apps: browser access through
django-cors-headers as :mod:`chat.cors_settings` configures it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Warning

from chat import cors_settings

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
