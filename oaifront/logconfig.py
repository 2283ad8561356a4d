"""Where the front's log records go: one Loguru sink on standard error at ``HORDE_OAI_LOG_LEVEL``.

Loguru's default sink prints every DEBUG record; :func:`configure_logging` replaces it with one at the configured
level (default INFO), plain text or, with ``HORDE_OAI_LOG_JSON``, one JSON object per record whose ``record.extra``
holds the values of the reference's log lines. Records of the standard ``logging`` module (Django, asyncio, httpx)
go to the same sink, except Django's bare request-refusal lines (``Bad Request: /v1/chat/completions``): the front's
own finished-request and refused-parameter lines already describe those requests. A Django record that carries an
exception (an unhandled error behind a 500) is kept, with its traceback. With ``HORDE_OAI_LOG_JSON``, uvicorn's own
loggers (:data:`UVICORN_LOGGERS`: its start-up and shutdown lines) lose the plain-text handlers uvicorn gave them and
go to the same sink, so every line the process writes once the application is loaded is JSON. uvicorn's access log is
off in either format (:data:`UVICORN_ACCESS_LOGGER`).
"""

from __future__ import annotations

import logging
import sys
from typing import Final

from loguru import logger

from chat.settings import FrontSettings
from oaifront.error_pages import strip_traceback

TEXT_FORMAT: Final[str] = "{time:YYYY-MM-DD HH:mm:ss.SSSZ} | {level: <8} | {name}:{function}:{line} - {message}"
"""The plain-text line of each record (the message last, so the reference's lines read whole). The time carries its
UTC offset (``+00:00`` with the front's ``TIME_ZONE``; a host project's own zone shows as its offset)."""

DJANGO_REQUEST_LOGGER: Final[str] = "django.request"
DISALLOWED_HOST_LOGGER: Final[str] = "django.security.DisallowedHost"
"""Django's logger of a refused ``Host``: its line is kept, its traceback dropped (oaifront.error_pages)."""
"""Django's logger of responses with a 4xx or 5xx status."""


UVICORN_LOGGERS: Final[tuple[str, ...]] = ("uvicorn", "uvicorn.error")
"""The loggers uvicorn configures with handlers of its own (uvicorn.config.LOGGING_CONFIG), but its access log."""

UVICORN_ACCESS_LOGGER: Final[str] = "uvicorn.access"
"""uvicorn's access log: a line per request with the client's address and the query string (where a client may put
its key, ``?apikey=...``). Always off, whatever the log format and uvicorn's ``--access-log``: the logger loses its
handlers and does not propagate, so uvicorn (which writes it only while the logger has a handler) writes nothing."""

QUIET_LOGGERS: Final[tuple[str, ...]] = ("httpx", "httpcore")
"""Libraries whose INFO line per call (one per Horde status read) would drown the front's own lines."""


class InterceptHandler(logging.Handler):
    """Sends standard ``logging`` records to Loguru, keeping their level and origin."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record`` through Loguru at its level, with its exception if any."""
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).log(level, record.getMessage())


def drop_bare_refusal_lines(record: logging.LogRecord) -> bool:
    """Keep a ``django.request`` record only when it carries an exception (the 500 of an unhandled error)."""
    return record.exc_info is not None


def configure_logging(settings: FrontSettings) -> None:
    """Replace Loguru's sinks with one on standard error at ``settings.log_level``; route ``logging`` to it."""
    logger.remove()
    if settings.log_json:
        logger.add(sys.stderr, level=settings.log_level, serialize=True, backtrace=False, diagnose=False)
    else:
        logger.add(sys.stderr, level=settings.log_level, format=TEXT_FORMAT, backtrace=False, diagnose=False)
    logging.basicConfig(handlers=[InterceptHandler()], level=logging.INFO, force=True)
    if settings.log_json:
        for name in UVICORN_LOGGERS:
            uvicorn_logger = logging.getLogger(name)
            uvicorn_logger.handlers.clear()
            uvicorn_logger.propagate = True
    access_log = logging.getLogger(UVICORN_ACCESS_LOGGER)
    access_log.handlers.clear()
    access_log.propagate = False
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    disallowed_host = logging.getLogger(DISALLOWED_HOST_LOGGER)
    if strip_traceback not in disallowed_host.filters:
        disallowed_host.addFilter(strip_traceback)
    django_request = logging.getLogger(DJANGO_REQUEST_LOGGER)
    if drop_bare_refusal_lines not in django_request.filters:
        django_request.addFilter(drop_bare_refusal_lines)
