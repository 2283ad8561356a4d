"""Every error page in OpenAI's envelope, whatever ``DJANGO_DEBUG`` says.

Django answers some failures with its own HTML: a disallowed ``Host`` (400 "Bad Request (400)", or the debug page),
an unknown path and an unhandled error under ``DEBUG`` (the technical 404 and 500 pages). An API client or a probe
reads none of them. :class:`JsonErrorPagesMiddleware`, the outermost middleware, turns any HTML 400, 404 or 500 into
the envelope of the front's own handlers (front_operations.views): 400 ``BadRequest``, 404 ``unknown_url``, 500
``internal_error``. The documentation pages (``/docs``, ``/redoc``) are HTML on purpose and never error pages.

The disallowed-Host line of ``django.security.DisallowedHost`` is kept (once per request) without its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from asgiref.sync import markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from chat import errors
from front_operations.views import not_found, server_error

HTML_ERROR_STATUSES: Final[frozenset[int]] = frozenset({400, 404, 500})
"""The statuses whose HTML pages are replaced."""

REFUSED_REQUEST_MESSAGE: Final[str] = (
    "The request was refused before it reached a route: its Host header names a host this front does not serve "
    "(DJANGO_ALLOWED_HOSTS), or it could not be read."
)
"""The message of Django's own 400 (a disallowed Host is the usual cause)."""


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponseBase:
    """400 ``BadRequest`` for a request Django refused before any view, such as a disallowed ``Host``."""
    return errors.failure(errors.BAD_REQUEST, REFUSED_REQUEST_MESSAGE).to_response()


class JsonErrorPagesMiddleware:
    """Replaces Django's HTML 400, 404 and 500 pages with OpenAI's error envelope (see the module docstring)."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]]) -> None:
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """The response, or the envelope in place of an HTML 400, 404 or 500 page."""
        response = await self.get_response(request)
        if response.status_code not in HTML_ERROR_STATUSES:
            return response
        if not str(response.get("Content-Type", "")).startswith("text/html"):
            return response
        if response.status_code == 400:
            return bad_request(request)
        if response.status_code == 404:
            return not_found(request)
        return server_error(request)


def strip_traceback(record: logging.LogRecord) -> bool:
    """Keep the record, without its traceback (a disallowed Host is the client's mistake, not the front's)."""
    record.exc_info = None
    record.exc_text = None
    return True
