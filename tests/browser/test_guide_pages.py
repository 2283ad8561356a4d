"""The guides ``/docs/behaviour`` and ``/docs/clients`` in headless Chromium: headings, code and tables render as HTML
(not Markdown text), the local stylesheet applies, the links between the guides and to ``/docs`` work, and the page
asks nothing of the internet (issue 25)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from front_operations.openapi.guides import GUIDE_CONTENT_SECURITY_POLICY
from tests.browser.conftest import OfflinePage

ROOT = Path(__file__).resolve().parents[2]


def headings(file: str, level: int) -> list[str]:
    """The text of the source's headings of ``level`` (inline code shown without its backticks)."""
    source = (ROOT / "docs" / file).read_text(encoding="utf-8")
    marks = "#" * level
    return [text.replace("`", "") for text in re.findall(rf"^{marks} (.+)$", source, flags=re.MULTILINE)]


@pytest.mark.parametrize(("url", "file"), [("/docs/behaviour", "behaviour.md"), ("/docs/clients", "clients.md")])
def test_the_guide_renders_as_a_page(offline_page: OfflinePage, docs_front: str, url: str, file: str) -> None:
    page = offline_page.page
    response = page.goto(f"{docs_front}{url}")
    assert response is not None and response.status == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == GUIDE_CONTENT_SECURITY_POLICY

    [title] = headings(file, 1)
    assert page.title() == title
    assert page.locator("main h1").all_inner_texts() == [title]
    assert page.locator("main h2").all_inner_texts() == headings(file, 2)
    assert page.locator("main h3").all_inner_texts() == headings(file, 3)
    assert page.locator("main code").count() > 10
    assert "## " not in page.locator("main").inner_text()  # no Markdown left as text
    # The stylesheet applies: headings in the system font stack, code on its tinted background.
    assert "system-ui" in page.locator("body").evaluate("element => getComputedStyle(element).fontFamily")
    assert page.locator("main code").first.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert offline_page.blocked == []
    assert offline_page.errors == []


def test_links_lead_between_the_guides_and_to_the_api_reference(offline_page: OfflinePage, docs_front: str) -> None:
    page = offline_page.page
    page.goto(f"{docs_front}/docs/clients")
    page.locator("main a", has_text="Limits").first.click()
    page.wait_for_url(f"{docs_front}/docs/behaviour#limits")
    assert page.locator("#limits").inner_text() == "Limits"

    page.locator("nav a", has_text="Clients").click()
    page.wait_for_url(f"{docs_front}/docs/clients")
    page.locator("nav a", has_text="API reference").click()
    page.wait_for_url(f"{docs_front}/docs")
    page.locator("#operations-Chat-createChatCompletion").wait_for(timeout=30_000)
    assert offline_page.blocked == []


def test_the_markdown_source_is_one_click_away(offline_page: OfflinePage, docs_front: str) -> None:
    page = offline_page.page
    page.goto(f"{docs_front}/docs/behaviour")
    with page.expect_response(f"{docs_front}/docs/behaviour?format=md") as source:
        page.locator("nav a", has_text="Markdown source").click()
    assert source.value.headers["content-type"] == "text/markdown; charset=utf-8"
    assert source.value.text() == (ROOT / "docs" / "behaviour.md").read_text(encoding="utf-8")
