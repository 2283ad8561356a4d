"""The chat completions app (``POST /v1/chat/completions``)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Final

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from loguru import logger

FRONT_LOG_MODULES: Final[tuple[str, ...]] = ("chat", "images", "models_list", "front_operations", "horde_sdk")
"""The modules whose Loguru records ``HORDE_OAI_LOG_LEVEL`` governs in a host project: the front's own and the Horde
SDK it calls on the host's behalf."""

LOGURU_DEFAULT_HANDLER: Final[int] = 0
"""The id of the handler Loguru adds at import (standard error, every record from DEBUG up), as its documentation
names it."""


def apply_front_log_level(level: str) -> bool:
    """Replace Loguru's default handler by one that writes the records of :data:`FRONT_LOG_MODULES` from ``level`` up
    and every other module's as the default did (from DEBUG up); the host's ``logging`` configuration is untouched.

    Returns False, changing nothing, when the default handler is gone (the front's own project configured Loguru, or
    the host did).
    """
    try:
        logger.remove(LOGURU_DEFAULT_HANDLER)
    except ValueError:
        return False
    levels: dict[str | None, str | int | bool] = {"": "DEBUG", **dict.fromkeys(FRONT_LOG_MODULES, level)}
    logger.add(sys.stderr, level=0, filter=levels)
    return True


WSGI_WARNING: Final[str] = (
    "The chat apps are served over WSGI: every stream: true request ends at once with FrontShuttingDown and each "
    "request holds a thread. Serve the project with an ASGI server: uvicorn <project>.asgi:application"
)
"""The one line logged at the first request a WSGI handler serves."""


def warn_once_under_wsgi(sender: type[Any], **kwargs: Any) -> None:
    """``request_started`` receiver, disconnected at its first call: logs :data:`WSGI_WARNING` when the handler that
    sends the signal (its ``sender``) is Django's WSGI one.
    """
    from django.core import signals  # noqa: PLC0415 -- loaded with the app registry
    from django.core.handlers.wsgi import WSGIHandler  # noqa: PLC0415 -- same

    signals.request_started.disconnect(warn_once_under_wsgi)
    if issubclass(sender, WSGIHandler):
        logger.warning(WSGI_WARNING)


class ChatConfig(AppConfig):
    """Django's registration of the chat completions app."""

    name = "chat"
    verbose_name = "Chat completions"

    def ready(self) -> None:
        """Disconnect django.db's per-request signal receivers: the front has no database (``DATABASES`` is empty),
        and under ASGI each sync receiver costs every request a hop to a worker thread. Register the front's system
        checks of :mod:`chat.checks` (``manage.py check``): settings, reachability, limits, browser access and
        ``runserver``; under a WSGI server, the first request logs :data:`WSGI_WARNING` (:func:`warn_once_under_wsgi`).
        Apply ``HORDE_OAI_LOG_LEVEL`` to the front's records (:func:`apply_front_log_level`); an invalid setting is
        left to the checks (``horde_oai.E002``, ``E003``) and to the entry points, which refuse it in one line.
        """
        from django.core import signals  # noqa: PLC0415 -- apps import in ready(), after the registry is populated
        from django.db import close_old_connections, reset_queries  # noqa: PLC0415 -- same

        signals.request_started.disconnect(reset_queries)
        signals.request_started.disconnect(close_old_connections)
        signals.request_finished.disconnect(close_old_connections)
        signals.request_started.connect(warn_once_under_wsgi)

        from chat.checks import register_checks  # noqa: PLC0415 -- the checks read the settings, ready once apps load
        from chat.settings import front_settings  # noqa: PLC0415 -- same

        register_checks()
        with contextlib.suppress(ImproperlyConfigured):
            apply_front_log_level(front_settings().log_level)
