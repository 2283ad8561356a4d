"""The cancel queue: outcomes, retries, the bound, expiry and the shutdown retry (reference: Cancel outcomes).

The clock and the sleep are injected: time passes only when the queue sleeps or the test moves it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from chat.horde.cancels import MAX_FAILED_CANCELS, RETRIED_OUTCOMES, CancelQueue, PendingCancel
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus
from chat.limits import HORDE_CHAT_REQUEST_EXPIRY_SECONDS

pytestmark = pytest.mark.asyncio

RETRY = 10.0
SUBMITTED = 1_000_000.0


class FakeClock:
    def __init__(self) -> None:
        self.now = SUBMITTED

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class FakeHorde:
    """Answers each cancel with the next scripted result per request id (the last repeats); records the calls."""

    def __init__(self, script: dict[str, list[Any]] | None = None, default: Any = "ok") -> None:
        self.script = script or {}
        self.default = default
        self.calls: list[tuple[str, str | None]] = []

    async def cancel(self, request_id: str, apikey: str | None) -> NativeStatus:
        count = sum(1 for call in self.calls if call[0] == request_id)
        self.calls.append((request_id, apikey))
        results = self.script.get(request_id, [self.default])
        result = results[min(count, len(results) - 1)]
        if result == "hang":
            await asyncio.sleep(3600)
        if isinstance(result, BaseException):
            raise result
        return NativeStatus(done=True)


UNREACHABLE = HordeUnreachable("DELETE: ConnectError")
NOT_FOUND = HordeRefusal(status=404, message="Request not found.", rc="RequestNotFound")
REFUSED = HordeRefusal(status=500, message="boom", rc="InternalError")


async def never(seconds: float) -> None:
    """A sleep that does not end: the test drives the retries itself."""
    await asyncio.Event().wait()


def make_queue(horde: FakeHorde, clock: FakeClock, *, loop_sleeps: bool = False, **kwargs: Any) -> CancelQueue:
    """A queue on the fake clock; its background retry loop sleeps for ever unless ``loop_sleeps``."""
    sleep = clock.sleep if loop_sleeps else never
    return CancelQueue(horde, retry_seconds=RETRY, attempt_timeout=0.05, clock=clock, sleep=sleep, **kwargs)


@pytest.mark.parametrize(
    ("answer", "outcome", "retried"),
    [
        ("ok", "cancelled", False),
        (NOT_FOUND, "not_found", False),
        (UNREACHABLE, "failed", True),
        (REFUSED, "failed", True),
        ("hang", "timed_out", True),
        (RuntimeError("client closed"), "failed", True),
    ],
)
async def test_attempt_outcomes(answer: Any, outcome: str, retried: bool) -> None:
    """ref: cancel-outcomes.1, cancel-outcomes.2"""
    clock = FakeClock()
    queue = make_queue(FakeHorde({"r1": [answer]}), clock)
    assert await queue.cancel_soon("r1", "key", SUBMITTED) == outcome
    assert (outcome in RETRIED_OUTCOMES) is retried
    assert ("r1" in queue.pending) is retried
    assert queue.attempts == 1 and queue.outcome_counts == {outcome: 1}
    await queue.aclose()


async def test_an_interrupted_attempt_is_not_started_and_retried() -> None:
    """ref: cancel-outcomes.2"""
    clock = FakeClock()
    queue = make_queue(FakeHorde({"r1": ["hang", "ok"]}), clock)
    queue.attempt_timeout = 60
    task = queue.cancel_soon("r1", "key", SUBMITTED)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.outcome_counts == {"not_started": 1}
    assert "r1" in queue.pending
    await queue.aclose()
    assert queue.outcome_counts == {"not_started": 1, "cancelled": 1}


async def test_failed_cancels_are_retried_every_retry_interval_until_they_succeed() -> None:
    """ref: cancel-outcomes.1, cancel-outcomes.2"""
    clock = FakeClock()
    horde = FakeHorde({"r1": [UNREACHABLE, UNREACHABLE, "ok"]})
    queue = make_queue(horde, clock)
    assert await queue.cancel_soon("r1", "key", SUBMITTED) == "failed"
    assert queue.pending["r1"].due_at == SUBMITTED + RETRY
    assert await queue.retry_due() == []  # not due yet
    clock.now += RETRY
    assert await queue.retry_due() == ["failed"]
    clock.now += RETRY - 1
    assert await queue.retry_due() == []
    clock.now += 1
    assert await queue.retry_due() == ["cancelled"]
    assert not queue.pending
    assert horde.calls == [("r1", "key")] * 3
    assert queue.attempts == 3 and queue.outcome_counts == {"failed": 2, "cancelled": 1}


async def test_the_retry_loop_runs_on_its_own() -> None:
    """ref: cancel-outcomes.2"""
    clock = FakeClock()
    horde = FakeHorde({"r1": [UNREACHABLE, UNREACHABLE, "ok"]})
    queue = make_queue(horde, clock, loop_sleeps=True)
    await queue.cancel_soon("r1", None, SUBMITTED)
    for _ in range(100):
        if queue.outcome_counts["cancelled"]:
            break
        await asyncio.sleep(0)
    assert not queue.pending
    assert len(horde.calls) == 3
    assert queue.outcome_counts == {"failed": 2, "cancelled": 1}
    assert clock.now == SUBMITTED + 2 * RETRY


async def test_retries_stop_at_the_request_expiry() -> None:
    """ref: cancel-outcomes.3"""
    assert HORDE_CHAT_REQUEST_EXPIRY_SECONDS == 1200
    clock = FakeClock()
    horde = FakeHorde(default=UNREACHABLE)
    queue = make_queue(horde, clock)
    await queue.cancel_soon("r1", None, SUBMITTED)
    clock.now = SUBMITTED + HORDE_CHAT_REQUEST_EXPIRY_SECONDS - 1
    assert await queue.retry_due() == ["failed"]
    assert "r1" in queue.pending  # a shutdown before the expiry still retries it
    clock.now = SUBMITTED + HORDE_CHAT_REQUEST_EXPIRY_SECONDS
    calls = len(horde.calls)
    assert await queue.retry_due(everything=True) == []  # expired: dropped without an attempt
    assert len(horde.calls) == calls and not queue.pending
    # A cancel failing after the expiry is not remembered.
    assert await queue.cancel_soon("r2", None, SUBMITTED) == "failed"
    assert not queue.pending
    await queue.aclose()
    assert len(horde.calls) == calls + 1


async def test_the_retry_queue_keeps_the_newest_and_drops_the_oldest_first() -> None:
    """ref: cancel-outcomes.4, cancel-outcomes.5"""
    assert MAX_FAILED_CANCELS == 1000
    clock = FakeClock()
    queue = make_queue(FakeHorde(default=UNREACHABLE), clock, max_failed=3)
    # Failures arrive out of submit order: r2 (submitted first) fails last.
    for request_id, submitted in [("r3", 3.0), ("r4", 4.0), ("r5", 5.0), ("r1", 1.0), ("r2", 2.0)]:
        await queue.cancel_soon(request_id, None, SUBMITTED + submitted)
    assert sorted(queue.pending) == ["r3", "r4", "r5"]
    assert queue.dropped == 2
    await queue.cancel_soon("r6", None, SUBMITTED + 6)
    assert sorted(queue.pending) == ["r4", "r5", "r6"]


async def test_shutdown_retries_every_pending_cancel_once_more() -> None:
    """ref: cancel-outcomes.1, cancel-outcomes.2"""
    clock = FakeClock()
    horde = FakeHorde({"r1": [UNREACHABLE, "ok"], "r2": [UNREACHABLE, UNREACHABLE], "r3": ["ok"]})
    queue = make_queue(horde, clock)
    for request_id in ("r1", "r2", "r3"):
        queue.cancel_soon(request_id, "key", SUBMITTED)
    await queue.aclose()  # retries at once, not after the interval
    assert clock.now == SUBMITTED
    assert [call[0] for call in horde.calls].count("r1") == 2
    assert [call[0] for call in horde.calls].count("r2") == 2
    assert [call[0] for call in horde.calls].count("r3") == 1
    assert queue.attempts == 5
    assert queue.outcome_counts == {"failed": 3, "cancelled": 2}
    assert list(queue.pending) == ["r2"]  # still failing, but no more retries after shutdown
    await asyncio.sleep(0)
    assert queue._retry_task is None or queue._retry_task.done()


async def test_a_pending_entry_keeps_its_key_and_submit_time() -> None:
    clock = FakeClock()
    queue = make_queue(FakeHorde(default=UNREACHABLE), clock)
    await queue.cancel_soon("r1", "secret", SUBMITTED - 5)
    entry = queue.pending["r1"]
    assert isinstance(entry, PendingCancel)
    assert (entry.apikey, entry.submitted_at) == ("secret", SUBMITTED - 5)
    await queue.aclose()


async def test_a_client_leaving_during_the_submit_still_gets_the_request_cancelled() -> None:
    """ref: cancel-outcomes.1 (chat.serving.service.submit_shielded)"""
    from types import SimpleNamespace

    from chat.horde.native import SubmitResult
    from chat.serving.service import submit_shielded

    answer: asyncio.Future[SubmitResult] = asyncio.get_running_loop().create_future()
    cancels: list[tuple[str, str | None]] = []

    async def submit(payload: dict, apikey: str | None) -> SubmitResult:
        return await answer

    runtime = SimpleNamespace(
        horde=SimpleNamespace(submit=submit),
        cancels=SimpleNamespace(
            cancel_soon=lambda request_id, apikey, submitted_at: cancels.append((request_id, apikey))
        ),
    )
    view = asyncio.ensure_future(submit_shielded(runtime, {}, "key"))
    await asyncio.sleep(0)
    view.cancel()  # the client disconnected while the Horde had not answered yet
    with pytest.raises(asyncio.CancelledError):
        await view
    assert cancels == []
    answer.set_result(SubmitResult(id="created-late", kudos=1.0, warnings=[]))
    for _ in range(5):
        await asyncio.sleep(0)
    assert cancels == [("created-late", "key")]


async def test_a_stream_never_started_still_ends_when_django_closes_it() -> None:
    """ref: cancel-outcomes.1 (chat.views.event_stream.ChatEventStream)"""
    from chat.views.event_stream import ChatEventStream

    ended: list[str] = []
    started: list[bool] = []

    async def events():
        started.append(True)
        yield b": keepalive\n\n"

    response = ChatEventStream(events(), on_end=lambda: ended.append("end"), loop=asyncio.get_running_loop())
    assert response["Content-Type"] == "text/event-stream"
    await asyncio.to_thread(response.close)  # Django closes responses from a worker thread
    for _ in range(5):
        await asyncio.sleep(0)
    assert ended == ["end"] and started == []
