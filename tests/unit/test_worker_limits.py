"""chat.horde.worker_limits: the Horde's text worker list read through the shared cache (httpx.MockTransport, an
injected wall clock), each model's declared limits, a stopped worker told from its unchanging ``uptime``, and what
the text status and the waiter make of it (a request whose workers all stopped meets the fail-fast grace, not the
timeout)."""

from __future__ import annotations

import asyncio
import json
import uuid
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from chat.errors import OpenAIError
from chat.horde.native import HordeClient, NativeStatus
from chat.horde.text import PreparedTextRequest, TextRoutes
from chat.horde.worker_limits import (
    ModelWorkers,
    WorkerDirectory,
    WorkerSnapshot,
    WorkerState,
    apply_liveness,
    track_uptimes,
)
from chat.protocol.chat_request import ChatCompletionRequest
from chat.waiting.waiter import ChatWaiter

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
START = 1_800_000_000.0


def worker(worker_id: str, uptime: float | None, **fields: Any) -> dict[str, Any]:
    """A ``/v2/workers`` entry as the real Horde serves it (the keys the front reads, and some it does not)."""
    return {
        "id": worker_id,
        "name": f"worker-{worker_id}",
        "type": "text",
        "models": [QWEN],
        "threads": 1,
        "uptime": uptime,
        "max_length": 512,
        "max_context_length": 4096,
        "maintenance_mode": False,
        "online": True,
        "performance": "14.6 tokens per second",
        **fields,
    }


class Clock:
    """Wall seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class WorkersHorde:
    """A Horde answering ``GET /v2/workers?type=text`` from ``lists`` (the last one repeats), counting reads."""

    def __init__(self, lists: list[Any], status: int = 200) -> None:
        self.lists = lists
        self.status = status
        self.reads: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/v2/workers")
        self.reads.append(request)
        if self.status != 200:
            return httpx.Response(self.status, text="<html>Not Found</html>")
        body = self.lists[min(len(self.reads), len(self.lists)) - 1]
        return httpx.Response(200, content=json.dumps(body))

    def client(self) -> HordeClient:
        url = f"http://horde-{uuid.uuid4().hex[:8]}.test/api"  # its own cache keys
        return HordeClient(url, "test:1:none", 5.0, transport=httpx.MockTransport(self.handle))


def test_an_uptime_unchanged_for_over_120_seconds_is_a_stopped_worker() -> None:
    """A worker seen for the first time is live; it stays live while its uptime changed within 120 s of the read
    (120 s exactly included) and is stopped at 121 s; a changed uptime makes it live again. Offline workers and workers
    in maintenance are left out; a missing ``threads`` counts one."""
    entries = [
        worker("a", 795),
        worker("b", 30, threads=None),
        worker("off", 10, online=False),
        worker("maint", 10, maintenance_mode=True),
    ]
    first, kept = track_uptimes(entries, {}, 100.0)
    assert [(w.id, w.threads, w.live) for w in first] == [("a", 1, True), ("b", 1, True)]
    assert kept == {"a": [795.0, 100.0], "b": [30.0, 100.0]}
    at_120, kept_120 = track_uptimes([worker("a", 795), worker("b", 60)], kept, 220.0)
    assert [(w.id, w.live) for w in at_120] == [("a", True), ("b", True)]
    assert kept_120 == {"a": [795.0, 100.0], "b": [60.0, 220.0]}
    at_121, kept_121 = track_uptimes([worker("a", 795), worker("b", 60)], kept_120, 221.0)
    assert [(w.id, w.live) for w in at_121] == [("a", False), ("b", True)]
    back, _ = track_uptimes([worker("a", 826)], kept_121, 222.0)
    assert [(w.id, w.live) for w in back] == [("a", True)]
    no_uptime, none_kept = track_uptimes([worker("c", None)], {"c": [5.0, 0.0]}, 500.0)
    assert [(w.id, w.live) for w in no_uptime] == [("c", True)]
    assert none_kept == {}


def test_a_list_of_three_workers_none_live_is_a_stale_list_not_three_stopped_workers() -> None:
    """The Horde's worker cache thread halting freezes every uptime: from three workers on, a list with none live
    keeps them all live; two workers that stopped together are stopped."""
    three = [worker("a", 10), worker("b", 20), worker("c", 30)]
    _, kept = track_uptimes(three, {}, 0.0)
    frozen, _ = track_uptimes(three, kept, 121.0)
    assert [(w.id, w.live) for w in frozen] == [("a", True), ("b", True), ("c", True)]
    one_moved, _ = track_uptimes([worker("a", 10), worker("b", 20), worker("c", 61)], kept, 121.0)
    assert [(w.id, w.live) for w in one_moved] == [("a", False), ("b", False), ("c", True)]
    _, kept_two = track_uptimes(three[:2], {}, 0.0)
    two, _ = track_uptimes(three[:2], kept_two, 121.0)
    assert [(w.id, w.live) for w in two] == [("a", False), ("b", False)]


def test_a_models_workers_are_counted_once_with_their_largest_limits() -> None:
    snapshot = WorkerSnapshot(
        read_at=START,
        workers=(
            WorkerState(
                id="a", models=frozenset({"m/a", "m/b"}), threads=2, max_length=512, max_context_length=4096, live=True
            ),
            WorkerState(
                id="b", models=frozenset({"m/b"}), threads=3, max_length=1024, max_context_length=2048, live=False
            ),
            WorkerState(
                id="c", models=frozenset({"m/c"}), threads=8, max_length=None, max_context_length=None, live=True
            ),
        ),
    )
    assert snapshot.for_models(["m/a", "m/b"]) == ModelWorkers(
        workers=2, threads=5, live_workers=1, live_threads=2, max_length=1024, max_context_length=4096
    )
    assert snapshot.for_models(["m/c"]) == ModelWorkers(
        workers=1, threads=8, live_workers=1, live_threads=8, max_length=None, max_context_length=None
    )
    assert snapshot.for_models(["m/none"]).workers == 0
    assert WorkerSnapshot.from_cache(json.loads(json.dumps(snapshot.to_cache()))) == snapshot


@pytest.mark.asyncio
async def test_the_list_is_read_once_per_30_seconds_across_processes_and_tracks_stopped_workers() -> None:
    """Two directories on one Horde (two processes sharing the cache) make one read per 30 s between them; a
    worker whose uptime stays 795 from the first read is live at 40 s and stopped at 130 s."""
    horde = WorkersHorde([[worker("a", 795)], [worker("a", 795)], [worker("a", 795)]])
    client = horde.client()
    clock = Clock()
    one = WorkerDirectory(client, clock=clock)
    two = WorkerDirectory(client, clock=clock)
    try:
        first = await one.snapshot()
        assert first is not None and first.for_models([QWEN]) == ModelWorkers(
            workers=1, threads=1, live_workers=1, live_threads=1, max_length=512, max_context_length=4096
        )
        clock.now += 29
        assert await two.snapshot() == first  # the other process's read, from the shared cache
        assert await one.snapshot() == first
        assert len(horde.reads) == 1
        assert horde.reads[0].url.params["type"] == "text"
        clock.now += 11  # 40 s
        at_40 = await two.snapshot()
        assert at_40 is not None and at_40.read_at == START + 40 and at_40.for_models([QWEN]).live_workers == 1
        clock.now += 90  # 130 s: unchanged since the read at 0 s
        at_130 = await one.snapshot()
        assert at_130 is not None and at_130.for_models([QWEN]).live_workers == 0
        assert len(horde.reads) == 3
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_horde_without_the_list_is_remembered_as_unknown_for_30_seconds() -> None:
    """A development Horde answers 404 without an rc: no limits, no liveness, and no read again for 30 s."""
    horde = WorkersHorde([], status=404)
    client = horde.client()
    clock = Clock()
    directory = WorkerDirectory(client, clock=clock)
    try:
        assert await directory.snapshot() is None
        clock.now += 29.5
        assert await WorkerDirectory(client, clock=clock).snapshot() is None
        assert len(horde.reads) == 1
        clock.now += 1
        assert await directory.snapshot() is None
        assert len(horde.reads) == 2
    finally:
        await client.aclose()


def test_a_status_gets_the_live_workers_and_is_impossible_when_none_runs() -> None:
    waiting = {"waiting": 1, "done": False, "is_possible": True}
    live = NativeStatus.model_validate(waiting)
    apply_liveness(
        live,
        ModelWorkers(workers=2, threads=3, live_workers=1, live_threads=2, max_length=512, max_context_length=4096),
    )
    assert (live.is_possible, live.eligible_workers, live.eligible_worker_threads) == (True, 1, 2)
    stopped = NativeStatus.model_validate(waiting)
    apply_liveness(
        stopped,
        ModelWorkers(workers=1, threads=1, live_workers=0, live_threads=0, max_length=512, max_context_length=4096),
    )
    assert (stopped.is_possible, stopped.eligible_workers, stopped.eligible_worker_threads) == (False, 0, 0)
    unknown = NativeStatus.model_validate(waiting)
    apply_liveness(
        unknown,
        ModelWorkers(workers=0, threads=0, live_workers=0, live_threads=0, max_length=None, max_context_length=None),
    )
    assert (unknown.is_possible, unknown.eligible_workers, unknown.eligible_worker_threads) == (True, None, None)


# --- the waiter over the text path -------------------------------------------------------------------------------

GRACE = 30.0
PREPARED = PreparedTextRequest(
    payload={"models": [QWEN]},
    stop_sequences=(),
    max_length=512,
    estimated_prompt_tokens=3,
    strip_leading_whitespace=True,
)


class TextStatuses:
    """The text client: every status read says the request waits and is possible (the real Horde's answer for five
    minutes after the last worker stopped)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.read_times: list[float] = []

    async def status_body(self, request_id: str, apikey: str | None) -> dict[str, Any]:
        self.read_times.append(self.clock.now - START)
        return {"waiting": 1, "processing": 0, "finished": 0, "done": False, "is_possible": True, "wait_time": 5}


class FixedWorkers:
    def __init__(self, live: bool) -> None:
        state = WorkerState(
            id="a", models=frozenset({QWEN}), threads=1, max_length=512, max_context_length=4096, live=live
        )
        self.value = WorkerSnapshot(read_at=START, workers=(state,))

    async def snapshot(self) -> WorkerSnapshot:
        return self.value


def text_waiter(live: bool, mode: str = "wait") -> tuple[ChatWaiter, TextStatuses]:
    clock = Clock()
    statuses = TextStatuses(clock)
    routes = TextRoutes(statuses, PREPARED, FixedWorkers(live))  # type: ignore[arg-type] - stubs with the methods read
    settings = SimpleNamespace(
        signal_recheck_seconds=1.0,
        signal_recheck_max_seconds=30.0,
        signal_recheck_reads_per_second=25.0,
        fail_fast_grace_seconds=GRACE,
    )
    runtime = SimpleNamespace(horde=routes, signals=None, settings=settings)
    request = ChatCompletionRequest.model_validate(
        {"model": QWEN, "messages": [{"role": "user", "content": "Hi"}], "horde": {"availability_mode": mode}}
    )
    waiter = ChatWaiter(
        runtime, "req-1", "key", timeout_seconds=300.0, request=request, clock=clock, sleep=clock.sleep, horde=routes
    )
    return waiter, statuses


@pytest.mark.asyncio
async def test_a_request_whose_workers_all_stopped_gets_no_eligible_worker_after_the_grace() -> None:
    """ref: model-availability.8 - the grace starts at the first read and ends at 30 s with 503, not a 408 at 300 s."""
    waiter, statuses = text_waiter(live=False)
    first = await waiter.first_read()
    assert (first.is_possible, first.eligible_worker_threads) == (False, 0)
    with pytest.raises(OpenAIError) as refused:
        await waiter.wait_done(first)
    error = refused.value
    assert (error.status, error.code, error.retry_after, error.should_retry) == (503, "no_eligible_worker", 30, False)
    assert statuses.read_times[-1] == GRACE


@pytest.mark.asyncio
async def test_fail_fast_refuses_at_once_when_no_worker_runs_and_counts_live_threads_otherwise() -> None:
    """ref: fail-fast-admission.1 - zero eligible worker threads (the live workers') refuse at the first read."""
    waiter, _ = text_waiter(live=False, mode="fail_fast")
    with pytest.raises(OpenAIError) as refused:
        await waiter.first_read()
    assert (refused.value.status, refused.value.code) == (503, "queue_unavailable")
    assert refused.value.metadata is not None
    assert (refused.value.metadata["reason"], refused.value.metadata["eligible_worker_threads"]) == (
        "no_eligible_threads",
        0,
    )
    admitted, statuses = text_waiter(live=True, mode="fail_fast")
    status = await admitted.first_read()
    assert (status.is_possible, status.eligible_worker_threads, statuses.read_times) == (True, 1, [0.0])
