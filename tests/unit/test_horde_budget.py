"""The Horde's budgets (chat.horde.budget): proxy headers, submit pacing, the status read cap, the 429 retry and the
shared heartbeat verdict.

Time is virtual: :class:`VirtualTime` is the budget's clock and sleep, and only moves when every task is asleep, so
each test states the exact moment a call reached the Horde. Calls go through the real clients over
``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
import json
import time as wall_clock
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from django.core.cache import cache
from django.test import override_settings
from horde_sdk.generic_api.consts import ANON_API_KEY
from loguru import logger
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import ValidationError
from redis.asyncio import Redis

import chat.metrics
from chat.asgi import with_front_lifespan
from chat.horde import refusals
from chat.horde.budget import HordeBudget, describe_address_budget, shared_read
from chat.horde.cancels import CancelQueue
from chat.horde.client_address import CLIENT_ADDRESS, serving_client
from chat.horde.native import HordeClient, HordeRefusal
from chat.horde.pacing import MAX_IDLE_LOGS, PER_ADDRESS, PER_KEY, Pacer, RedisPacer
from chat.horde.text import TextHordeClient, TextRoutes
from chat.metrics import configure_metrics
from chat.protocol.chat_request import ChatCompletionRequest
from chat.serving.runtime import close_runtime, get_runtime
from chat.serving.text_route import prepare_chat_request
from chat.settings import FrontSettings, describe_invalid_settings, front_settings
from chat.waiting.waiter import ChatWaiter
from front_operations import readiness
from oaifront.guards import AdmissionGuards
from tests.virtual_time import VirtualTime

BASE = "http://horde.test/api"
PASSKEY = "pk-0123456789abcdef"
CLIENT = "203.0.113.7"


class FakeHorde:
    """An ``httpx.MockTransport`` handler recording each request with the virtual time it arrived at."""

    def __init__(self, time: VirtualTime, answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.time = time
        self.answer = answer
        self.requests: list[tuple[float, httpx.Request]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((self.time.now, request))
        if self.answer is not None:
            return self.answer(request)
        if request.method == "POST":
            return httpx.Response(202, json={"id": f"id-{len(self.requests)}", "kudos": 0.0})
        if request.url.path.endswith("/v2/status/models"):
            return httpx.Response(200, json=[])
        return httpx.Response(200, json={"done": False, "waiting": 1, "finished": 0, "processing": 0})

    @property
    def times(self) -> list[float]:
        return [at for at, _ in self.requests]


def clients(
    horde: FakeHorde, time: VirtualTime, passkey: str | None = None, **budget_options: Any
) -> tuple[HordeBudget, HordeClient, TextHordeClient]:
    budget = HordeBudget(passkey, clock=time.clock, sleep=time.sleep, **budget_options)
    transport = httpx.MockTransport(horde)
    native = HordeClient(BASE, "test:1:test", 30, transport=transport, budget=budget)
    text = TextHordeClient(BASE, "test:1:test", 30, transport=transport, budget=budget)
    return budget, native, text


PAYLOAD: dict[str, Any] = {"prompt": "Hi", "models": ["m"], "params": {"max_length": 16}}


async def every_call(native: HordeClient, text: TextHordeClient) -> None:
    """One of each call the front makes: text submit, dry run, status, cancel; native submit, status, cancel,
    heartbeat, model list."""
    await text.submit(PAYLOAD, "key-a")
    await text.dry_run_kudos(PAYLOAD, "key-a")
    await text.status_body("t1", "key-a")
    await text.cancel("t1", "key-a")
    await native.submit({"messages": []}, "key-a")
    await native.status("n1", "key-a")
    await native.cancel("n1", "key-a")
    await native.heartbeat()
    await native.text_models()


# --- proxy headers -------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_with_a_passkey_every_call_carries_the_passkey_and_the_client_address() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, native, text = clients(horde, time, PASSKEY)
    with serving_client(CLIENT):
        await time.run(every_call(native, text))
    assert len(horde.requests) == 9
    for _, request in horde.requests:
        assert request.headers["Proxy-Authorization"] == PASSKEY
        assert request.headers["Proxied-For"] == CLIENT
        assert request.headers["Client-Agent"] == "test:1:test"


@pytest.mark.asyncio
async def test_without_a_passkey_no_call_carries_proxy_headers() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, native, text = clients(horde, time)
    with serving_client(CLIENT):
        await time.run(every_call(native, text))
    assert len(horde.requests) == 9
    for _, request in horde.requests:
        assert "Proxy-Authorization" not in request.headers
        assert "Proxied-For" not in request.headers


@pytest.mark.asyncio
async def test_a_call_outside_any_request_sends_the_passkey_without_proxied_for() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, native, _ = clients(horde, time, PASSKEY)
    await native.heartbeat()
    request = horde.requests[0][1]
    assert request.headers["Proxy-Authorization"] == PASSKEY
    assert "Proxied-For" not in request.headers


@pytest.mark.asyncio
async def test_the_asgi_boundary_serves_each_request_with_the_guards_client_address() -> None:
    """chat.asgi sets the address the guards cap (the trusted header's first entry), for the app's Horde calls."""
    seen: list[str | None] = []
    guards_seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(CLIENT_ADDRESS.get())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    settings = FrontSettings(client_address_header="X-Forwarded-For")
    guards = AdmissionGuards(app, settings)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    front_settings.cache_clear()
    try:
        with override_settings(HORDE_OAI=settings):
            application = with_front_lifespan(guards)  # type: ignore[arg-type] - the guards are an ASGI app
            for forwarded, peer in (
                (b"198.51.100.9, 10.0.0.1", "127.0.0.1"),
                (None, "192.0.2.44"),
            ):
                headers = [(b"x-forwarded-for", forwarded)] if forwarded is not None else []
                scope = {"type": "http", "path": "/v1/chat/completions", "headers": headers, "client": (peer, 5000)}
                guards_seen.append(guards.client_address(scope))
                await application(scope, receive, send)
    finally:
        front_settings.cache_clear()
    assert seen == ["198.51.100.9", "192.0.2.44"]
    assert guards_seen == seen
    assert CLIENT_ADDRESS.get() is None


@pytest.mark.asyncio
async def test_cancel_retries_send_the_address_of_the_request_they_cancel() -> None:
    addresses: list[str | None] = []

    class FailingOnce:
        async def cancel(self, request_id: str, apikey: str | None) -> Any:
            addresses.append(CLIENT_ADDRESS.get())
            if len(addresses) == 1:
                raise HordeRefusal(status=500, message="down", rc=None)
            return None

    queue = CancelQueue(FailingOnce(), retry_seconds=60, attempt_timeout=5)  # type: ignore[arg-type] - a stub
    with serving_client("198.51.100.4"):
        assert await queue.cancel_soon("r1", "key", wall_clock.time()) == "failed"
    with serving_client("192.0.2.1"):  # another request's context: the retry still sends the first one's
        outcomes = await queue.retry_due(everything=True)
    await queue.aclose()
    assert outcomes == ["cancelled"]
    assert addresses == ["198.51.100.4", "198.51.100.4"]


def test_the_passkey_is_never_shown_by_the_settings() -> None:
    settings = FrontSettings(proxy_passkey=PASSKEY)
    assert PASSKEY not in repr(settings)
    assert PASSKEY not in str(settings.model_dump())
    assert PASSKEY not in repr(HordeBudget.from_settings(settings))
    assert HordeBudget.from_settings(settings).proxy_headers() == {"Proxy-Authorization": PASSKEY}
    with pytest.raises(ValidationError) as invalid:
        FrontSettings(proxy_passkey=" pk-with spaces ")
    assert describe_invalid_settings(invalid.value) == (
        "Invalid front configuration: HORDE_OAI_PROXY_PASSKEY='***': a proxy passkey is printable ASCII without "
        "surrounding spaces (an HTTP header value)"
    )
    assert FrontSettings(proxy_passkey="").proxy_passkey is None


@pytest.mark.asyncio
async def test_the_passkey_never_reaches_the_log() -> None:
    """Every call, a rate-limited one with its retry log line included, at the lowest level."""
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="TRACE", format="{message} {extra}")
    time = VirtualTime()
    limited = iter([True])

    def answer(request: httpx.Request) -> httpx.Response:
        if next(limited, False):
            return httpx.Response(429, json={"message": "2 per 1 second"}, headers={"Retry-After": "1"})
        return httpx.Response(202, json={"id": "x", "kudos": 0.0})

    horde = FakeHorde(time, answer)
    _, native, text = clients(horde, time, PASSKEY)
    try:
        with serving_client(CLIENT):
            await time.run(text.submit(PAYLOAD, "key-a"))
            await time.run(native.heartbeat())
    finally:
        logger.remove(sink)
    assert any("rate-limited POST /v2/generate/text/async: retry 1 in 1 s" in line for line in lines)
    assert all(PASSKEY not in line for line in lines)


# --- pacing --------------------------------------------------------------------------------------------------------


def test_the_pacer_lets_two_through_per_window_and_spaces_the_rest() -> None:
    time = VirtualTime()
    pacer = Pacer(time.clock, time.sleep)
    turns = [(PER_KEY, "a")]
    assert [pacer.reserve(turns) for _ in range(5)] == [0.0, 0.0, 1.1, 1.1, 2.2]
    assert pacer.reserve([(PER_KEY, "b")]) == 0.0  # another key has its own log
    time.now = 10.0
    assert pacer.reserve(turns) == 10.0  # an old window no longer counts


def test_a_call_waits_for_every_log_it_names() -> None:
    time = VirtualTime()
    pacer = Pacer(time.clock, time.sleep)
    pacer.reserve([(PER_KEY, "a")])
    pacer.reserve([(PER_KEY, "a")])
    assert pacer.reserve([(PER_KEY, "b"), (PER_KEY, "a")]) == 1.1
    assert pacer.reserve([(PER_KEY, "b")]) == 1.1  # calls of one log go in order


def test_the_pacer_forgets_logs_no_rule_needs() -> None:
    time = VirtualTime()
    pacer = Pacer(time.clock, time.sleep)
    for index in range(MAX_IDLE_LOGS):
        pacer.reserve([(PER_KEY, f"k{index}")])
    time.now = 5.0
    pacer.reserve([(PER_KEY, "last")])
    assert list(pacer._logs) == [(PER_KEY, "last")]


async def submit_all(time: VirtualTime, text: TextHordeClient, calls: list[tuple[str, str | None]]) -> None:
    """Submit once per ``(address, apikey)`` at the same moment."""

    async def one(address: str, apikey: str | None) -> None:
        with serving_client(address):
            await text.submit(PAYLOAD, apikey)

    await time.run(asyncio.gather(*(one(address, apikey) for address, apikey in calls)))


@pytest.mark.asyncio
async def test_twenty_submits_on_one_key_are_spread_at_two_a_second() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time)
    await submit_all(time, text, [(CLIENT, "key-a")] * 20)
    assert horde.times == pytest.approx([1.1 * (index // 2) for index in range(20)])
    assert len({request.url.path for _, request in horde.requests}) == 1


@pytest.mark.asyncio
async def test_without_a_passkey_every_user_shares_the_fronts_address_budget() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time)
    await submit_all(time, text, [(f"192.0.2.{index}", f"key-{index}") for index in range(4)])
    assert horde.times == [0.0, 0.0, 1.1, 1.1]


@pytest.mark.asyncio
async def test_with_a_passkey_each_client_address_has_its_own_budget() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time, PASSKEY)
    await submit_all(time, text, [(f"192.0.2.{index}", f"key-{index}") for index in range(4)])
    assert horde.times == [0.0, 0.0, 0.0, 0.0]
    assert [request.headers["Proxied-For"] for _, request in horde.requests] == [f"192.0.2.{i}" for i in range(4)]


@pytest.mark.asyncio
async def test_with_a_passkey_one_key_still_gets_two_a_second() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time, PASSKEY)
    await submit_all(time, text, [(f"192.0.2.{index}", "shared-key") for index in range(4)])
    assert horde.times == [0.0, 0.0, 1.1, 1.1]


@pytest.mark.asyncio
async def test_the_anonymous_key_is_paced_at_sixty_a_second() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time, PASSKEY)
    await submit_all(time, text, [(f"10.0.{index // 250}.{index % 250}", None) for index in range(61)])
    assert horde.times == [0.0] * 60 + [1.1]
    assert horde.requests[0][1].headers["apikey"] == ANON_API_KEY


@pytest.mark.asyncio
async def test_one_address_gets_ninety_submits_a_minute() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time)
    await submit_all(time, text, [(CLIENT, f"key-{index}") for index in range(91)])
    assert horde.times[:90] == pytest.approx([1.1 * (index // 2) for index in range(90)])
    assert horde.times[90] == PER_ADDRESS[1].seconds  # the 91st waits for the first to leave the minute window


@pytest.mark.asyncio
async def test_a_dry_run_is_paced_like_a_submit() -> None:
    time = VirtualTime()
    horde = FakeHorde(time, lambda request: httpx.Response(200, json={"kudos": 3.0}))
    _, _, text = clients(horde, time)
    await time.run(asyncio.gather(*(text.dry_run_kudos(PAYLOAD, "key-a") for _ in range(3))))
    assert horde.times == [0.0, 0.0, 1.1]


@pytest.mark.asyncio
async def test_native_routes_are_not_paced() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, native, _ = clients(horde, time)
    await time.run(asyncio.gather(*(native.submit({"messages": []}, "key-a") for _ in range(4))))
    await time.run(asyncio.gather(*(native.status("n1", "key-a") for _ in range(3))))
    assert horde.times == [0.0] * 7
    assert time.sleeps == []


@pytest.mark.asyncio
async def test_a_submit_that_would_wait_over_65_seconds_is_answered_429_at_once() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time, PASSKEY)
    calls = [(f"10.1.{index // 250}.{index % 250}", "key-a") for index in range(120)]  # the 120th goes at 64.9 s

    await submit_all(time, text, calls)
    assert horde.times[-1] == pytest.approx(64.9)
    time.now = 0.0  # the same moment again: the next turn of key-a is at 66 s, more than 65 s away
    with pytest.raises(HordeRefusal) as refused, serving_client("10.2.0.1"):
        await time.run(text.submit(PAYLOAD, "key-a"))
    assert len(horde.requests) == 120  # never sent
    error = refusals.error_from_refusal(refused.value)
    assert (error.status, error.code, error.retry_after) == (429, "rate_limit_exceeded", 65)
    assert error.message == (
        "This front paces its submits to the Horde's rate limits (2 a second per API key and per address) and this "
        "request's turn is more than 65 s away. Retry in 65 s."
    )


class FixedWindowHorde:
    """The real Horde's submit limiter (flask-limiter, fixed windows that start at their first count, 2 a second per
    key) behind a queue: a submit is counted ``delays[n]`` seconds after it arrives (the Horde's busy threads, a full
    connection pool), then answered."""

    def __init__(self, time: VirtualTime, delays: list[float]) -> None:
        self.time = time
        self.delays = delays
        self.counted: list[float] = []
        self.refused: list[float] = []
        self._windows: dict[str, tuple[float, int]] = {}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        delay = self.delays[len(self.counted) + len(self.refused)] if self.delays else 0.0
        if delay:
            await self.time.sleep(delay)
        key = request.headers["apikey"]
        start, count = self._windows.get(key, (-1.0, 0))
        if self.time.now >= start + 1.0:
            start, count = self.time.now, 0
        self._windows[key] = (start, count + 1)
        if count + 1 > PER_KEY.calls:
            self.refused.append(self.time.now)
            return httpx.Response(429, json={"message": "2 per 1 second"}, headers={"Retry-After": "0"})
        self.counted.append(self.time.now)
        return httpx.Response(202, json={"id": f"id-{len(self.counted)}", "kudos": 0.0})


@pytest.mark.asyncio
async def test_a_submit_holds_its_place_until_its_answer_so_a_slow_count_at_the_horde_meets_no_429() -> None:
    """The first two submits of a key are counted half a second after they leave (the Horde's queue): the third,
    sent 1.1 s after them, would be counted 0.6 s into their window and refused. Each holds its place until its
    answer plus the window instead."""
    time = VirtualTime()
    horde = FixedWindowHorde(time, [0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    budget = HordeBudget(PASSKEY, clock=time.clock, sleep=time.sleep)
    text = TextHordeClient(BASE, "test:1:test", 30, transport=httpx.MockTransport(horde), budget=budget)
    await submit_all(time, text, [(f"192.0.2.{index}", "shared-key") for index in range(4)])
    assert horde.refused == []
    assert horde.counted == pytest.approx([0.5, 0.5, 1.6, 1.6])
    assert budget.rate_limit_retries == 0


# --- pacing shared through Redis ----------------------------------------------------------------------------------

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.mark.asyncio
async def test_two_processes_share_one_log_through_redis() -> None:
    """Two pacers (two processes) on one Horde: the third turn of one key is the first's plus 1.1 s, whichever
    process takes it; reservations are written on Redis's clock in milliseconds."""
    sleeps: list[float] = []

    async def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    namespace = f"test-{wall_clock.time_ns()}"
    first = RedisPacer(REDIS_URL, namespace, Pacer(), sleep=no_sleep)
    second = RedisPacer(REDIS_URL, namespace, Pacer(), sleep=no_sleep)
    turns = [(PER_KEY, "key-a")]
    redis = Redis.from_url(REDIS_URL)
    try:
        assert await first.take(turns, 65) == 0.0
        await second.take(turns, 65)
        third = await first.take(turns, 65)
        reserved = [int(value) for value in await redis.lrange(first.log_key(PER_KEY, "key-a"), 0, -1)]
        assert len(reserved) == 2  # the log keeps the rule's last two
        assert await second.take(turns, 0) is None  # the next turn is in the future: not reserved
        assert [int(value) for value in await redis.lrange(first.log_key(PER_KEY, "key-a"), 0, -1)] == reserved
        assert third is not None and third > 0
        assert sleeps == [third]
        assert first.log_key(PER_KEY, "key-a") == second.log_key(PER_KEY, "key-a")
        assert "key-a" not in first.log_key(PER_KEY, "key-a")
        assert 0 < await redis.pttl(first.log_key(PER_KEY, "key-a")) <= 2200
        assert not first.fell_back
    finally:
        await redis.delete(first.log_key(PER_KEY, "key-a"))
        await redis.aclose()
        await first.aclose()
        await second.aclose()


@pytest.mark.asyncio
async def test_two_processes_share_the_held_places_through_redis() -> None:
    """Two unanswered submits of one key (one per process) fill its two places: a third waits, and once one is
    answered its place frees a window (1.1 s) after the answer, on Redis's clock."""
    namespace = f"test-{wall_clock.time_ns()}"
    first = RedisPacer(REDIS_URL, namespace, Pacer())
    second = RedisPacer(REDIS_URL, namespace, Pacer())
    turns = [(PER_KEY, "key-a")]
    redis = Redis.from_url(REDIS_URL)
    try:
        assert await first.claim(turns, "one") == 0.0
        assert await second.claim(turns, "two") == 0.0
        unanswered = await first.claim(turns, "three")
        assert 119.0 < unanswered <= 120.0  # behind two unanswered submits: their bound
        await second.release(turns, "one")
        freed = await second.claim(turns, "three")
        assert 1.0 < freed <= 1.1
        assert sorted(member.decode() for member in await redis.zrange(first.places_key(PER_KEY, "key-a"), 0, -1)) == [
            "one",
            "two",
        ]
        assert not first.fell_back and not second.fell_back
    finally:
        await redis.delete(first.places_key(PER_KEY, "key-a"))
        await redis.aclose()
        await first.aclose()
        await second.aclose()


@pytest.mark.asyncio
async def test_without_an_answer_from_redis_the_process_paces_on_its_own() -> None:
    time = VirtualTime()
    local = Pacer(time.clock, time.sleep)
    shared = RedisPacer("redis://127.0.0.1:9/0", "test", local, sleep=time.sleep)
    turns = [(PER_KEY, "key-a")]
    try:
        assert [await time.run(shared.take(turns, 65)) for _ in range(3)] == [0.0, 0.0, 1.1]
        assert [await shared.claim(turns, ticket) for ticket in ("one", "two", "three")] == [0.0, 0.0, 120.0]
        await shared.release(turns, "one")
        assert await shared.claim(turns, "three") == 1.1
        assert shared.fell_back
    finally:
        await shared.aclose()


def test_a_front_with_redis_shares_its_pacing() -> None:
    assert isinstance(HordeBudget.from_settings(FrontSettings(redis_url=REDIS_URL)).turns_taker, RedisPacer)
    assert isinstance(HordeBudget.from_settings(FrontSettings()).turns_taker, Pacer)


# --- status read cap -----------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_one_text_status_is_read_at_most_once_every_1_05_seconds() -> None:
    time = VirtualTime()
    horde = FakeHorde(time)
    _, _, text = clients(horde, time)
    await time.run(asyncio.gather(*(text.status_body("t1", "key-a") for _ in range(3)), text.status_body("t2", "k")))
    reads = [(at, request.url.path.rsplit("/", 1)[-1]) for at, request in horde.requests]
    assert sorted(reads) == [(0.0, "t1"), (0.0, "t2"), (1.05, "t1"), (2.1, "t1")]
    await time.run(text.cancel("t1", "key-a"))  # a cancel is another limit at the Horde: never held back
    assert horde.times[-1] == 2.1


class SubscribedSignals:
    """A signal listener subscribed to Redis (``HORDE_OAI_REDIS_URL`` set), recording who registers for signals."""

    subscribed = True

    def __init__(self) -> None:
        self.registered_ids: list[str] = []

    @property
    def registered(self) -> int:
        return len(self.registered_ids)

    def register(self, request_id: str) -> asyncio.Queue[str]:
        self.registered_ids.append(request_id)
        return asyncio.Queue()

    def unregister(self, request_id: str) -> None:
        self.registered_ids.remove(request_id)


@pytest.mark.asyncio
async def test_a_text_request_waiting_behind_redis_is_read_every_recheck_within_the_cap() -> None:
    """The text API publishes no signals, so with Redis subscribed a text request's waiter does not back off to
    HORDE_OAI_SIGNAL_RECHECK_MAX_SECONDS (before: reads at 0, 1.05, 3.05, 7.05, 15.05, 31.05, 61.05 s): it re-reads
    every signal_recheck_seconds from each read's start, which the read cap spaces to 1.05 s, and is not registered
    for signals."""
    time = VirtualTime()
    finished = {
        "done": True,
        "finished": 1,
        "waiting": 0,
        "processing": 0,
        "is_possible": True,
        "generations": [{"text": "Hello", "model": "m", "worker_id": "w", "worker_name": "w", "state": "ok"}],
    }

    def answer(request: httpx.Request) -> httpx.Response:
        waiting = {"done": False, "waiting": 1, "finished": 0, "processing": 0, "is_possible": True}
        return httpx.Response(200, json=finished if len(horde.requests) > 7 else waiting)

    horde = FakeHorde(time, answer)
    _, native, text = clients(horde, time)
    chat_request = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    routes = TextRoutes(text, prepare_chat_request(chat_request))
    signals = SubscribedSignals()
    settings = FrontSettings(signal_recheck_seconds=1.0, signal_recheck_max_seconds=30.0)
    runtime = SimpleNamespace(horde=native, signals=signals, settings=settings)
    waiter = ChatWaiter(
        runtime,
        "t1",
        "key-a",
        timeout_seconds=300,
        request=chat_request,
        clock=time.clock,
        sleep=time.sleep,
        horde=routes,
    )
    status = await time.run(waiter.wait_done(await time.run(waiter.first_read())))
    assert status.finished_generation is not None
    assert horde.times == pytest.approx([0.0, 1.05, 2.1, 3.15, 4.2, 5.25, 6.3, 7.35])
    assert signals.registered_ids == []
    # a second from the last read's start (7.0; the cap held its call to 7.35), not a backed-off 2 s (issue 37)
    assert waiter.recheck_delay() == pytest.approx(0.65)


# --- the 429 retry -------------------------------------------------------------------------------------------------


def limiter_429(retry_after: str | None = "1") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(429, json={"message": "2 per 1 second"}, headers=headers)


@pytest.mark.asyncio
async def test_a_limiter_429_is_retried_after_its_retry_after() -> None:
    time = VirtualTime()
    answers = iter([limiter_429("1")])
    horde = FakeHorde(time, lambda request: next(answers, httpx.Response(202, json={"id": "ok-id", "kudos": 0.0})))
    budget, _, text = clients(horde, time)
    submitted = await time.run(text.submit(PAYLOAD, "key-a"))
    assert submitted.id == "ok-id"
    assert horde.times == [0.0, 1.0]
    assert time.sleeps == [1.0]
    assert budget.rate_limit_retries == 1


@pytest.mark.asyncio
async def test_a_429_is_retried_twice_at_most_then_reaches_the_client_as_rate_limit_exceeded() -> None:
    time = VirtualTime()
    horde = FakeHorde(time, lambda request: limiter_429(None))
    _, _, text = clients(horde, time)
    with pytest.raises(HordeRefusal) as refused:
        await time.run(text.submit(PAYLOAD, "key-a"))
    assert horde.times == [0.0, 1.0, 2.0]  # no Retry-After: one second
    error = refusals.error_from_refusal(refused.value)
    assert (error.status, error.code, error.message) == (429, "rate_limit_exceeded", "2 per 1 second")
    assert json.loads(error.to_response().content)["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.asyncio
async def test_a_retry_after_of_zero_is_waited_as_the_limiters_one_second_window_and_never_passed_on() -> None:
    """flask-limiter writes ``int(reset - now)``: in the last second of a one-second window the real Horde says
    ``Retry-After: 0``. A retry at once lands in the same window; the client is never told to retry in 0 s."""
    time = VirtualTime()
    horde = FakeHorde(time, lambda request: limiter_429("0"))
    _, _, text = clients(horde, time)
    with pytest.raises(HordeRefusal) as refused:
        await time.run(text.submit(PAYLOAD, "key-a"))
    assert horde.times == [0.0, 1.0, 2.0]
    assert time.sleeps == [1.0, 1.0]
    assert refusals.error_from_refusal(refused.value).to_response()["Retry-After"] == "1"


@pytest.mark.asyncio
async def test_the_retries_wait_five_seconds_in_all_at_most() -> None:
    time = VirtualTime()
    horde = FakeHorde(time, lambda request: limiter_429("3"))
    _, _, text = clients(horde, time)
    with pytest.raises(HordeRefusal) as refused:
        await time.run(text.submit(PAYLOAD, "key-a"))
    assert horde.times == [0.0, 3.0]  # a second wait of 3 s would pass 5 s in all
    assert refusals.error_from_refusal(refused.value).to_response()["Retry-After"] == "3"


@pytest.mark.asyncio
async def test_a_429_with_an_rc_is_not_retried() -> None:
    time = VirtualTime()
    answer = httpx.Response(429, json={"message": "Too many prompts", "rc": "TooManyPrompts"})
    horde = FakeHorde(time, lambda request: answer)
    _, native, _ = clients(horde, time)
    with pytest.raises(HordeRefusal) as refused:
        await time.run(native.submit({"messages": []}, "key-a"))
    assert refused.value.rc == "TooManyPrompts"
    assert horde.times == [0.0]


@pytest.mark.asyncio
async def test_a_rate_limited_status_read_is_retried_too() -> None:
    time = VirtualTime()
    answers = iter([limiter_429("1")])
    horde = FakeHorde(time, lambda request: next(answers, httpx.Response(200, json={"done": True})))
    _, native, _ = clients(horde, time)
    status = await time.run(native.status("n1", "key-a"))
    assert status.done is True
    assert horde.times == [0.0, 1.0]


# --- shared reads --------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_shared_read_is_made_once_per_interval_for_every_caller() -> None:
    calls: list[int] = []

    async def read() -> str:
        calls.append(1)
        return "ok"

    key = "test-horde-budget:shared-read"
    await cache.adelete(key)
    try:
        assert [await shared_read(key, 5.0, read) for _ in range(3)] == ["ok", "ok", "ok"]
        assert len(calls) == 1
        assert await shared_read(key, 0, read) == "ok"
        assert len(calls) == 2
    finally:
        await cache.adelete(key)


@pytest.mark.asyncio
async def test_the_readiness_heartbeat_verdict_is_shared_through_the_cache() -> None:
    """Another process's verdict in the cache is used: this process's Horde (a closed port) is not asked."""
    key = readiness.HEARTBEAT_CACHE_KEY.format(horde_url=get_runtime().horde.base_url)
    try:
        await cache.aset(key, "ok", timeout=30)
        assert await readiness.check_horde() == "ok"
        await cache.adelete(key)
        assert await readiness.check_horde() == "unreachable"
        assert await cache.aget(key) == "unreachable"
    finally:
        await cache.adelete(key)
        await close_runtime()


# --- the shared address budget -------------------------------------------------------------------------------------


def test_the_start_log_says_whose_address_budget_the_horde_counts() -> None:
    assert describe_address_budget(FrontSettings()) == (
        "Horde budget: without HORDE_OAI_PROXY_PASSKEY every user shares the front's one address budget at the Horde: "
        "2 submits a second and 90 a minute for all of them; beyond it a request waits its turn or is answered 429 "
        "rate_limit_exceeded (docs/public-horde.md)"
    )
    assert describe_address_budget(FrontSettings(proxy_passkey=PASSKEY)) == (
        "Horde budget: HORDE_OAI_PROXY_PASSKEY set: the Horde counts each user's own address (Proxied-For)"
    )


@pytest.mark.asyncio
async def test_submits_refused_for_the_shared_address_budget_are_counted() -> None:
    """Without a passkey: one refused by the front's pacing (its turn beyond the bound), one by the Horde's limiter
    after its retries; with a passkey neither counts."""
    memory = InMemoryMetricReader()
    configure_metrics(MeterProvider(metric_readers=[memory]))
    try:
        time = VirtualTime()
        limited = {"X-RateLimit-Limit": "2"}
        refused = httpx.Response(429, json={"message": "2 per 1 second"}, headers=limited)
        horde = FakeHorde(time, lambda request: refused)
        budget, _, text = clients(horde, time)
        assert not budget.shares_address_budget
        with pytest.raises(HordeRefusal):
            await time.run(text.submit(PAYLOAD, "key-a"))  # three 429s: at 0 s, retried at 1 s and 2 s
        assert budget.shares_address_budget
        accepted = httpx.Response(202, json={"id": "x", "kudos": 0.0}, headers=limited)
        _, _, paced_text = clients(FakeHorde(time, lambda request: accepted), time, max_pacing_wait=0.5)
        with pytest.raises(HordeRefusal):  # the third's turn is 1.1 s away
            await time.run(asyncio.gather(*(paced_text.submit(PAYLOAD, f"key-{index}") for index in range(3))))
        proxied, _, proxied_text = clients(FakeHorde(time, lambda request: refused), time, PASSKEY)
        with pytest.raises(HordeRefusal), serving_client(CLIENT):
            await time.run(proxied_text.submit(PAYLOAD, "key-b"))
        assert proxied.horde_limits and not proxied.shares_address_budget
        data = memory.get_metrics_data()
        counted = {
            point.attributes["by"]: point.value
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "horde.oai.address_budget.refusals"
            for point in metric.data.data_points
        }
        assert counted == {"horde": 1, "front": 1}
    finally:
        chat.metrics._metrics = None


@pytest.mark.asyncio
async def test_a_call_that_finds_every_pooled_connection_busy_is_counted() -> None:
    memory = InMemoryMetricReader()
    configure_metrics(MeterProvider(metric_readers=[memory]))
    release = asyncio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200, json={})

    client = HordeClient(BASE, "test:1:test", 30, transport=httpx.MockTransport(slow), connections=2)
    try:
        calls = [asyncio.ensure_future(client.heartbeat()) for _ in range(3)]
        for _ in range(20):
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*calls)
        data = memory.get_metrics_data()
        counted = [
            point.value
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "horde.oai.horde.pool_full"
            for point in metric.data.data_points
        ]
        assert counted == [1]  # the third of three calls on two connections waited
    finally:
        await client.aclose()
        chat.metrics._metrics = None
