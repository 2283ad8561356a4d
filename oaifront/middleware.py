"""Django middleware of the front project (``oaifront.settings.MIDDLEWARE``).

Browser access (reference: Browser access) is django-cors-headers' ``CorsMiddleware``, configured by
``chat.cors_settings``; this module holds what the front does instead of Django's ``CommonMiddleware``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

type GetResponse = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]
"""The next handler of Django's middleware chain: sync, or async when the chain is."""


class CommonMiddleware:
    """What Django's ``CommonMiddleware`` does for this front, natively async (Django's runs its hooks in a thread
    per request under ASGI, the largest per-request cost a profile of the non-streamed path showed).

    With ``APPEND_SLASH`` and ``PREPEND_WWW`` off and no ``DISALLOWED_USER_AGENTS`` (oaifront.settings), that is:
    the ``ALLOWED_HOSTS`` check of ``request.get_host()`` (``DisallowedHost``, which Django answers with 400), and
    ``Content-Length`` on every response that is not streamed.
    """

    async_capable = True
    sync_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        """Check the host, pass the request on, then add ``Content-Length`` (awaitable in an async chain)."""
        if self.is_async:
            return self._acall(request)
        request.get_host()
        return self._finish(cast("HttpResponseBase", self.get_response(request)))

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request.get_host()
        return self._finish(await cast("Awaitable[HttpResponseBase]", self.get_response(request)))

    @staticmethod
    def _finish(response: HttpResponseBase) -> HttpResponseBase:
        if isinstance(response, HttpResponse) and not response.has_header("Content-Length"):
            response.headers["Content-Length"] = str(len(response.content))
        return response
