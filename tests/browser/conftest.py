"""Fixtures of the browser tests: the front alone (no Horde, no Redis: the pages need neither) and headless Chromium.

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``), driven by Playwright's Python package
through ``executable_path``; Playwright never downloads a browser of its own here. Every request the pages make to
anything but the front's 127.0.0.1 port is aborted and recorded, so a page that needs the internet fails its test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import start_front

CHROMIUM_PATH = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
"""Debian's Chromium; ``CHROMIUM_PATH`` names another build."""

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""No sandbox (containers), no GPU, and none of Chromium's own background traffic."""


UNREACHABLE_HORDE = "http://127.0.0.1:9/api"
"""The front's ``HORDE_URL`` here: a closed loopback port, since the documentation pages never call the Horde."""


@pytest.fixture(scope="session")
def docs_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The front under uvicorn (``DEBUG`` off, as in production); yields its base URL."""
    process, base_url = start_front(tmp_path_factory.mktemp("browser"), UNREACHABLE_HORDE, redis=False)
    try:
        yield base_url
    finally:
        process.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium browser, or a skip naming what is missing.

    Module-scoped: Playwright's sync API keeps an event loop running while it is open, which would break the
    asyncio tests that run after this module."""
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright's Python package is not installed (pip install playwright)"
    )
    if not (os.path.exists(CHROMIUM_PATH) or shutil.which(CHROMIUM_PATH)):
        pytest.skip(f"no Chromium at {CHROMIUM_PATH} (apt-get install -y chromium, or set CHROMIUM_PATH)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM_PATH, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class OfflinePage:
    """A page whose requests may only reach the front; everything else is aborted and listed in ``blocked``."""

    page: Any
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def offline_page(chromium: Any, docs_front: str) -> Iterator[OfflinePage]:
    """A fresh page limited to the front's origin (``http://127.0.0.1:<port>``)."""
    context = chromium.new_context(service_workers="block")
    page = context.new_page()
    offline = OfflinePage(page)

    def only_the_front(route: Any) -> None:
        url = route.request.url
        if url == docs_front or url.startswith(docs_front + "/"):
            route.continue_()
        else:
            offline.blocked.append(url)
            route.abort("internetdisconnected")

    context.route("**/*", only_the_front)
    page.on("pageerror", lambda error: offline.errors.append(str(error)))
    try:
        yield offline
    finally:
        context.close()
