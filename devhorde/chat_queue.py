"""The chat queue: the requests in submit order, their lifecycle states and the queue estimates.

Requests are served first in, first out. A waiting request's ``queue_position`` is 1 plus the earlier waiting
requests that share a model and an eligible worker with it; its ``wait_time`` is their ``max_length`` tokens plus its
own over the eligible workers' throughput. The estimates of every waiting request are computed in one pass and kept
until the queue or the routing changes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import ChatRequirements
from strenum import StrEnum

from devhorde.scenario import Scenario, WorkerSpec

Eligibility = Callable[["ChatRequest"], list[WorkerSpec]]
"""The eligible workers of a request now (:meth:`devhorde.routing.Routing.eligible_workers`)."""


class RequestState(StrEnum):
    """A request's lifecycle state, as ``GET /_devhorde/requests`` reports it."""

    WAITING = "waiting"
    PROCESSING = "processing"
    DONE = "done"
    FAULTED = "faulted"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_STATES: Final = frozenset(
    {RequestState.DONE, RequestState.FAULTED, RequestState.CANCELLED, RequestState.EXPIRED},
)


@dataclass(slots=True)
class Attempt:
    """One generation attempt: a pop of the request by one worker, with its own ``gen`` id."""

    gen: str
    worker_name: str
    worker_id: str
    model: str
    streams: bool
    posts: int = 0
    tokens: int = 0
    ended: str | None = None


@dataclass(slots=True)
class ChatRequest:
    """One submitted chat request and everything the status reports about it."""

    id: str
    seq: int
    payload: dict[str, Any]
    apikey: str
    client_agent: str | None
    submitted_at: float
    expires_at: float
    expires_epoch_ms: int
    models: list[str]
    body: dict[str, Any]
    requirements: ChatRequirements
    max_length: int
    requested_max_length: int
    adjustments: list[dict[str, Any]]
    max_context_length: int | None
    stream: bool
    kudos_estimate: float
    state: RequestState = RequestState.WAITING
    restarted: int = 0
    generations: list[dict[str, Any]] = field(default_factory=list)
    fault_reason: str | None = None
    stream_progress: bool = False
    cancelled: bool = False
    cancel_requests: int = 0
    done_reads: int = 0
    """Status reads answered with ``done: true``: a reader that got one knew the request had ended."""
    status_reads: int = 0
    """Status reads answered for this request (the benchmarks' reads per second to the Horde)."""
    done_epoch: float | None = None
    """Unix seconds when the request became done (the benchmarks' delivery delay starts there)."""
    attempts: list[Attempt] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    restart_counts: Counter[str] = field(default_factory=Counter)
    kudos_consumed: float = 0.0
    eligible_cache: tuple[int, tuple[str, ...]] | None = None

    @property
    def attempt(self) -> Attempt | None:
        """The current or last attempt."""
        return self.attempts[-1] if self.attempts else None


class ChatQueue:
    """Every chat request of one development Horde, in memory."""

    def __init__(self) -> None:
        self.requests: dict[str, ChatRequest] = {}
        self.next_seq = 0
        """The ``seq`` of the next request: its place in the FIFO order."""
        self.version = 0
        """Bumped whenever a request is added, changes state or is forgotten: the queue snapshot's key."""
        self._snapshot: tuple[tuple[int, int], dict[str, tuple[int, int]]] | None = None

    def add(self, request: ChatRequest) -> None:
        """Queue a new request (its ``seq`` is :attr:`next_seq`)."""
        self.requests[request.id] = request
        self.version += 1
        self.next_seq += 1

    def clear(self) -> None:
        """Forget every request (their jobs are the caller's to stop)."""
        self.requests.clear()
        self.version += 1

    def set_state(self, request: ChatRequest, state: RequestState) -> None:
        """Move a request to ``state`` (``done`` records :attr:`ChatRequest.done_epoch`)."""
        request.state = state
        if state is RequestState.DONE and request.done_epoch is None:
            request.done_epoch = time.time()
        self.version += 1

    def waiting(self) -> list[ChatRequest]:
        """The waiting requests, oldest first."""
        return sorted(
            (request for request in self.requests.values() if request.state is RequestState.WAITING),
            key=lambda request: request.seq,
        )

    def busy(self) -> Counter[str]:
        """Running chat jobs per worker name."""
        return Counter(
            request.attempt.worker_name
            for request in self.requests.values()
            if request.state is RequestState.PROCESSING and request.attempt is not None
        )

    def queue_stats(
        self, request: ChatRequest, scenario: Scenario, now: float, eligible: Eligibility, routing_version: int
    ) -> tuple[int, int]:
        """Return ``(queue_position, wait_time)``.

        Waiting: the position is 1 plus the waiting requests submitted earlier that share a model and that one of
        this request's eligible workers could serve; the wait is their ``max_length`` tokens plus this request's,
        divided by the eligible workers' throughput (``tokens_per_second * threads``), rounded up, as the reference
        describes the native estimate. Both read 0 during ``queue_position_delay_seconds`` after submit.
        Processing: position 0 and the remaining tokens at the worker's speed. Done: 0 and 0.
        """
        if request.state is RequestState.PROCESSING and request.attempt is not None:
            worker = scenario.worker(request.attempt.worker_name)
            speed = worker.tokens_per_second if worker is not None else 1.0
            return 0, math.ceil(max(0, request.max_length - request.attempt.tokens) / speed)
        if request.state is not RequestState.WAITING:
            return 0, 0
        if now - request.submitted_at < scenario.queue_position_delay_seconds:
            return 0, 0
        return self._waiting_queue_stats(eligible, routing_version)[request.id]

    def _waiting_queue_stats(self, eligible: Eligibility, routing_version: int) -> dict[str, tuple[int, int]]:
        """``(queue_position, wait_time)`` of every waiting request (as :meth:`queue_stats` defines them), computed
        in one pass and kept until a request is added, changes state or is forgotten, or the routing changes.

        A request's queue is the waiting requests submitted earlier that share a model and an eligible worker with
        it. Requests are grouped by (models, eligible workers); running totals per group make the pass linear in
        the waiting requests (times the groups), so thousands of waiting requests cost a status read little.
        """
        key = (self.version, routing_version)
        if self._snapshot is not None and self._snapshot[0] == key:
            return self._snapshot[1]
        waiting = self.waiting()
        totals: dict[tuple[frozenset[str], frozenset[str]], list[int]] = {}
        compatible: dict[tuple[frozenset[str], frozenset[str]], list[list[int]]] = {}
        stats: dict[str, tuple[int, int]] = {}
        for request in waiting:
            workers = eligible(request)
            group = (frozenset(request.models), frozenset(worker.name for worker in workers))
            if group not in totals:
                totals[group] = [0, 0]
                for other, other_totals in totals.items():
                    if group[0] & other[0] and group[1] & other[1]:
                        compatible.setdefault(group, []).append(other_totals)
                        if other != group:
                            compatible.setdefault(other, []).append(totals[group])
            ahead = sum(entry[0] for entry in compatible.get(group, ()))
            work = sum(entry[1] for entry in compatible.get(group, ())) + request.max_length
            throughput = sum(worker.tokens_per_second * worker.threads for worker in workers)
            stats[request.id] = (ahead + 1, math.ceil(work / throughput) if throughput > 0 else 0)
            totals[group][0] += 1
            totals[group][1] += request.max_length
        self._snapshot = (key, stats)
        return stats
