"""The guides ``/docs/behaviour`` and ``/docs/clients``: a page for a browser, the Markdown source for a client that
asks for it (front_operations.openapi.guides), links between the guides, and the stylesheet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from front_operations.openapi.guides import GUIDE_CONTENT_SECURITY_POLICY, render_guide

ROOT = Path(__file__).resolve().parents[2]
GUIDES = [("/docs/behaviour", "behaviour.md"), ("/docs/clients", "clients.md")]
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


@pytest.mark.parametrize(("url", "file"), GUIDES)
@pytest.mark.parametrize(
    ("query", "accept"),
    [("", "text/markdown"), ("?format=md", BROWSER_ACCEPT), ("?format=markdown", ""), ("", "text/plain")],
)
def test_a_client_asking_for_markdown_gets_the_file_as_it_is(url: str, file: str, query: str, accept: str) -> None:
    response = Client().get(url + query, headers={"Accept": accept} if accept else {})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response.content == (ROOT / "docs" / file).read_bytes()
    assert "Accept" in [name.strip() for name in response["Vary"].split(",")]


@pytest.mark.parametrize(("url", "file"), GUIDES)
@pytest.mark.parametrize(
    ("query", "accept"),
    [("", BROWSER_ACCEPT), ("", "*/*"), ("", ""), ("?format=html", "text/markdown")],
)
def test_a_browser_gets_the_page(url: str, file: str, query: str, accept: str) -> None:
    response = Client().get(url + query, headers={"Accept": accept} if accept else {})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Content-Security-Policy"] == GUIDE_CONTENT_SECURITY_POLICY
    assert "Accept" in [name.strip() for name in response["Vary"].split(",")]
    page = response.content.decode()
    source = (ROOT / "docs" / file).read_text(encoding="utf-8")
    first_heading = source.splitlines()[0].removeprefix("# ")
    assert f"<title>{first_heading}</title>" in page
    assert '<link rel="stylesheet" href="/docs/assets/guide.css">' in page
    assert page.count("<h2 id=") == len(re.findall(r"^## ", source, flags=re.MULTILINE))
    for link in ('href="/docs"', 'href="/docs/behaviour"', 'href="/docs/clients"', 'href="/openapi.json"'):
        assert link in page
    assert "<script" not in page


def test_headings_get_githubs_ids_and_links_between_guides_point_at_the_pages() -> None:
    page = render_guide(
        "# The guide\n\n## The `horde` options\n\nSee [limits](behaviour.md#limits), [clients](clients.md) and "
        "[the API](/docs).\n"
    )
    assert '<h1 id="the-guide">The guide</h1>' in page
    assert '<h2 id="the-horde-options">The <code>horde</code> options</h2>' in page
    assert '<a href="/docs/behaviour#limits">limits</a>' in page
    assert '<a href="/docs/clients">clients</a>' in page
    assert '<a href="/docs">the API</a>' in page
    assert "<title>The guide</title>" in page


def test_raw_html_in_a_guide_is_shown_as_text() -> None:
    page = render_guide("# Title\n\n<script>alert(1)</script>\n")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_every_link_between_the_guides_names_a_heading_that_exists() -> None:
    """Each ``/docs/behaviour#x`` or ``/docs/clients#x`` link in either page has its ``id="x"``."""
    client = Client()
    pages = {url: client.get(url).content.decode() for url, _ in GUIDES}
    checked = 0
    for page in pages.values():
        for target, fragment in re.findall(r'href="(/docs/(?:behaviour|clients))#([^"]+)"', page):
            assert f'id="{fragment}"' in pages[target], (target, fragment)
            checked += 1
    assert checked >= 2


def test_the_stylesheet_is_served_from_the_front() -> None:
    response = Client().get("/docs/assets/guide.css")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/css; charset=utf-8"
    assert response.content == (ROOT / "front_operations" / "openapi" / "guide.css").read_bytes()
    assert b"url(" not in response.content  # nothing remote, nothing else to load


def test_every_guide_in_docs_is_served_at_its_name_and_links_between_them_resolve() -> None:
    """A guide added to ``docs/`` is a page at ``/docs/<name>`` with no code to change; a link from one guide to
    another's heading names a heading that exists; an unknown name is the unknown-route 404."""
    from front_operations.openapi.guides import guide_names

    names = guide_names()
    assert {"api", "behaviour", "clients", "configuration", "deployment", "development", "host-project"} <= set(names)
    client = Client()
    pages = {f"/docs/{name}": client.get(f"/docs/{name}") for name in names}
    assert {url: page.status_code for url, page in pages.items()} == dict.fromkeys(pages, 200)
    texts = {url: page.content.decode() for url, page in pages.items()}
    for url, page in texts.items():
        markdown = client.get(url, {"format": "md"}).content.decode()
        assert markdown == (ROOT / "docs" / f"{url.removeprefix('/docs/')}.md").read_text(encoding="utf-8")
        for target, fragment in re.findall(r'href="(/docs/[a-z-]+)#([^"]+)"', page):
            assert f'id="{fragment}"' in texts[target], (url, target, fragment)
    assert client.get("/docs/no-such-guide").status_code == 404
