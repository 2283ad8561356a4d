"""Virtual time for tests of code that sleeps: a clock and an ``asyncio.sleep`` whose time passes only when every task
waits on it (:class:`VirtualTime`)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable


class VirtualTime:
    """A clock and an ``asyncio.sleep`` whose time passes only when every task waits on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), future))
        await future

    async def run[T](self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        while not task.done():
            for _ in range(200):
                await asyncio.sleep(0)
                if task.done():
                    break
            if not task.done() and self._sleepers:
                wake, _, future = heapq.heappop(self._sleepers)
                self.now = max(self.now, wake)
                future.set_result(None)
        return task.result()
