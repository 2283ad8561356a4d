"""Django middleware of the front project (``oaifront.settings.MIDDLEWARE``).

Browser access (reference: Browser access) is django-cors-headers' ``CorsMiddleware``, configured by
``chat.cors_settings``; this module holds what the front does instead of Django's ``CommonMiddleware``, and Django's
security, CSRF and clickjacking middleware with their hooks run in the event loop.

Django's ``MiddlewareMixin`` is async-capable, but under ASGI it runs each ``process_request`` /
``process_response`` hook through ``sync_to_async(thread_sensitive=True)``, and ``BaseHandler`` wraps a synchronous
``process_view`` the same way: a thread hop per hook and a new executor thread per request. A profile of the
non-streamed path (bench/README.md) showed those hops as about 45 % of the front's CPU. The request and response
hooks of these three classes only read the request's headers and cookies and set response headers and cookies (no
I/O, nothing that blocks), so the async middleware below (:class:`EventLoopHooks`) call Django's own hooks directly
in the event loop: same code, same behaviour, no thread. The CSRF view check stays in a thread where it can read a
form body (see :class:`CsrfViewMiddleware`). Django's deployment checks that its own classes are listed are silenced
by name in the settings (:data:`SUBSTITUTED_CHECKS`); :func:`check_as_djangos_middleware` runs the ones they guard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Tags, register
from django.core.checks.security import base
from django.core.checks.security import csrf as csrf_checks
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


class EventLoopHooks:
    """An async middleware as Django documents it (``async_capable``, not ``sync_capable``,
    ``markcoroutinefunction``) that calls the hooks of one of Django's middleware (:attr:`hooks_of`, made with the
    same ``get_response``) on the event loop, in Django's order: ``process_request``, the next handler,
    ``process_response``. Only for middleware whose hooks do no I/O and never block (see the module docstring). In a
    sync chain (WSGI) Django adapts it as it adapts any async-only middleware.
    """

    sync_capable = False
    async_capable = True
    hooks_of: type[MiddlewareMixin]
    """Django's middleware whose hooks run here."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.hooks = self.hooks_of(get_response)
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """``process_request``, the next handler, ``process_response``."""
        response: HttpResponseBase | None = None
        process_request = getattr(self.hooks, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await cast("Awaitable[HttpResponseBase]", self.get_response(request))
        process_response = getattr(self.hooks, "process_response", None)
        if process_response is not None:
            response = process_response(request, response)
        return response


class SecurityMiddleware(EventLoopHooks):
    """Django's ``SecurityMiddleware`` (HSTS, nosniff, referrer and cross-origin opener policies, SSL redirect), its
    hooks on the event loop.
    """

    hooks_of = security.SecurityMiddleware


class XFrameOptionsMiddleware(EventLoopHooks):
    """Django's ``XFrameOptionsMiddleware`` (``X-Frame-Options``), its hook on the event loop."""

    hooks_of = clickjacking.XFrameOptionsMiddleware


class CsrfViewMiddleware(EventLoopHooks):
    """Django's ``CsrfViewMiddleware``, its cookie hooks on the event loop. ``process_view`` is a coroutine here, so
    Django's handler awaits it: for a ``csrf_exempt`` view (every API view) or a safe method it returns on the event
    loop, as Django's check does nothing there; any other request's check, which may parse a whole form body and
    render the 403 page, runs in a worker thread as Django would run it.
    """

    hooks_of = csrf.CsrfViewMiddleware

    async def process_view(
        self,
        request: HttpRequest,
        callback: Callable[..., HttpResponseBase],
        callback_args: tuple[object, ...],
        callback_kwargs: dict[str, object],
    ) -> HttpResponseBase | None:
        """Django's check of an unsafe request (``csrf.CsrfViewMiddleware.process_view``)."""
        check = cast("csrf.CsrfViewMiddleware", self.hooks).process_view
        if getattr(callback, "csrf_exempt", False) or request.method in SAFE_METHODS:
            return check(request, callback, callback_args, callback_kwargs)
        return await sync_to_async(check, thread_sensitive=False)(request, callback, callback_args, callback_kwargs)


SUBSTITUTES: Final[dict[str, str]] = {
    "django.middleware.security.SecurityMiddleware": "oaifront.middleware.SecurityMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware": "oaifront.middleware.CsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": "oaifront.middleware.XFrameOptionsMiddleware",
}
"""Django's middleware class path -> the class above that takes its place in ``settings.MIDDLEWARE``."""

SUBSTITUTED_CHECKS: Final[tuple[str, ...]] = ("security.W001", "security.W002", "security.W003")
"""Django's deployment checks that ``settings.MIDDLEWARE`` lists its security, clickjacking and CSRF middleware:
the front lists :data:`SUBSTITUTES` instead, so its settings silence these three by name and
:func:`check_as_djangos_middleware` runs the checks they guard."""


@register(Tags.security, deploy=True)
def check_as_djangos_middleware(app_configs: Sequence[AppConfig] | None, **kwargs: object) -> list[CheckMessage]:
    """Django's own deployment checks of the security, CSRF and clickjacking settings (HSTS, nosniff, SSL redirect,
    referrer and cross-origin opener policies, ``X-Frame-Options``, secure CSRF cookie), run with Django's middleware
    paths in place of :data:`SUBSTITUTES`: Django skips them when its own classes are not listed.
    """
    listed = list(settings.MIDDLEWARE)
    if not any(path in listed for path in SUBSTITUTES.values()):
        return []
    from django.test.utils import override_settings  # noqa: PLC0415 - Django's test utilities, for this check alone

    djangos = [next((django for django, ours in SUBSTITUTES.items() if ours == path), path) for path in listed]
    with override_settings(MIDDLEWARE=djangos):
        checks = (
            base.check_sts,
            base.check_sts_include_subdomains,
            base.check_sts_preload,
            base.check_content_type_nosniff,
            base.check_ssl_redirect,
            base.check_xframe_deny,
            base.check_referrer_policy,
            base.check_cross_origin_opener_policy,
            csrf_checks.check_csrf_cookie_secure,
        )
        return [message for check in checks for message in check(app_configs)]
