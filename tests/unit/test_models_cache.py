"""The native model list cache of ``GET /v1/models``: Django's ``default`` cache for ``HORDE_OAI_MODELS_CACHE_SECONDS``
(local memory in the unit tests, which configure no Redis; django-redis with ``HORDE_OAI_REDIS_URL``, shared by every
worker process: tests/integration/test_workers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.cache import cache

from models_list import views

pytestmark = pytest.mark.asyncio

ENTRIES = [{"name": "devhorde/plain-3b", "count": 1, "type": "text"}]


class CountingHorde:
    base_url = "http://127.0.0.1:1/api"

    def __init__(self) -> None:
        self.calls = 0

    async def text_models(self) -> list[dict[str, Any]]:
        self.calls += 1
        return [{**ENTRIES[0], "call": self.calls}]


@pytest.fixture(autouse=True)
def clear_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def runtime(seconds: float) -> tuple[SimpleNamespace, CountingHorde]:
    horde = CountingHorde()
    return SimpleNamespace(settings=SimpleNamespace(models_cache_seconds=seconds), horde=horde), horde


async def test_the_list_is_reused_within_the_cache_time(monkeypatch: pytest.MonkeyPatch) -> None:
    front, horde = runtime(30)
    monkeypatch.setattr(views, "get_runtime", lambda: front)
    first = await views.native_text_models()
    second = await views.native_text_models()
    assert first == second == [{**ENTRIES[0], "call": 1}]
    assert horde.calls == 1
    assert await cache.aget(views.MODELS_CACHE_KEY.format(horde_url=horde.base_url)) == first


async def test_an_expired_entry_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    front, horde = runtime(30)
    monkeypatch.setattr(views, "get_runtime", lambda: front)
    await views.native_text_models()
    await cache.adelete(views.MODELS_CACHE_KEY.format(horde_url=horde.base_url))  # what expiry does
    assert (await views.native_text_models())[0]["call"] == 2


async def test_zero_seconds_reads_the_horde_every_time_and_stores_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    front, horde = runtime(0)
    monkeypatch.setattr(views, "get_runtime", lambda: front)
    assert [(await views.native_text_models())[0]["call"] for _ in range(3)] == [1, 2, 3]
    assert await cache.aget(views.MODELS_CACHE_KEY.format(horde_url=horde.base_url)) is None


async def test_each_horde_has_its_own_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    front, horde = runtime(30)
    monkeypatch.setattr(views, "get_runtime", lambda: front)
    await views.native_text_models()
    horde.base_url = "http://127.0.0.1:2/api"
    assert (await views.native_text_models())[0]["call"] == 2


class SlowHorde(CountingHorde):
    """A Horde whose model list takes until ``answer`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def text_models(self) -> list[dict[str, Any]]:
        self.calls += 1
        await self.answer.wait()
        return [{**ENTRIES[0], "call": self.calls}]


async def test_requests_that_find_the_cache_empty_together_share_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """256 requests admitted at once (a burst at the per-client cap) read the list once, not 256 times (issue 23; the
    public Horde allows 90 reads a minute per address); one that leaves does not cancel the read for the others."""
    horde = SlowHorde()
    front = SimpleNamespace(settings=SimpleNamespace(models_cache_seconds=30), horde=horde)
    monkeypatch.setattr(views, "get_runtime", lambda: front)
    readers = [asyncio.ensure_future(views.native_text_models()) for _ in range(256)]
    while horde.calls == 0:
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    readers[0].cancel()
    horde.answer.set()
    lists = await asyncio.gather(*readers[1:])
    assert horde.calls == 1
    assert all(entries == [{**ENTRIES[0], "call": 1}] for entries in lists)
    assert await views.native_text_models() == lists[0]  # and cached
    assert horde.calls == 1
