"""Django middleware of the front project (``oaifront.settings.MIDDLEWARE``).

Browser access (reference: Browser access) is django-cors-headers' ``CorsMiddleware``, configured by
``chat.cors_settings``; this module holds what the front does instead of Django's ``CommonMiddleware``, and Django's
security, CSRF and clickjacking middleware with their hooks run in the event loop.

Django's ``MiddlewareMixin`` is async-capable, but under ASGI it runs each ``process_request`` /
``process_response`` hook through ``sync_to_async(thread_sensitive=True)``, and ``BaseHandler`` wraps a synchronous
``process_view`` the same way: a thread hop per hook and a new executor thread per request. A profile of the
non-streamed path (bench/README.md) showed those hops as about 45 % of the front's CPU. The request and response
hooks of these three classes only read the request's headers and cookies and set response headers and cookies (no
I/O, nothing that blocks), so the subclasses below call Django's own hooks directly in the event loop: same code,
same behaviour, no thread. The CSRF view check stays in a thread where it can read a form body (see
:class:`CsrfViewMiddleware`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.middleware import clickjacking, csrf, security
from django.utils.deprecation import MiddlewareMixin

SAFE_METHODS: Final[frozenset[str]] = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""The methods Django's CSRF check accepts without looking at the request (RFC 9110 safe methods)."""

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


class EventLoopHooksMixin(MiddlewareMixin):
    """Call a ``MiddlewareMixin``'s hooks directly in an async chain instead of through ``sync_to_async``.

    Only for middleware whose hooks do no I/O and never block (see the module docstring). In a sync chain Django's
    ``MiddlewareMixin.__call__`` is unchanged.
    """

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        """``process_request``, the next handler, ``process_response``: Django's order, on the event loop."""
        response: HttpResponseBase | None = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await cast("Awaitable[HttpResponseBase]", self.get_response(request))
        process_response = getattr(self, "process_response", None)
        if process_response is not None:
            response = process_response(request, response)
        return response


class SecurityMiddleware(EventLoopHooksMixin, security.SecurityMiddleware):
    """Django's ``SecurityMiddleware`` (HSTS, nosniff, referrer and cross-origin opener policies, SSL redirect), its
    hooks on the event loop.
    """


class XFrameOptionsMiddleware(EventLoopHooksMixin, clickjacking.XFrameOptionsMiddleware):
    """Django's ``XFrameOptionsMiddleware`` (``X-Frame-Options``), its hook on the event loop."""


class CsrfViewMiddleware(EventLoopHooksMixin, csrf.CsrfViewMiddleware):
    """Django's ``CsrfViewMiddleware``, its cookie hooks on the event loop. ``process_view`` is a coroutine here, so
    Django's handler awaits it: for a ``csrf_exempt`` view (every API view) or a safe method it returns on the event
    loop, as Django's check does nothing there; any other request's check, which may parse a whole form body and
    render the 403 page, runs in a worker thread as Django would run it.
    """

    async def process_view(  # type: ignore[override]  # a coroutine: Django's handler awaits it in an async chain
        self,
        request: HttpRequest,
        callback: Callable[..., HttpResponseBase],
        callback_args: tuple[object, ...],
        callback_kwargs: dict[str, object],
    ) -> HttpResponseBase | None:
        """Django's check of an unsafe request (``csrf.CsrfViewMiddleware.process_view``)."""
        check = super().process_view
        if getattr(callback, "csrf_exempt", False) or request.method in SAFE_METHODS:
            return check(request, callback, callback_args, callback_kwargs)
        return await sync_to_async(check, thread_sensitive=False)(request, callback, callback_args, callback_kwargs)


EVENT_LOOP_SUBSTITUTES: dict[str, str] = {
    f"{cls.__mro__[2].__module__}.{cls.__mro__[2].__qualname__}": f"{cls.__module__}.{cls.__qualname__}"
    for cls in (SecurityMiddleware, CsrfViewMiddleware, XFrameOptionsMiddleware)
}
"""Django's middleware class path -> the subclass above that takes its place."""


class MiddlewareSetting(list[str]):
    """``settings.MIDDLEWARE`` that answers ``in`` for a Django middleware class path when the subclass of
    :data:`EVENT_LOOP_SUBSTITUTES` is listed instead.

    Django's deployment checks ask ``"django.middleware.security.SecurityMiddleware" in settings.MIDDLEWARE`` (and the
    same for the CSRF and clickjacking middleware) before checking HSTS, ``nosniff``, the referrer policy, secure CSRF
    cookies and ``X-Frame-Options``; with the subclasses listed under their own paths, ``check --deploy`` would
    report them missing and skip those checks. This keeps every one of Django's checks, in Django's code.
    """

    def __contains__(self, path: object) -> bool:
        return super().__contains__(path) or (
            isinstance(path, str) and super().__contains__(EVENT_LOOP_SUBSTITUTES.get(path, ""))
        )
