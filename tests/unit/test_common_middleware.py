"""oaifront.middleware.CommonMiddleware: Django's CommonMiddleware as the front uses it, without a thread per request.

It keeps ``Content-Length`` on every response that is not streamed and the ``ALLOWED_HOSTS`` check."""

from __future__ import annotations

import pytest
from django.test import AsyncClient, override_settings

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
