"""Every cached Horde read is shared: 500 requests that find the cache empty together make one call per route
(chat.horde.budget.single_flight): the performance totals, a key's kudos, the worker list, the model list and the
heartbeat. Calls go through the real client over ``httpx.MockTransport`` to a Horde that answers after a few loop
turns, so every request is waiting while the first read is under way.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

import httpx
import pytest
from django.core.cache import cache, caches

from chat.horde.budget import HordeBudget, shared_read, single_flight
from chat.horde.native import HordeClient, HordeUnreachable
from chat.horde.upfront_kudos import (
    PERFORMANCE_CACHE_KEY,
    USER_KUDOS_CACHE_KEY,
    cached_ceiling,
    key_hash,
    upfront_ceiling,
)
from chat.horde.worker_limits import UPTIMES_CACHE_KEY, WORKERS_CACHE_KEY, WorkerDirectory
from chat.serving.text_route import MODELS_CACHE_KEY, cached_text_models
from chat.settings import FrontSettings

BASE = "http://shared-reads.test/api"
REQUESTS = 500


class CountingHorde:
    """Answers each route after a few loop turns and counts the calls by path."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls[request.url.path.removeprefix("/api")] += 1
        for _ in range(5):
            await asyncio.sleep(0)
        path = request.url.path.removeprefix("/api")
        if path == "/v2/status/performance":
            return httpx.Response(200, json={"text_thread_count": 0, "queued_text_requests": 400})
        if path == "/v2/find_user":
            return httpx.Response(200, json={"kudos": 1.0})
        if path == "/v2/workers":
            return httpx.Response(200, json=[{"name": "w", "models": ["m"], "threads": 1, "online": True}])
        if path == "/v2/status/models":
            return httpx.Response(200, json=[{"name": "m", "count": 1}])
        return httpx.Response(200, json={})


async def forget(*keys: str) -> None:
    for key in keys:
        await cache.adelete(key)


@pytest.mark.asyncio
async def test_five_hundred_requests_arriving_at_once_read_each_cached_route_once() -> None:
    horde = CountingHorde()
    client = HordeClient(BASE, "test:1:test", 30, transport=httpx.MockTransport(horde), budget=HordeBudget())
    runtime = SimpleNamespace(horde=client, settings=FrontSettings(models_cache_seconds=10))
    directory = WorkerDirectory(client)
    keys = (
        PERFORMANCE_CACHE_KEY.format(horde_url=BASE),
        USER_KUDOS_CACHE_KEY.format(horde_url=BASE, key_hash=key_hash("key-a")),
        WORKERS_CACHE_KEY.format(horde_url=BASE),
        UPTIMES_CACHE_KEY.format(horde_url=BASE),
        MODELS_CACHE_KEY.format(horde_url=BASE),
    )
    await forget(*keys)

    async def heartbeat() -> str:
        await client.heartbeat()
        return "ok"

    async def one_request() -> tuple[int | None, bool, int, str]:
        ceiling = await upfront_ceiling(client, max_length=512, apikey="key-a")
        snapshot = await directory.snapshot()
        models = await cached_text_models(runtime)
        ready = await shared_read(f"heartbeat:{BASE}", 5.0, heartbeat)
        return ceiling, snapshot is not None, len(models), ready

    try:
        answers = await asyncio.gather(*(one_request() for _ in range(REQUESTS)))
        assert set(answers) == {(256, True, 1, "ok")}  # 400 queued: the ceiling is 256; 1 kudos is short of 512's
        assert horde.calls == {
            "/v2/status/performance": 1,
            "/v2/find_user": 1,
            "/v2/workers": 1,
            "/v2/status/models": 1,
            "/v2/status/heartbeat": 1,
        }
    finally:
        await forget(*keys, f"heartbeat:{BASE}")
        await client.aclose()


@pytest.mark.asyncio
async def test_a_failed_single_flight_read_reaches_every_waiting_caller_and_is_not_kept() -> None:
    calls: list[int] = []

    async def failing() -> str:
        calls.append(1)
        await asyncio.sleep(0)
        raise HordeUnreachable("down")

    results = await asyncio.gather(
        *(single_flight("test-single-flight", failing) for _ in range(3)), return_exceptions=True
    )
    assert [type(result) for result in results] == [HordeUnreachable] * 3
    assert calls == [1]

    async def working() -> str:
        calls.append(2)
        return "ok"

    assert await single_flight("test-single-flight", working) == "ok"  # the next read is a new one
    assert calls == [1, 2]


@pytest.mark.asyncio
async def test_a_request_whose_miss_came_before_the_read_stored_takes_the_stored_totals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shared read looks in the cache once more before it calls the Horde (chat.horde.budget.shared_read): a
    request that found the performance totals missing while another request's read was storing them, and that joins
    after that read ended, reads no second time (the live test saw 2 reads for 60 requests on a busy machine). The
    cache's first look of the second request answers "missing" (Django's ``aget``, patched on the backend's class)."""
    horde = CountingHorde()
    client = HordeClient(BASE, "test:1:test", 30, transport=httpx.MockTransport(horde), budget=HordeBudget())
    key = PERFORMANCE_CACHE_KEY.format(horde_url=BASE)
    await forget(key)
    backend = type(caches["default"])
    real_aget = backend.aget
    looks: list[object] = []

    async def first_look_misses(self: object, key: str, default: object = None, version: int | None = None) -> object:
        found = await real_aget(self, key, default, version=version)
        looks.append(found)
        return default if len(looks) == 1 else found

    try:
        assert await cached_ceiling(client) == 256  # the first request: one read, stored
        monkeypatch.setattr(backend, "aget", first_look_misses)
        assert await cached_ceiling(client) == 256
        assert horde.calls == {"/v2/status/performance": 1}
        assert len(looks) == 2  # the miss, then the look inside the shared read
    finally:
        await forget(key)
        await client.aclose()
