"""Submit pacing and the status read cap: sliding logs of calls per rule and key, in one process or shared by every
process through Redis (real-horde.md "Rate limits"; chat.horde.budget says which call waits in which log).

The Horde counts a submit when its limiter sees it, anywhere between the moment it leaves and its answer, and its
windows are fixed ones that start at their first count: so beside its turn (:meth:`Pacer.take`) a submit holds its
place in each log until its answer plus the window (:meth:`Pacer.claim`, :meth:`Pacer.release`). With
``HORDE_OAI_REDIS_URL`` the logs are shared by every process of the front (:class:`RedisPacer`, one Redis script per
turn on Redis's clock); without it, or while Redis does not answer, each process paces on its own (:class:`Pacer`).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from loguru import logger
from redis.exceptions import RedisError

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

WINDOW_MARGIN_SECONDS: Final[float] = 0.1
"""Added to each one-second window (one second to the minute window): a call reaches the Horde a little after it
leaves, so a window of the front's one second long could hold three arrivals of a Horde window."""

STATUS_READ_SPACING_SECONDS: Final[float] = 1.05
"""The shortest time between two reads of one text status: 60 a minute at the Horde, with a margin."""


@dataclass(frozen=True, slots=True)
class Rule:
    """At most ``calls`` calls in any ``seconds`` long interval."""

    calls: int
    seconds: float


PER_KEY: Final[Rule] = Rule(2, 1 + WINDOW_MARGIN_SECONDS)
"""Submits per API key: 2 a second (``get_request_limit_per_apikey``)."""

PER_ANONYMOUS_KEY: Final[Rule] = Rule(60, 1 + WINDOW_MARGIN_SECONDS)
"""Submits on the anonymous key: 60 a second."""

PER_ADDRESS: Final[tuple[Rule, ...]] = (Rule(2, 1 + WINDOW_MARGIN_SECONDS), Rule(90, 61.0))
"""Submits per client address: 2 a second and 90 a minute (``get_request_2sec_limit_per_ip``, ``..._90min_...``)."""

STATUS_READS: Final[Rule] = Rule(1, STATUS_READ_SPACING_SECONDS)
"""Reads of one text status, and of one image check (cached 1 s at the Horde, so a closer read learns nothing)."""

IMAGE_STATUS_READS: Final[Rule] = Rule(9, 61.0)
"""Reads (or cancels, counted apart) of one image status: the Horde's 10 a minute, one kept in reserve."""

IN_FLIGHT_HOLD_SECONDS: Final[float] = 120.0
"""How long an unanswered submit holds its place at most (a process that died while its submit was out frees it
then); longer than any call's timeout."""

HOLD_POLL_SECONDS: Final[float] = 0.05
"""How often a submit waiting for its place behind unanswered submits looks again (their answer time is unknown)."""

MAX_IDLE_LOGS: Final[int] = 4096
"""How many per-key logs the pacer keeps before it drops those no rule needs any more."""


class Pacer:
    """Spaces calls so that each ``(rule, key)`` log never holds more than ``rule.calls`` in ``rule.seconds``.

    A call reserves the earliest moment every log it names allows, then sleeps until then, so waiting calls go in the
    order they came (a sliding log per key: unlike a leaky bucket, two calls at once and a third half a second later
    can never meet in one of the Horde's one-second windows).

    Args:
        clock: ``time.monotonic``-like seconds; injectable for tests.
        sleep: ``asyncio.sleep``-like; injectable for tests.
    """

    def __init__(self, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.clock = clock
        self._sleep = sleep
        self._logs: dict[tuple[Rule, str], deque[float]] = {}
        self._holds: dict[tuple[Rule, str], dict[str, float]] = {}

    def earliest(self, turns: Sequence[tuple[Rule, str]]) -> float:
        """The earliest moment each ``(rule, key)`` in ``turns`` allows a call (on :attr:`clock`), reserving nothing."""
        at = self.clock()
        for rule, key in turns:
            log = self._logs.get((rule, key))
            if log:
                at = max(at, log[-1])
                if len(log) >= rule.calls:
                    at = max(at, log[0] + rule.seconds)
        return at

    def reserve(self, turns: Sequence[tuple[Rule, str]]) -> float:
        """Reserve the earliest moment each ``(rule, key)`` in ``turns`` allows; return it (on :attr:`clock`)."""
        now = self.clock()
        at = self.earliest(turns)
        for rule, key in turns:
            self._logs.setdefault((rule, key), deque(maxlen=rule.calls)).append(at)
        if len(self._logs) > MAX_IDLE_LOGS:
            self._forget_idle(now)
        return at

    async def turn(self, turns: Sequence[tuple[Rule, str]]) -> float:
        """Wait for the moment :meth:`reserve` gives; return the seconds waited."""
        wait = self.reserve(turns) - self.clock()
        if wait > 0:
            await self._sleep(wait)
            return wait
        return 0.0

    async def take(self, turns: Sequence[tuple[Rule, str]], max_wait: float) -> float | None:
        """Wait for a turn unless it is more than ``max_wait`` seconds away: the seconds waited, or None (nothing
        reserved) when it is.
        """
        if self.earliest(turns) - self.clock() > max_wait:
            return None
        return await self.turn(turns)

    async def claim(self, turns: Sequence[tuple[Rule, str]], ticket: str) -> float:
        """Hold a place for the call ``ticket`` in each log of ``turns`` if each has fewer than ``rule.calls`` places
        held (unanswered, or answered less than ``rule.seconds`` ago): 0.0 when held, else the seconds until a place
        may be free (nothing held).
        """
        now = self.clock()
        wait = 0.0
        for rule, key in turns:
            held = self._holds.get((rule, key), {})
            for other, until in list(held.items()):
                if until <= now:
                    del held[other]
            if len(held) >= rule.calls:
                wait = max(wait, sorted(held.values())[len(held) - rule.calls] - now)
        if wait > 0:
            return wait
        for rule, key in turns:
            self._holds.setdefault((rule, key), {})[ticket] = now + IN_FLIGHT_HOLD_SECONDS
        return 0.0

    async def release(self, turns: Sequence[tuple[Rule, str]], ticket: str) -> None:
        """The call ``ticket`` was answered: its places are held ``rule.seconds`` more, then free."""
        now = self.clock()
        for rule, key in turns:
            held = self._holds.get((rule, key))
            if held is not None and ticket in held:
                held[ticket] = now + rule.seconds

    def _forget_idle(self, now: float) -> None:
        for (rule, key), log in list(self._logs.items()):
            if not log or log[-1] + rule.seconds <= now:
                del self._logs[(rule, key)]
        for place, held in list(self._holds.items()):
            if all(until <= now for until in held.values()):
                del self._holds[place]


class TurnTaker(Protocol):
    """What chat.horde.budget.HordeBudget paces with: :class:`Pacer` (one process) or :class:`RedisPacer` (every
    process).
    """

    async def take(self, turns: Sequence[tuple[Rule, str]], max_wait: float) -> float | None:
        """Wait for a turn, or None when it is more than ``max_wait`` seconds away (see :meth:`Pacer.take`)."""
        ...

    async def claim(self, turns: Sequence[tuple[Rule, str]], ticket: str) -> float:
        """Hold a place until the answer, or the seconds until one may be free (see :meth:`Pacer.claim`)."""
        ...

    async def release(self, turns: Sequence[tuple[Rule, str]], ticket: str) -> None:
        """The call was answered (see :meth:`Pacer.release`)."""
        ...


SHARED_TURN_SCRIPT: Final[str] = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local at = now
for i, key in ipairs(KEYS) do
  local calls = tonumber(ARGV[2 * i])
  local period = tonumber(ARGV[2 * i + 1])
  local length = redis.call('LLEN', key)
  if length > 0 then
    at = math.max(at, tonumber(redis.call('LINDEX', key, -1)))
    if length >= calls then
      at = math.max(at, tonumber(redis.call('LINDEX', key, -calls)) + period)
    end
  end
end
if at - now > tonumber(ARGV[1]) then
  return -1
end
for i, key in ipairs(KEYS) do
  local calls = tonumber(ARGV[2 * i])
  local period = tonumber(ARGV[2 * i + 1])
  redis.call('RPUSH', key, at)
  redis.call('LTRIM', key, -calls, -1)
  redis.call('PEXPIRE', key, at - now + period)
end
return at - now
"""
""":meth:`Pacer.take` as one Redis script on Redis's clock, in milliseconds: each log is a list of its last reserved
moments, kept as long as a rule needs it. Returns the wait, or -1 when it is beyond the bound (nothing reserved)."""

SHARED_CLAIM_SCRIPT: Final[str] = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local in_flight = tonumber(ARGV[2])
local wait = 0
for i, key in ipairs(KEYS) do
  local calls = tonumber(ARGV[2 + i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZCARD', key)
  if held >= calls then
    local first = redis.call('ZRANGE', key, held - calls, held - calls, 'WITHSCORES')
    wait = math.max(wait, tonumber(first[2]) - now)
  end
end
if wait > 0 then
  return wait
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + in_flight, ARGV[1])
  redis.call('PEXPIRE', key, in_flight)
end
return 0
"""
""":meth:`Pacer.claim` as one Redis script on Redis's clock, in milliseconds: each log's places are a sorted set of
call tickets scored by the moment they are free (ARGV: ticket, the in-flight bound, then each log's ``calls``)."""

SHARED_RELEASE_SCRIPT: Final[str] = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + tonumber(ARGV[1 + i]), ARGV[1])
end
return 0
"""
""":meth:`Pacer.release` as one Redis script (ARGV: ticket, then each log's window in milliseconds)."""

SHARED_PACING_TIMEOUT_SECONDS: Final[float] = 1.0
"""How long a shared turn may take to get from Redis before the process paces on its own."""


class RedisPacer:
    """:class:`Pacer` shared by every process of the front through Redis (``HORDE_OAI_REDIS_URL``): one sliding log
    per rule and key, reserved by :data:`SHARED_TURN_SCRIPT` on Redis's clock. When Redis does not answer, the process
    paces with ``fallback`` (its own :class:`Pacer`) and says so once in the log.

    Args:
        url: The Redis URL.
        namespace: What the logs are per (``HORDE_URL``): fronts of different Hordes keep their own.
        fallback: The process's own pacer.
        sleep: ``asyncio.sleep``-like; injectable for tests.
    """

    def __init__(self, url: str, namespace: str, fallback: Pacer, sleep: Sleep = asyncio.sleep) -> None:
        from redis.asyncio import Redis  # noqa: PLC0415 - only a front with Redis needs it

        self._redis = Redis.from_url(
            url, socket_timeout=SHARED_PACING_TIMEOUT_SECONDS, socket_connect_timeout=SHARED_PACING_TIMEOUT_SECONDS
        )
        self._script = self._redis.register_script(SHARED_TURN_SCRIPT)
        self._claim_script = self._redis.register_script(SHARED_CLAIM_SCRIPT)
        self._release_script = self._redis.register_script(SHARED_RELEASE_SCRIPT)
        self.namespace = namespace
        self.fallback = fallback
        self._sleep = sleep
        self.fell_back = False
        """Whether Redis failed once (then, and while it fails, the process paces on its own)."""

    def log_key(self, rule: Rule, key: str) -> str:
        """The Redis key of one log: hashed, so no API key or address is written in Redis."""
        digest = hashlib.sha256(f"{self.namespace}|{rule.calls}/{rule.seconds}|{key}".encode()).hexdigest()[:32]
        return f"horde-oai:pacing:{digest}"

    def places_key(self, rule: Rule, key: str) -> str:
        """The Redis key of one log's held places (:meth:`claim`)."""
        return f"{self.log_key(rule, key)}:held"

    async def take(self, turns: Sequence[tuple[Rule, str]], max_wait: float) -> float | None:
        """:meth:`Pacer.take` across every process (see the class docstring)."""
        args: list[int] = [round(max_wait * 1000)]
        for rule, _ in turns:
            args += [rule.calls, round(rule.seconds * 1000)]
        try:
            async with asyncio.timeout(SHARED_PACING_TIMEOUT_SECONDS):
                wait_ms = int(await self._script(keys=[self.log_key(rule, key) for rule, key in turns], args=args))
        except (RedisError, OSError, TimeoutError) as failure:
            self._fall_back(failure)
            return await self.fallback.take(turns, max_wait)
        if wait_ms < 0:
            return None
        if wait_ms > 0:
            await self._sleep(wait_ms / 1000)
        return wait_ms / 1000

    async def claim(self, turns: Sequence[tuple[Rule, str]], ticket: str) -> float:
        """:meth:`Pacer.claim` across every process (:data:`SHARED_CLAIM_SCRIPT`)."""
        args: list[int | str] = [ticket, round(IN_FLIGHT_HOLD_SECONDS * 1000), *(rule.calls for rule, _ in turns)]
        try:
            async with asyncio.timeout(SHARED_PACING_TIMEOUT_SECONDS):
                keys = [self.places_key(rule, key) for rule, key in turns]
                wait_ms = int(await self._claim_script(keys=keys, args=args))
        except (RedisError, OSError, TimeoutError) as failure:
            self._fall_back(failure)
            return await self.fallback.claim(turns, ticket)
        return wait_ms / 1000

    async def release(self, turns: Sequence[tuple[Rule, str]], ticket: str) -> None:
        """:meth:`Pacer.release` across every process (:data:`SHARED_RELEASE_SCRIPT`)."""
        args: list[int | str] = [ticket, *(round(rule.seconds * 1000) for rule, _ in turns)]
        try:
            async with asyncio.timeout(SHARED_PACING_TIMEOUT_SECONDS):
                await self._release_script(keys=[self.places_key(rule, key) for rule, key in turns], args=args)
        except (RedisError, OSError, TimeoutError) as failure:
            self._fall_back(failure)
        await self.fallback.release(turns, ticket)

    def _fall_back(self, failure: BaseException) -> None:
        if not self.fell_back:
            logger.warning("Shared pacing unavailable ({}): this process paces on its own", type(failure).__name__)
            self.fell_back = True

    async def aclose(self) -> None:
        """Close the Redis connections."""
        await self._redis.aclose()
