"""``GET /readyz``: whether this process can serve requests now (``/healthz`` only says that it runs).

Ready means the Horde answers ``GET /v2/status/heartbeat``. When ``HORDE_OAI_REDIS_URL`` is set and Redis does not
answer ``PING``, the front still serves every request, in the mode :data:`REDIS_FALLBACK_MODE` (streams delivered
whole, waits ended by timer re-reads instead of wake-up signals), so readiness is *degraded*: 200 with ``"redis":
"degraded"`` and that mode, and a load balancer keeps every replica in its pool through a Redis blip. With
``HORDE_OAI_READINESS_STRICT=true`` Redis down is not ready (503) instead. The result is reused for
``HORDE_OAI_READINESS_CACHE_SECONDS``, so a probe every second costs little; the heartbeat's verdict is shared by
every process through Django's cache for as long (:func:`check_horde`). The answer names each check and what
failed, without the Horde's or Redis's address (a Redis URL may hold a password). A front without
``HORDE_OAI_PROXY_PASSKEY`` at a Horde that limits (its answers carry ``X-RateLimit-Limit``) adds ``details``:
``{"horde_budget": ...}``, every user sharing one address budget of 2 submits a second and 90 a minute.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Final

from django.http import HttpRequest, JsonResponse
from redis.asyncio import Redis

from chat.horde.budget import SHARED_ADDRESS_BUDGET, shared_read
from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.serving.runtime import get_runtime

CHECK_TIMEOUT_SECONDS: Final[float] = 2.0
"""The longest one check may take before it counts as failed."""

OK: Final[str] = "ok"

HEARTBEAT_CACHE_KEY: Final[str] = "horde-heartbeat:{horde_url}"
"""The key of the shared heartbeat verdict in Django's ``default`` cache, per ``HORDE_URL``."""

DEGRADED: Final[str] = "degraded"
"""A check that failed without stopping the front from serving (Redis, unless readiness is strict)."""

REDIS_FALLBACK_MODE: Final[str] = "buffered"
"""How the front serves without Redis: every stream is delivered whole, in one content chunk, and waits end on timer
re-reads of the native status instead of Redis wake-up signals."""

DEGRADABLE_CHECKS: Final[frozenset[str]] = frozenset({"redis"})
"""Checks whose failure leaves the front serving (degraded), unless ``HORDE_OAI_READINESS_STRICT`` is true."""


@dataclass(frozen=True)
class Readiness:
    """One round of checks: each check's result (``ok`` or why it failed) and when it was made (monotonic)."""

    checks: dict[str, str]
    checked_at: float
    strict: bool = False
    details: dict[str, str] | None = None
    """What an operator should know beyond the checks: ``horde_budget`` (chat.horde.budget.SHARED_ADDRESS_BUDGET)
    when every user shares the front's address budget at a Horde that limits (no passkey)."""
    """Whether every check must pass (``HORDE_OAI_READINESS_STRICT``); else only those outside
    :data:`DEGRADABLE_CHECKS`."""

    @property
    def ready(self) -> bool:
        """Whether the front can serve: every check passed, or only degradable ones failed and readiness is not
        strict.
        """
        return all(
            result == OK or (not self.strict and name in DEGRADABLE_CHECKS) for name, result in self.checks.items()
        )

    @property
    def degraded(self) -> dict[str, dict[str, str]]:
        """The failed degradable checks of a ready front: why each failed and the mode the front serves in."""
        if not self.ready:
            return {}
        return {
            name: {"reason": result, "fallback": REDIS_FALLBACK_MODE}
            for name, result in self.checks.items()
            if result != OK
        }

    def body(self) -> dict[str, object]:
        """The ``/readyz`` answer (see :func:`readyz`)."""
        degraded = self.degraded
        details: dict[str, object] = {"details": self.details} if self.details else {}
        if not degraded:
            return {"status": "ready" if self.ready else "not_ready", "checks": self.checks, **details}
        checks = {name: DEGRADED if name in degraded else result for name, result in self.checks.items()}
        return {"status": DEGRADED, "checks": checks, "degraded": degraded, **details}


_cached: dict[asyncio.AbstractEventLoop, Readiness] = {}


async def check_horde() -> str:
    """``ok`` when the Horde answers its heartbeat, else why not: one verdict shared by every process for
    ``HORDE_OAI_READINESS_CACHE_SECONDS`` through Django's cache (chat.horde.budget.shared_read), so the probes of
    every worker process cost the Horde one heartbeat per interval (the real Horde exempts the heartbeat from its
    rate limits, ``horde/apis/v2/base.py:3065``; a proxy in front of a Horde may not).
    """
    runtime = get_runtime()
    key = HEARTBEAT_CACHE_KEY.format(horde_url=runtime.horde.base_url)
    return await shared_read(key, runtime.settings.readiness_cache_seconds, read_heartbeat)


async def read_heartbeat() -> str:
    """``ok`` when the Horde answers its heartbeat now, else why not."""
    try:
        await asyncio.wait_for(get_runtime().horde.heartbeat(), CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"no heartbeat within {CHECK_TIMEOUT_SECONDS:g} seconds"
    except HordeRefusal as refusal:
        return f"heartbeat refused with HTTP {refusal.status}"
    except HordeUnreachable:
        return "unreachable"
    return OK


async def check_redis(url: str) -> str:
    """``ok`` when Redis answers ``PING``, else why not (the URL, which may hold a password, is never shown)."""
    client = Redis.from_url(url, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, socket_timeout=CHECK_TIMEOUT_SECONDS)
    try:
        await asyncio.wait_for(client.ping(), CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_SECONDS:g} seconds"
    except Exception as error:  # noqa: BLE001 - any failure means not ready; its type says which
        return f"unreachable ({type(error).__name__})"
    finally:
        await client.aclose()
    return OK


async def readiness() -> Readiness:
    """The checks, reused while younger than ``readiness_cache_seconds``."""
    runtime = get_runtime()
    loop = asyncio.get_running_loop()
    cached = _cached.get(loop)
    now = time.monotonic()
    if cached is not None and now - cached.checked_at < runtime.settings.readiness_cache_seconds:
        return cached
    names = ["horde"]
    checks = [check_horde()]
    if runtime.settings.redis_url:
        names.append("redis")
        checks.append(check_redis(runtime.settings.redis_url))
    results = await asyncio.gather(*checks)
    details = {"horde_budget": SHARED_ADDRESS_BUDGET} if runtime.horde.budget.shares_address_budget else None
    fresh = Readiness(
        dict(zip(names, results, strict=True)), time.monotonic(), runtime.settings.readiness_strict, details
    )
    _cached[loop] = fresh
    return fresh


async def readyz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ready", "checks": {"horde": "ok", "redis": "ok"}}``; with Redis down (and readiness not
    strict) 200 ``{"status": "degraded", "checks": {"horde": "ok", "redis": "degraded"}, "degraded": {"redis":
    {"reason": ..., "fallback": "buffered"}}}``; else 503 ``{"status": "not_ready", "checks": {...}}`` naming what
    failed (``redis`` only when configured). Left out of the API description.
    """
    result = await readiness()
    return JsonResponse(result.body(), status=200 if result.ready else 503)
