"""On the text API the status reads follow the queue too (issue 37), on virtual time: exact read times and counts.

The real AI Horde's text status reports ``wait_time`` 0 for a queued request at any position (its queue divides the
text queue's tokens by the image divisor, ``horde/database/threads.py:124``), so the schedule estimates the wait from
``queue_position`` and the queue's advance, which the process learns from its own reads (chat.waiting.read_schedule
``QueueAdvance``). :class:`QueueHorde` plays that Horde: first in, first out over a few worker threads, statuses
shaped as chat.horde.text.native_status reads the real text status.
"""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from chat.horde.native import NativeStatus
from chat.horde.text import TextRoutes
from chat.waiting.read_schedule import (
    ADVANCE_MIN_SECONDS,
    ADVANCE_WINDOW_SECONDS,
    MAX_POSITIONED_DELAY_SECONDS,
    MIN_QUEUE_ADVANCE,
    QUEUE_FRACTION,
    QueueAdvance,
    ReadBudget,
    is_urgent,
    wanted_delay,
)
from chat.waiting.waiter import ChatWaiter
from tests.virtual_time import VirtualTime

SETTINGS: Any = SimpleNamespace(
    signal_recheck_seconds=1.0,
    signal_recheck_max_seconds=30.0,
    signal_recheck_reads_per_second=25.0,
    fail_fast_grace_seconds=30.0,
)


def text_queued(position: int) -> NativeStatus:
    """A queued text request as the real Horde reports it: a position, ``wait_time`` 0."""
    body = {"waiting": 1, "queue_position": position, "wait_time": 0, "is_possible": True}
    return NativeStatus.model_validate(body)


# --- the pure rules -------------------------------------------------------------------------------------------------


def test_a_queued_text_request_without_a_wait_is_urgent_only_while_the_queue_advance_is_unknown() -> None:
    assert is_urgent(text_queued(20)) is True
    assert is_urgent(text_queued(20), advance=0.5) is False
    assert is_urgent(text_queued(1), advance=0.5) is True
    assert is_urgent(text_queued(0), advance=0.5) is True


@pytest.mark.parametrize(
    ("position", "advance", "delay"),
    [
        (20, None, 1.0),  # the advance unknown: once a second
        (2, 0.5, 1.0),  # one place ahead at half a place a second: 1 s, the floor
        (4, 2.0, 1.0),  # three places at 2 a second: 1.5 s, half of it is under the floor
        (7, 1.0, 3.0),  # six places at a place a second: 6 s, half of it
        (5, 0.5, 4.0),  # four places at 0.5 a second: 8 s, half of it
        (21, 2.0, 4.0),  # twenty at 2 a second: 10 s, half of it is over the 4 s bound
        (21, 0.0, 4.0),  # a queue seen standing still: 0.2 a second at least, 100 s, within the 4 s bound
    ],
)
def test_the_wanted_delay_of_a_queued_text_request_is_half_its_places_ahead_over_the_advance(
    position: int, advance: float | None, delay: float
) -> None:
    assert (QUEUE_FRACTION, MIN_QUEUE_ADVANCE, MAX_POSITIONED_DELAY_SECONDS) == (0.5, 0.2, 4.0)
    assert wanted_delay(SETTINGS, text_queued(position), ceiling=30.0, advance=advance) == delay


def test_a_reported_wait_time_still_decides_over_the_advance() -> None:
    status = NativeStatus.model_validate({"waiting": 1, "queue_position": 21, "wait_time": 12, "is_possible": True})
    assert wanted_delay(SETTINGS, status, ceiling=30.0, advance=0.1) == 6.0


def test_the_queue_advance_is_the_places_gained_per_second_over_the_last_thirty_seconds() -> None:
    advance = QueueAdvance()
    assert (ADVANCE_WINDOW_SECONDS, ADVANCE_MIN_SECONDS) == (30.0, 3.0)
    advance.observe(1.0, 1, 1.0)
    advance.observe(2.0, 2, 1.0)
    assert advance.per_second(2.0) is None  # 2 s observed: not yet known
    advance.observe(4.0, 3, 2.0)
    assert advance.per_second(4.0) == 1.5  # 6 places in 4 s
    advance.observe(10.0, -2, 2.0)  # passed by two requests of higher priority
    assert advance.per_second(10.0) == pytest.approx(4 / 6)
    assert advance.per_second(32.5) == 0.25  # the reads before 2.5 s have left the window: 1 place in 4 s
    assert advance.per_second(41.0) is None
    advance.observe(50.0, -6, 4.0)
    assert advance.per_second(50.0) == 0.0


# --- a waiter on the text routes -------------------------------------------------------------------------------------


@dataclass
class Job:
    submitted: float
    seconds: float
    started: float = 0.0
    done: float = 0.0


class QueueHorde:
    """The real Horde's text queue on virtual time: jobs served first in, first out by ``threads`` worker threads.

    A status read takes ``read_seconds`` and answers the state at its start; each read's time is recorded by request.
    """

    publishes_signals: ClassVar[bool] = TextRoutes.publishes_signals
    status_queue: ClassVar[str] = TextRoutes.status_queue

    def __init__(self, time: VirtualTime, jobs: dict[str, Job], threads: int, read_seconds: float = 0.0) -> None:
        self.time = time
        self.jobs = jobs
        self.read_seconds = read_seconds
        self.reads: dict[str, list[float]] = {request_id: [] for request_id in jobs}
        free = [0.0] * threads
        for job in sorted(jobs.values(), key=lambda job: job.submitted):
            job.started = max(job.submitted, heapq.heappop(free))
            job.done = job.started + job.seconds
            heapq.heappush(free, job.done)

    async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
        now = self.time.now
        self.reads[request_id].append(now)
        job = self.jobs[request_id]
        if self.read_seconds:
            await self.time.sleep(self.read_seconds)
        if now >= job.done:
            generation = {"id": "g", "model": "m", "message": {"content": "Hi"}, "finish_reason": "stop"}
            body = {"done": True, "finished": 1, "is_possible": True, "generations": [generation]}
            return NativeStatus.model_validate(body)
        if now >= job.started:
            body = {"processing": 1, "wait_time": round(job.done - now), "is_possible": True}
            return NativeStatus.model_validate(body)
        ahead = sum(1 for other in self.jobs.values() if other.submitted <= job.submitted and other.started > now)
        return text_queued(ahead)

    async def text_models(self) -> list[dict[str, Any]]:
        return []


async def wait(runtime: Any, request_id: str, time: VirtualTime, horde: QueueHorde) -> None:
    """Submitted at its job's ``submitted`` time (0 at the earliest), wait for ``request_id`` as the service does."""
    await time.sleep(horde.jobs[request_id].submitted)
    waiter = ChatWaiter(runtime, request_id, None, timeout_seconds=900, clock=time.clock, sleep=time.sleep, horde=horde)
    try:
        await waiter.wait_done(await waiter.first_read())
    finally:
        waiter.close()


def queue_of(ahead: int, seconds: float) -> dict[str, Job]:
    """``ahead`` one-second jobs submitted before a request ``r`` of ``seconds``, all waiting at 0."""
    jobs = {f"a{index}": Job(submitted=index - 100.0, seconds=1.0) for index in range(ahead)}
    return {**jobs, "r": Job(submitted=0.0, seconds=seconds)}


@pytest.mark.asyncio
async def test_a_deep_text_request_is_read_by_its_places_ahead_once_the_queue_advance_is_known() -> None:
    """A request 38th in a queue that moves a place a second (one thread, one-second jobs), in a process that has
    seen it move so: read every 4 s (half of its places ahead at a place a second is more: the bound a request that
    a worker may take out of order is read within), then closer as it nears the head (34.5: the 4th, half of 3
    places), every second from the 3rd place on, and at 42.022, 0.022 s after its 4 s job is done: 17 reads where
    every second would be 43."""
    time = VirtualTime()
    budget = ReadBudget(SETTINGS.signal_recheck_reads_per_second)
    budget.advance("text").observe(0.0, 30, 30.0)
    runtime = SimpleNamespace(settings=SETTINGS, signals=None, read_budget=budget)
    horde = QueueHorde(time, queue_of(38, 4.0), threads=1)
    assert (horde.jobs["r"].started, horde.jobs["r"].done) == (38.0, 42.0)
    await time.run(wait(runtime, "r", time, horde))
    assert [round(at, 3) for at in horde.reads["r"]] == [4.0 * read for read in range(9)] + [34.5] + [
        36.022 + second for second in range(7)
    ]


@pytest.mark.asyncio
async def test_until_the_queue_advance_is_known_a_queued_text_request_is_read_every_second() -> None:
    """A process that has seen no queue move yet: the 38th request is read every second until it has moved for a
    second itself (the 37th at 1, a place a second), then by its places ahead: every 4 s while half of them at a place
    a second is more."""
    time = VirtualTime()
    runtime = SimpleNamespace(settings=SETTINGS, signals=None, read_budget=ReadBudget(25.0))
    horde = QueueHorde(time, queue_of(38, 4.0), threads=1)
    await time.run(wait(runtime, "r", time, horde))
    assert horde.reads["r"][:5] == [0.0, 1.0, 5.0, 9.0, 13.0]


@pytest.mark.asyncio
async def test_a_request_moving_faster_than_the_queue_is_read_by_its_own_pace() -> None:
    """The process saw its queue move 0.1 places a second (requests passed by others of higher priority); this one,
    7th, moves a place a second: its first delay is the 4 s bound, then its own pace decides (the 3rd at 4: half of
    2 places at a place a second, 1 s; the queue's 0.2 would give the 4 s bound again), and it is read every second
    until its job, taken at 7, is done at 11."""
    time = VirtualTime()
    budget = ReadBudget(SETTINGS.signal_recheck_reads_per_second)
    budget.advance("text").observe(0.0, 3, 30.0)
    runtime = SimpleNamespace(settings=SETTINGS, signals=None, read_budget=budget)
    horde = QueueHorde(time, queue_of(7, 4.0), threads=1)
    await time.run(wait(runtime, "r", time, horde))
    assert horde.reads["r"] == [0.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]


@pytest.mark.asyncio
async def test_a_processing_text_request_is_read_a_second_after_its_previous_read_began() -> None:
    """Reads that take 0.25 s at the Horde: a processing request is read at 0, 1, 2, ... (a second from each read's
    start), not 0, 1.25, 2.5, ..., so its reply reaches the client within a second of the Horde having it."""
    time = VirtualTime()
    runtime = SimpleNamespace(settings=SETTINGS, signals=None, read_budget=ReadBudget(25.0))
    horde = QueueHorde(time, {"r": Job(submitted=-1.0, seconds=3.9)}, threads=1, read_seconds=0.25)
    await time.run(wait(runtime, "r", time, horde))
    assert horde.reads["r"] == [0.0, 1.0, 2.0, 3.0, 4.0]


def load(users: int, threads: int) -> dict[str, Job]:
    """``users`` requests arriving over 20 s, jobs of 4 to 12 s (issue 37's load test, at a small size)."""
    return {
        f"u{index}": Job(submitted=round(index * 20.0 / users, 3), seconds=4.0 + 8.0 * (index % 5) / 4)
        for index in range(users)
    }


@pytest.mark.asyncio
async def test_sixty_text_requests_on_six_threads_are_read_where_it_matters() -> None:
    """Sixty requests on six worker threads (a queue up to 40 deep, 26 s queued on average): every reply is read
    within a second of the Horde having it (0.34 s on average), the queued requests are read 0.35 times a second
    (every second before), the processing ones once a second. 1,079 reads in all, 0.52 per waiting request per
    second: at this size a quarter of the waiting is processing (issue 37's 0.35 is for 280 waiting on 24 threads)."""
    time = VirtualTime()
    runtime = SimpleNamespace(settings=SETTINGS, signals=None, read_budget=ReadBudget(25.0))
    jobs = load(60, threads=6)
    horde = QueueHorde(time, jobs, threads=6)
    await time.run(asyncio.gather(*(wait(runtime, request_id, time, horde) for request_id in jobs)))
    after_done = [horde.reads[request_id][-1] - job.done for request_id, job in jobs.items()]
    queued = [at for request_id, job in jobs.items() for at in horde.reads[request_id] if at < job.started]
    queued_seconds = sum(job.started - job.submitted for job in jobs.values())
    processing = [at for request_id, job in jobs.items() for at in horde.reads[request_id] if at >= job.started]
    processing_seconds = sum(horde.reads[request_id][-1] - job.started for request_id, job in jobs.items())
    assert max(after_done) <= SETTINGS.signal_recheck_seconds
    assert round(sum(after_done) / len(after_done), 3) == 0.339
    assert (len(queued), round(len(queued) / queued_seconds, 3)) == (540, 0.347)
    assert (len(processing), round(processing_seconds)) == (539, 500)
