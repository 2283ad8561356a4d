"""Helpers and fixtures of the development Horde's tests: an in-process app per test (``httpx.ASGITransport``), fast
scenarios and, for the stream tests, the real Redis on 127.0.0.1:6379 in database 13. ``conftest.py`` re-exports the
fixtures; test modules import the helpers from here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio
from redis.asyncio import Redis

from devhorde.app import create_app
from devhorde.scenario import Scenario

REDIS_URL = "redis://127.0.0.1:6379"
"""The only Redis the tests use."""
REDIS_DB = 13
"""The database the stream tests write to."""
API = "/api/v2"
KEY = {"apikey": "0000000000"}

FAST = {"time_to_first_token_seconds": 0.0, "tokens_per_second": 2000.0, "post_interval_seconds": 0.002}
"""Worker speed keys for tests: no first-token delay, a post every 2 ms."""

STRICT_DECLARATIONS = ["prompt_overflow_refused"]


def worker(name: str, model: str = "m/plain", **keys: Any) -> dict[str, Any]:
    """A fast worker document; ``keys`` override anything."""
    return {"name": name, "model": model, **FAST, **keys}


def scenario(*workers: dict[str, Any], **keys: Any) -> Scenario:
    """A validated scenario with these workers and knobs."""
    return Scenario.model_validate({"name": "test", "workers": list(workers), **keys})


def chat(content: str = "Tell me about tides and the moon", *, models: list[str] | None = None, **keys: Any) -> dict:
    """A native submit payload with one user message."""
    payload: dict[str, Any] = {
        "messages": [{"role": "user", "content": content}],
        "models": ["m/plain"] if models is None else models,
    }
    payload.update(keys)
    return payload


MakeClient = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest_asyncio.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """Build an app around a scenario and return an ``httpx.AsyncClient`` on it; every app is stopped after the
    test (jobs cancelled, Redis closed)."""
    built: list[tuple[Any, httpx.AsyncClient]] = []

    async def make(scenario_: Scenario, *, redis: bool = False) -> httpx.AsyncClient:
        app = create_app(scenario_, redis_url=REDIS_URL if redis else None, stream_redis_db=REDIS_DB)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://devhorde")
        client.app = app  # type: ignore[attr-defined]
        built.append((app, client))
        return client

    yield make
    for app, client in built:
        await client.aclose()
        await app.state.horde.stop()


@pytest_asyncio.fixture
async def redis_db13() -> AsyncIterator[Redis]:
    """A client of database 13 of the Redis on 127.0.0.1:6379; the test is skipped when none answers."""
    client = Redis.from_url(REDIS_URL, db=REDIS_DB, decode_responses=True)
    try:
        await asyncio.wait_for(client.ping(), 2)
    except Exception:  # noqa: BLE001
        await client.aclose()
        pytest.skip("no Redis answers on 127.0.0.1:6379")
    yield client
    await client.aclose()


async def submit(client: httpx.AsyncClient, payload: dict[str, Any], headers: dict | None = None) -> httpx.Response:
    """POST the payload to the submit route with the anonymous key unless ``headers`` says otherwise."""
    return await client.post(f"{API}/generate/chat/async", json=payload, headers=KEY if headers is None else headers)


async def status(client: httpx.AsyncClient, request_id: str) -> dict[str, Any]:
    """GET a status, asserting 200."""
    response = await client.get(f"{API}/generate/chat/status/{request_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def submit_ok(client: httpx.AsyncClient, payload: dict[str, Any]) -> str:
    """Submit, assert 202 and return the id."""
    response = await submit(client, payload)
    assert response.status_code == 202, response.text
    return response.json()["id"]


async def wait_for(
    client: httpx.AsyncClient,
    request_id: str,
    predicate: Callable[[dict], bool],
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Poll the status every 10 ms until ``predicate`` holds; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        body = await status(client, request_id)
        if predicate(body):
            return body
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status never matched: {body}")
        await asyncio.sleep(0.01)


async def wait_done(client: httpx.AsyncClient, request_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """Poll until the status is done (not the transient processing done)."""
    return await wait_for(client, request_id, lambda body: body["done"] and not body["processing"], timeout)
