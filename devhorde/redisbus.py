"""The optional Redis side of the development Horde: progress streams and state signals.

Contract: ``native-horde-chat.md``, "Progress stream (Redis)" and "Signals (Redis pub/sub)". Every write goes through
one queue drained by one writer task, so a request's stream entries, its ``ended`` marker and its signals reach
Redis in the order the simulator produced them. A failed write is logged and dropped: the Horde keeps working, and a
front that misses deltas or signals falls back to reading the status, as the contract requires. Without a Redis URL
:class:`RedisBus` is inert and every call returns at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final

from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from devhorde.limits import SIGNALS_CHANNEL, STREAM_KEY_PREFIX, STREAM_MAXLEN

logger = logging.getLogger("devhorde.redis")

WRITE_TIMEOUT_SECONDS: Final[float] = 2.0
"""The socket timeout of one Redis write; a slower write is dropped."""

OUTAGE_BACKOFF_SECONDS: Final[float] = 1.0
"""After a failed write, writes are dropped without trying for this long, so a Redis outage does not slow the
simulated workers down; writing resumes on its own once Redis answers again."""


def stream_key(request_id: str) -> str:
    """Return the progress stream key of a request, ``horde:chat:stream:<request id>``."""
    return f"{STREAM_KEY_PREFIX}{request_id}"


@dataclass(slots=True)
class _Write:
    kind: str  # "xadd", "publish" or "flush"
    key: str
    fields: Mapping[str, str] = field(default_factory=dict)
    expire_at_ms: int = 0
    payload: str = ""
    done: asyncio.Future[None] | None = None


class RedisBus:
    """Writes progress entries (``XADD`` with ``MAXLEN ~ 10000`` and ``PEXPIREAT`` at the request's expiry) and
    publishes ``{"id", "event"}`` signals on ``horde:chat:signals``.

    Args:
        url: A ``redis://`` URL, or None for no Redis.
        stream_db: The database of the progress streams (``HORDE_OAI_STREAM_REDIS_DB`` on the front's side); pub/sub
            is database-independent, so the same connection publishes the signals.
    """

    def __init__(self, url: str | None, stream_db: int = 0) -> None:
        self.url = url
        self.stream_db = stream_db
        self._client: Redis | None = None
        self._queue: asyncio.Queue[_Write] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._retry_at = 0.0

    @property
    def enabled(self) -> bool:
        """Whether a Redis URL is configured."""
        return self.url is not None

    def _ensure_started(self) -> asyncio.Queue[_Write] | None:
        if self.url is None:
            return None
        if self._queue is None:
            self._client = Redis.from_url(
                self.url,
                socket_timeout=WRITE_TIMEOUT_SECONDS,
                socket_connect_timeout=WRITE_TIMEOUT_SECONDS,
                decode_responses=True,
            )
            # Streams go to the stream database even when the URL names another one (from_url lets the URL win).
            self._client.connection_pool.connection_kwargs["db"] = self.stream_db
            self._queue = asyncio.Queue()
            self._writer = asyncio.get_running_loop().create_task(self._drain(), name="devhorde-redis-writer")
        return self._queue

    async def _drain(self) -> None:
        assert self._queue is not None
        assert self._client is not None
        loop = asyncio.get_running_loop()
        while True:
            write = await self._queue.get()
            try:
                if write.kind != "flush" and loop.time() < self._retry_at:
                    continue
                if write.kind == "xadd":
                    async with self._client.pipeline(transaction=False) as pipe:
                        fields: dict[FieldT, EncodableT] = dict(write.fields.items())
                        pipe.xadd(write.key, fields, maxlen=STREAM_MAXLEN, approximate=True)
                        pipe.pexpireat(write.key, write.expire_at_ms)
                        await pipe.execute()
                elif write.kind == "publish":
                    await self._client.publish(write.key, write.payload)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - Redis is optional; log and keep simulating
                logger.warning("Redis write to %s failed: %s", write.key, error)
                self._retry_at = loop.time() + OUTAGE_BACKOFF_SECONDS
            finally:
                if write.done is not None and not write.done.done():
                    write.done.set_result(None)

    def xadd(self, request_id: str, fields: Mapping[str, str], expire_at_ms: int) -> asyncio.Future[None] | None:
        """Queue one progress stream entry; return a future set once it was written (or dropped), or None.

        Args:
            request_id: The request whose stream receives the entry.
            fields: String fields (``gen``, ``seq``, ``text``, ``reasoning``, ``model``, ``worker`` or ``ended``).
            expire_at_ms: The request's expiry as Unix milliseconds; the stream's TTL ends then.
        """
        queue = self._ensure_started()
        if queue is None:
            return None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.put_nowait(_Write("xadd", stream_key(request_id), fields, expire_at_ms, done=done))
        return done

    def signal(self, request_id: str, event: str) -> None:
        """Queue the signal ``{"id": request_id, "event": event}`` on ``horde:chat:signals``."""
        queue = self._ensure_started()
        if queue is not None:
            payload = json.dumps({"id": request_id, "event": event})
            queue.put_nowait(_Write("publish", SIGNALS_CHANNEL, payload=payload))

    async def flush(self, timeout: float = WRITE_TIMEOUT_SECONDS) -> None:
        """Wait until every queued write was made or dropped, at most ``timeout`` seconds."""
        if self._queue is None:
            return
        marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Write("flush", "", done=marker))
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(marker), timeout)

    async def close(self) -> None:
        """Flush briefly, stop the writer task and close the connection."""
        if self._queue is not None:
            await self.flush(timeout=1.0)
        if self._writer is not None:
            self._writer.cancel()
            with suppress(asyncio.CancelledError):
                await self._writer
        if self._client is not None:
            with suppress(Exception):
                await self._client.aclose()
        self._client, self._queue, self._writer = None, None, None
