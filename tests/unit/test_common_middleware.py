"""oaifront.middleware.CommonMiddleware: Django's CommonMiddleware as the front uses it, without a thread per request.

It keeps ``Content-Length`` on every response that is not streamed and the ``ALLOWED_HOSTS`` check."""

from __future__ import annotations

import pytest
from django.test import AsyncClient, override_settings
from django.views.decorators.csrf import csrf_exempt

pytestmark = pytest.mark.asyncio


async def test_a_json_answer_has_its_content_length() -> None:
    response = await AsyncClient().get("/v1/no-such-route")
    assert response.status_code == 404
    assert int(response["Content-Length"]) == len(response.content) > 0
    assert response["Access-Control-Allow-Origin"] == "*"


async def test_a_health_answer_has_its_content_length() -> None:
    response = await AsyncClient().get("/healthz")
    assert int(response["Content-Length"]) == len(response.content)


async def test_a_host_outside_allowed_hosts_is_refused_with_400() -> None:
    """The test client's host is ``testserver``."""
    with override_settings(ALLOWED_HOSTS=["front.example"]):
        assert (await AsyncClient(raise_request_exception=False).get("/healthz")).status_code == 400
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        assert (await AsyncClient().get("/healthz")).status_code == 200


async def test_no_middleware_runs_in_a_thread() -> None:
    """Every configured middleware is async-capable, so Django adapts none with sync_to_async (a thread hop and an
    executor per request under ASGI)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    for path in settings.MIDDLEWARE:
        assert getattr(import_string(path), "async_capable", False), path


async def test_no_middleware_hook_goes_through_sync_to_async(monkeypatch: pytest.MonkeyPatch) -> None:
    """Django's ``MiddlewareMixin`` is async-capable yet runs each hook through ``sync_to_async`` (a thread per
    request): the security, CSRF and clickjacking middleware of the front call their hooks on the event loop. Fails
    with Django's own classes in MIDDLEWARE (their four hooks per request went to a thread)."""
    from asgiref.sync import SyncToAsync

    threaded: list[str] = []
    original = SyncToAsync.__call__

    async def recording(self: SyncToAsync[..., object], *args: object, **kwargs: object) -> object:
        threaded.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", recording)
    client = AsyncClient()
    assert (await client.get("/healthz")).status_code == 200
    refused = await client.post("/v1/chat/completions", data=b"{}", content_type="application/json")
    assert refused.status_code == 400
    # What is left is Django's ASGIHandler's own: it closes each response with sync_to_async (request_finished's
    # receivers may be sync) and logs a 4xx answer with log_response in its thread pool.
    assert threaded == ["HttpResponseBase.close", "log_response", "HttpResponseBase.close"]


async def test_the_security_headers_are_still_set() -> None:
    """Django's SecurityMiddleware and XFrameOptionsMiddleware hooks, run on the event loop, set their headers."""
    response = await AsyncClient().get("/healthz")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


async def test_csrf_still_refuses_an_unsafe_request_to_a_view_that_is_not_exempt() -> None:
    """The CSRF check of a view added later (not csrf_exempt) still runs, awaited on the event loop."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    from oaifront.middleware import CsrfViewMiddleware

    async def get_response(request: object) -> HttpResponse:
        return HttpResponse()

    def view(request: object) -> HttpResponse:
        return HttpResponse()

    middleware = CsrfViewMiddleware(get_response)
    request = RequestFactory().post("/added-later", data={})
    refused = await middleware.process_view(request, view, (), {})
    assert refused is not None and refused.status_code == 403
    assert await middleware.process_view(RequestFactory().get("/added-later"), view, (), {}) is None
    exempt = csrf_exempt(view)
    assert await middleware.process_view(RequestFactory().post("/api", data={}), exempt, (), {}) is None


async def test_the_csrf_check_of_an_unsafe_request_to_a_view_not_exempt_runs_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Such a check may parse a whole form body: Django's code, in a worker thread (not the event loop); an exempt
    view or a safe method is answered on the event loop."""
    import threading

    from django.http import HttpResponse
    from django.middleware import csrf
    from django.test import RequestFactory

    from oaifront.middleware import CsrfViewMiddleware

    threads: list[str] = []
    original = csrf.CsrfViewMiddleware.process_view

    def recording(self: csrf.CsrfViewMiddleware, *args: object) -> object:
        threads.append(threading.current_thread().name)
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(csrf.CsrfViewMiddleware, "process_view", recording)

    async def get_response(request: object) -> HttpResponse:
        return HttpResponse()

    def view(request: object) -> HttpResponse:
        return HttpResponse()

    middleware = CsrfViewMiddleware(get_response)
    await middleware.process_view(RequestFactory().post("/added-later", data={}), view, (), {})
    await middleware.process_view(RequestFactory().get("/added-later"), view, (), {})
    await middleware.process_view(RequestFactory().post("/api", data={}), csrf_exempt(view), (), {})
    loop_thread = threading.current_thread().name
    assert threads[0] != loop_thread
    assert threads[1:] == [loop_thread, loop_thread]


async def test_djangos_deployment_checks_run_for_the_substitutes() -> None:
    """``check --deploy`` checks HSTS, nosniff, secure CSRF cookies and X-Frame-Options only when Django's own
    middleware paths are listed: the front lists its async substitutes, silences Django's three "not listed" warnings
    by name, and its own deploy check runs Django's checks as if Django's classes were listed."""
    from django.conf import settings

    from oaifront.middleware import SUBSTITUTED_CHECKS, SUBSTITUTES, check_as_djangos_middleware

    assert SUBSTITUTES == {
        "django.middleware.security.SecurityMiddleware": "oaifront.middleware.SecurityMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware": "oaifront.middleware.CsrfViewMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware": "oaifront.middleware.XFrameOptionsMiddleware",
    }
    assert all(path in settings.MIDDLEWARE for path in SUBSTITUTES.values())
    assert not any(path in settings.MIDDLEWARE for path in SUBSTITUTES)
    assert "django.middleware.common.CommonMiddleware" not in settings.MIDDLEWARE
    assert set(SUBSTITUTED_CHECKS) <= set(settings.SILENCED_SYSTEM_CHECKS)
    # Silenced by name in the settings (HTTPS belongs to the TLS proxy): Django's run_checks drops them.
    with override_settings(SECURE_HSTS_SECONDS=3600, SECURE_HSTS_INCLUDE_SUBDOMAINS=True):
        assert [message.id for message in check_as_djangos_middleware(None)] == ["security.W021", "security.W008"]
    with override_settings(SECURE_CONTENT_TYPE_NOSNIFF=False, X_FRAME_OPTIONS="SAMEORIGIN", CSRF_COOKIE_SECURE=False):
        assert sorted(message.id for message in check_as_djangos_middleware(None)) == [
            "security.W004",
            "security.W006",
            "security.W008",
            "security.W016",
            "security.W019",
        ]
