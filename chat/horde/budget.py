"""Staying inside the Horde's budgets, and telling it whose budget a call spends (real-horde.md "Rate limits").

The real AI Horde limits each client address and each API key with fixed windows (flask-limiter) and answers a call
beyond them 429 ``{"message": "2 per 1 second"}`` without an ``rc``. Everything one front process sends goes through
one :class:`HordeBudget` (chat.serving.runtime), shared by the native and the text clients:

- **Proxy headers.** With ``HORDE_OAI_PROXY_PASSKEY`` (a service account's proxy passkey), every call carries
  ``Proxy-Authorization: <passkey>`` and ``Proxied-For: <client address>``, so the Horde counts each end user's own
  address instead of the front's. The address is the one the admission guards cap (:func:`scope_client_address`:
  the connection's peer, or the first entry of ``HORDE_OAI_CLIENT_ADDRESS_HEADER`` behind a trusted proxy), carried
  from the ASGI boundary (chat.asgi) in :data:`CLIENT_ADDRESS`. A call made outside any request (none known) sends
  no ``Proxied-For``. The passkey is never logged.
- **Submit pacing.** Submits and dry runs of the text API (``POST /v2/generate/text/async``) wait their turn so that
  no API key sends more than 2 a second (the anonymous key 60) and no address more than 2 a second and 90 a minute:
  the address is the proxied client's with a passkey, else the front's own (one budget for every user). The windows
  carry a margin (:data:`WINDOW_MARGIN_SECONDS`) for the network's jitter. The Horde counts a submit when its
  limiter sees it, anywhere between the moment it leaves and its answer (a full connection pool, a busy event loop or
  the Horde's own queue delay it), and its windows are fixed ones that start at their first count: so a submit also
  holds its place in each log until its answer plus the window (:meth:`HordeBudget.holding`), and no more than
  ``calls`` submits of one key or address are ever unanswered or answered within the window. Twenty requests at once
  on one key are
  submitted over about ten seconds instead of eighteen of them being refused. A submit that would wait more than
  :data:`MAX_PACING_WAIT_SECONDS` is answered 429 ``rate_limit_exceeded`` with ``Retry-After`` at once instead.
- **Status read cap.** A text status (``GET /v2/generate/text/status/{id}``, 60 a minute per request at the Horde) and
  an image check (``GET /v2/generate/check/{id}``) are read at most once per :data:`STATUS_READ_SPACING_SECONDS`,
  whatever the waiter's timer; an image status (``GET`` or ``DELETE /v2/generate/status/{id}``, 10 a minute) at most
  :data:`IMAGE_STATUS_READS` a minute. The image submit (``POST /v2/generate/async``) is paced as the text submit.
- **429 retry.** A 429 without ``rc`` (the limiter's) is retried after its ``Retry-After`` (1 s when absent), at
  most :data:`MAX_RATE_LIMIT_RETRIES` times and :data:`MAX_RATE_LIMIT_RETRY_SECONDS` in all; then the client sees it
  (429 ``rate_limit_exceeded``, chat.horde.refusals).
- **The shared address budget.** Without a passkey every user's submits spend the front's one address budget: 2 a
  second and 90 a minute for all of them (:data:`SHARED_ADDRESS_BUDGET`, said in the start log and in ``/readyz``
  once the Horde shows it limits, :attr:`HordeBudget.horde_limits`); each submit refused 429 meanwhile, by the
  front's pacing or by the Horde's limiter, counts in ``horde.oai.address_budget.refusals``.
- **Shared reads.** :func:`shared_read` keeps a read's result in Django's ``default`` cache (django-redis with
  ``HORDE_OAI_REDIS_URL``, shared by every worker process; local memory without), so reads every process would make
  (the readiness heartbeat) are made once per interval for all of them; the requests of one process that find the
  cache empty together share one read (:func:`single_flight`, also used by the model list, the performance totals,
  a key's kudos and the worker list), so a burst of requests makes one call, not one each.

With ``HORDE_OAI_REDIS_URL`` the pacing and the read cap are shared by every process of the front
(:class:`RedisPacer`, one Redis script per turn on Redis's clock); without it, or while Redis does not answer, each
process paces on its own, so several processes together may send up to that many times the rate.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

import httpx
import orjson
from django.core.cache import cache
from horde_sdk.ai_horde_api.endpoints import AI_HORDE_API_ENDPOINT_SUBPATH
from horde_sdk.generic_api.consts import ANON_API_KEY
from loguru import logger
from redis.exceptions import RedisError

from chat.horde.real_horde_answers import LIMITER_WINDOW_SECONDS
from chat.metrics import front_metrics
from chat.settings import FrontSettings

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

CLIENT_ADDRESS: ContextVar[str | None] = ContextVar("horde_oai_client_address", default=None)
"""The address of the client whose request is being served (set by chat.asgi for each HTTP request); the
``Proxied-For`` of every call made for it, and its address budget at the Horde."""

PROXY_AUTHORIZATION: Final[str] = "Proxy-Authorization"
PROXIED_FOR: Final[str] = "Proxied-For"

TEXT_SUBMIT_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_text_async.value
"""The paced route: the text API's submit, dry runs included (``TextAsyncGenerate``'s limits)."""

TEXT_STATUS_PREFIX: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_text_status.value.split("{", 1)[0]
"""The prefix of the capped reads: ``GET /v2/generate/text/status/{id}`` (60 a minute per request and address)."""

IMAGE_SUBMIT_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_async.value
"""The image API's submit (``POST /v2/generate/async``), paced as the text submit: the same limits
(``horde/apis/v2/stable.py:72-81``), dry runs included."""

IMAGE_CHECK_PREFIX: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_check.value.split("{", 1)[0]
"""The prefix of an image request's check (10 a second per address and path, its answer cached 1 s at the Horde)."""

IMAGE_STATUS_PREFIX: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_status.value.split("{", 1)[0]
"""The prefix of an image request's full status: **10 a minute** per address, method and request id
(``horde/apis/v2/stable.py:472``); the front reads it once, at the end (images.horde)."""

WINDOW_MARGIN_SECONDS: Final[float] = 0.1
"""Added to each one-second window (one second to the minute window): a call reaches the Horde a little after it
leaves, so a window of the front's one second long could hold three arrivals of a Horde window."""

STATUS_READ_SPACING_SECONDS: Final[float] = 1.05
"""The shortest time between two reads of one text status: 60 a minute at the Horde, with a margin."""

MAX_RATE_LIMIT_RETRIES: Final[int] = 2
"""How many times a 429 without ``rc`` is retried before the client sees it."""

MAX_RATE_LIMIT_RETRY_SECONDS: Final[float] = 5.0
"""The most seconds one call spends waiting out 429s; a ``Retry-After`` beyond what is left is not waited."""

DEFAULT_RETRY_AFTER_SECONDS: Final[float] = 1.0
"""The wait before retrying a 429 that has no readable ``Retry-After``."""


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

SHARED_ADDRESS_BUDGET: Final[str] = (
    f"without HORDE_OAI_PROXY_PASSKEY every user shares the front's one address budget at the Horde: "
    f"{PER_ADDRESS[0].calls} submits a second and {PER_ADDRESS[1].calls} a minute for all of them; beyond it a "
    f"request waits its turn or is answered 429 rate_limit_exceeded (docs/public-horde.md)"
)
"""What the start log and ``/readyz`` say of a front without a passkey."""


def describe_address_budget(settings: FrontSettings) -> str:
    """The start log's line on whose address budget the Horde counts each user's submits."""
    if settings.proxy_passkey is None:
        return f"Horde budget: {SHARED_ADDRESS_BUDGET}"
    return "Horde budget: HORDE_OAI_PROXY_PASSKEY set: the Horde counts each user's own address (Proxied-For)"


RATE_LIMIT_HEADER: Final[str] = "X-RateLimit-Limit"
"""The header the real Horde's limiter (flask-limiter ``headers_enabled``) sets on its answers: a Horde that limits."""

FRONT_ADDRESS: Final[str] = ""
"""The address key of calls that spend the front's own address budget (no passkey, or no client known)."""

MAX_PACING_WAIT_SECONDS: Final[float] = 65.0
"""The longest a submit waits its turn (long enough to wait out the minute window once); one that would wait longer
is not queued but answered as the Horde's limiter would (429 ``rate_limit_exceeded`` with ``Retry-After``), so a
flood on one key or address cannot queue without end (at 2 a second, about 120 submits wait at most)."""

IN_FLIGHT_HOLD_SECONDS: Final[float] = 120.0
"""How long an unanswered submit holds its place at most (a process that died while its submit was out frees it
then); longer than any call's timeout."""

HOLD_POLL_SECONDS: Final[float] = 0.05
"""How often a submit waiting for its place behind unanswered submits looks again (their answer time is unknown)."""

MAX_IDLE_LOGS: Final[int] = 4096
"""How many per-key logs the pacer keeps before it drops those no rule needs any more."""


# --- the client's address ------------------------------------------------------------------------------------------


def address_header_name(header: str | None) -> bytes | None:
    """``HORDE_OAI_CLIENT_ADDRESS_HEADER`` as an ASGI header name (lower-case bytes), or None when unset."""
    return header.lower().encode("latin-1") if header else None


def scope_client_address(scope: Mapping[str, Any], header: bytes | None) -> str:
    """The client address of an ASGI HTTP scope: the first entry of the trusted ``header`` when configured and
    present, else the connection's peer address ("" when the server gives none). The admission guards' per-client
    cap and the ``Proxied-For`` header both use it.
    """
    if header is not None:
        for name, value in scope.get("headers") or ():
            if name.lower() == header:
                first = str(value.decode("latin-1")).split(",")[0].strip()
                if first:
                    return first
    peer = scope.get("client")
    return str(peer[0]) if peer else ""


@contextmanager
def serving_client(address: str | None) -> Iterator[None]:
    """Within the block, calls to the Horde are made for ``address`` (:data:`CLIENT_ADDRESS`)."""
    token = CLIENT_ADDRESS.set(address or None)
    try:
        yield
    finally:
        CLIENT_ADDRESS.reset(token)


# --- pacing --------------------------------------------------------------------------------------------------------


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
    """What :class:`HordeBudget` paces with: :class:`Pacer` (one process) or :class:`RedisPacer` (every process)."""

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


# --- the budget ----------------------------------------------------------------------------------------------------


def retry_after_seconds(headers: Mapping[str, str]) -> float:
    """A ``Retry-After`` in seconds (:data:`DEFAULT_RETRY_AFTER_SECONDS` when absent or not a number of seconds), at
    least the limiter's one-second window (:data:`LIMITER_WINDOW_SECONDS`: its ``Retry-After: 0`` is not "at once").
    """
    value = headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else DEFAULT_RETRY_AFTER_SECONDS
    except ValueError:
        return DEFAULT_RETRY_AFTER_SECONDS
    return max(float(LIMITER_WINDOW_SECONDS), seconds) if math.isfinite(seconds) else DEFAULT_RETRY_AFTER_SECONDS


def is_limiter_refusal(response: httpx.Response) -> bool:
    """Whether ``response`` is the Horde limiter's 429: no ``rc`` in its body (a 429 with an ``rc`` is a refusal
    of the Horde's own, such as a queue limit, which waiting a second does not lift).
    """
    if response.status_code != 429:
        return False
    try:
        body = orjson.loads(response.content)
    except ValueError:
        return True
    return not (isinstance(body, dict) and body.get("rc"))


def pacing_refusal(max_wait: float) -> httpx.Response:
    """The answer to a submit whose turn is more than ``max_wait`` seconds away: the Horde limiter's 429, with the
    front's message and ``Retry-After`` (``max_wait`` in whole seconds), never sent to the Horde.
    """
    seconds = math.ceil(round(max_wait, 3))
    message = (
        f"This front paces its submits to the Horde's rate limits (2 a second per API key and per address) and this "
        f"request's turn is more than {seconds} s away. Retry in {seconds} s."
    )
    return httpx.Response(429, json={"message": message}, headers={"Retry-After": str(seconds)})


Attempt = Callable[[Mapping[str, str]], Awaitable[httpx.Response]]
"""One HTTP attempt of a call, given the headers the budget adds."""


class HordeBudget:
    """The process's budgets at one Horde (see the module docstring).

    Args:
        proxy_passkey: ``HORDE_OAI_PROXY_PASSKEY``; None sends no proxy headers.
        clock: ``time.monotonic``-like seconds; injectable for tests.
        sleep: ``asyncio.sleep``-like; injectable for tests.
        max_retries: :data:`MAX_RATE_LIMIT_RETRIES`.
        max_retry_seconds: :data:`MAX_RATE_LIMIT_RETRY_SECONDS`.
        max_pacing_wait: :data:`MAX_PACING_WAIT_SECONDS`.
        shared_pacer: A pacer shared by every process (:class:`RedisPacer`); default :attr:`pacer`.
    """

    def __init__(  # noqa: PLR0913 - the passkey, then keyword-only bounds and test seams (clock, sleep, pacer)
        self,
        proxy_passkey: str | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        max_retries: int = MAX_RATE_LIMIT_RETRIES,
        max_retry_seconds: float = MAX_RATE_LIMIT_RETRY_SECONDS,
        max_pacing_wait: float = MAX_PACING_WAIT_SECONDS,
        shared_pacer: TurnTaker | None = None,
    ) -> None:
        self._passkey = proxy_passkey or None
        self.pacer = Pacer(clock, sleep)
        """The process's own pacer."""
        self.turns_taker: TurnTaker = self.pacer if shared_pacer is None else shared_pacer
        """What submits and reads wait their turn with: :attr:`pacer`, or the pacer every process shares."""
        self._sleep = sleep
        self.max_retries = max_retries
        self.max_retry_seconds = max_retry_seconds
        self.max_pacing_wait = max_pacing_wait
        self.rate_limit_retries = 0
        """429s retried so far."""
        self.horde_limits = False
        """Whether an answer of the Horde carried :data:`RATE_LIMIT_HEADER` (a Horde with rate limits)."""

    @classmethod
    def from_settings(cls, settings: FrontSettings) -> HordeBudget:
        """The budget of ``settings``: ``HORDE_OAI_PROXY_PASSKEY``, and with ``HORDE_OAI_REDIS_URL`` pacing shared by
        every process (:class:`RedisPacer`).
        """
        secret = settings.proxy_passkey
        budget = cls(secret.get_secret_value() if secret is not None else None)
        if settings.redis_url:
            budget.turns_taker = RedisPacer(settings.redis_url, settings.horde_url, budget.pacer)
        return budget

    async def aclose(self) -> None:
        """Close the shared pacer's connections, if any."""
        if isinstance(self.turns_taker, RedisPacer):
            await self.turns_taker.aclose()

    def __repr__(self) -> str:
        return f"HordeBudget(proxy_passkey={'***' if self._passkey else None})"

    @property
    def proxied(self) -> bool:
        """Whether calls carry the proxy headers."""
        return self._passkey is not None

    def proxy_headers(self) -> dict[str, str]:
        """``Proxy-Authorization`` and ``Proxied-For`` for the current client, or nothing without a passkey."""
        if self._passkey is None:
            return {}
        headers = {PROXY_AUTHORIZATION: self._passkey}
        address = CLIENT_ADDRESS.get()
        if address:
            headers[PROXIED_FOR] = address
        return headers

    def address_key(self) -> str:
        """Whose address budget a call spends: the proxied client's with a passkey, else the front's own."""
        address = CLIENT_ADDRESS.get() if self._passkey is not None else None
        return address or FRONT_ADDRESS

    def turns(self, method: str, path: str, apikey: str | None) -> list[tuple[Rule, str]]:
        """The logs a call waits its turn in (none for calls the Horde does not limit per key or request)."""
        if method == "POST" and path in (TEXT_SUBMIT_PATH, IMAGE_SUBMIT_PATH):
            key = apikey or ANON_API_KEY
            address = self.address_key()
            key_rule = PER_ANONYMOUS_KEY if key == ANON_API_KEY else PER_KEY
            return [(key_rule, key), *((rule, address) for rule in PER_ADDRESS)]
        if method == "GET" and path.startswith((TEXT_STATUS_PREFIX, IMAGE_CHECK_PREFIX)):
            return [(STATUS_READS, path)]
        if path.startswith(IMAGE_STATUS_PREFIX) and method in ("GET", "DELETE"):
            return [(IMAGE_STATUS_READS, f"{method} {path}")]
        return []

    @asynccontextmanager
    async def holding(self, turns: Sequence[tuple[Rule, str]]) -> AsyncIterator[None]:
        """Within the block a submit holds a place in each log of ``turns`` (:meth:`Pacer.claim`), waited for first;
        leaving the block is its answer (:meth:`Pacer.release`). Nothing is held for ``turns`` empty.
        """
        if not turns:
            yield
            return
        ticket = uuid.uuid4().hex
        while (wait := await self.turns_taker.claim(turns, ticket)) > 0:
            await self._sleep(min(wait, HOLD_POLL_SECONDS) if wait > IN_FLIGHT_HOLD_SECONDS / 2 else wait)
        try:
            yield
        finally:
            await self.turns_taker.release(turns, ticket)

    @property
    def shares_address_budget(self) -> bool:
        """Whether every user shares the front's one address budget at a Horde that limits (no passkey)."""
        return not self.proxied and self.horde_limits

    def _count_address_refusal(self, path: str, by: str) -> None:
        if path == TEXT_SUBMIT_PATH and self.address_key() == FRONT_ADDRESS:
            front_metrics().address_budget_refusals.add(1, {"by": by})

    async def send(self, method: str, path: str, apikey: str | None, attempt: Attempt) -> httpx.Response:
        """Make one call through the budget: wait its turn, add the proxy headers, retry the limiter's 429 (see the
        module docstring). Returns the last response; raises what ``attempt`` raises.
        """
        retries = 0
        waited = 0.0
        while True:
            turns = self.turns(method, path, apikey)
            if turns and await self.turns_taker.take(turns, self.max_pacing_wait) is None:
                self._count_address_refusal(path, "front")
                return pacing_refusal(self.max_pacing_wait)
            async with self.holding(turns if path == TEXT_SUBMIT_PATH else ()):
                response = await attempt(self.proxy_headers())
            if RATE_LIMIT_HEADER in response.headers:
                self.horde_limits = True
            if not is_limiter_refusal(response):
                return response
            delay = retry_after_seconds(response.headers)
            if retries >= self.max_retries or waited + delay > self.max_retry_seconds:
                self._count_address_refusal(path, "horde")
                return response
            retries += 1
            waited += delay
            self.rate_limit_retries += 1
            logger.info("The Horde rate-limited {} {}: retry {} in {:g} s", method, path, retries, delay)
            await self._sleep(delay)


# --- shared reads --------------------------------------------------------------------------------------------------


_reads_under_way: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Task[Any]] = {}
"""The single-flight reads under way, by event loop and cache key."""


async def single_flight[T](key: str, read: Callable[[], Awaitable[T]]) -> T:
    """``read()``'s result, shared by every caller of this event loop that asks for ``key`` while a read of it is
    under way: one call to the Horde for a burst of requests that find a cache empty together. A caller that leaves
    does not cancel the read the others wait for (shielded). Raises what ``read`` raises, to every waiting caller.
    """
    loop = asyncio.get_running_loop()
    task = _reads_under_way.get((loop, key))
    if task is None:

        async def run() -> T:
            return await read()

        task = loop.create_task(run())
        _reads_under_way[(loop, key)] = task
        task.add_done_callback(lambda _: _reads_under_way.pop((loop, key), None))
    return cast("T", await asyncio.shield(task))


async def shared_read[T](key: str, seconds: float, read: Callable[[], Awaitable[T]]) -> T:
    """``read()``'s result, kept ``seconds`` in Django's ``default`` cache under ``key`` and reused by every process
    sharing that cache. A cache that cannot be reached is skipped (django-redis ``IGNORE_EXCEPTIONS``); 0 or fewer
    seconds reads every time. Raises what ``read`` raises (a failure is not kept).
    """
    if seconds <= 0:
        return await read()
    cached = await cache.aget(key)
    if cached is not None:
        return cast("T", cached)  # stored by this function under this key

    async def read_and_keep() -> T:
        fresh = await read()
        await cache.aset(key, fresh, timeout=seconds)
        return fresh

    return await single_flight(key, read_and_keep)
