"""/docs and /redoc render the API description in headless Chromium with no network but the front
(reference: API documentation).

Each page runs in a context where every request to anything but the front's 127.0.0.1 port is aborted (see
``conftest.offline_page``); the pages' Content-Security-Policy keeps them from even trying. The checks read the
rendered DOM: the chat completions operation, its request body schema with its fields, and the model list operation.
"""

from __future__ import annotations

import httpx
import pytest

from front_operations.openapi.pages import DOCS_CONTENT_SECURITY_POLICY
from tests.browser.conftest import OfflinePage

RENDER_TIMEOUT_MS = 30_000
"""How long a page may take to render (a first paint of Swagger UI or ReDoc on a slow CI machine)."""


def test_swagger_ui_renders_the_chat_operation_and_its_request_schema(
    offline_page: OfflinePage, docs_front: str
) -> None:
    """ref: api-documentation.1"""
    page = offline_page.page
    response = page.goto(f"{docs_front}/docs")
    assert response is not None and response.status == 200
    assert response.headers["content-security-policy"] == DOCS_CONTENT_SECURITY_POLICY
    assert page.title() == "AI Horde OpenAI-compatible chat front"

    operation = page.locator("#operations-Chat-createChatCompletion")
    operation.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert operation.locator(".opblock-summary-method").inner_text() == "POST"
    assert operation.locator(".opblock-summary-path").inner_text() == "/v1/chat/completions"
    assert page.locator("#operations-Models-listModels .opblock-summary-path").inner_text() == "/v1/models"
    assert page.locator("#operations-Images-createImage .opblock-summary-path").inner_text() == (
        "/v1/images/generations"
    )

    operation.locator(".opblock-summary").first.click()
    request_body = operation.locator(".opblock-section-request-body")
    request_body.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert '"model": "example/model-7b"' in request_body.inner_text()
    request_body.get_by_text("Schema", exact=True).click()
    model = request_body.locator(".model-box")
    model.get_by_text("ChatCompletionRequest").first.wait_for(timeout=RENDER_TIMEOUT_MS)
    schema_text = model.inner_text()
    assert "The body of POST /v1/chat/completions." in schema_text
    for field in (
        "messages",
        "model",
        "models",
        "stream",
        "max_tokens",
        "tools",
        "response_format",
        "horde",
        "logprobs",
        "service_tier",
    ):
        assert f"\n{field}" in schema_text, field

    responses = operation.locator(".responses-table").first.inner_text()
    for status in ("200", "400", "401", "403", "404", "408", "429", "502", "503"):
        assert status in responses
    assert "422" not in responses
    assert "no_eligible_worker" in responses

    assert offline_page.blocked == []
    assert offline_page.errors == []


def test_redoc_renders_the_chat_operation_and_its_request_schema(offline_page: OfflinePage, docs_front: str) -> None:
    """ref: api-documentation.1"""
    page = offline_page.page
    response = page.goto(f"{docs_front}/redoc")
    assert response is not None and response.status == 200
    assert response.headers["content-security-policy"] == DOCS_CONTENT_SECURITY_POLICY

    operation = page.locator('[id="operation/createChatCompletion"]')
    operation.wait_for(timeout=RENDER_TIMEOUT_MS)
    text = operation.inner_text()
    assert text.startswith("Create a chat completion")
    assert "REQUEST BODY SCHEMA: APPLICATION/JSON" in text.upper()
    for field in (
        "messages",
        "model",
        "models",
        "stream",
        "max_tokens",
        "tools",
        "response_format",
        "horde",
        "logprobs",
        "service_tier",
    ):
        assert f"\n{field}" in text, field
    assert "The conversation, oldest first." in text
    # The first variant ("With model"): model a required string, never "string or string, Default: null".
    model = text[text.index("\nmodel") : text.index("\nmodel") + 400]
    assert model.startswith("\nmodel\nrequired\n\t\nstring [ 1 .. 255 ] characters\n\nThe model to use;"), model
    assert "/v1/chat/completions" in text
    assert page.locator('[id="operation/listModels"]').inner_text().startswith("List the models")
    image = page.locator('[id="operation/createImage"]').inner_text()
    assert image.startswith("Create an image")
    assert "/v1/images/generations" in image
    for field in ("prompt", "size", "response_format", "horde"):
        assert f"\n{field}" in image, field

    assert offline_page.blocked == []
    assert offline_page.errors == []


def test_root_redirects_a_browser_to_swagger_ui(offline_page: OfflinePage, docs_front: str) -> None:
    """ref: api-documentation.1"""
    assert httpx.get(f"{docs_front}/", timeout=5).headers["location"] == "/docs"
    page = offline_page.page
    page.goto(f"{docs_front}/")
    assert page.url == f"{docs_front}/docs"
    page.locator("#operations-Chat-createChatCompletion").wait_for(timeout=RENDER_TIMEOUT_MS)
    assert offline_page.blocked == []


@pytest.mark.parametrize("page_path", ["/docs", "/redoc"])
def test_the_pages_name_no_remote_asset(docs_front: str, page_path: str) -> None:
    """The HTML itself references only the front (no CDN, no web fonts)."""
    html = httpx.get(f"{docs_front}{page_path}", timeout=5).text
    assert "https://" not in html and "http://" not in html


def test_swagger_ui_renders_the_responses_operation_and_its_request_schema(
    offline_page: OfflinePage, docs_front: str
) -> None:
    """``POST /v1/responses`` is on /docs with its example and its request schema (stateless, every field listed)."""
    page = offline_page.page
    response = page.goto(f"{docs_front}/docs")
    assert response is not None and response.status == 200
    operation = page.locator("#operations-Responses-createResponse")
    operation.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert operation.locator(".opblock-summary-method").inner_text() == "POST"
    assert operation.locator(".opblock-summary-path").inner_text() == "/v1/responses"
    operation.locator(".opblock-summary").first.click()
    request_body = operation.locator(".opblock-section-request-body")
    request_body.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert '"input": "Say hello in one sentence."' in request_body.inner_text()
    request_body.get_by_text("Schema", exact=True).click()
    model = request_body.locator(".model-box")
    model.get_by_text("ResponsesRequest").first.wait_for(timeout=RENDER_TIMEOUT_MS)
    schema_text = model.inner_text()
    for field in ("model", "input", "instructions", "max_output_tokens", "text", "reasoning", "store", "include"):
        assert f"\n{field}" in schema_text, field
    assert "The body of POST /v1/responses (the conversation in input, after a stored previous_response_id)." in (
        schema_text
    )
    assert offline_page.blocked == []
    assert offline_page.errors == []
