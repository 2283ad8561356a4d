"""``GET /readyz``: whether this process can serve requests now (``/healthz`` only says that it runs).

Ready means the Horde answers ``GET /v2/status/heartbeat`` and, when ``HORDE_OAI_REDIS_URL`` is set, Redis answers
``PING``. The result is reused for ``HORDE_OAI_READINESS_CACHE_SECONDS``, so a probe every second costs little. The
answer names each check and what failed, without the Horde's or Redis's address (a Redis URL may hold a password).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Final

from django.http import HttpRequest, JsonResponse
from redis.asyncio import Redis

from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.serving.runtime import get_runtime

CHECK_TIMEOUT_SECONDS: Final[float] = 2.0
"""The longest one check may take before it counts as failed."""

OK: Final[str] = "ok"


@dataclass(frozen=True)
class Readiness:
    """One round of checks: each check's result (``ok`` or why it failed) and when it was made (monotonic)."""

    checks: dict[str, str]
    checked_at: float

    @property
    def ready(self) -> bool:
        """Whether every check passed."""
        return all(result == OK for result in self.checks.values())


_cached: dict[asyncio.AbstractEventLoop, Readiness] = {}


async def check_horde() -> str:
    """``ok`` when the Horde answers its heartbeat, else why not."""
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
    fresh = Readiness(dict(zip(names, results, strict=True)), time.monotonic())
    _cached[loop] = fresh
    return fresh


async def readyz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ready", "checks": {"horde": "ok", "redis": "ok"}}``; 503 ``{"status": "not_ready",
    "checks": {...}}`` naming what failed (``redis`` only when configured). Left out of the API description.
    """
    result = await readiness()
    return JsonResponse(
        {"status": "ready" if result.ready else "not_ready", "checks": result.checks},
        status=200 if result.ready else 503,
    )
