"""The Horde's upfront kudos rule for text requests, as the front can foresee it.

The real Horde (``horde/classes/kobold/waiting_prompt.py`` ``require_upfront_kudos``, ``horde/apis/v2/kobold.py``)
serves a text request over a ceiling only to a user who already holds the request's kudos. The ceiling
(:func:`free_ceiling`) is ``512 + 5 x text_thread_count - round(0.9 x queued_text_requests)``, clamped to 256..512
(unclamped for ``slow_workers: false``, which always needs the kudos), both counts from
``GET /v2/status/performance``. The kudos needed are ``round(max_length x multiplier / 21, 2)``, the multiplier being
the model's parameters in billions from the Horde's model reference, 1 for a model it does not know. A user short of
them gets 403 ``KudosUpfront``, or, with ``allow_downgrade: true``, the request with ``max_length`` lowered to the
ceiling, silently.

The front reports that lowering (chat.serving.text_limits): for a request over the ceiling it reads the user's ``kudos``
(``GET /v2/find_user`` with the client's key) and, when they are below :func:`least_required_kudos` (the kudos needed
at the smallest multiplier the Horde applies to a model it does not know, 1), lowers ``max_length`` to the ceiling
before submit. The performance read is shared for :data:`PERFORMANCE_CACHE_SECONDS`
and each key's kudos for :data:`USER_KUDOS_CACHE_SECONDS` in Django's ``default`` cache, under a hash of the key
(never the key itself); the requests of a process that find either missing together share one read
(chat.horde.budget.shared_read). When either read fails, nothing is lowered.

That foresight can be wrong: the Horde counts its queue from totals it refreshes every 60 s
(``horde/database/threads.py`` ``store_totals``), so a read cached here may be older than the totals it will apply,
and a user who holds the kudos at a multiplier of 1 may still be short for a larger model. So a request that could
be lowered (:func:`asks_free_ceiling`: over :data:`FREE_CEILING_MIN` with slow workers allowed) is sent with
``allow_downgrade: false``: the Horde then names its ceiling in the 403 ("for requests over N tokens",
:func:`refused_ceiling`) instead of lowering silently, and the front submits again at N, reporting it
(chat.serving.text_limits.resubmit_after_downgrade_refusal). The Horde's other refusals that ``allow_downgrade``
turns into service (:data:`DOWNGRADE_REFUSALS`: a shared key short of kudos, or empty) are submitted again as they
were, with ``allow_downgrade: true``; the Horde may then lower those unreported (it checks the shared key before the
ceiling, so their 403 names none), as it does under ``slow_workers: false``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final, Protocol

from django.core.cache import cache
from horde_sdk.ai_horde_api.consts import RC

from chat.horde.budget import shared_read
from chat.horde.native import ANONYMOUS_API_KEY, HordeRefusal, HordeUnreachable

FREE_CEILING_BASE: Final[int] = 512
"""The real Horde's ceiling before its thread bonus and queue malus (``require_upfront_kudos``)."""

FREE_CEILING_PER_THREAD: Final[int] = 5
"""Tokens the ceiling rises per online text worker thread."""

FREE_CEILING_QUEUE_FACTOR: Final[float] = 0.9
"""Tokens the ceiling falls per queued text request (rounded as Python's ``round``, as the Horde does)."""

FREE_CEILING_MIN: Final[int] = 256
FREE_CEILING_MAX: Final[int] = 512
"""The clamp of the ceiling for a request that allows slow workers (the default)."""

KUDOS_PER_TOKEN_DIVISOR: Final[float] = 21.0
"""The kudos needed are ``max_length x multiplier / 21`` (``horde/apis/v2/kobold.py``)."""

PERFORMANCE_CACHE_KEY: Final[str] = "horde-performance:{horde_url}"
PERFORMANCE_CACHE_SECONDS: Final[float] = 30.0
"""How long one ``GET /v2/status/performance`` is used, across processes (the Horde caches its totals too)."""

USER_KUDOS_CACHE_KEY: Final[str] = "horde-user-kudos:{horde_url}:{key_hash}"
USER_KUDOS_CACHE_SECONDS: Final[float] = 10.0
"""How long one key's ``kudos`` are used: briefly, as kudos change with every request and gift."""

DOWNGRADE_REFUSALS: Final[frozenset[str]] = frozenset(
    {RC.KudosUpfront.value, RC.SharedKeyInsufficientKudos.value, RC.SharedKeyEmpty.value}
)
"""The 403 ``rc`` values the Horde answers with ``allow_downgrade: false`` where ``true`` would have served the request
(lowered to the ceiling, or at the anonymous priority: ``horde/apis/v2/kobold.py`` ``initiate_waiting_prompt``,
``horde/apis/v2/base.py`` ``validate``)."""

REFUSED_CEILING_PATTERN: Final[re.Pattern[str]] = re.compile(r"\bfor requests over (\d+) tokens\b")
"""Where a ``KudosUpfront`` message names the ceiling: "Due to heavy demand, for requests over N tokens, the client
needs to already have the required kudos. ..." (``horde/apis/v2/kobold.py``)."""

_UNKNOWN: Final[str] = "unknown"
"""The cached value of a read that failed."""


class KudosSource(Protocol):
    """The calls this module makes (chat.horde.native.HordeClient)."""

    @property
    def base_url(self) -> str:
        """The Horde's API root, which names the cache keys."""
        ...

    async def performance(self) -> dict[str, Any]:
        """``GET /v2/status/performance``."""
        ...

    async def find_user(self, apikey: str | None) -> dict[str, Any]:
        """``GET /v2/find_user`` with ``apikey``."""
        ...


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def free_ceiling(performance: Mapping[str, Any], *, slow_workers: bool = True) -> int | None:
    """The largest ``max_length`` served without upfront kudos, from a ``GET /v2/status/performance`` answer; None
    when it lacks ``text_thread_count`` or ``queued_text_requests``.

    ``512 + 5 x threads - round(0.9 x queued)``, clamped to 256..512 unless ``slow_workers`` is false.
    """
    threads = _count(performance.get("text_thread_count"))
    queued = _count(performance.get("queued_text_requests"))
    if threads is None or queued is None:
        return None
    tokens = FREE_CEILING_BASE + FREE_CEILING_PER_THREAD * threads - round(queued * FREE_CEILING_QUEUE_FACTOR)
    if not slow_workers:
        return tokens
    return min(max(tokens, FREE_CEILING_MIN), FREE_CEILING_MAX)


def asks_free_ceiling(max_length: int, *, slow_workers: bool = True) -> bool:
    """Whether a request of ``max_length`` tokens is sent with ``allow_downgrade: false``, so that a Horde whose ceiling
    is below it says so (403 ``KudosUpfront``, :func:`refused_ceiling`) rather than lowering it unreported: over
    :data:`FREE_CEILING_MIN` (the lowest ceiling) with slow workers allowed. With ``slow_workers: false`` the ceiling
    is unclamped and every request needs the kudos, so ``allow_downgrade: true`` is sent as before.
    """
    return slow_workers and max_length > FREE_CEILING_MIN


def refused_ceiling(refusal: HordeRefusal) -> int | None:
    """The ceiling a 403 ``KudosUpfront`` names ("for requests over N tokens"), or None for another refusal or a
    message without it.
    """
    if refusal.status != HTTPStatus.FORBIDDEN or refusal.rc != RC.KudosUpfront.value:
        return None
    found = REFUSED_CEILING_PATTERN.search(refusal.message)
    return int(found.group(1)) if found is not None else None


async def forget_ceiling(source: KudosSource) -> None:
    """Drop the shared performance read (the Horde refused at a ceiling it did not foresee), so the next request reads
    the Horde's totals again.
    """
    await cache.adelete(PERFORMANCE_CACHE_KEY.format(horde_url=source.base_url))


def least_required_kudos(max_length: int) -> float:
    """The kudos a request of ``max_length`` tokens needs upfront at a multiplier of 1: ``round(max_length / 21, 2)``
    (513 tokens: 24.43).
    """
    return round(max_length / KUDOS_PER_TOKEN_DIVISOR, 2)


def key_hash(apikey: str | None) -> str:
    """The SHA-256 of the key sent (the anonymous key when none), the part of a cache key that names the user."""
    return hashlib.sha256((apikey or ANONYMOUS_API_KEY).encode()).hexdigest()


async def cached_ceiling(source: KudosSource, *, slow_workers: bool = True) -> int | None:
    """:func:`free_ceiling` of a performance read shared for :data:`PERFORMANCE_CACHE_SECONDS`
    (chat.horde.budget.shared_read); None when it cannot be read (the failure is remembered as long).
    """

    async def read() -> object:
        try:
            fresh: object = await source.performance()
        except (HordeRefusal, HordeUnreachable):
            fresh = _UNKNOWN
        return fresh

    key = PERFORMANCE_CACHE_KEY.format(horde_url=source.base_url)
    performance = await shared_read(key, PERFORMANCE_CACHE_SECONDS, read)
    if not isinstance(performance, dict):
        return None
    return free_ceiling(performance, slow_workers=slow_workers)


async def cached_user_kudos(source: KudosSource, apikey: str | None) -> float | None:
    """The ``kudos`` of the key's user, shared for :data:`USER_KUDOS_CACHE_SECONDS` (chat.horde.budget.shared_read);
    None when they cannot be read (an unknown key, an unreachable Horde; remembered as long).
    """

    async def read() -> float | str:
        try:
            user = await source.find_user(apikey)
        except (HordeRefusal, HordeUnreachable):
            user = {}
        value = user.get("kudos")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else _UNKNOWN

    key = USER_KUDOS_CACHE_KEY.format(horde_url=source.base_url, key_hash=key_hash(apikey))
    kudos = await shared_read(key, USER_KUDOS_CACHE_SECONDS, read)
    return kudos if isinstance(kudos, float) else None


async def upfront_ceiling(
    source: KudosSource, *, max_length: int, apikey: str | None, slow_workers: bool = True
) -> int | None:
    """The ceiling to lower ``max_length`` to before submit, or None to send it as it is: the request is over
    :func:`cached_ceiling` and the user's kudos (:func:`cached_user_kudos`) are below :func:`least_required_kudos`.
    The user's kudos are read only for a request over the ceiling.
    """
    ceiling = await cached_ceiling(source, slow_workers=slow_workers)
    if ceiling is None or max_length <= ceiling:
        return None
    kudos = await cached_user_kudos(source, apikey)
    if kudos is None or kudos >= least_required_kudos(max_length):
        return None
    return ceiling
