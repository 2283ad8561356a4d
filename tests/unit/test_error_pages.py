"""oaifront.error_pages: Django's HTML error pages become OpenAI's envelope; other responses pass unchanged."""

from __future__ import annotations

import json

import pytest
from django.http import HttpResponse, JsonResponse
from django.test import RequestFactory

from oaifront.error_pages import JsonErrorPagesMiddleware


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "code"), [(400, "BadRequest"), (404, "unknown_url"), (500, "internal_error")])
async def test_html_error_pages_become_envelopes(status: int, code: str) -> None:
    async def html_page(request: object) -> HttpResponse:
        return HttpResponse("<html>Traceback ...</html>", status=status, content_type="text/html")

    middleware = JsonErrorPagesMiddleware(html_page)
    response = await middleware(RequestFactory().get("/v1/anything"))
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert body["error"]["code"] == code
    assert "Traceback" not in response.content.decode()


@pytest.mark.asyncio
async def test_json_errors_and_html_pages_that_are_not_errors_pass_unchanged() -> None:
    responses = [JsonResponse({"error": {"code": "x"}}, status=404), HttpResponse("<html>docs</html>", status=200)]

    for original in responses:

        async def page(request: object, original: HttpResponse = original) -> HttpResponse:
            return original

        assert await JsonErrorPagesMiddleware(page)(RequestFactory().get("/docs")) is original
