"""The timer reads without signals follow the queue (chat.waiting.read_schedule), on injected clocks: exact delays.

Issue 23: a request processing or at the head of the queue is read every ``signal_recheck_seconds``; one deep in the
queue after a share of its estimated wait, within the ceiling; one process-wide budget books the reads of the deep
ones so the process stays within ``signal_recheck_reads_per_second`` however many wait.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from chat.horde.native import HordeUnreachable, NativeStatus
from chat.waiting.read_schedule import CEILING_SHARE, QUEUE_FRACTION, ReadBudget, ReadSchedule, is_urgent, wanted_delay
from tests.unit.test_waiter import FINISHED, GRACE, IMPOSSIBLE, PROCESSING, WAITING, make_waiter, refused

SETTINGS: Any = SimpleNamespace(signal_recheck_seconds=1.0, signal_recheck_max_seconds=30.0)


def queued(position: int, wait_time: int) -> NativeStatus:
    return NativeStatus.model_validate({**WAITING, "queue_position": position, "wait_time": wait_time})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("status", "urgent"),
    [
        (None, True),
        (NativeStatus.model_validate(PROCESSING), True),
        (NativeStatus.model_validate(FINISHED), True),
        (NativeStatus.model_validate(IMPOSSIBLE | {"queue_position": 40, "wait_time": 400}), True),
        (queued(0, 0), True),
        (queued(1, 12), True),
        (queued(2, 0), True),
        (queued(2, 12), False),
        (queued(700, 900), False),
    ],
)
def test_which_reads_are_urgent(status: NativeStatus | None, urgent: bool) -> None:
    assert is_urgent(status) is urgent


@pytest.mark.parametrize(
    ("status", "delay"),
    [
        (None, 1.0),
        (NativeStatus.model_validate(PROCESSING), 1.0),
        (queued(1, 30), 1.0),
        (queued(2, 1), 1.0),
        (queued(3, 6), 3.0),
        (queued(12, 20), 10.0),
        (queued(90, 59), 29.5),
        (queued(400, 300), 30.0),
    ],
)
def test_the_wanted_delay_is_a_share_of_the_wait_within_the_floor_and_ceiling(
    status: NativeStatus | None, delay: float
) -> None:
    assert QUEUE_FRACTION == 0.5
    assert wanted_delay(SETTINGS, status, ceiling=30.0) == delay


def test_a_deep_read_takes_the_first_slot_with_room() -> None:
    """Two reads a second: the third read wanted in second 10 moves to the start of second 11, the fifth to 12."""
    budget = ReadBudget(2)
    assert [budget.book(0.0, 10.5, urgent=False) for _ in range(5)] == [10.5, 10.5, 11.0, 11.0, 12.0]
    assert [budget.booked(slot) for slot in (10, 11, 12)] == [2, 2, 1]


def test_a_deep_read_is_put_off_by_at_most_its_slack() -> None:
    """Slots 10-12 full: with 2 s of slack the read wanted at 10.5 goes to the least booked of slots 10-12 (10, the
    first of equals); with 3 s it reaches the free slot 13."""
    budget = ReadBudget(1)
    for slot in (10, 11, 12):
        budget.book(0.0, float(slot), urgent=True)
    assert budget.book(0.0, 10.5, urgent=False, slack=2.0) == 10.5
    assert budget.booked(10) == 2
    assert budget.book(0.0, 10.5, urgent=False, slack=3.0) == 13.0


def test_an_urgent_read_keeps_its_time_and_counts_in_its_slot() -> None:
    budget = ReadBudget(2)
    assert budget.book(0.0, 3.25, urgent=True) == 3.25
    assert budget.book(0.0, 3.5, urgent=True) == 3.5
    assert budget.book(0.0, 3.75, urgent=True) == 3.75
    assert budget.booked(3) == 3
    assert budget.book(0.0, 3.0, urgent=False) == 4.0


def test_past_slots_are_forgotten_and_a_release_gives_a_slot_back() -> None:
    budget = ReadBudget(1)
    assert budget.book(0.0, 5.0, urgent=False) == 5.0
    budget.release(5.0)
    assert budget.booked(5) == 0
    assert budget.book(0.0, 5.0, urgent=False) == 5.0
    assert budget.book(9.0, 9.0, urgent=False) == 9.0
    assert budget.booked(5) == 0


def test_a_schedule_books_its_delay_and_leaves_on_close() -> None:
    clock = Clock()
    budget = ReadBudget(1)
    first = ReadSchedule(SETTINGS, budget, clock)
    second = ReadSchedule(SETTINGS, budget, clock)
    assert budget.waiting == 2
    assert first.next_delay(queued(50, 40), ceiling=30.0) == 20.0
    assert second.next_delay(queued(50, 40), ceiling=30.0) == 21.0
    first.close()
    first.close()
    assert budget.waiting == 1
    assert budget.booked(20) == 0
    assert ReadSchedule(SETTINGS, budget, clock).next_delay(queued(50, 40), ceiling=30.0) == 20.0


def test_a_cut_shorter_than_the_wanted_delay_is_kept_exactly() -> None:
    """The grace's end comes before the queue's read: it is read then, even in a full slot."""
    clock = Clock()
    budget = ReadBudget(1)
    budget.book(0.0, 4.0, urgent=True)
    schedule = ReadSchedule(SETTINGS, budget, clock)
    assert schedule.next_delay(queued(50, 40), ceiling=30.0, cut=4.5) == 4.5


def shrinking_queue(count: int) -> dict[str, Any]:
    """Position 61 - 10 per read, wait_time 60 - 10 per read (the whole queue moves at 1 s per position), then
    processing at the head from read 6, finished at read 9."""
    if count >= 9:
        return FINISHED
    if count >= 6:
        return PROCESSING
    return {**WAITING, "queue_position": 61 - 10 * count, "wait_time": 60 - 10 * count}


@pytest.mark.asyncio
async def test_without_signals_a_deep_request_is_read_at_half_its_wait_then_every_second() -> None:
    """Reads at 0 (wait 50 s: next in 25 s), 25 (wait 40: 20), 45 (wait 30: 15), 60 (wait 20: 10), 70 (wait 10: 5),
    75 processing, then every second."""
    waiter, horde = make_waiter([shrinking_queue])
    status = await waiter.wait_done(await waiter.first_read())
    assert status.finished == 1
    assert horde.read_times == [0.0, 25.0, 45.0, 60.0, 70.0, 75.0, 76.0, 77.0, 78.0]


@pytest.mark.asyncio
async def test_without_signals_the_ceiling_bounds_the_deep_delay() -> None:
    deep = {**WAITING, "queue_position": 900, "wait_time": 3000}
    waiter, horde = make_waiter([deep, deep, deep, FINISHED])
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 30.0, 60.0, 90.0]


@pytest.mark.asyncio
async def test_without_signals_the_ceiling_rises_with_the_waiting_count() -> None:
    """1,000 requests waiting at 25 reads a second, a quarter of which the reads at the ceiling may take: 160 s."""
    deep = {**WAITING, "queue_position": 900, "wait_time": 3000}
    waiter, horde = make_waiter([deep, deep, FINISHED], timeout=1000)
    waiter.reads.budget.waiting = 1000
    await waiter.wait_done(await waiter.first_read())
    assert CEILING_SHARE == 0.25
    assert horde.read_times == [0.0, 160.0, 320.0]


@pytest.mark.asyncio
async def test_without_signals_the_budget_moves_a_deep_read_to_a_free_slot() -> None:
    """The budget's slot of second 25 is already full (25 reads): the deep read comes at 26."""
    deep = {**WAITING, "queue_position": 61, "wait_time": 50}
    waiter, horde = make_waiter([deep, FINISHED])
    budget = waiter.reads.budget
    for _ in range(25):
        budget.book(0.0, 25.0, urgent=False)
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 26.0]


@pytest.mark.asyncio
async def test_without_signals_the_grace_still_ends_on_time_for_a_deep_request() -> None:
    """Deep in the queue (next read wanted 30 s later), then impossible at 30: read every second until the grace ends
    GRACE after that read, then 503. ref: model-availability.8"""
    deep = {**WAITING, "queue_position": 500, "wait_time": 600}
    waiter, horde = make_waiter([deep, IMPOSSIBLE])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code) == (503, "no_eligible_worker")
    assert horde.read_times == [0.0] + [30.0 + second for second in range(int(GRACE) + 1)]


@pytest.mark.asyncio
async def test_a_failed_read_of_a_deep_request_is_retried_after_signal_recheck_seconds() -> None:
    deep = {**WAITING, "queue_position": 500, "wait_time": 600}
    failure = HordeUnreachable("GET status: ConnectError")
    waiter, horde = make_waiter([deep, failure, deep, FINISHED])
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 30.0, 31.0, 61.0]


@pytest.mark.asyncio
async def test_closing_a_waiter_leaves_the_waiting_count() -> None:
    waiter, _ = make_waiter([WAITING])
    assert waiter.reads.budget.waiting == 1
    waiter.close()
    assert waiter.reads.budget.waiting == 0
