"""A few pieces of admitted work start per event-loop iteration (chat.loop_turns, issue 23: refusals before work).

Each test counts the loop's iterations with a callback that re-schedules itself (``call_soon`` runs once per
iteration), so what is asserted is in iterations, never in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from chat.loop_turns import FREE_SECONDS, HOLD_SECONDS, STARTS_PER_ITERATION, LoopTurns, loop_turns


class Iterations:
    """The number of event-loop iterations since it started (one ``call_soon`` callback per iteration)."""

    def __init__(self) -> None:
        self.count = 0
        self._running = True

    def _tick(self) -> None:
        if self._running:
            self.count += 1
            asyncio.get_running_loop().call_soon(self._tick)

    @contextmanager
    def running(self) -> Iterator[Iterations]:
        asyncio.get_running_loop().call_soon(self._tick)
        try:
            yield self
        finally:
            self._running = False


async def take_all(turns: LoopTurns, count: int, iterations: Iterations) -> list[tuple[int, int]]:
    """``count`` callers of ``turns.take()`` started together: (caller, iteration it went through) in passing order."""
    passed: list[tuple[int, int]] = []

    async def caller(index: int) -> None:
        await turns.take()
        passed.append((index, iterations.count))

    await asyncio.gather(*(caller(index) for index in range(count)))
    return passed


@pytest.mark.asyncio
async def test_at_most_eight_pass_per_iteration_in_arrival_order() -> None:
    turns = LoopTurns()
    with Iterations().running() as iterations:
        passed = await take_all(turns, 40, iterations)
    assert STARTS_PER_ITERATION == 8
    assert [index for index, _ in passed] == list(range(40))
    per_iteration: dict[int, int] = {}
    for _, iteration in passed:
        per_iteration[iteration] = per_iteration.get(iteration, 0) + 1
    assert max(per_iteration.values()) <= 8
    assert len(per_iteration) >= 5
    assert turns.waiting == 0


@pytest.mark.asyncio
async def test_a_caller_that_finds_no_queue_goes_through_without_waiting() -> None:
    turns = LoopTurns()
    with Iterations().running() as iterations:
        await asyncio.sleep(0)
        before = iterations.count
        for _ in range(8):
            await turns.take()
        assert iterations.count == before  # eight in the same iteration: none of them waited
        await turns.take()  # the ninth waits for the next iteration
        assert iterations.count > before


@pytest.mark.asyncio
async def test_a_cancelled_caller_leaves_the_queue_and_the_others_still_pass() -> None:
    turns = LoopTurns(per_iteration=1)
    waiting = [asyncio.ensure_future(turns.take()) for _ in range(4)]
    await asyncio.sleep(0)  # the first went through, three wait
    assert turns.waiting == 3
    waiting[2].cancel()
    await asyncio.gather(waiting[0], waiting[1], waiting[3])
    assert waiting[2].cancelled()
    assert turns.waiting == 0


@pytest.mark.asyncio
async def test_nobody_passes_in_the_iteration_after_a_connection_arrived() -> None:
    turns = LoopTurns()
    with Iterations().running() as iterations:
        await asyncio.sleep(0)
        turns.hold_for_arrival()
        held_at = iterations.count
        await turns.take()
        assert iterations.count >= held_at + 2


@pytest.mark.asyncio
async def test_arrivals_that_never_stop_hold_the_work_back_only_for_a_while() -> None:
    """A steady stream of connections (one in every iteration) slows the admitted work, never stops it: after
    ``HOLD_SECONDS`` of holding, one iteration's turns go out."""
    turns = LoopTurns()
    arriving = True

    def arrive() -> None:
        if arriving:
            turns.hold_for_arrival()
            asyncio.get_running_loop().call_soon(arrive)

    loop = asyncio.get_running_loop()
    loop.call_soon(arrive)
    await asyncio.sleep(0)
    started = loop.time()
    try:
        await asyncio.wait_for(turns.take(), timeout=60)
    finally:
        arriving = False
    assert loop.time() - started >= HOLD_SECONDS * 0.9


@pytest.mark.asyncio
async def test_one_turns_per_running_loop() -> None:
    assert loop_turns() is loop_turns()


def test_per_iteration_is_one_or_more() -> None:
    with pytest.raises(ValueError, match="per_iteration must be 1 or more, not 0"):
        LoopTurns(per_iteration=0)


@pytest.mark.asyncio
async def test_steady_arrivals_leave_the_admitted_work_a_share_of_the_loop() -> None:
    """Connections arriving in every iteration (a steady stream of refused clients) hold the admitted work for
    ``HOLD_SECONDS``, then leave it ``FREE_SECONDS``, when turns go out in every iteration: far more than the one
    iteration of turns per hold there would be without the free time."""
    turns = LoopTurns()
    loop = asyncio.get_running_loop()
    passes = 0
    arriving = True

    def arrive() -> None:
        if arriving:
            turns.hold_for_arrival()
            loop.call_soon(arrive)

    async def work() -> None:
        nonlocal passes
        while arriving:
            await turns.take()
            passes += 1

    loop.call_soon(arrive)
    worker = asyncio.ensure_future(work())
    started = loop.time()
    await asyncio.sleep((HOLD_SECONDS + FREE_SECONDS) * 5)
    arriving = False
    await worker
    holds = (loop.time() - started) / HOLD_SECONDS
    assert passes > holds * STARTS_PER_ITERATION * 3
