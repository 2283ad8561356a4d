"""The guides ``/docs/behaviour`` (``docs/behaviour.md``) and ``/docs/clients`` (``docs/clients.md``): an HTML page
for a browser, the Markdown source for a client that asks for it.

- **Content negotiation** (:func:`wants_markdown`): ``?format=md`` (or ``markdown``) gives the Markdown source as
  ``text/markdown``, ``?format=html`` the page; otherwise the ``Accept`` header decides (Django's
  ``HttpRequest.get_preferred_type``): ``text/markdown`` or ``text/plain`` preferred over ``text/html`` gives the
  source, anything else (a browser's ``text/html``, ``*/*``, no header) the page. Each answer says ``Vary: Accept``.
- **Rendering** with markdown-it-py (CommonMark plus tables; raw HTML in the source is escaped, not passed through)
  and mdit-py-plugins' heading anchors (GitHub's ids, so ``#the-horde-options`` works as on GitHub). Links between
  the guides (``behaviour.md#limits``, ``clients.md``) point at the pages (``/docs/behaviour#limits``).
- **Style**: one small stylesheet of this package (``guide.css``, at ``/docs/assets/guide.css``); the page loads
  nothing else, under :data:`GUIDE_CONTENT_SECURITY_POLICY`.
"""

from __future__ import annotations

import asyncio
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Final

from django.http import Http404, HttpRequest, HttpResponse
from django.template import engines
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from mdit_py_plugins.anchors import anchors_plugin

from front_operations.openapi.assets import ASSET_CACHE_CONTROL

DOCS_DIRECTORY: Final = Path(__file__).resolve().parents[1] / "guides"
"""The guides' Markdown sources: ``front_operations/guides/``, package data of this app (``pyproject.toml``'s
``package-data``); in the checkout a link to ``docs/``, where the guides are written."""

BEHAVIOUR_GUIDE: Final = DOCS_DIRECTORY / "behaviour.md"
"""The behaviour guide's Markdown source."""

CLIENTS_GUIDE: Final = DOCS_DIRECTORY / "clients.md"
"""The guide per client's Markdown source."""

STYLESHEET: Final = Path(__file__).resolve().parent / "guide.css"
"""The guides' stylesheet."""

MARKDOWN_CONTENT_TYPE: Final = "text/markdown; charset=utf-8"
HTML_CONTENT_TYPE: Final = "text/html; charset=utf-8"

GUIDE_CONTENT_SECURITY_POLICY: Final = "default-src 'none'; style-src 'self'; img-src 'self' data:"
"""The guide pages load their stylesheet from this process and nothing else (no script at all)."""

GUIDE_PAGES: Final = {"behaviour.md": "behaviour-guide", "clients.md": "clients-guide"}
"""The file name and URL name of the two guides ``/docs`` links by name; every other guide is served by
:func:`guide_page` at ``/docs/<its file name without .md>``."""


def guide_names() -> tuple[str, ...]:
    """Every guide's name: the file names of ``docs/*.md`` without ``.md`` (``deployment`` for ``deployment.md``). A
    new file there is a new page, with no code to change.
    """
    return tuple(sorted(path.stem for path in DOCS_DIRECTORY.glob("*.md")))


def guide_url(file_name: str) -> str | None:
    """The page of a guide's file (``configuration.md`` -> ``/docs/configuration``), or None for another file."""
    if file_name in GUIDE_PAGES:
        return reverse(GUIDE_PAGES[file_name])
    stem, dot, suffix = file_name.rpartition(".")
    if dot and suffix == "md" and stem in guide_names():
        return reverse("guide", args=[stem])
    return None


_PAGE: Final = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<link rel="stylesheet" href="{{ stylesheet }}">
</head>
<body>
<nav>
<a href="{{ docs }}">API reference</a>
<a href="{{ behaviour }}">How the front behaves</a>
<a href="{{ clients }}">Clients</a>
<a href="{{ openapi }}">openapi.json</a>
<a href="?format=md" class="source">Markdown source</a>
</nav>
<main>
{{ body|safe }}
</main>
</body>
</html>
"""


def _guide_links(state: StateCore) -> None:
    """Point links to a guide's file (``behaviour.md#limits``) at its page (``/docs/behaviour#limits``)."""
    for token in state.tokens:
        for child in token.children or ():
            if child.type != "link_open":
                continue
            target, hash_mark, fragment = str(child.attrGet("href") or "").partition("#")
            page = guide_url(target.removeprefix("./").removeprefix("docs/"))
            if page is not None:
                child.attrSet("href", page + hash_mark + fragment)


@cache
def markdown() -> MarkdownIt:
    """The guides' Markdown renderer (module docstring)."""
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    renderer.use(anchors_plugin, min_level=1, max_level=3)
    renderer.core.ruler.push("guide_links", _guide_links)
    return renderer


def render_guide(source: str) -> str:
    """The HTML page of a guide's Markdown ``source``; its title is the first heading's text."""
    renderer = markdown()
    tokens = renderer.parse(source)
    title = next(
        (
            "".join(child.content for child in inline.children or ())
            for heading, inline in pairwise(tokens)
            if heading.type == "heading_open" and heading.tag == "h1"
        ),
        "Guide",
    )
    return (
        engines["django"]
        .from_string(_PAGE)
        .render(
            {
                "title": title,
                "body": renderer.renderer.render(tokens, renderer.options, {}),
                "stylesheet": reverse("guide-stylesheet"),
                "docs": reverse("swagger-ui"),
                "behaviour": reverse("behaviour-guide"),
                "clients": reverse("clients-guide"),
                "openapi": reverse("schema"),
            }
        )
    )


def wants_markdown(request: HttpRequest) -> bool:
    """Whether ``request`` asks for the Markdown source rather than the page (module docstring)."""
    chosen = request.GET.get("format", "").lower()
    if chosen in {"md", "markdown"}:
        return True
    if chosen == "html":
        return False
    preferred = request.get_preferred_type(["text/html", "text/markdown", "text/plain"])
    return preferred in {"text/markdown", "text/plain"}


async def serve_guide(request: HttpRequest, source: Path) -> HttpResponse:
    """The guide at ``source``: the Markdown file as it is, or its page."""
    text = await asyncio.to_thread(source.read_text, encoding="utf-8")
    if wants_markdown(request):
        response = HttpResponse(text.encode(), content_type=MARKDOWN_CONTENT_TYPE)
    else:
        response = HttpResponse(await asyncio.to_thread(render_guide, text), content_type=HTML_CONTENT_TYPE)
        response["Content-Security-Policy"] = GUIDE_CONTENT_SECURITY_POLICY
    patch_vary_headers(response, ["Accept"])
    return response


async def behaviour_guide(request: HttpRequest) -> HttpResponse:
    """``/docs/behaviour``: how the front behaves where a volunteer network differs from OpenAI."""
    return await serve_guide(request, BEHAVIOUR_GUIDE)


async def clients_guide(request: HttpRequest) -> HttpResponse:
    """``/docs/clients``: the settings each chat UI and client library needs."""
    return await serve_guide(request, CLIENTS_GUIDE)


async def guide_page(request: HttpRequest, name: str) -> HttpResponse:
    """``/docs/<name>``: the guide ``docs/<name>.md`` (:func:`guide_names`).

    Raises:
        Http404: No guide has that name (the project's unknown-route answer).
    """
    if name not in guide_names():
        raise Http404(name)
    return await serve_guide(request, DOCS_DIRECTORY / f"{name}.md")


async def guide_stylesheet(request: HttpRequest) -> HttpResponse:
    """``/docs/assets/guide.css``: the guides' stylesheet."""
    response = HttpResponse(await asyncio.to_thread(STYLESHEET.read_bytes), content_type="text/css; charset=utf-8")
    response["Cache-Control"] = ASSET_CACHE_CONTROL
    return response
