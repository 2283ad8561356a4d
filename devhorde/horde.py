"""The simulated Horde: requests, routing, the FIFO queue, simulated worker jobs, progress and signals.

Contract: ``native-horde-chat.md``. :class:`DevHorde` holds every request in memory and runs each popped job as one
asyncio task. State changes are synchronous (no ``await`` between reading and writing a request), so the HTTP
handlers, the jobs and the dispatcher never see a half-updated request. Redis writes go through
:class:`devhorde.redisbus.RedisBus`; a job awaits its own stream writes, so by the time a status reads ``done`` the
stream already holds the attempt's ``ended`` marker.

Routing follows the SDK: a request's needs come from ``chat_request_requirements`` over the OpenAI-shaped body
rebuilt from the native payload, and a worker serves it when ``chat_service_gap`` finds no gap against its
declaration and the request's ``max_length`` and ``max_context_length`` fit the worker's declared limits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import uuid
from collections import Counter, deque
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import (
    ChatConformance,
    ChatFeature,
    ChatGuarantee,
    ChatLimitField,
    ChatRequirements,
    ChatResponseFormatType,
    ChatServiceGap,
    ChatToolChoiceMode,
    chat_request_requirements,
    chat_service_gap,
)
from horde_sdk.worker.chat_declaration import (
    ChatFaultReason,
    ChatUsage,
    build_chat_fault_submit,
    build_chat_reply_submit,
)
from strenum import StrEnum

from devhorde.answers import (
    CONTROL_INVALID_KEY_MESSAGE,
    MAINTENANCE_MESSAGE,
    NOT_FOUND_MESSAGE,
    HordeReply,
)
from devhorde.answers import (
    refusal as _refusal,
)
from devhorde.limits import ANONYMOUS_API_KEY, DEFAULT_CHAT_MAX_TOKENS
from devhorde.payload import (
    VALIDATION_FAILED_MESSAGE,
    openai_body,
    request_rule_refusal,
    validate_payload,
)
from devhorde.redisbus import RedisBus
from devhorde.replies import (
    ReplyPlan,
    build_tool_calls,
    choose_tools,
    conversation_seed,
    cut_reply,
    json_reply,
    last_user_text,
    prompt_tokens,
    reasoning_text,
    reply_text,
)
from devhorde.scenario import Scenario, WorkerSpec
from devhorde.text_api import TextQueue

logger = logging.getLogger("devhorde")

DISPATCH_TICK_SECONDS: Final[float] = 0.25
"""How often the dispatcher wakes without an event, to expire requests and retry pops."""

STREAM_WRITE_WAIT_SECONDS: Final[float] = 0.5
"""The longest a job waits for one of its own stream writes before going on (a slow Redis never stalls a job)."""

SUBMIT_LOG_LENGTH: Final[int] = 1000
"""How many of the latest submits ``GET /_devhorde/submits`` keeps (older ones are dropped, so load stays bounded)."""
DIVERGED_PREFIX: Final[str] = "Correction: "
"""Prefix of the submitted content of a worker whose ``final_text_diverges``."""


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
    attempts: list[Attempt] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    restart_counts: Counter[str] = field(default_factory=Counter)
    kudos_consumed: float = 0.0
    eligible_cache: tuple[int, tuple[str, ...]] | None = None

    @property
    def attempt(self) -> Attempt | None:
        """The current or last attempt."""
        return self.attempts[-1] if self.attempts else None


def format_number(value: float) -> str:
    """Format a kudos amount as the Horde's messages do: the shortest decimal that reads back as ``value``, never
    rounded and never with an exponent, an integral value without ``.0``: ``215``, ``1.5``, ``0.001``,
    ``1234567.5``.

    The front reads the ``ChatKudosCapExceeded`` message's numbers back with ``KUDOS_CAP_EXCESS_PATTERN``
    (``chat/contract.py``), which takes plain decimal text only (contract: Submit).
    """
    return format(Decimal(repr(float(value))).normalize(), "f")


class DevHorde:
    """The development Horde's state and behaviour, independent of HTTP.

    Args:
        scenario: The workers and knobs to simulate; replaceable at run time with :meth:`replace_scenario`.
        redis_url: Redis for progress streams and signals, or None to run without.
        stream_redis_db: The database of the progress streams.
    """

    def __init__(self, scenario: Scenario, redis_url: str | None = None, stream_redis_db: int = 0) -> None:
        self.scenario = scenario
        self.bus = RedisBus(redis_url, stream_redis_db)
        self.requests: dict[str, ChatRequest] = {}
        self._next_seq = 0
        self._jobs_done: Counter[str] = Counter()
        self._refusal_uses: Counter[int] = Counter()
        self.submits: deque[dict[str, Any]] = deque(maxlen=SUBMIT_LOG_LENGTH)
        """The latest submits received, accepted or refused, oldest first (``GET /_devhorde/submits``)."""
        self._wake: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._routing_version = 0
        self._queue_version = 0
        """Bumped whenever a request is added, changes state or is forgotten: the queue snapshot's key."""
        self._queue_snapshot: tuple[tuple[int, int], dict[str, tuple[int, int]]] | None = None
        self.text = TextQueue(self)
        """The text generation API's requests (devhorde.text_api)."""

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the dispatcher task (idempotent); called by the app's lifespan or lazily by the first request."""
        if self._dispatcher is None or self._dispatcher.done():
            self._wake = asyncio.Event()
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch_loop(), name="devhorde-dispatch")

    async def stop(self) -> None:
        """Cancel the dispatcher and every running job, and close Redis."""
        tasks = [request.task for request in self.requests.values() if request.task is not None]
        tasks += self.text.stop_all()
        if self._dispatcher is not None:
            tasks.append(self._dispatcher)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._dispatcher = None
        await self.bus.close()

    async def _dispatch_loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                self._expire_due()
                self._dispatch()
            except Exception:  # pragma: no cover - keep the Horde alive, the next tick retries
                logger.exception("dispatch failed")
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), DISPATCH_TICK_SECONDS)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    # ----------------------------------------------------------------- routing

    def online_chat_workers(self, models: list[str] | frozenset[str]) -> list[WorkerSpec]:
        """Online chat workers serving any of ``models``, in scenario order."""
        return [w for w in self.scenario.workers if w.online and w.chat and w.model in models]

    @staticmethod
    def _passes_worker_options(worker: WorkerSpec, payload: Mapping[str, Any]) -> bool:
        if payload.get("trusted_workers") and not worker.trusted:
            return False
        if payload.get("slow_workers") is False and worker.slow:
            return False
        listed = payload.get("workers") or []
        if listed:
            named = worker.name in listed or worker.worker_id in listed
            return not named if payload.get("worker_blacklist") else named
        return True

    @staticmethod
    def worker_gap(worker: WorkerSpec, request: ChatRequest) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Return ``(missing_declarations, exceeded_limits)`` of one worker for a request, both sorted.

        ``chat_service_gap`` gives the declarations and trait limits; ``max_length`` and ``max_context_length``
        are compared here with the request's applied ``max_length`` and its ``params.max_context_length``.
        """
        gap = chat_service_gap(request.requirements, worker.declared_values, worker.limits)
        missing = gap.missing_declarations if gap is not None else ()
        exceeded = set(gap.exceeded_limits if gap is not None else ())
        if request.max_length > worker.max_length:
            exceeded.add(ChatLimitField.MAX_LENGTH.value)
        if request.max_context_length is not None and request.max_context_length > worker.max_context_length:
            exceeded.add(ChatLimitField.MAX_CONTEXT_LENGTH.value)
        return tuple(sorted(missing)), tuple(sorted(exceeded))

    def _candidates(self, request: ChatRequest) -> list[WorkerSpec]:
        return [
            worker
            for worker in self.online_chat_workers(request.models)
            if self._passes_worker_options(worker, request.payload)
        ]

    def eligible_workers(self, request: ChatRequest) -> list[WorkerSpec]:
        """Online workers that can serve the request now: model, worker options, declarations and limits.

        Cached per request until the scenario or a worker changes.
        """
        cached = request.eligible_cache
        if cached is None or cached[0] != self._routing_version:
            names = tuple(
                worker.name for worker in self._candidates(request) if self.worker_gap(worker, request) == ((), ())
            )
            cached = request.eligible_cache = (self._routing_version, names)
        return [worker for worker in self.scenario.workers if worker.name in cached[1]]

    def impossible_reason(self, request: ChatRequest) -> dict[str, Any] | None:
        """Return the ``impossible_reason`` of a request no online worker can serve, or None without a known cause.

        Missing declarations are the request's needs outside the union of the candidate workers' declarations (the
        model list's feature union, as ``chat_service_gap`` documents); a limit is exceeded when every candidate
        exceeds it. When the union covers everything but no single worker does, the closest worker's own gap is
        reported. No candidate (no online worker of the models, or the worker options exclude all) is no known
        cause. The shape is ``horde_sdk``'s ``ChatServiceGap``.
        """
        candidates = self._candidates(request)
        if not candidates:
            return None
        gaps = {worker.name: self.worker_gap(worker, request) for worker in candidates}
        union: set[str] = set().union(*(worker.declared_values for worker in candidates))
        missing = tuple(sorted(request.requirements.declarations - union))
        limit_fields = {limit for _, exceeded in gaps.values() for limit in exceeded}
        exceeded = tuple(sorted(f for f in limit_fields if all(f in gap[1] for gap in gaps.values())))
        if not missing and not exceeded:
            closest = min(candidates, key=lambda w: (len(gaps[w.name][0]) + len(gaps[w.name][1]), w.name))
            missing, exceeded = gaps[closest.name]
        if not missing and not exceeded:
            return None
        gap = ChatServiceGap(missing_declarations=missing, exceeded_limits=exceeded)
        return {
            "kind": gap.kind.value,
            "missing_declarations": list(gap.missing_declarations),
            "exceeded_limits": list(gap.exceeded_limits),
        }

    # ----------------------------------------------------------------- submit

    def submit(self, payload: Any, apikey: str | None, client_agent: str | None) -> HordeReply:
        """Answer a submit with :meth:`answer_submit` and record it in :attr:`submits`: ``{"status", "rc", "id",
        "payload"}`` (``rc`` and ``id`` null when the answer has none), so a test can count what reached the Horde,
        refusals included.
        """
        reply = self.answer_submit(payload, apikey, client_agent)
        body = reply.body if isinstance(reply.body, dict) else {}
        self.submits.append({"status": reply.status, "rc": body.get("rc"), "id": body.get("id"), "payload": payload})
        return reply

    def answer_submit(self, payload: Any, apikey: str | None, client_agent: str | None) -> HordeReply:
        """Handle ``POST /v2/generate/chat/async`` (contract: Submit); returns 202 or a refusal of its table.

        Checks, in order: payload validation and the ``apikey`` header (400 with ``errors``), invalid keys (401
        ``InvalidAPIKey``), maintenance (503 ``MaintenanceMode``), the scenario's ``submit_refusals``, unknown
        models (400 ``UnknownModel``), the request rules (400 ``UnsupportedChatParameter`` /
        ``ChatRequestConflict`` with ``param``), no online chat worker for any model (503 ``NoEligibleWorker``),
        the kudos cap (400 ``ChatKudosCapExceeded``), the free output allowance (403 ``KudosUpfront`` or 403
        ``NoEligibleWorker``). An accepted request gets its ``worker_max_length`` adjustment and joins the queue.
        """
        errors = validate_payload(payload)
        if apikey is None:
            errors = {"apikey": "Missing required parameter in the HTTP headers", **errors}
        if errors:
            return HordeReply(400, {"message": VALIDATION_FAILED_MESSAGE, "errors": errors})
        assert apikey is not None
        scenario = self.scenario
        if apikey in scenario.invalid_api_keys:
            return _refusal(401, CONTROL_INVALID_KEY_MESSAGE, "InvalidAPIKey")
        if scenario.maintenance:
            return _refusal(503, MAINTENANCE_MESSAGE, "MaintenanceMode")
        models: list[str] = list(payload["models"])
        scripted = self._scripted_refusal(payload, apikey, models)
        if scripted is not None:
            return scripted
        for index, model in enumerate(models):
            if model not in scenario.text_models:
                return _refusal(400, f"'models[{index}]' is not a known text model.", "UnknownModel")
        rule = request_rule_refusal(payload)
        if rule is not None:
            return HordeReply(400, rule.body())
        serving = self.online_chat_workers(models)
        if not serving:
            named = " or ".join(f"'{model}'" for model in models)
            return _refusal(503, f"No worker is currently serving the model {named}. Retry later.", "NoEligibleWorker")
        request = self._new_request(payload, apikey, client_agent, models, serving)
        if "max_kudos" in payload and request.kudos_estimate > payload["max_kudos"]:
            return _refusal(
                400,
                f"The request's kudos estimate at current pricing is {format_number(request.kudos_estimate)}, above "
                f"its horde.max_kudos of {format_number(payload['max_kudos'])}. The estimate assumes the full "
                "max_tokens is generated.",
                "ChatKudosCapExceeded",
            )
        allowance = scenario.free_output_allowance
        if (
            allowance is not None
            and request.max_length > allowance
            and (apikey == ANONYMOUS_API_KEY or apikey not in scenario.upfront_kudos_api_keys)
        ):
            if not self.eligible_workers(request):
                reason = self.impossible_reason(request)
                extra = {"impossible_reason": reason} if reason is not None else {}
                return _refusal(
                    403,
                    "No online worker can serve this request, and it is above the free output allowance without "
                    "the kudos to hold upfront.",
                    "NoEligibleWorker",
                    **extra,
                )
            return _refusal(
                403,
                f"This request asks for {request.max_length} tokens, above the free output allowance of {allowance}, "
                f"and needs {format_number(request.kudos_estimate)} kudos held upfront.",
                "KudosUpfront",
            )
        self.requests[request.id] = request
        self._queue_version += 1
        self._next_seq += 1
        self._dispatch()
        body: dict[str, Any] = {"id": request.id, "kudos": request.kudos_estimate}
        if scenario.submit_warnings:
            body["warnings"] = [dict(warning) for warning in scenario.submit_warnings]
        return HordeReply(202, body)

    def _scripted_refusal(self, payload: Mapping[str, Any], apikey: str, models: list[str]) -> HordeReply | None:
        for index, rule in enumerate(self.scenario.submit_refusals):
            if rule.apikey is not None and rule.apikey != apikey:
                continue
            if rule.models is not None and not set(rule.models) & set(models):
                continue
            if rule.times is not None and self._refusal_uses[index] >= rule.times:
                continue
            self._refusal_uses[index] += 1
            body: dict[str, Any] = {"message": rule.message}
            if rule.rc is not None:
                body["rc"] = rule.rc
            body.update(rule.extra)
            if rule.impossible_reason == "auto":
                serving = self.online_chat_workers(models)
                if serving and all(model in self.scenario.text_models for model in models):
                    probe = self._new_request(dict(payload), apikey, None, models, serving)
                    reason = None if self.eligible_workers(probe) else self.impossible_reason(probe)
                    if reason is not None:
                        body["impossible_reason"] = reason
            elif isinstance(rule.impossible_reason, dict):
                body["impossible_reason"] = rule.impossible_reason
            headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
            return HordeReply(rule.status, body, headers)
        return None

    def _new_request(
        self,
        payload: dict[str, Any],
        apikey: str,
        client_agent: str | None,
        models: list[str],
        serving: list[WorkerSpec],
    ) -> ChatRequest:
        params = payload.get("params") or {}
        requested = int(params.get("max_length", DEFAULT_CHAT_MAX_TOKENS))
        worker_max = max(worker.max_length for worker in serving)
        applied = min(requested, worker_max)
        adjustments = (
            [{"kind": "worker_max_length", "requested": requested, "applied": applied}] if applied < requested else []
        )
        body = openai_body(payload)
        now = self._now()
        expiry = self.scenario.request_expiry_seconds
        return ChatRequest(
            id=str(uuid.uuid4()),
            seq=self._next_seq,
            payload=payload,
            apikey=apikey,
            client_agent=client_agent,
            submitted_at=now,
            expires_at=now + expiry,
            expires_epoch_ms=int((time.time() + expiry) * 1000),
            models=models,
            body=body,
            requirements=chat_request_requirements(body),
            max_length=applied,
            requested_max_length=requested,
            adjustments=adjustments,
            max_context_length=params.get("max_context_length"),
            stream=bool(payload.get("stream")),
            kudos_estimate=round(applied * self.scenario.kudos_per_token, 2),
        )

    # ----------------------------------------------------------------- status, cancel

    def _lookup(self, request_id: str) -> ChatRequest | None:
        request = self.requests.get(request_id)
        if request is None:
            return None
        if request.state is not RequestState.EXPIRED and self._now() >= request.expires_at:
            self._expire(request)
        return None if request.state is RequestState.EXPIRED else request

    def status(self, request_id: str) -> HordeReply:
        """Handle ``GET /v2/generate/chat/status/{id}`` (contract: Status); 404 ``RequestNotFound`` when unknown or
        expired.
        """
        request = self._lookup(request_id)
        if request is None:
            return _refusal(404, NOT_FOUND_MESSAGE, "RequestNotFound")
        body = self.status_body(request)
        if body.get("done") is True:
            request.done_reads += 1
        return HordeReply(200, body)

    def cancel(self, request_id: str) -> HordeReply:
        """Handle ``DELETE /v2/generate/chat/status/{id}`` (contract: Cancel).

        A waiting or processing request stops its job, ends done with no generation and publishes ``cancelled``;
        a done request's status is returned unchanged.
        """
        request = self._lookup(request_id)
        if request is None:
            return _refusal(404, NOT_FOUND_MESSAGE, "RequestNotFound")
        request.cancel_requests += 1
        if request.state in (RequestState.WAITING, RequestState.PROCESSING):
            was_processing = request.state is RequestState.PROCESSING
            self._stop_task(request)
            if was_processing:
                self._end_attempt(request, "cancelled")
            self._set_state(request, RequestState.CANCELLED)
            request.cancelled = True
            self.bus.signal(request.id, "cancelled")
            self._dispatch()
        return HordeReply(200, self.status_body(request))

    def _queue_stats(self, request: ChatRequest) -> tuple[int, int]:
        """Return ``(queue_position, wait_time)``.

        Waiting: the position is 1 plus the waiting requests submitted earlier that share a model and that one of
        this request's eligible workers could serve; the wait is their ``max_length`` tokens plus this request's,
        divided by the eligible workers' throughput (``tokens_per_second * threads``), rounded up, as the reference
        describes the native estimate. Both read 0 during ``queue_position_delay_seconds`` after submit.
        Processing: position 0 and the remaining tokens at the worker's speed. Done: 0 and 0.
        """
        now = self._now()
        if request.state is RequestState.PROCESSING and request.attempt is not None:
            worker = self.scenario.worker(request.attempt.worker_name)
            speed = worker.tokens_per_second if worker is not None else 1.0
            return 0, math.ceil(max(0, request.max_length - request.attempt.tokens) / speed)
        if request.state is not RequestState.WAITING:
            return 0, 0
        if now - request.submitted_at < self.scenario.queue_position_delay_seconds:
            return 0, 0
        return self._waiting_queue_stats()[request.id]

    def _set_state(self, request: ChatRequest, state: RequestState) -> None:
        request.state = state
        self._queue_version += 1

    def _waiting_queue_stats(self) -> dict[str, tuple[int, int]]:
        """``(queue_position, wait_time)`` of every waiting request (as :meth:`_queue_stats` defines them), computed
        in one pass and kept until a request is added, changes state or is forgotten, or the routing changes.

        A request's queue is the waiting requests submitted earlier that share a model and an eligible worker with
        it. Requests are grouped by (models, eligible workers); running totals per group make the pass linear in
        the waiting requests (times the groups), so thousands of waiting requests cost a status read little.
        """
        key = (self._queue_version, self._routing_version)
        if self._queue_snapshot is not None and self._queue_snapshot[0] == key:
            return self._queue_snapshot[1]
        waiting = sorted(
            (request for request in self.requests.values() if request.state is RequestState.WAITING),
            key=lambda request: request.seq,
        )
        totals: dict[tuple[frozenset[str], frozenset[str]], list[int]] = {}
        compatible: dict[tuple[frozenset[str], frozenset[str]], list[list[int]]] = {}
        stats: dict[str, tuple[int, int]] = {}
        for request in waiting:
            eligible = self.eligible_workers(request)
            group = (frozenset(request.models), frozenset(worker.name for worker in eligible))
            if group not in totals:
                totals[group] = [0, 0]
                for other, other_totals in totals.items():
                    if group[0] & other[0] and group[1] & other[1]:
                        compatible.setdefault(group, []).append(other_totals)
                        if other != group:
                            compatible.setdefault(other, []).append(totals[group])
            ahead = sum(entry[0] for entry in compatible.get(group, ()))
            work = sum(entry[1] for entry in compatible.get(group, ())) + request.max_length
            throughput = sum(worker.tokens_per_second * worker.threads for worker in eligible)
            stats[request.id] = (ahead + 1, math.ceil(work / throughput) if throughput > 0 else 0)
            totals[group][0] += 1
            totals[group][1] += request.max_length
        self._queue_snapshot = (key, stats)
        return stats

    def status_body(self, request: ChatRequest) -> dict[str, Any]:
        """The status JSON of a request (contract: Status), recomputed against the workers online now."""
        state = request.state
        attempt = request.attempt
        worker = self.scenario.worker(attempt.worker_name) if attempt is not None else None
        transient_done = state is RequestState.PROCESSING and worker is not None and worker.done_while_processing
        eligible = self.eligible_workers(request)
        is_possible = state is not RequestState.WAITING or bool(eligible)
        position, wait_time = self._queue_stats(request)
        done = state in TERMINAL_STATES or transient_done
        body: dict[str, Any] = {
            "done": done,
            "faulted": state is RequestState.FAULTED,
            "waiting": int(state is RequestState.WAITING),
            "processing": int(state is RequestState.PROCESSING),
            "finished": len(request.generations),
            "restarted": request.restarted,
            "queue_position": position,
            "wait_time": wait_time,
            "kudos": request.kudos_consumed if state in TERMINAL_STATES else request.kudos_estimate,
            "is_possible": is_possible,
        }
        if not self.scenario.older_horde:
            body["eligible_workers"] = len(eligible)
            body["eligible_worker_threads"] = sum(w.threads for w in eligible)
            body["might_stall"] = self.scenario.might_stall
            if not is_possible:
                reason = self.impossible_reason(request)
                if reason is not None:
                    body["impossible_reason"] = reason
        if request.adjustments:
            body["context_adjustments"] = [dict(adjustment) for adjustment in request.adjustments]
        body["stream_progress"] = request.stream_progress
        body["generations"] = [dict(generation) for generation in request.generations]
        body["fault_reason"] = request.fault_reason
        return body

    # ----------------------------------------------------------------- expiry

    def _expire_due(self) -> None:
        now = self._now()
        for request in list(self.requests.values()):
            if request.state is not RequestState.EXPIRED and now >= request.expires_at:
                self._expire(request)

    def _expire(self, request: ChatRequest) -> None:
        if request.state is RequestState.PROCESSING:
            self._stop_task(request)
            self._end_attempt(request, "expired")
        self._set_state(request, RequestState.EXPIRED)

    # ----------------------------------------------------------------- queue and jobs

    def wake(self) -> None:
        """Ask the dispatcher to run now (after a scenario change)."""
        if self._wake is not None:
            self._wake.set()

    def _busy(self) -> Counter[str]:
        """Running jobs per worker name, chat and text (both share a worker's threads)."""
        return (
            Counter(
                request.attempt.worker_name
                for request in self.requests.values()
                if request.state is RequestState.PROCESSING and request.attempt is not None
            )
            + self.text.busy()
        )

    def _dispatch(self) -> None:
        """Pop waiting requests in FIFO order onto eligible workers with a free thread (most free threads first)."""
        busy = self._busy()
        waiting = sorted(
            (request for request in self.requests.values() if request.state is RequestState.WAITING),
            key=lambda request: request.seq,
        )
        for request in waiting:
            free = [worker for worker in self.eligible_workers(request) if busy[worker.name] < worker.threads]
            if not free:
                continue
            worker = max(free, key=lambda w: w.threads - busy[w.name])
            busy[worker.name] += 1
            self._pop(request, worker)
        self.text.dispatch()

    def _pop(self, request: ChatRequest, worker: WorkerSpec) -> None:
        streams = request.stream and worker.posts_progress and self.bus.enabled
        attempt = Attempt(
            gen=str(uuid.uuid4()),
            worker_name=worker.name,
            worker_id=worker.worker_id,
            model=worker.model,
            streams=streams,
        )
        request.attempts.append(attempt)
        self._set_state(request, RequestState.PROCESSING)
        request.stream_progress = request.stream_progress or streams
        self.bus.signal(request.id, "processing")
        request.task = asyncio.get_running_loop().create_task(
            self._job_main(request, worker, attempt),
            name=f"devhorde-job-{request.id}",
        )

    def _stop_task(self, request: ChatRequest) -> None:
        task, request.task = request.task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _end_attempt(self, request: ChatRequest, reason: str) -> asyncio.Future[None] | None:
        """Mark the current attempt ended and queue its ``ended`` marker (with ``gen`` and optional ``reason``)."""
        attempt = request.attempt
        if attempt is None or attempt.ended is not None:
            return None
        attempt.ended = reason
        if not attempt.streams:
            return None
        worker = self.scenario.worker(attempt.worker_name)
        fields = {"gen": attempt.gen, "ended": "1"}
        if worker is None or worker.ended_reason:
            fields["reason"] = reason
        return self.bus.xadd(request.id, fields, request.expires_epoch_ms)

    def _restart(self, request: ChatRequest, *, counted_for: str | None) -> None:
        """End the current attempt as restarted and put the request back in the queue at its original place."""
        self._stop_task(request)
        self._end_attempt(request, "restarted")
        request.restarted += 1
        if counted_for is not None:
            request.restart_counts[counted_for] += 1
        self._set_state(request, RequestState.WAITING)
        self._dispatch()
        self.wake()

    def _job_finished(self, worker_name: str) -> None:
        self._jobs_done[worker_name] += 1
        worker = self.scenario.worker(worker_name)
        if (
            worker is not None
            and worker.offline_after_jobs is not None
            and self._jobs_done[worker_name] >= worker.offline_after_jobs
            and worker.online
        ):
            self.patch_worker(worker_name, {"online": False})
            return
        self._dispatch()

    def _plan(self, request: ChatRequest, worker: WorkerSpec) -> ReplyPlan | ChatFaultReason:
        """Compose the attempt's reply (or a prompt overflow fault) from the conversation and the worker."""
        payload = request.payload
        params = payload.get("params") or {}
        messages = list(payload["messages"])
        traits = request.requirements.traits
        tools = list(payload.get("tools") or []) if traits.forwards_tools else []
        prompt = prompt_tokens(messages, tools)
        context = min(request.max_context_length or worker.max_context_length, worker.max_context_length)
        if prompt > context and ChatGuarantee.PROMPT_OVERFLOW_REFUSED.value in worker.declared_values:
            return ChatFaultReason.PROMPT_OVERFLOW
        effort = params.get("reasoning_effort")
        seed = conversation_seed(
            messages,
            tools,
            payload.get("tool_choice"),
            payload.get("response_format"),
            params.get("seed"),
            effort,
        )
        reasons = worker.reasoning == "always" or (
            worker.reasoning == "auto" and ChatFeature.REASONING_EFFORT.value in worker.declared_values
        )
        reasoning = reasoning_text(messages, effort) if reasons else ""
        tool_calls: list[dict[str, Any]] | None = None
        if tools and worker.tool_calls != "never":
            tool_choice = payload.get("tool_choice")
            forced = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
            chosen = choose_tools(tools, traits.tool_choice_mode, forced, messages, traits.parallel_tool_calls)
            if worker.tool_calls == "invalid":
                chosen = [{"type": "function", "function": {"name": "undefined_function", "parameters": {}}}]
            tool_calls = build_tool_calls(chosen, messages, seed) or None
        content: str | None
        response_format = payload.get("response_format") or {}
        if tool_calls:
            content = None
        elif response_format.get("type") in {kind.value for kind in ChatResponseFormatType}:
            content = json_reply(response_format, messages, seed)
        elif worker.reply_style == "echo":
            content = "You said: " + last_user_text(messages)
        elif worker.reply_style == "fixed":
            content = worker.fixed_reply
        else:
            content = reply_text(messages, words=worker.reply_words, seed=seed)
        if worker.reasoning_only:
            content = "" if not tool_calls else content
            reasoning = reasoning or reasoning_text(messages, None)
        if worker.empty_reply:
            content, reasoning, tool_calls = "", "", None
        return cut_reply(
            reasoning,
            content,
            tool_calls,
            max_length=min(request.max_length, worker.max_length),
            stop=params.get("stop_sequence"),
            prompt=prompt,
        )

    async def _write(self, request: ChatRequest, fields: dict[str, str]) -> None:
        await self._await_marker(self.bus.xadd(request.id, fields, request.expires_epoch_ms))

    async def _post(
        self,
        request: ChatRequest,
        worker: WorkerSpec,
        attempt: Attempt,
        seq: int,
        reasoning: str,
        text: str,
    ) -> None:
        if not attempt.streams or worker.skip_seq == seq:
            return
        fields = {"gen": attempt.gen, "seq": str(seq), "text": text, "reasoning": reasoning}
        if not worker.omit_model_in_deltas:
            fields["model"] = worker.model
        if not worker.omit_worker_in_deltas:
            fields["worker"] = worker.worker_id
        await self._write(request, fields)

    @staticmethod
    async def _await_marker(future: asyncio.Future[None] | None) -> None:
        """Wait for a queued stream write, at most ``STREAM_WRITE_WAIT_SECONDS``."""
        if future is not None:
            with suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(future), STREAM_WRITE_WAIT_SECONDS)

    async def _job_main(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt) -> None:
        try:
            await self._run_job(request, worker, attempt)
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - a simulator bug faults the request instead of hanging it
            logger.exception("job of request %s failed", request.id)
            if request.attempt is attempt and request.state is RequestState.PROCESSING:
                await self._fault(request, worker, attempt, ChatFaultReason.GENERATION_ERROR)

    async def _run_job(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt) -> None:
        """Simulate one attempt: first token delay, progress posts, then reply, fault, restart or empty end."""
        await asyncio.sleep(worker.time_to_first_token_seconds)
        plan = self._plan(request, worker)
        if isinstance(plan, ChatFaultReason):
            await self._fault(request, worker, attempt, plan)
            return
        pieces = [("r", token) for token in plan.reasoning_tokens_list] + [
            ("c", token) for token in plan.content_tokens_list
        ]
        per_post = max(1, round(worker.tokens_per_second * worker.post_interval_seconds))
        posts = [pieces[start : start + per_post] for start in range(0, len(pieces), per_post)]
        interval = worker.post_interval_seconds
        restart_after = (
            worker.restart_after_posts
            if worker.restart_after_posts is not None and request.restart_counts[worker.name] < worker.restarts
            else None
        )
        for seq, post in enumerate(posts, start=1):
            if worker.fault_reason is not None and seq > worker.fault_after_posts:
                await self._fault(request, worker, attempt, worker.fault_reason)
                return
            if restart_after is not None and seq > restart_after:
                self._restart(request, counted_for=worker.name)
                return
            if seq > 1 and interval:
                await asyncio.sleep(interval)
            reasoning = "".join(token for kind, token in post if kind == "r")
            text = "".join(token for kind, token in post if kind == "c")
            await self._post(request, worker, attempt, seq, reasoning, text)
            attempt.posts = seq
            attempt.tokens += len(post)
        if worker.fault_reason is not None:
            await self._fault(request, worker, attempt, worker.fault_reason)
            return
        if restart_after is not None:
            self._restart(request, counted_for=worker.name)
            return
        if plan.tool_call_tokens:
            await asyncio.sleep(plan.tool_call_tokens / worker.tokens_per_second)
        if worker.done_without_generation:
            await self._await_marker(self._end_attempt(request, "completed"))
            self._set_state(request, RequestState.DONE)
            request.task = None
            self.bus.signal(request.id, "done")
            self._job_finished(worker.name)
            return
        await self._complete(request, worker, attempt, plan)

    async def _fault(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt, reason: ChatFaultReason) -> None:
        submit = build_chat_fault_submit(attempt.gen, worker.model, reason)
        await self._await_marker(self._end_attempt(request, "faulted"))
        self._set_state(request, RequestState.FAULTED)
        request.fault_reason = submit["fault_reason"]
        request.task = None
        self.bus.signal(request.id, "faulted")
        self._job_finished(worker.name)

    @staticmethod
    def _verify(request: ChatRequest, submit: Mapping[str, Any]) -> bool:
        """The Horde's checks of a reply under ``strict`` conformance; False refuses it (``reply_refused``)."""
        if request.requirements.conformance is not ChatConformance.STRICT:
            return True
        traits = request.requirements.traits
        calls = submit["message"].get("tool_calls") or []
        offered = {tool["function"]["name"] for tool in request.payload.get("tools") or []}
        if calls and (not traits.forwards_tools or any(call["function"]["name"] not in offered for call in calls)):
            return False
        forced = traits.forwards_tools and traits.tool_choice_mode in (
            ChatToolChoiceMode.REQUIRED,
            ChatToolChoiceMode.FUNCTION,
        )
        return not (forced and not calls)

    async def _complete(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt, plan: ReplyPlan) -> None:
        message: dict[str, Any] = {"content": plan.content}
        if plan.content and worker.final_text_diverges:
            message["content"] = DIVERGED_PREFIX + plan.content
        if plan.tool_calls:
            message["tool_calls"] = plan.tool_calls
        if plan.reasoning:
            message["reasoning_content"] = plan.reasoning
        reported = set(worker.report_usage)
        usage = ChatUsage(
            prompt_tokens=plan.prompt_tokens if "prompt_tokens" in reported else None,
            completion_tokens=plan.completion_tokens if "completion_tokens" in reported else None,
            reasoning_tokens=plan.reasoning_tokens if "reasoning_tokens" in reported and plan.reasoning else None,
        )
        submit = build_chat_reply_submit(
            attempt.gen,
            worker.model,
            message,
            plan.finish_reason,
            usage,
            native_finish_reason=plan.native_finish_reason,
        )
        if not self._verify(request, submit):
            await self._fault(request, worker, attempt, ChatFaultReason.REPLY_REFUSED)
            return
        traits = request.requirements.traits
        calls = submit["message"].get("tool_calls")
        if calls and not traits.parallel_tool_calls and request.requirements.conformance is ChatConformance.STRICT:
            submit["message"]["tool_calls"] = calls[:1]
        generation: dict[str, Any] = {
            "id": submit["id"],
            "worker_id": worker.worker_id,
            "worker_name": worker.name,
            "model": submit["model_id"],
        }
        generation.update({key: value for key, value in submit.items() if key not in ("id", "model_id")})
        await self._await_marker(self._end_attempt(request, "completed"))
        request.generations = [generation]
        request.kudos_consumed = round(plan.completion_tokens * self.scenario.kudos_per_token, 2)
        self._set_state(request, RequestState.DONE)
        request.task = None
        self.bus.signal(request.id, "done")
        self._job_finished(worker.name)

    # ----------------------------------------------------------------- models

    def models_status(self, model_type: str) -> list[dict[str, Any]]:
        """Handle ``GET /v2/status/models?type=text`` (contract: Models): one entry per model with an online worker,
        with a ``chat`` object when an online chat worker serves it.
        """
        if model_type not in ("text", "all", ""):
            return []
        entries: list[dict[str, Any]] = []
        for model in sorted(self.scenario.text_models):
            online = [w for w in self.scenario.workers if w.online and w.model == model]
            if not online:
                continue
            waiting = [r for r in self.requests.values() if r.state is RequestState.WAITING and model in r.models]
            processing = [
                r
                for r in self.requests.values()
                if r.state is RequestState.PROCESSING and r.attempt is not None and r.attempt.model == model
            ]
            throughput = sum(w.tokens_per_second * w.threads for w in online)
            queued = sum(r.max_length for r in waiting)
            entry: dict[str, Any] = {
                "name": model,
                "count": len(online),
                "performance": round(sum(w.tokens_per_second for w in online) / len(online), 1),
                "queued": queued,
                "jobs": len(waiting) + len(processing),
                "eta": math.ceil(queued / throughput) if throughput else 0,
                "type": "text",
            }
            chat_workers = [w for w in online if w.chat]
            if chat_workers:
                entry["chat"] = {
                    "workers": len(chat_workers),
                    "threads": sum(w.threads for w in chat_workers),
                    "max_length": max(w.max_length for w in chat_workers),
                    "max_context_length": max(w.max_context_length for w in chat_workers),
                    "features": sorted(set().union(*(w.declared_values for w in chat_workers))),
                    "image_transports": sorted({t for w in chat_workers for t in w.image_transports}),
                }
            entries.append(entry)
        return entries

    # ----------------------------------------------------------------- control

    def replace_scenario(self, scenario: Scenario) -> None:
        """Replace the whole scenario; routing of new and existing requests follows it at once.

        A processing request whose worker is gone, offline, chat-less or now serves another model restarts.
        """
        self.scenario = scenario
        self._routing_version += 1
        self._refusal_uses.clear()
        self._reconcile()

    def patch_worker(self, name: str, patch: Mapping[str, Any]) -> WorkerSpec:
        """Merge ``patch`` into the worker named ``name`` and revalidate it (such as ``{"online": false}``).

        Raises:
            KeyError: No worker has that name.
            pydantic.ValidationError: The patched worker is invalid.
        """
        current = self.scenario.worker(name)
        if current is None:
            raise KeyError(name)
        patched = WorkerSpec.model_validate({**current.model_dump(exclude_unset=False), **dict(patch)})
        workers = [patched if worker.name == name else worker for worker in self.scenario.workers]
        self.scenario = self.scenario.model_copy(update={"workers": workers})
        self._routing_version += 1
        self._reconcile()
        return patched

    def _reconcile(self) -> None:
        for request in list(self.requests.values()):
            attempt = request.attempt
            if request.state is not RequestState.PROCESSING or attempt is None:
                continue
            worker = self.scenario.worker(attempt.worker_name)
            if worker is None or not worker.online or not worker.chat or worker.model != attempt.model:
                self._restart(request, counted_for=None)
        self._dispatch()
        self.wake()

    def reset(self) -> int:
        """Forget every request (cancelling running jobs) and the per-worker job counters; return how many."""
        count = len(self.requests)
        for request in self.requests.values():
            self._stop_task(request)
        count += len(self.text.requests)
        self.text.stop_all()
        self.text.requests.clear()
        self.requests.clear()
        self._queue_version += 1
        self._jobs_done.clear()
        self._refusal_uses.clear()
        self.submits.clear()
        return count

    def describe_requests(self) -> list[dict[str, Any]]:
        """Every request for ``GET /_devhorde/requests``: id, state, cancelled, the native payload as received,
        the ``apikey`` header, and the attempts.
        """
        now = self._now()
        self._expire_due()
        return [
            {
                "id": request.id,
                "api": "chat",
                "state": request.state.value,
                "cancelled": request.cancelled,
                "cancel_requests": request.cancel_requests,
                "done_reads": request.done_reads,
                "payload": request.payload,
                "apikey": request.apikey,
                "client_agent": request.client_agent,
                "models": request.models,
                "max_length": request.max_length,
                "restarted": request.restarted,
                "age_seconds": round(now - request.submitted_at, 3),
                "attempts": [dataclasses.asdict(attempt) for attempt in request.attempts],
            }
            for request in sorted(self.requests.values(), key=lambda r: r.seq)
        ] + self.text.describe()
