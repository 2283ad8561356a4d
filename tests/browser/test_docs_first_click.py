"""The documentation pages work at the first click, in headless Chromium, against a front with a Horde behind it.

``/docs``: "Try it out" with the default example reaches a served model (the example's model id comes from the live
model list) and answers 200; the copied curl carries no ``X-CSRFTOKEN``. ``/redoc``: no broken logo and no Content
Security Policy error. Every request either page makes succeeds (no failed, blocked or 4xx/5xx request, no console
error), ``/favicon.ico`` included, and the description links the front's behaviour guide, served at
``/docs/behaviour``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from front_operations.openapi.assets import EMPTY_IMAGE, REDOC_CDN_LOGO
from front_operations.openapi.document import DOCS_URL
from tests.conftest import ROOT, running_stack

RENDER_TIMEOUT_MS = 30_000
"""How long a page may take to render (a first paint of Swagger UI or ReDoc on a slow CI machine)."""

TRY_IT_OUT_TIMEOUT_MS = 60_000
"""How long "Execute" may take: the ``fast`` scenario answers in well under a second; the rest is margin."""


@pytest.fixture(scope="module")
def served_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The front (no Redis) in front of the devhorde's ``fast`` scenario; yields its base URL."""
    with running_stack(tmp_path_factory.mktemp("docs-first-click"), redis=False) as stack:
        yield stack.front_url


@dataclass
class WatchedPage:
    """A page and every problem the browser reported: console errors, failed requests, 4xx/5xx answers."""

    page: Any
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    error_responses: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return self.console_errors + self.failed_requests + self.error_responses


@pytest.fixture
def watched_page(chromium: Any, served_front: str) -> Iterator[WatchedPage]:
    context = chromium.new_context(service_workers="block")
    page = context.new_page()
    watched = WatchedPage(page)

    def only_the_front(route: Any) -> None:
        url = route.request.url
        if url == served_front or url.startswith(served_front + "/"):
            route.continue_()
        else:
            watched.failed_requests.append(f"blocked: {url}")
            route.abort("internetdisconnected")

    context.route("**/*", only_the_front)
    page.on("console", lambda message: watched.console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: watched.console_errors.append(str(error)))
    page.on("requestfailed", lambda request: watched.failed_requests.append(f"{request.url}: {request.failure}"))
    page.on(
        "response",
        lambda response: (
            watched.error_responses.append(f"{response.status} {response.url}") if response.status >= 400 else None
        ),
    )
    try:
        yield watched
    finally:
        context.close()


def test_try_it_out_with_the_default_example_reaches_a_served_model(
    watched_page: WatchedPage, served_front: str
) -> None:
    served = [model["id"] for model in httpx.get(f"{served_front}/v1/models", timeout=10).json()["data"]]
    page = watched_page.page
    page.goto(f"{served_front}/docs")
    operation = page.locator("#operations-Chat-createChatCompletion")
    operation.wait_for(timeout=RENDER_TIMEOUT_MS)
    operation.locator(".opblock-summary").first.click()
    operation.get_by_role("button", name="Try it out").click()
    body = operation.locator(".body-param__text")
    body.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert f'"model": "{served[0]}"' in body.input_value()

    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table tr.response .response-col_status").first
    status.wait_for(timeout=TRY_IT_OUT_TIMEOUT_MS)
    assert status.inner_text().strip() == "200"
    assert '"object": "chat.completion"' in operation.locator(".live-responses-table .microlight").first.inner_text()

    curl = operation.locator(".curl-command").first.inner_text()
    assert f"curl -X 'POST' \\\n  '{served_front}/v1/chat/completions'" in curl
    assert f'"model": "{served[0]}"' in curl
    assert "csrf" not in curl.lower()
    assert watched_page.problems() == []


def test_redoc_shows_no_broken_logo_and_reports_nothing(watched_page: WatchedPage, served_front: str) -> None:
    page = watched_page.page
    page.goto(f"{served_front}/redoc")
    page.locator('[id="operation/createChatCompletion"]').wait_for(timeout=RENDER_TIMEOUT_MS)
    logo = page.get_by_alt_text("redocly logo")
    assert logo.get_attribute("src") == EMPTY_IMAGE
    assert REDOC_CDN_LOGO not in page.content()
    page.reload()
    page.locator('[id="operation/createChatCompletion"]').wait_for(timeout=RENDER_TIMEOUT_MS)
    assert watched_page.problems() == []


def test_the_favicon_is_served(watched_page: WatchedPage, served_front: str) -> None:
    response = httpx.get(f"{served_front}/favicon.ico", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content.startswith(b"\x89PNG\r\n\x1a\n")


def test_the_description_links_the_behaviour_guide_which_the_front_serves(
    watched_page: WatchedPage, served_front: str
) -> None:
    page = watched_page.page
    page.goto(f"{served_front}/docs")
    link = page.locator(".info .description a", has_text=DOCS_URL).first
    link.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert link.get_attribute("href") == DOCS_URL
    guide = httpx.get(f"{served_front}{DOCS_URL}?format=md", timeout=10)
    assert guide.status_code == 200
    assert guide.headers["content-type"] == "text/markdown; charset=utf-8"
    assert guide.text == Path(ROOT, "docs", "behaviour.md").read_text()
    for section in ("## Waiting and availability", "## Streaming modes", "## Errors and retries", "## Limits"):
        assert section in guide.text
    assert "## The `horde` options" in guide.text
    assert watched_page.problems() == []
