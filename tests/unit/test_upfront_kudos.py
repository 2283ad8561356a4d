"""chat.horde.upfront_kudos: the Horde's free ceiling from ``GET /v2/status/performance`` (the real server's
``require_upfront_kudos``), the user's kudos from ``GET /v2/find_user`` under a hashed key, both shared through
Django's cache, and when a request is lowered to the ceiling (httpx.MockTransport)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import httpx
import pytest
from django.core.cache import cache

from chat.horde.native import HordeClient
from chat.horde.upfront_kudos import (
    USER_KUDOS_CACHE_KEY,
    free_ceiling,
    key_hash,
    least_required_kudos,
    upfront_ceiling,
)

IDLE = {"text_thread_count": 11, "queued_text_requests": 45}
BUSY = {"text_thread_count": 2, "queued_text_requests": 200}


@pytest.mark.parametrize(
    ("performance", "slow_workers", "ceiling"),
    [
        ({"text_thread_count": 0, "queued_text_requests": 0}, True, 512),
        (IDLE, True, 512),  # 512 + 55 - round(40.5) = 527, clamped (the loopback Horde's totals)
        (BUSY, True, 342),  # 512 + 10 - 180
        ({"text_thread_count": 0, "queued_text_requests": 400}, True, 256),  # 152, clamped
        ({"text_thread_count": 0, "queued_text_requests": 400}, False, 152),  # slow_workers false: unclamped
        ({"text_thread_count": 1, "queued_text_requests": 5}, False, 513),  # 517 - round(4.5), half to even
        ({"text_thread_count": 1}, True, None),
        ({"text_thread_count": "3", "queued_text_requests": 0}, True, None),
    ],
)
def test_the_free_ceiling_is_the_real_horde_formula(
    performance: dict[str, Any], slow_workers: bool, ceiling: int | None
) -> None:
    assert free_ceiling(performance, slow_workers=slow_workers) == ceiling


def test_the_least_kudos_needed_is_max_length_over_21() -> None:
    assert (least_required_kudos(513), least_required_kudos(1024), least_required_kudos(4096)) == (24.43, 48.76, 195.05)


class KudosHorde:
    """Answers the performance read and ``find_user`` (kudos per key; an unknown key is 404 with an rc)."""

    def __init__(self, performance: dict[str, Any], kudos: dict[str, float]) -> None:
        self.performance = performance
        self.kudos = kudos
        self.calls: list[tuple[str, str]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["apikey"]
        self.calls.append((request.url.path.removeprefix("/api"), key))
        if request.url.path.endswith("/v2/status/performance"):
            return httpx.Response(200, content=json.dumps(self.performance))
        assert request.url.path.endswith("/v2/find_user")
        if key not in self.kudos:
            return httpx.Response(404, content=json.dumps({"message": "User not found", "rc": "UserNotFound"}))
        return httpx.Response(200, content=json.dumps({"username": "new#7", "id": 7, "kudos": self.kudos[key]}))

    def client(self) -> HordeClient:
        url = f"http://horde-{uuid.uuid4().hex[:8]}.test/api"
        return HordeClient(url, "test:1:none", 5.0, transport=httpx.MockTransport(self.handle))


@pytest.mark.asyncio
async def test_a_user_without_kudos_is_lowered_to_the_busy_ceiling_and_reads_are_shared() -> None:
    """A 0-kudos user asking 512 on a busy Horde is lowered to 342; the user is read once for two requests, the
    performance once for three, and a request within the ceiling reads no user at all."""
    horde = KudosHorde(BUSY, {"new-user-key": 0})
    client = horde.client()
    try:
        assert await upfront_ceiling(client, max_length=342, apikey="new-user-key") is None
        assert horde.calls == [("/v2/status/performance", "0000000000")]
        assert await upfront_ceiling(client, max_length=512, apikey="new-user-key") == 342
        assert await upfront_ceiling(client, max_length=4096, apikey="new-user-key") == 342
        assert horde.calls == [("/v2/status/performance", "0000000000"), ("/v2/find_user", "new-user-key")]
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_user_who_holds_the_kudos_or_cannot_be_read_is_not_lowered() -> None:
    horde = KudosHorde(IDLE, {"worker-owner": 24.43, "poorer": 24.42})
    client = horde.client()
    try:
        assert await upfront_ceiling(client, max_length=513, apikey="worker-owner") is None
        assert await upfront_ceiling(client, max_length=513, apikey="poorer") == 512
        assert (
            await upfront_ceiling(client, max_length=527, apikey="poorer", slow_workers=False) is None
        )  # 527: unclamped
        assert await upfront_ceiling(client, max_length=1024, apikey="unknown-key") is None  # 404: unknown
        assert await upfront_ceiling(client, max_length=1024, apikey="unknown-key") is None
        assert horde.calls.count(("/v2/find_user", "unknown-key")) == 1  # the failure is remembered too
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_the_cache_names_a_user_by_the_keys_hash_never_the_key() -> None:
    horde = KudosHorde(BUSY, {"secret-key-123": 3})
    client = horde.client()
    try:
        assert await upfront_ceiling(client, max_length=1024, apikey="secret-key-123") == 342
        digest = hashlib.sha256(b"secret-key-123").hexdigest()
        assert key_hash("secret-key-123") == digest
        key = USER_KUDOS_CACHE_KEY.format(horde_url=client.base_url, key_hash=digest)
        assert "secret-key-123" not in key
        assert await cache.aget(key) == 3.0
        assert key_hash(None) == hashlib.sha256(b"0000000000").hexdigest()
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_horde_without_the_performance_route_lowers_nothing() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="<html>Not Found</html>")

    url = f"http://horde-{uuid.uuid4().hex[:8]}.test/api"
    client = HordeClient(url, "test:1:none", 5.0, transport=httpx.MockTransport(handle))
    try:
        assert await upfront_ceiling(client, max_length=4096, apikey=None) is None
    finally:
        await client.aclose()
