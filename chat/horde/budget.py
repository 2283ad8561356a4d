"""Staying inside the Horde's budgets, and telling it whose budget a call spends (real-horde.md "Rate limits").

The real AI Horde limits each client address and each API key with fixed windows (flask-limiter) and answers a call
beyond them 429 ``{"message": "2 per 1 second"}`` without an ``rc``. Everything one front process sends goes through
one :class:`HordeBudget` (chat.serving.runtime), shared by the native and the text clients:

- **Proxy headers.** With ``HORDE_OAI_PROXY_PASSKEY``, every call carries ``Proxy-Authorization`` and ``Proxied-For``
  for the client being served (chat.horde.client_address), so the Horde counts each end user's own address.
- **Submit pacing.** Submits and dry runs of the text API (``POST /v2/generate/text/async``) wait their turn so that
  no API key sends more than 2 a second (the anonymous key 60) and no address more than 2 a second and 90 a minute:
  the address is the proxied client's with a passkey, else the front's own (one budget for every user). The windows
  carry a margin (chat.horde.pacing.WINDOW_MARGIN_SECONDS) for the network's jitter, and a submit holds its place in
  each log until its answer plus the window (:meth:`HordeBudget.holding`, chat.horde.pacing), since the Horde counts
  it anywhere between send and answer. Twenty requests at once on one key are submitted over about ten seconds
  instead of eighteen of them being refused. A submit that would wait more than :data:`MAX_PACING_WAIT_SECONDS` is
  answered 429 ``rate_limit_exceeded`` with ``Retry-After`` at once instead.
- **Status read cap.** A text status (``GET /v2/generate/text/status/{id}``, 60 a minute per request at the Horde) and
  an image check (``GET /v2/generate/check/{id}``) are read at most once per ``STATUS_READ_SPACING_SECONDS``
  (chat.horde.pacing), whatever the waiter's timer; an image status (``GET`` or ``DELETE /v2/generate/status/{id}``,
  10 a minute) at most ``IMAGE_STATUS_READS`` a minute. The image submit (``POST /v2/generate/async``) is paced as
  the text submit.
- **429 retry.** A 429 without ``rc`` (the limiter's) is retried after its ``Retry-After`` (1 s when absent), at
  most :data:`MAX_RATE_LIMIT_RETRIES` times and :data:`MAX_RATE_LIMIT_RETRY_SECONDS` in all; then the client sees it
  (429 ``rate_limit_exceeded``, chat.horde.refusals).
- **The shared address budget.** Without a passkey every user's submits spend the front's one address budget: 2 a
  second and 90 a minute for all of them (:data:`SHARED_ADDRESS_BUDGET`, said in the start log and in ``/readyz``
  once the Horde shows it limits, :attr:`HordeBudget.horde_limits`); each submit refused 429 meanwhile, by the
  front's pacing or by the Horde's limiter, counts in ``horde.oai.address_budget.refusals``.
- **Shared reads.** :func:`shared_read` keeps a read's result in Django's ``default`` cache (django-redis with
  ``HORDE_OAI_REDIS_URL``, shared by every worker process; local memory without), so reads every process would make
  (the readiness heartbeat, the model list, the performance totals, a key's kudos, the image model cards) are made
  once per interval for all of them; the requests of one process that find the cache empty together share one read
  (:func:`single_flight`), so a burst of requests makes one call, not one each. The worker list keeps its own lock
  (chat.horde.worker_limits.WorkerDirectory).

With ``HORDE_OAI_REDIS_URL`` the pacing and the read cap are shared by every process of the front
(chat.horde.pacing.RedisPacer); without it, or while Redis does not answer, each process paces on its own, so several
processes together may send up to that many times the rate.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, Final, cast

import httpx
import orjson
from asgiref.sync import ThreadSensitiveContext
from django.core.cache import cache
from horde_sdk.ai_horde_api.endpoints import AI_HORDE_API_ENDPOINT_SUBPATH
from horde_sdk.generic_api.consts import ANON_API_KEY
from loguru import logger

from chat.horde import client_address
from chat.horde.client_address import CLIENT_ADDRESS
from chat.horde.pacing import (
    HOLD_POLL_SECONDS,
    IMAGE_STATUS_READS,
    IN_FLIGHT_HOLD_SECONDS,
    PER_ADDRESS,
    PER_ANONYMOUS_KEY,
    PER_KEY,
    STATUS_READS,
    Clock,
    Pacer,
    RedisPacer,
    Rule,
    Sleep,
    TurnTaker,
)
from chat.horde.real_horde_answers import LIMITER_WINDOW_SECONDS
from chat.metrics import front_metrics
from chat.settings import FrontSettings

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

MAX_RATE_LIMIT_RETRIES: Final[int] = 2
"""How many times a 429 without ``rc`` is retried before the client sees it."""

MAX_RATE_LIMIT_RETRY_SECONDS: Final[float] = 5.0
"""The most seconds one call spends waiting out 429s; a ``Retry-After`` beyond what is left is not waited."""

DEFAULT_RETRY_AFTER_SECONDS: Final[float] = 1.0
"""The wait before retrying a 429 that has no readable ``Retry-After``."""

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
        return client_address.proxy_headers(self._passkey)

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


async def outliving_request[T](awaitable: Awaitable[T]) -> T:
    """``awaitable`` awaited in a ``ThreadSensitiveContext`` of its own (asgiref), for a task that may outlive the
    request that made it (a shared read, a shielded submit): its thread-sensitive calls (Django's cache) run on an
    executor of its own, whose one thread starts at its first call and ends after it, not on the request's, which
    raises ``RuntimeError`` once the request has ended (chat.asgi.RequestThreads). Returns what ``awaitable``
    returns; raises what it raises.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="horde-oai-outliving")
    try:
        async with ThreadSensitiveContext(executor=executor):
            return await awaitable
    finally:
        executor.shutdown(wait=False)


async def single_flight[T](key: str, read: Callable[[], Awaitable[T]]) -> T:
    """``read()``'s result, shared by every caller of this event loop that asks for ``key`` while a read of it is
    under way: one call to the Horde for a burst of requests that find a cache empty together. A caller that leaves
    does not cancel the read the others wait for (shielded). Raises what ``read`` raises, to every waiting caller.
    """
    loop = asyncio.get_running_loop()
    task = _reads_under_way.get((loop, key))
    if task is None:
        task = loop.create_task(outliving_request(read()))
        _reads_under_way[(loop, key)] = task
        task.add_done_callback(lambda _: _reads_under_way.pop((loop, key), None))
    return cast("T", await asyncio.shield(task))


async def shared_read[T](key: str, seconds: float, read: Callable[[], Awaitable[T]]) -> T:
    """``read()``'s result, kept ``seconds`` in Django's ``default`` cache under ``key`` and reused by every process
    sharing that cache; ``read`` must not return None (the cache's "missing"). Callers that find the cache empty
    together share one read (:func:`single_flight`), which looks in the cache once more before it calls ``read``: a
    caller whose miss came just before another's read stored its result, and who joins after that read has ended,
    takes the stored result instead of reading again. A cache that cannot be reached is skipped (django-redis
    ``IGNORE_EXCEPTIONS``); 0 or fewer seconds reads every time. Raises what ``read`` raises (a failure is not kept).
    """
    if seconds <= 0:
        return await read()
    cached = await cache.aget(key)
    if cached is not None:
        return cast("T", cached)  # stored by this function under this key

    async def read_and_keep() -> T:
        stored = await cache.aget(key)
        if stored is not None:
            return cast("T", stored)
        fresh = await read()
        await cache.aset(key, fresh, timeout=seconds)
        return fresh

    return await single_flight(key, read_and_keep)
