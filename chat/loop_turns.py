"""A few pieces of admitted work start per event-loop iteration, so the loop reads its sockets between them.

An asyncio loop alternates two phases: it polls its sockets and runs their callbacks (a connection's bytes arrive and
are parsed; the door refuses a request on its head there: oaifront.door), then it runs every callback that was ready
when the phase began (each task's next step). Admitted work comes in clumps: the requests of a burst admitted in the
same poll (256 from one address, the per-client cap), or the status reads of those requests, whose timers all end in
the same iteration a second later. Each such step is about a millisecond of CPU (Django's middleware and the body's
validation; a call to the Horde through httpx), so one clump made a run phase of about half a second, and every
connection that arrived meanwhile, a 30 µs refusal included, waited that long for the next poll (bench/README.md,
row 8). :class:`LoopTurns` bounds the phase: at most :data:`STARTS_PER_ITERATION` pieces of work start per iteration
(an admitted request entering the application: oaifront.guards; the transport of a connection whose request the door
admitted as it was accepted: oaifront.door; a call to the Horde: chat.horde.native); the others
wait, in arrival order, for the next iterations, one poll apart. Work that finds no queue starts at once, so outside a
clump nothing waits.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import Final

HOLD_SECONDS: Final[float] = 0.1
"""The longest admitted work is held back while new connections keep arriving (:meth:`LoopTurns.hold_for_arrival`);
then :data:`FREE_SECONDS` without holding, whatever arrives. (With a 20 ms hold, a burst's admitted requests took
about a third of the loop while it was still being refused: bench/README.md, row 8.)"""

FREE_SECONDS: Final[float] = HOLD_SECONDS / 4
"""After a hold that ran its whole :data:`HOLD_SECONDS`, how long arrivals hold nothing: connections arriving in every
iteration without end (a burst that lasts, a client hammering at its cap) leave the admitted work at least a fifth of
the loop's time."""

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
        self._arrived = False
        self._held_since: float | None = None
        self._free_until = 0.0

    @property
    def waiting(self) -> int:
        """Callers waiting for a later iteration (cancelled ones until that iteration drops them)."""
        return len(self._waiting)

    async def take(self) -> None:
        """Return in this iteration if fewer than ``per_iteration`` went through in it and nobody waits; otherwise
        wait for a later iteration. Cancelling a waiting caller takes it out of the queue.
        """
        loop = asyncio.get_running_loop()
        if not self._waiting and not self._arrived and self._passed < self.per_iteration:
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

    def hold_for_arrival(self) -> None:
        """A new connection arrived (oaifront.door calls this as each is made): no turn goes out in this iteration or
        the next, so the loop goes back to its sockets at once and accepts and refuses the connections behind it.
        A hold lasts at most :data:`HOLD_SECONDS` however many arrive, then :data:`FREE_SECONDS` go without one.
        """
        if self._arrived:  # an arrival of this iteration already holds it (a burst's connections after the first)
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._free_until:
            return
        self._arrived = True
        self._schedule_next(loop)

    def _next_iteration(self, loop: asyncio.AbstractEventLoop) -> None:
        """Runs once in the iteration after a turn was taken or a connection arrived: a new count, and the first
        waiting callers let through, unless connections arrived since the last one (within :data:`HOLD_SECONDS`).
        """
        self._next_scheduled = False
        self._passed = 0
        if self._arrived:
            self._arrived = False
            now = loop.time()
            if self._held_since is None:
                self._held_since = now
            if now - self._held_since < HOLD_SECONDS:
                self._passed = self.per_iteration  # nobody passes in this iteration
                self._schedule_next(loop)
                return
            self._free_until = now + FREE_SECONDS
        self._held_since = None
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
