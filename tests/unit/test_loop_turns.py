"""A few pieces of admitted work start per event-loop iteration (chat.loop_turns, issue 23: refusals before work).

Each test counts the loop's iterations with a callback that re-schedules itself (``call_soon`` runs once per
iteration), so what is asserted is in iterations, never in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from chat.loop_turns import STARTS_PER_ITERATION, LoopTurns, loop_turns


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
async def test_one_turns_per_running_loop() -> None:
    assert loop_turns() is loop_turns()


def test_per_iteration_is_one_or_more() -> None:
    with pytest.raises(ValueError, match="per_iteration must be 1 or more, not 0"):
        LoopTurns(per_iteration=0)
