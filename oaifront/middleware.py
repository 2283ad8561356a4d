"""Browser access (reference: Browser access): preflights answered, any origin allowed on every response.

``Access-Control-Allow-Origin: *`` and ``Access-Control-Expose-Headers: Retry-After, x-should-retry`` go on every
response, so a web client such as KoboldAI Lite can call the front with a bearer key and read the retry headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from chat.errors import CORS_HEADERS

type GetResponse = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]
"""The next handler of Django's middleware chain: sync, or async when the chain is."""

PREFLIGHT_MAX_AGE_SECONDS = 86400
"""How long a browser may reuse a preflight answer."""


class CorsMiddleware:
    """Answers ``OPTIONS`` preflights with 204 and adds the CORS headers to every response."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        """Answer a preflight or pass the request on, then add the headers (awaitable in an async chain)."""
        if self.is_async:
            return self._acall(request)
        if self._is_preflight(request):
            return self._finish(request, None)
        response = self.get_response(request)
        assert isinstance(response, HttpResponse)  # a sync chain's handler returns the response itself
        return self._finish(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if self._is_preflight(request):
            return self._finish(request, None)
        response = self.get_response(request)
        assert not isinstance(response, HttpResponse)  # an async chain's handler returns an awaitable
        return self._finish(request, await response)

    @staticmethod
    def _is_preflight(request: HttpRequest) -> bool:
        return request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers

    @staticmethod
    def _finish(request: HttpRequest, response: HttpResponse | None) -> HttpResponse:
        if response is None:
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response["Access-Control-Allow-Headers"] = request.headers.get(
                "Access-Control-Request-Headers", "Authorization, Content-Type"
            )
            response["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE_SECONDS)
        for name, value in CORS_HEADERS.items():
            response[name] = value
        return response


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
        """Run the rest of the chain (sync or async, as Django chose) and finish its response."""
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
