"""A few pieces of admitted work start per event-loop iteration, so the loop reads its sockets between them.

An asyncio loop alternates two phases: it polls its sockets and runs their callbacks (a connection's bytes arrive and
are parsed), then it runs every callback that was ready when the phase began (each task's next step: a request's
admission guards, which refuse a request on its head, are the first step of its task). Admitted work comes in clumps:
the requests of a burst admitted in the same poll (256 from one address, the per-client cap), or the status reads of
those requests, whose timers all end in the same iteration a second later. Each such step is about a millisecond of
CPU (Django's middleware and the body's validation; a call to the Horde through httpx), so one clump made a run phase
of about half a second, and every connection that arrived meanwhile, a 30 µs refusal included, waited that long for
the next poll (bench/README.md, row 8). :class:`LoopTurns` bounds the phase: at most :data:`STARTS_PER_ITERATION`
pieces of work start per iteration (an admitted request entering the application: oaifront.guards; a call to the
Horde: chat.horde.native); the others wait, in arrival order, for the next iterations, one poll apart. Work that finds
no queue starts at once, so outside a clump nothing waits. Only public asyncio: ``call_soon`` and futures.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import Final

STARTS_PER_ITERATION: Final[int] = 8
"""Pieces of admitted work started in one event-loop iteration: eight steps of about a millisecond keep every poll
within about 10 ms of the last one under a burst (bench/README.md, row 8)."""


class LoopTurns:
    """Lets at most ``per_iteration`` callers of :meth:`take` through per event-loop iteration, in arrival order.

    Args:
        per_iteration: Callers let through per iteration (1 or more).
    """

    def __init__(self, per_iteration: int = STARTS_PER_ITERATION) -> None:
        if per_iteration < 1:
            raise ValueError(f"per_iteration must be 1 or more, not {per_iteration}")
        self.per_iteration = per_iteration
        self._passed = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._next_scheduled = False

    @property
    def waiting(self) -> int:
        """Callers waiting for a later iteration (cancelled ones until that iteration drops them)."""
        return len(self._waiting)

    async def take(self) -> None:
        """Return in this iteration if fewer than ``per_iteration`` went through in it and nobody waits; otherwise
        wait for a later iteration. Cancelling a waiting caller takes it out of the queue.
        """
        loop = asyncio.get_running_loop()
        if not self._waiting and self._passed < self.per_iteration:
            self._passed += 1
            self._schedule_next(loop)
            return
        turn: asyncio.Future[None] = loop.create_future()
        self._waiting.append(turn)
        self._schedule_next(loop)
        try:
            await turn
        except asyncio.CancelledError:
            turn.cancel()  # still queued: the next iteration skips it
            raise

    def _schedule_next(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._next_scheduled:
            self._next_scheduled = True
            loop.call_soon(self._next_iteration, loop)

    def _next_iteration(self, loop: asyncio.AbstractEventLoop) -> None:
        """Runs once in the iteration after a turn was taken: a new count, and the first waiting callers let through."""
        self._next_scheduled = False
        self._passed = 0
        while self._waiting and self._passed < self.per_iteration:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                self._passed += 1
        if self._waiting or self._passed:
            self._schedule_next(loop)


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopTurns] = weakref.WeakKeyDictionary()
_last: tuple[asyncio.AbstractEventLoop, LoopTurns] | None = None
"""The loop asked for last and its turns: a server process has one loop, and every connection asks."""


def loop_turns() -> LoopTurns:
    """The running loop's :class:`LoopTurns`, shared by every piece of admitted work of the process (made on first
    use).
    """
    global _last  # noqa: PLW0603 - a one-entry cache in front of the mapping
    loop = asyncio.get_running_loop()
    if _last is not None and _last[0] is loop:
        return _last[1]
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = LoopTurns()
    _last = (loop, turns)
    return turns
