"""The status wait, driven by scripted native statuses on an injected clock (no real time passes).

Reference sections: Model availability (the grace), Declaration gaps, Size limit gaps, Fail-fast admission, Queue
position refresh, Stream errors (an unknown impossible_reason kind), Completion without a generation, Error
attributes (408, 502). :class:`FakeClock` advances only when the waiter sleeps, so every read's time is exact.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from chat.errors import OpenAIError
from chat.horde.delta_stream import RESUBSCRIBED_EVENT
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus
from chat.protocol.chat_request import ChatCompletionRequest
from chat.waiting.waiter import POSITIONED_READ_WAIT_SECONDS, ChatWaiter

pytestmark = pytest.mark.asyncio

REQUEST_ID = "req-wait-1"
RECHECK = 1.0
RECHECK_MAX = 30.0
READS_PER_SECOND = 25.0
GRACE = 30.0
TIMEOUT = 300.0
MODEL_ENTRIES = [{"name": "m/a", "chat": {"max_length": 1024, "max_context_length": 8192}}]


class FakeClock:
    """Seconds that pass only when the waiter sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class FakeHorde:
    """Serves scripted statuses: each item is a NativeStatus, a dict, an exception, or a callable of the read
    count returning one of those. The last item repeats. Records each read's clock time."""

    def __init__(self, clock: FakeClock, script: list[Any], entries: list[dict] | None = None) -> None:
        self.clock = clock
        self.script = script
        self.read_times: list[float] = []
        self.entries = entries if entries is not None else MODEL_ENTRIES

    async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
        assert request_id == REQUEST_ID
        index = min(len(self.read_times), len(self.script) - 1)
        self.read_times.append(self.clock.now)
        item = self.script[index]
        if callable(item) and not isinstance(item, type):
            item = item(len(self.read_times))
        if isinstance(item, Exception):
            raise item
        return item if isinstance(item, NativeStatus) else NativeStatus.model_validate(item)

    async def text_models(self) -> list[dict]:
        return self.entries


class FakeSignals:
    """A signal listener: ``subscribed`` as the real one reports it; events are put on ``queue`` by the test."""

    def __init__(self, subscribed: bool = True) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.subscribed = subscribed
        self.registered = 1

    def register(self, request_id: str) -> asyncio.Queue[str]:
        return self.queue

    def unregister(self, request_id: str) -> None:
        pass


def make_waiter(
    script: list[Any],
    *,
    mode: str | None = None,
    signals: bool = False,
    timeout: float = TIMEOUT,
    entries: list[dict] | None = None,
    models: list[str] | None = None,
    subscribed: bool = True,
    recheck_max: float = RECHECK_MAX,
) -> tuple[ChatWaiter, FakeHorde]:
    clock = FakeClock()
    horde = FakeHorde(clock, script, entries)
    settings = SimpleNamespace(
        signal_recheck_seconds=RECHECK,
        signal_recheck_max_seconds=recheck_max,
        signal_recheck_reads_per_second=READS_PER_SECOND,
        fail_fast_grace_seconds=GRACE,
    )
    runtime = SimpleNamespace(horde=horde, signals=FakeSignals(subscribed) if signals else None, settings=settings)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Hi"}]}
    if models:
        body["models"] = models
    else:
        body["model"] = "m/a"
    if mode:
        body["horde"] = {"availability_mode": mode}
    request = ChatCompletionRequest.model_validate(body)
    waiter = ChatWaiter(
        runtime, REQUEST_ID, "key", timeout_seconds=timeout, request=request, clock=clock, sleep=clock.sleep
    )
    return waiter, horde


WAITING = {"waiting": 1, "is_possible": True, "eligible_workers": 1, "eligible_worker_threads": 2}
PROCESSING = {"waiting": 0, "processing": 1, "eligible_workers": 1, "eligible_worker_threads": 2}
FINISHED = {
    "done": True,
    "waiting": 0,
    "finished": 1,
    "generations": [
        {"id": "g1", "model": "m/a", "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
    ],
}
NO_GENERATION = {"done": True, "waiting": 0, "processing": 0, "finished": 0}
IMPOSSIBLE = {"waiting": 1, "is_possible": False, "eligible_workers": 0, "eligible_worker_threads": 0}


def gap(missing: list[str] | None = None, exceeded: list[str] | None = None) -> dict[str, Any]:
    return {
        **IMPOSSIBLE,
        "impossible_reason": {
            "kind": "declaration_gap",
            "missing_declarations": missing or [],
            "exceeded_limits": exceeded or [],
        },
    }


async def refused(coroutine: Any) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        await coroutine
    return caught.value


# --- Declaration and size limit gaps -----------------------------------------------------------------------------


async def test_a_declaration_gap_refuses_at_the_first_read() -> None:
    """ref: declaration-gaps.1, declaration-gaps.3, declaration-gaps.4, declaration-gaps.5, stream-errors.1"""
    waiter, horde = make_waiter([gap(["reasoning_effort"])])
    error = await refused(waiter.first_read())
    assert (error.status, error.code, error.type, error.param) == (
        404,
        "no_worker_supports_features",
        "not_found_error",
        None,
    )
    assert error.message == (
        "No worker can serve this request: no online worker serving the model declares "
        "reasoning_effort. The request was cancelled."
    )
    assert error.metadata == {"request_id": REQUEST_ID}
    assert (error.retry_after, error.should_retry) == (None, None)
    assert horde.read_times == [0.0]
    assert waiter.terminal is False  # the caller cancels


async def test_a_size_limit_gap_after_submit_is_400_with_the_model_list_value() -> None:
    """ref: size-limit-gaps.3, size-limit-gaps.4, size-limit-gaps.5, size-limit-gaps.6"""
    waiter, horde = make_waiter([WAITING, WAITING, gap([], ["max_length"])])
    first = await waiter.first_read()
    assert first.waiting == 1
    error = await refused(waiter.wait_done(first))
    assert (error.status, error.code, error.param) == (400, "no_worker_supports_limit", "max_tokens")
    assert error.message == (
        "No worker eligible for this request currently declares a completion limit that high. The largest any "
        "online worker for the model declares now is 1024 tokens. The request was cancelled."
    )
    assert error.metadata == {"request_id": REQUEST_ID}
    assert horde.read_times == [0.0, 1.0, 2.0]


async def test_a_gap_of_a_started_request_is_ignored() -> None:
    started = {**gap(["seed"]), "processing": 1, "waiting": 0}
    waiter, _ = make_waiter([started, FINISHED])
    status = await waiter.first_read()
    assert (await waiter.wait_done(status)).finished == 1


# --- The grace ---------------------------------------------------------------------------------------------------


async def test_impossible_waits_the_grace_then_503() -> None:
    """ref: model-availability.6, model-availability.7, model-availability.8, stream-errors.2"""
    waiter, horde = make_waiter([IMPOSSIBLE])
    first = await waiter.first_read()  # the grace starts; the stream's headers may go out
    assert first.is_possible is False
    error = await refused(waiter.wait_done(first))
    assert (error.status, error.code, error.retry_after, error.should_retry) == (503, "no_eligible_worker", 30, False)
    assert error.metadata == {"request_id": REQUEST_ID}
    assert horde.read_times[-1] == GRACE
    assert horde.read_times == [float(second) for second in range(int(GRACE) + 1)]


@pytest.mark.parametrize(
    "impossible",
    [
        {**IMPOSSIBLE, "impossible_reason": {"kind": "a_newer_kind", "missing_declarations": ["seed"]}},
        {**IMPOSSIBLE, "impossible_reason": {"missing_declarations": ["seed"]}},
        {"waiting": 1, "is_possible": False},  # an older Horde: no reason, no counts
    ],
)
async def test_an_unknown_reason_kind_is_ignored_so_the_grace_applies(impossible: dict) -> None:
    """ref: stream-errors.4, model-availability.8"""
    waiter, horde = make_waiter([impossible])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert error.code == "no_eligible_worker"
    assert horde.read_times[-1] == GRACE


async def test_the_grace_restarts_when_a_worker_appears() -> None:
    """ref: model-availability.8"""

    def script(read: int) -> dict:
        if read <= 20 or read > 22:
            return IMPOSSIBLE
        return WAITING  # reads 21 and 22 (t=20, 21) find a worker again

    waiter, horde = make_waiter([script])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert error.code == "no_eligible_worker"
    assert horde.read_times[-1] == 22.0 + GRACE


async def test_a_worker_appearing_within_the_grace_serves_the_request() -> None:
    waiter, _ = make_waiter([IMPOSSIBLE, IMPOSSIBLE, PROCESSING, FINISHED])
    status = await waiter.wait_done(await waiter.first_read())
    assert status.finished == 1 and waiter.terminal


# --- Fail-fast admission -----------------------------------------------------------------------------------------


async def test_fail_fast_zero_threads_refuses_on_the_first_read() -> None:
    """ref: fail-fast-admission.1, queue-position-refresh.6, error-attributes.2"""
    waiter, horde = make_waiter([{**WAITING, "eligible_worker_threads": 0}], mode="fail_fast")
    error = await refused(waiter.first_read())
    assert (error.status, error.code, error.param, error.retry_after) == (
        503,
        "queue_unavailable",
        "horde.availability_mode",
        60,
    )
    assert error.metadata["reason"] == "no_eligible_threads"
    assert error.message == (
        "No eligible worker thread is online for this request (0 eligible worker threads, an estimated wait of 0 "
        'seconds, 300 seconds of budget left) under horde.availability_mode "fail_fast". The request was '
        "cancelled."
    )
    assert horde.read_times == [0.0]


async def test_fail_fast_rereads_until_a_status_has_queue_information() -> None:
    """ref: queue-position-refresh.3, queue-position-refresh.4, fail-fast-admission.2, fail-fast-admission.5"""
    waiter, horde = make_waiter([WAITING, {**WAITING, "queue_position": 4, "wait_time": 420}], mode="fail_fast")
    error = await refused(waiter.first_read())
    assert horde.read_times == [0.0, RECHECK]
    assert (error.code, error.metadata["reason"], error.retry_after) == ("queue_unavailable", "wait_exceeds_budget", 60)
    assert error.message == (
        "The estimated queue wait exceeds this request's remaining time budget (2 eligible worker threads, an "
        'estimated wait of 420 seconds, 299 seconds of budget left) under horde.availability_mode "fail_fast". '
        "The request was cancelled."
    )


async def test_fail_fast_uses_the_latest_reading_at_the_positioned_deadline() -> None:
    """ref: queue-position-refresh.4, queue-position-refresh.5"""
    waiter, horde = make_waiter([WAITING], mode="fail_fast")
    status = await waiter.first_read()
    assert horde.read_times == [0.0, 1.0, POSITIONED_READ_WAIT_SECONDS]
    assert status.waiting == 1


async def test_fail_fast_admits_a_wait_within_the_budget() -> None:
    waiter, horde = make_waiter([{**WAITING, "queue_position": 2, "wait_time": 299}], mode="fail_fast")
    status = await waiter.first_read()
    assert status.wait_time == 299 and horde.read_times == [0.0]


async def test_fail_fast_refuses_when_the_remaining_budget_is_short() -> None:
    """ref: fail-fast-admission.2"""
    waiter, _ = make_waiter([{**WAITING, "queue_position": 2, "wait_time": 25}], mode="fail_fast", timeout=20)
    error = await refused(waiter.first_read())
    assert (error.metadata["reason"], error.metadata["remaining_budget_seconds"], error.retry_after) == (
        "wait_exceeds_budget",
        20,
        25,
    )


async def test_fail_fast_threads_dropping_to_zero_while_positioning() -> None:
    waiter, horde = make_waiter([WAITING, WAITING, {**WAITING, "eligible_worker_threads": 0}], mode="fail_fast")
    error = await refused(waiter.first_read())
    assert error.metadata["reason"] == "no_eligible_threads"
    assert horde.read_times == [0.0, 1.0, 2.0]


async def test_fail_fast_a_declaration_gap_takes_precedence() -> None:
    """ref: fail-fast-admission.6"""
    waiter, _ = make_waiter([gap(["seed"])], mode="fail_fast")
    error = await refused(waiter.first_read())
    assert (error.status, error.code) == (404, "no_worker_supports_features")


async def test_fail_fast_an_older_horde_never_refuses_on_threads() -> None:
    """ref: fail-fast-admission.7"""
    older = {"waiting": 1, "is_possible": True, "queue_position": 3, "wait_time": 40}
    waiter, _ = make_waiter([older], mode="fail_fast")
    assert (await waiter.first_read()).wait_time == 40
    waiter, _ = make_waiter([{**older, "wait_time": 400}], mode="fail_fast")
    assert (await refused(waiter.first_read())).metadata["reason"] == "wait_exceeds_budget"


async def test_fail_fast_skips_a_started_request() -> None:
    """ref: fail-fast-admission.1"""
    waiter, horde = make_waiter([{**PROCESSING, "eligible_worker_threads": 0, "wait_time": 900}], mode="fail_fast")
    assert (await waiter.first_read()).processing == 1
    assert horde.read_times == [0.0]


async def test_wait_mode_does_not_refuse_on_threads_or_wait() -> None:
    waiter, horde = make_waiter([{**WAITING, "eligible_worker_threads": 0, "wait_time": 900}])
    assert (await waiter.first_read()).wait_time == 900
    assert horde.read_times == [0.0]


async def test_fail_fast_later_reads_use_the_grace() -> None:
    """ref: queue-position-refresh.7"""
    waiter, horde = make_waiter([{**WAITING, "queue_position": 1, "wait_time": 5}, IMPOSSIBLE], mode="fail_fast")
    first = await waiter.first_read()
    error = await refused(waiter.wait_done(first))
    assert error.code == "no_eligible_worker"
    assert horde.read_times[-1] == RECHECK + GRACE


# --- Completion without a generation -----------------------------------------------------------------------------


async def test_done_without_generation_is_read_again_after_the_full_recheck() -> None:
    """ref: completion-without-a-generation.2, completion-without-a-generation.3"""
    waiter, horde = make_waiter([WAITING, NO_GENERATION], signals=True)
    first = await waiter.first_read()
    for event in ("processing", "done", "done"):  # signals that must not shorten the recheck
        waiter._signal_queue.put_nowait(event)  # type: ignore[union-attr]
    read_before_wait = len(horde.read_times)
    task = asyncio.ensure_future(waiter.wait_done(first))
    error = await refused(task)
    assert error.code == "ChatRequestNoGeneration" and error.status == 502
    no_generation_reads = horde.read_times[read_before_wait:]
    assert len(no_generation_reads) == 2
    assert no_generation_reads[1] - no_generation_reads[0] == RECHECK
    assert error.message == "The Horde finished the request without a generation. The request was cancelled."


async def test_a_cancelled_signal_ends_the_recheck_at_once() -> None:
    """ref: completion-without-a-generation.2"""
    waiter, horde = make_waiter([NO_GENERATION], signals=True)
    first = await waiter.first_read()
    waiter._signal_queue.put_nowait("cancelled")  # type: ignore[union-attr]
    error = await refused(waiter.wait_done(first))
    assert error.code == "ChatRequestNoGeneration"
    assert horde.read_times == [0.0]


async def test_done_while_still_processing_is_unfinished() -> None:
    """ref: completion-without-a-generation.1"""
    transient = {"done": True, "waiting": 0, "processing": 1}
    waiter, horde = make_waiter([transient, transient, FINISHED])
    status = await waiter.wait_done(await waiter.first_read())
    assert status.finished == 1 and horde.read_times == [0.0, 1.0, 2.0]


async def test_a_recheck_that_finds_the_generation_returns_it() -> None:
    waiter, _ = make_waiter([NO_GENERATION, FINISHED])
    assert (await waiter.wait_done(await waiter.first_read())).finished == 1


# --- Timeouts, faults, unreachable Horde -------------------------------------------------------------------------


async def test_the_budget_ends_with_408() -> None:
    """ref: error-attributes.1"""
    waiter, horde = make_waiter([WAITING], timeout=5)
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code, error.type) == (408, "ChatRequestTimeout", "timeout_error")
    assert error.message == "No worker finished the request within 5 seconds. The request was cancelled."
    assert error.metadata == {"request_id": REQUEST_ID}
    assert horde.read_times[-1] == 5.0
    assert error.headers() == {"x-should-retry": "false"}  # the whole budget was waited: no silent SDK retry


async def test_a_faulted_request_is_502_and_terminal() -> None:
    """ref: error-attributes.1"""
    waiter, _ = make_waiter([WAITING, {"done": True, "faulted": True, "waiting": 0, "fault_reason": "backend_error"}])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code) == (502, "ChatRequestFaulted")
    assert error.message == "The worker faulted the request (backend_error)."
    assert error.metadata == {"request_id": REQUEST_ID, "fault_reason": "backend_error"}
    assert waiter.terminal  # nothing to cancel
    assert error.headers() == {}  # the SDK's default (retry a 5xx) applies


@pytest.mark.parametrize(
    ("fault_reason", "headers"),
    [
        ("prompt_overflow", {"x-should-retry": "false"}),
        ("generation_error", {}),
        ("tool_violation", {}),
        (None, {}),
    ],
)
async def test_a_prompt_overflow_fault_is_not_retried(fault_reason: str | None, headers: dict[str, str]) -> None:
    """A 502 ``ChatRequestFaulted`` whose fault is ``prompt_overflow`` sets ``x-should-retry: false`` (the same
    prompt overflows again); in the SSE form the flag is ``metadata.should_retry``.

    ref: error-attributes.1, stream-errors.2, stream-errors.3"""
    faulted = {"done": True, "faulted": True, "waiting": 0, "fault_reason": fault_reason}
    waiter, _ = make_waiter([WAITING, faulted])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code, error.metadata) == (
        502,
        "ChatRequestFaulted",
        {"request_id": REQUEST_ID, "fault_reason": fault_reason},
    )
    assert error.headers() == headers
    event = json.loads(error.stream_event().removeprefix(b"data: "))
    expected_metadata = {"request_id": REQUEST_ID, "fault_reason": fault_reason}
    if headers:
        expected_metadata["should_retry"] = False
    assert event["error"]["metadata"] == expected_metadata


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (HordeUnreachable("ConnectError"), "The Horde could not be reached (ConnectError). The request was cancelled."),
        (
            HordeRefusal(status=500, message="boom", rc="InternalError"),
            "The Horde answered HTTP 500 InternalError: boom. The request was cancelled.",
        ),
        (
            HordeUnreachable("HTTP 503 Service Unavailable without an error code", reached=True),
            "The Horde answered HTTP 503 Service Unavailable without an error code. The request was cancelled.",
        ),
    ],
)
async def test_reads_that_keep_failing_are_horde_unavailable(failure: Exception, message: str) -> None:
    """ref: error-attributes.1"""
    waiter, horde = make_waiter([WAITING, failure])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code, error.message) == (502, "HordeUnavailable", message)
    assert error.metadata == {"request_id": REQUEST_ID}
    assert len(horde.read_times) == 4


async def test_a_passing_read_failure_is_retried() -> None:
    waiter, _ = make_waiter([WAITING, HordeUnreachable("blip"), HordeUnreachable("blip"), FINISHED])
    assert (await waiter.wait_done(await waiter.first_read())).finished == 1


async def test_a_status_refusal_passes_through() -> None:
    """ref: stream-errors.1"""
    waiter, _ = make_waiter([HordeRefusal(status=404, message="Request not found.", rc="RequestNotFound")])
    error = await refused(waiter.first_read())
    assert (error.status, error.code, error.message) == (404, "RequestNotFound", "Request not found.")
    assert error.metadata == {"request_id": REQUEST_ID}


@pytest.mark.parametrize(
    ("refusal", "status", "code", "message"),
    [
        (HordeRefusal(status=401, message="Invalid API key.", rc="InvalidAPIKey"), 401, "InvalidAPIKey", None),
        (HordeRefusal(status=403, message="Forbidden.", rc="Forbidden"), 403, "Forbidden", None),
        (HordeRefusal(status=404, message="Request not found.", rc="RequestNotFound"), 404, "RequestNotFound", None),
        (HordeRefusal(status=410, message="", rc=None), 410, None, "Gone"),
    ],
)
async def test_a_native_4xx_on_a_later_status_read_keeps_the_request_id(
    refusal: HordeRefusal, status: int, code: str | None, message: str | None
) -> None:
    """A refusal of a status read names the native request it was about in ``metadata.request_id``, on the first
    read and on every later one, so the client can match it with the Horde's records.

    ref: stream-errors.1, declaration-gaps.3"""
    waiter, _ = make_waiter([WAITING, refusal])
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code, error.message) == (status, code, message or refusal.message)
    assert error.metadata == {"request_id": REQUEST_ID}


async def test_signals_wake_the_wait_early() -> None:
    waiter, horde = make_waiter([WAITING, FINISHED], signals=True)
    first = await waiter.first_read()
    waiter._signal_queue.put_nowait("done")  # type: ignore[union-attr]
    await waiter.wait_done(first)
    assert horde.read_times == [0.0, 0.0]
    assert waiter.woke_by == "signal"


async def test_a_rate_limited_status_read_is_waited_out_not_returned() -> None:
    """A 429 on a poll keeps the request: the waiter sleeps its Retry-After (7 s), then its usual recheck (1 s),
    and reads again."""
    limited = HordeRefusal(
        status=429, message="Slow down.", rc=None, body={"message": "Slow down."}, headers={"Retry-After": "7"}
    )
    waiter, horde = make_waiter([limited, limited, FINISHED])
    status = await waiter.wait_done(await waiter.first_read())
    assert status.finished_generation is not None
    assert horde.read_times == [0.0, 8.0, 16.0]


# --- The backoff timer with a subscribed signal listener ----------------------------------------------------------


def countdown(reads: int, then: dict[str, Any]) -> Any:
    """A script item: WAITING for the first ``reads`` reads, then ``then``."""
    return lambda count: WAITING if count <= reads else then


async def test_with_signals_the_timer_backs_off_to_the_ceiling() -> None:
    """With the listener subscribed, each timer re-read doubles the next delay from signal_recheck_seconds up to
    signal_recheck_max_seconds (reads at 0, 1, 3, 7, 15, 31, then every 30 s)."""
    waiter, horde = make_waiter([countdown(9, FINISHED)], signals=True)
    status = await waiter.wait_done(await waiter.first_read())
    assert status.finished == 1
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 61.0, 91.0, 121.0, 151.0]
    assert waiter.woke_by == "timer" and waiter.wakes == 9


async def test_many_waiting_requests_raise_the_ceiling_to_the_read_budget() -> None:
    """5,000 requests registered for signals at 25 timer re-reads a second: the ceiling is 200 s, not 30 s (reads at
    0, 1, 3, 7, 15, 31, 63, 127, 255, then every 200 s); the process's re-reads stay at 25 a second."""
    waiter, horde = make_waiter([countdown(10, FINISHED)], signals=True, timeout=10_000)
    waiter.runtime.signals.registered = 5000
    assert waiter.timer_ceiling() == 200.0
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 127.0, 255.0, 455.0, 655.0]


async def test_few_waiting_requests_keep_the_configured_ceiling() -> None:
    """Up to 750 registered at 25 a second, the configured 30 s ceiling holds; 1,000 raise it to 40 s."""
    waiter, _ = make_waiter([WAITING], signals=True)
    waiter.runtime.signals.registered = 100
    assert waiter.timer_ceiling() == RECHECK_MAX
    waiter.runtime.signals.registered = 1000
    assert waiter.timer_ceiling() == 40.0


async def test_the_read_budget_never_delays_the_end_of_the_grace() -> None:
    """With the ceiling raised, the read when the grace ends still comes on time: the first impossible read at 255 s,
    where the timer would next wait 200 s, and the grace read GRACE after it."""
    waiter, horde = make_waiter([countdown(8, IMPOSSIBLE)], signals=True, timeout=10_000)
    waiter.runtime.signals.registered = 5000
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code) == (503, "no_eligible_worker")
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 127.0, 255.0, 255.0 + GRACE]


async def test_the_ceiling_falls_as_requests_leave() -> None:
    """Each wake sets the next delay under the ceiling of now: 5,000 registered, then 100 by the ninth read, whose
    next delay is 30 s, not the 200 s the ceiling allowed before."""
    waiter, horde = make_waiter([countdown(9, FINISHED)], signals=True, timeout=10_000)
    signals = waiter.runtime.signals
    signals.registered = 5000

    def shrinking(count: int) -> dict[str, Any]:
        if count == 9:
            signals.registered = 100
        return WAITING if count <= 9 else FINISHED

    horde.script = [shrinking]
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 127.0, 255.0, 285.0]


async def test_without_redis_the_timer_stays_signal_recheck_seconds() -> None:
    """No signal listener (no Redis): every re-read comes signal_recheck_seconds after the last."""
    waiter, horde = make_waiter([countdown(6, FINISHED)])
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [float(second) for second in range(7)]


async def test_a_listener_not_subscribed_keeps_the_timer_at_signal_recheck_seconds() -> None:
    """Registered with a listener that is not subscribed (Redis down): signals may be lost, so no backoff."""
    waiter, horde = make_waiter([countdown(6, FINISHED)], signals=True, subscribed=False)
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [float(second) for second in range(7)]


async def test_the_backoff_resets_when_the_listener_is_lost_and_resumes_after() -> None:
    waiter, horde = make_waiter([countdown(8, FINISHED)], signals=True)
    signals = waiter.runtime.signals

    def unsubscribe_at_fourth_read(count: int) -> dict[str, Any]:
        signals.subscribed = count < 4
        return WAITING if count < 8 else FINISHED

    horde.script = [unsubscribe_at_fourth_read]
    await waiter.wait_done(await waiter.first_read())
    # 0, 1, 3 backed off; the 4th read (7) finds the listener gone: 8, 9, 10, 11 at signal_recheck_seconds.
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 8.0, 9.0, 10.0, 11.0]


def signal_at(waiter: ChatWaiter, read: int, event: str, then: dict[str, Any], done_after: int) -> Any:
    """A script item: WAITING, with ``event`` put on the waiter's queue during read number ``read`` (so it is
    there when the waiter next sleeps); ``then`` from read ``done_after`` on."""

    def item(count: int) -> dict[str, Any]:
        if count == read:
            assert waiter._signal_queue is not None
            waiter._signal_queue.put_nowait(event)
        return WAITING if count < done_after else then

    return item


async def test_a_signal_resets_the_backoff() -> None:
    """A signal (here "processing") wakes the waiter at once and the next timer starts at signal_recheck_seconds."""
    waiter, horde = make_waiter([WAITING], signals=True)
    horde.script = [signal_at(waiter, 4, "processing", FINISHED, done_after=7)]
    await waiter.wait_done(await waiter.first_read())
    # Timer reads at 1, 3, 7 (next would be 15); the signal at 7 wakes a read at once; then 1 s, 2 s again.
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 7.0, 8.0, 10.0]


async def test_a_failed_read_resets_the_backoff() -> None:
    """A read that fails (unreachable Horde) is retried after signal_recheck_seconds, so three failures in a row
    still end the wait quickly with HordeUnavailable. ref: error-attributes.1"""
    failure = HordeUnreachable("GET status: ConnectError")
    waiter, horde = make_waiter([lambda count: WAITING if count <= 4 else failure], signals=True)
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code) == (502, "HordeUnavailable")
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 16.0, 17.0]


async def test_the_backoff_never_skips_the_read_when_the_grace_ends() -> None:
    """Reported impossible, the backed-off timer is cut so a read comes exactly fail_fast_grace_seconds after the
    first such read; it refuses with 503. ref: model-availability.8, stream-errors.2"""
    waiter, horde = make_waiter([IMPOSSIBLE], signals=True)
    first = await waiter.first_read()
    error = await refused(waiter.wait_done(first))
    assert (error.status, error.code, error.retry_after) == (503, "no_eligible_worker", 30)
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, GRACE]


async def test_the_grace_starting_late_still_ends_on_time() -> None:
    """The grace counts from the first read that reports impossible, whatever the timer had backed off to.
    ref: model-availability.8"""
    waiter, horde = make_waiter([countdown(5, IMPOSSIBLE)], signals=True)
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert error.code == "no_eligible_worker"
    # WAITING at 0, 1, 3, 7, 15; impossible from 31: reads at 31, 61 (= 31 + GRACE).
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 31.0 + GRACE]


async def test_positioned_reads_keep_signal_recheck_seconds_with_signals() -> None:
    """fail_fast re-reads for queue information every signal_recheck_seconds for at most
    POSITIONED_READ_WAIT_SECONDS, with or without a subscribed listener. ref: queue-position-refresh.4"""
    unpositioned = {**WAITING, "queue_position": 0, "wait_time": 0}
    waiter, horde = make_waiter([unpositioned], mode="fail_fast", signals=True)
    await waiter.first_read()
    assert horde.read_times == [0.0, 1.0, 2.0]
    assert POSITIONED_READ_WAIT_SECONDS == 2.0


async def test_a_completion_without_generation_is_rechecked_after_signal_recheck_seconds_when_backed_off() -> None:
    """Found after the timer backed off to 16 s, a done status without a generation is still read again exactly
    signal_recheck_seconds later, then refused. ref: completion-without-a-generation.2"""
    waiter, horde = make_waiter([countdown(5, NO_GENERATION)], signals=True)
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code) == (502, "ChatRequestNoGeneration")
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 32.0]
    assert waiter.done_without_generation_reads == 2


async def test_a_cancelled_signal_during_a_backed_off_wait_ends_the_no_generation_recheck() -> None:
    """A done status without a generation found after backoff, and a cancelled signal during its recheck: 502 at
    once, without waiting signal_recheck_seconds. ref: completion-without-a-generation.2"""
    waiter, horde = make_waiter([WAITING], signals=True)
    horde.script = [signal_at(waiter, 4, "cancelled", NO_GENERATION, done_after=4)]
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert error.code == "ChatRequestNoGeneration"
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0]
    assert waiter.cancelled_signal


async def test_the_backed_off_timer_never_sleeps_past_the_budget() -> None:
    """ref: error-attributes.1"""
    waiter, horde = make_waiter([WAITING], signals=True, timeout=20)
    error = await refused(waiter.wait_done(await waiter.first_read()))
    assert (error.status, error.code) == (408, "ChatRequestTimeout")
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 15.0, 20.0]


async def test_a_ceiling_below_signal_recheck_seconds_means_no_backoff() -> None:
    waiter, horde = make_waiter([countdown(4, FINISHED)], signals=True, recheck_max=0.5)
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 1.0, 2.0, 3.0, 4.0]


async def test_a_resubscribed_event_wakes_the_waiter_to_read_at_once() -> None:
    """After the listener subscribes again it puts RESUBSCRIBED_EVENT on every queue (signals were lost): the
    waiter reads at once and its timer starts again from signal_recheck_seconds."""
    waiter, horde = make_waiter([WAITING], signals=True)
    horde.script = [signal_at(waiter, 4, RESUBSCRIBED_EVENT, FINISHED, done_after=6)]
    await waiter.wait_done(await waiter.first_read())
    assert horde.read_times == [0.0, 1.0, 3.0, 7.0, 7.0, 8.0]
    assert not waiter.cancelled_signal
