"""The front's per-process resources: one pooled Horde client, the cancel queue and, with Redis, one signal listener
and one DeltaStreamReader (reference: Redis reads and recovery).

They are made on first use inside the server's event loop and closed by the ASGI lifespan shutdown
(oaifront.asgi), which also retries pending cancels once more.
"""

from __future__ import annotations

import asyncio
from typing import Any

from chat.cancels import CancelQueue
from chat.horde_client import HordeClient
from chat.text_api import TextHordeClient
from oaifront.conf import FrontSettings, front_settings


class FrontRuntime:
    """What one front process shares across requests."""

    def __init__(self, settings: FrontSettings) -> None:
        self.settings = settings
        self.horde = HordeClient(settings.horde_url, settings.client_agent, settings.horde_timeout_seconds)
        self.cancels = CancelQueue(
            self.horde,
            retry_seconds=settings.cancel_retry_seconds,
            attempt_timeout=settings.horde_timeout_seconds,
        )
        # The text generation API (chat.text_api): its own client and cancel queue, the same settings.
        self.text_horde = TextHordeClient(settings.horde_url, settings.client_agent, settings.horde_timeout_seconds)
        self.text_cancels = CancelQueue(
            self.text_horde,
            retry_seconds=settings.cancel_retry_seconds,
            attempt_timeout=settings.horde_timeout_seconds,
        )
        self.signals: Any | None = None
        self.deltas: Any | None = None
        if settings.redis_url:
            from chat.relay import DeltaStreamReader, SignalListener

            self.signals = SignalListener(settings.redis_url)
            self.deltas = DeltaStreamReader(settings.redis_url, settings.stream_redis_db)

    @property
    def has_redis(self) -> bool:
        """Whether the front has a Redis client (``HORDE_OAI_REDIS_URL``)."""
        return self.deltas is not None

    async def aclose(self) -> None:
        """Retry pending cancels once more, stop the Redis tasks, close the HTTP pool."""
        await self.cancels.aclose()
        await self.text_cancels.aclose()
        for resource in (self.signals, self.deltas):
            if resource is not None:
                await resource.aclose()
        await self.horde.aclose()
        await self.text_horde.aclose()


_runtimes: dict[asyncio.AbstractEventLoop, FrontRuntime] = {}


def get_runtime() -> FrontRuntime:
    """Return the running loop's runtime, making it on first use."""
    loop = asyncio.get_running_loop()
    runtime = _runtimes.get(loop)
    if runtime is None:
        runtime = _runtimes[loop] = FrontRuntime(front_settings())
    return runtime


async def close_runtime() -> None:
    """Close the running loop's runtime, if one was made."""
    runtime = _runtimes.pop(asyncio.get_running_loop(), None)
    if runtime is not None:
        await runtime.aclose()
