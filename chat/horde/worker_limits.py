"""What the Horde's text workers publish (``GET /v2/workers?type=text``): each model's limits, and which workers still
run.

Limits (:meth:`WorkerSnapshot.for_models`): of the online workers (``online`` true, not in ``maintenance_mode``)
serving any of the requested models, the count, the threads, and the largest ``max_length`` and
``max_context_length`` any of them declares. The text path lowers a completion limit above that ``max_length`` to it
before submit and reports it as the native Horde does (chat.serving.text_limits), and the text model cards show both
limits (models_list.cards).

A stopped worker: the Horde counts a worker online until 300 s after its last check-in, so a model whose last worker
stopped still reads as possible for five minutes. A worker's ``uptime`` grows at each check-in, which the Horde records
at most every 30 s while the worker pops, and the Horde refreshes the list it serves every 30 s: an ``uptime`` that
has not changed for over :data:`STOPPED_AFTER_SECONDS` between the front's reads (:func:`track_uptimes`) means the
worker stopped. A worker the front sees for the first time counts as live, and a list of three or more workers none
of which is live is taken as a stale list rather than every worker stopping at once. When the requested models have
online workers but none live, the text status reads as impossible with zero eligible worker threads
(:func:`apply_liveness`), so the waiter's fail-fast grace and ``no_eligible_worker`` apply (chat.waiting.waiter)
instead of a wait into the timeout. A one-thread worker on a job longer than about 120 s does not pop meanwhile, so
reads as stopped until its next pop; a request waiting for it alone then meets the grace.

Reads are shared: the list, reduced to what the front uses with each worker's liveness, is kept in Django's ``default``
cache for :data:`WORKERS_CACHE_SECONDS` (django-redis with Redis, shared by every process; local memory without), the
uptimes seen in it for :data:`UPTIMES_KEEP_SECONDS`; each process keeps the last read in memory until it is that old
(:class:`WorkerDirectory`). A list the Horde does not serve (a development Horde without ``/v2/workers``, an
unreachable Horde) is remembered as unknown for as long, and nothing is bounded or marked stopped.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from django.core.cache import cache

from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus

WORKERS_CACHE_KEY: Final[str] = "text-workers:{horde_url}"
"""The key of the reduced worker list in Django's ``default`` cache, per ``HORDE_URL``."""

UPTIMES_CACHE_KEY: Final[str] = "text-worker-uptimes:{horde_url}"
"""The key of each worker's last seen ``uptime`` and when it last changed (``{id: [uptime, changed_at]}``)."""

WORKERS_CACHE_SECONDS: Final[float] = 30.0
"""How long one read of the worker list is used (the Horde itself refreshes the list it serves every 30 s)."""

UPTIMES_KEEP_SECONDS: Final[float] = 900.0
"""How long the uptimes seen are kept without a new read (well past the Horde's 300 s online window)."""

STOPPED_AFTER_SECONDS: Final[float] = 120.0
"""A worker whose ``uptime`` has not changed for longer than this between reads has stopped: a running worker's
check-in is recorded at most every 30 s while it pops, the list the Horde serves is up to 30 s old and the front's
copy up to 30 s more, so a live worker's uptime can look unchanged for about 90 s (70 s flagged live workers of the
real-Horde lane as stopped)."""

FROZEN_LIST_WORKERS: Final[int] = 3
"""A list of at least this many online workers none of which is live is taken as a list the Horde stopped refreshing
(its worker cache thread halted, which freezes every ``uptime``), not as every worker stopping at once: its workers
are all kept live, so a stale list never refuses requests."""

Clock = Callable[[], float]


class WorkersSource(Protocol):
    """The one call the directory makes (chat.horde.native.HordeClient.text_workers)."""

    @property
    def base_url(self) -> str:
        """The Horde's API root, which names the cache keys."""
        ...

    async def text_workers(self) -> list[dict[str, Any]]:
        """``GET /v2/workers?type=text``; raises ``HordeRefusal`` or ``HordeUnreachable``."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerState:
    """One online worker as the front uses it."""

    id: str
    models: frozenset[str]
    threads: int
    max_length: int | None
    max_context_length: int | None
    live: bool
    """Whether its ``uptime`` changed within :data:`STOPPED_AFTER_SECONDS` (or it was seen for the first time)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelWorkers:
    """The online workers serving any of some models (:meth:`WorkerSnapshot.for_models`)."""

    workers: int
    threads: int
    live_workers: int
    live_threads: int
    max_length: int | None
    """The largest ``max_length`` an online worker declares; None when none does."""
    max_context_length: int | None
    """The largest ``max_context_length`` an online worker declares; None when none does."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSnapshot:
    """One read of the worker list: ``read_at`` (``time.time()`` seconds) and each online worker."""

    read_at: float
    workers: tuple[WorkerState, ...]

    def for_models(self, models: Iterable[str]) -> ModelWorkers:
        """The online workers serving any of ``models``, each counted once."""
        wanted = set(models)
        serving = [worker for worker in self.workers if worker.models & wanted]
        live = [worker for worker in serving if worker.live]
        lengths = [worker.max_length for worker in serving if worker.max_length is not None]
        contexts = [worker.max_context_length for worker in serving if worker.max_context_length is not None]
        return ModelWorkers(
            workers=len(serving),
            threads=sum(worker.threads for worker in serving),
            live_workers=len(live),
            live_threads=sum(worker.threads for worker in live),
            max_length=max(lengths) if lengths else None,
            max_context_length=max(contexts) if contexts else None,
        )

    def to_cache(self) -> dict[str, Any]:
        """Plain JSON-able values for the shared cache (read back by :meth:`from_cache`)."""
        return {
            "read_at": self.read_at,
            "workers": [
                {
                    "id": worker.id,
                    "models": sorted(worker.models),
                    "threads": worker.threads,
                    "max_length": worker.max_length,
                    "max_context_length": worker.max_context_length,
                    "live": worker.live,
                }
                for worker in self.workers
            ],
        }

    @classmethod
    def from_cache(cls, value: Mapping[str, Any]) -> WorkerSnapshot:
        """The snapshot :meth:`to_cache` stored."""
        return cls(
            read_at=float(value["read_at"]),
            workers=tuple(
                WorkerState(
                    id=str(item["id"]),
                    models=frozenset(item["models"]),
                    threads=int(item["threads"]),
                    max_length=item["max_length"],
                    max_context_length=item["max_context_length"],
                    live=bool(item["live"]),
                )
                for item in value["workers"]
            ),
        )


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def track_uptimes(
    entries: Iterable[Mapping[str, Any]], history: Mapping[str, Any], read_at: float
) -> tuple[tuple[WorkerState, ...], dict[str, list[float]]]:
    """The online workers of one list read at ``read_at``, each live or stopped, and the uptimes to keep.

    ``history`` is the previous result's second value (``{id: [uptime, changed_at]}``). A worker whose ``uptime``
    differs from the one kept, is new, or reports none, changed at ``read_at``; it is live while ``read_at`` is within
    :data:`STOPPED_AFTER_SECONDS` of its last change. A worker offline or in maintenance mode is left out. When at
    least :data:`FROZEN_LIST_WORKERS` workers are listed and none is live, the list is stale and every one is live.
    """
    workers: list[WorkerState] = []
    kept: dict[str, list[float]] = {}
    for entry in entries:
        worker_id = entry.get("id")
        if not isinstance(worker_id, str) or entry.get("online") is not True or entry.get("maintenance_mode") is True:
            continue
        uptime = _number(entry.get("uptime"))
        previous = history.get(worker_id)
        changed_at = read_at
        if (
            uptime is not None
            and isinstance(previous, list | tuple)
            and len(previous) == 2
            and _number(previous[0]) == uptime
            and _number(previous[1]) is not None
        ):
            changed_at = float(previous[1])
        if uptime is not None:
            kept[worker_id] = [uptime, changed_at]
        models = frozenset(model for model in entry.get("models") or [] if isinstance(model, str))
        workers.append(
            WorkerState(
                id=worker_id,
                models=models,
                threads=max(_integer(entry.get("threads")) or 1, 1),
                max_length=_integer(entry.get("max_length")),
                max_context_length=_integer(entry.get("max_context_length")),
                live=read_at - changed_at <= STOPPED_AFTER_SECONDS,
            )
        )
    if len(workers) >= FROZEN_LIST_WORKERS and not any(worker.live for worker in workers):
        workers = [replace(worker, live=True) for worker in workers]
    return tuple(workers), kept


class WorkerDirectory:
    """The worker list of one Horde, read at most once per :data:`WORKERS_CACHE_SECONDS` across processes.

    Args:
        source: The Horde client (``base_url``, ``text_workers``).
        clock: ``time.time``-like seconds (shared across processes, so wall time), injectable for tests.
        cache_seconds: How long a read is used.
    """

    def __init__(
        self, source: WorkersSource, *, clock: Clock = time.time, cache_seconds: float = WORKERS_CACHE_SECONDS
    ) -> None:
        self.source = source
        self.clock = clock
        self.cache_seconds = cache_seconds
        self._snapshot: WorkerSnapshot | None = None
        self._good_until = -math.inf
        self._lock = asyncio.Lock()

    @property
    def _key(self) -> str:
        return WORKERS_CACHE_KEY.format(horde_url=self.source.base_url)

    async def snapshot(self) -> WorkerSnapshot | None:
        """The latest read, or None when the Horde does not serve the list (remembered as long as a read)."""
        if self.clock() < self._good_until:
            return self._snapshot
        async with self._lock:
            if self.clock() < self._good_until:
                return self._snapshot
            self._snapshot, read_at = await self._read()
            self._good_until = read_at + self.cache_seconds
        return self._snapshot

    async def _read(self) -> tuple[WorkerSnapshot | None, float]:
        now = self.clock()
        cached = await cache.aget(self._key)
        read_at = cached.get("read_at") if isinstance(cached, dict) else None
        if isinstance(cached, dict) and isinstance(read_at, float | int) and 0 <= now - read_at < self.cache_seconds:
            return (None if cached.get("failed") else WorkerSnapshot.from_cache(cached)), float(read_at)
        try:
            entries = await self.source.text_workers()
        except (HordeRefusal, HordeUnreachable):
            await cache.aset(self._key, {"read_at": now, "failed": True}, timeout=self.cache_seconds)
            return None, now
        uptimes_key = UPTIMES_CACHE_KEY.format(horde_url=self.source.base_url)
        history = await cache.aget(uptimes_key)
        workers, kept = track_uptimes(entries, history if isinstance(history, dict) else {}, now)
        snapshot = WorkerSnapshot(read_at=now, workers=workers)
        await cache.aset(self._key, snapshot.to_cache(), timeout=self.cache_seconds)
        await cache.aset(uptimes_key, kept, timeout=UPTIMES_KEEP_SECONDS)
        return snapshot, now


_directories: weakref.WeakKeyDictionary[WorkersSource, WorkerDirectory] = weakref.WeakKeyDictionary()


def directory_for(source: WorkersSource) -> WorkerDirectory:
    """The process's :class:`WorkerDirectory` of one Horde client, made on first use."""
    directory = _directories.get(source)
    if directory is None:
        directory = _directories[source] = WorkerDirectory(source)
    return directory


def apply_liveness(status: NativeStatus, workers: ModelWorkers) -> None:
    """Give a text status what the worker list says of its models (see the module docstring): the live workers and
    their threads as ``eligible_workers`` and ``eligible_worker_threads`` (where the Horde sent neither), and
    ``is_possible`` false when the models have online workers and none is live. A list without an online worker for
    the models says nothing, and the status is left as the Horde sent it.
    """
    if workers.workers == 0:
        return
    if status.eligible_worker_threads is None:
        status.eligible_worker_threads = workers.live_threads
    if status.eligible_workers is None:
        status.eligible_workers = workers.live_workers
    if workers.live_workers == 0:
        status.is_possible = False
