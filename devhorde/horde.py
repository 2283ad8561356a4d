"""The simulated Horde: submits, status, cancel, expiry, the model list and the control operations.

Contract: ``native-horde-chat.md``. :class:`DevHorde` is the Horde as the HTTP handlers see it, and puts together
the parts that hold its seams:

- :mod:`devhorde.routing`: which online workers can serve a request (horde_sdk's ``chat_request_requirements`` and
  ``chat_service_gap``, the worker options, the declared limits) and why none can;
- :mod:`devhorde.chat_queue`: the chat requests in FIFO order, their states and the queue estimates;
- :mod:`devhorde.jobs`: the simulated workers' jobs (progress posts, replies, faults, restarts);
- :mod:`devhorde.text_api`: the text generation API, which needs only :class:`devhorde.text_api.TextHorde` of it.

Every request lives in memory and each popped job is one asyncio task. State changes are synchronous (no ``await``
between reading and writing a request), so the HTTP handlers, the jobs and the dispatcher never see a half-updated
request. Redis writes go through :class:`devhorde.redisbus.RedisBus`.
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
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import chat_request_requirements

from devhorde.answers import (
    CONTROL_INVALID_KEY_MESSAGE,
    MAINTENANCE_MESSAGE,
    NOT_FOUND_MESSAGE,
    HordeReply,
    format_number,
)
from devhorde.answers import (
    refusal as _refusal,
)
from devhorde.chat_queue import TERMINAL_STATES, ChatQueue, ChatRequest, RequestState
from devhorde.jobs import Jobs
from devhorde.limits import ANONYMOUS_API_KEY, DEFAULT_CHAT_MAX_TOKENS
from devhorde.payload import (
    VALIDATION_FAILED_MESSAGE,
    openai_body,
    request_rule_refusal,
    validate_payload,
)
from devhorde.redisbus import RedisBus
from devhorde.routing import Routing
from devhorde.scenario import Scenario, WorkerSpec
from devhorde.text_api import TextQueue

logger = logging.getLogger("devhorde")

DISPATCH_TICK_SECONDS: Final[float] = 0.25
"""How often the dispatcher wakes without an event, to expire requests and retry pops."""

SUBMIT_LOG_LENGTH: Final[int] = 1000
"""How many of the latest submits ``GET /_devhorde/submits`` keeps (older ones are dropped, so load stays bounded)."""


class DevHorde:
    """The development Horde's state and behaviour, independent of HTTP.

    Args:
        scenario: The workers and knobs to simulate; replaceable at run time with :meth:`replace_scenario`.
        redis_url: Redis for progress streams and signals, or None to run without.
        stream_redis_db: The database of the progress streams.
    """

    def __init__(self, scenario: Scenario, redis_url: str | None = None, stream_redis_db: int = 0) -> None:
        self.routing = Routing(scenario)
        """Which workers serve which request (devhorde.routing)."""
        self._bus = RedisBus(redis_url, stream_redis_db)
        self._queue = ChatQueue()
        self.jobs = Jobs(self)
        """The simulated workers' jobs (devhorde.jobs)."""
        self._refusal_uses: Counter[int] = Counter()
        self.submits: deque[dict[str, Any]] = deque(maxlen=SUBMIT_LOG_LENGTH)
        """The latest submits received, accepted or refused, oldest first (``GET /_devhorde/submits``)."""
        self._wake: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self.offline_since: dict[str, float] = {}
        """When each offline worker went offline (its last pop): on an ``aihorde`` scenario it still counts as online
        for ``online_window_seconds``."""
        self.text = TextQueue(self)
        """The text generation API's requests (devhorde.text_api)."""

    @property
    def scenario(self) -> Scenario:
        """The workers and knobs simulated now."""
        return self.routing.scenario

    @property
    def bus(self) -> RedisBus:
        """The Redis writer of progress streams and signals."""
        return self._bus

    @property
    def queue(self) -> ChatQueue:
        """The chat requests (devhorde.chat_queue)."""
        return self._queue

    @property
    def requests(self) -> dict[str, ChatRequest]:
        """The chat requests by id."""
        return self._queue.requests

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
                self.dispatch()
            except Exception:  # pragma: no cover - keep the Horde alive, the next tick retries
                logger.exception("dispatch failed")
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), DISPATCH_TICK_SECONDS)

    def now(self) -> float:
        """The Horde's clock: the running event loop's monotonic time."""
        return asyncio.get_running_loop().time()

    # ----------------------------------------------------------------- submit

    def submit(self, payload: Any, apikey: str | None, client_agent: str | None) -> HordeReply:
        """Answer a submit with :meth:`answer_submit` and record it in :attr:`submits`: ``{"status", "rc", "id",
        "payload"}`` (``rc`` and ``id`` null when the answer has none), so a test can count what reached the Horde,
        refusals included.
        """
        return self.record_submit(payload, self.answer_submit(payload, apikey, client_agent))

    def record_submit(self, payload: Any, reply: HordeReply) -> HordeReply:
        """Add a submit and its answer to :attr:`submits` (the chat route's and the text API's); return the answer."""
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
        scripted = self.scripted_refusal(payload, apikey, models)
        if scripted is not None:
            return scripted
        for index, model in enumerate(models):
            if model not in scenario.text_models:
                return _refusal(400, f"'models[{index}]' is not a known text model.", "UnknownModel")
        rule = request_rule_refusal(payload)
        if rule is not None:
            return HordeReply(400, rule.body())
        serving = self.routing.online_chat_workers(models)
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
            if not self.routing.eligible_workers(request):
                reason = self.routing.impossible_reason(request)
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
        self.queue.add(request)
        self.dispatch()
        body: dict[str, Any] = {"id": request.id, "kudos": request.kudos_estimate}
        if scenario.submit_warnings:
            body["warnings"] = [dict(warning) for warning in scenario.submit_warnings]
        return HordeReply(202, body)

    def scripted_refusal(self, payload: Mapping[str, Any], apikey: str, models: list[str]) -> HordeReply | None:
        """Answer with the scenario's first matching ``submit_refusals`` rule (counting its use), or None."""
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
                serving = self.routing.online_chat_workers(models)
                if serving and all(model in self.scenario.text_models for model in models):
                    probe = self._new_request(dict(payload), apikey, None, models, serving)
                    reason = None if self.routing.eligible_workers(probe) else self.routing.impossible_reason(probe)
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
        now = self.now()
        expiry = self.scenario.request_expiry_seconds
        return ChatRequest(
            id=str(uuid.uuid4()),
            seq=self.queue.next_seq,
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
        if request.state is not RequestState.EXPIRED and self.now() >= request.expires_at:
            self._expire(request)
        return None if request.state is RequestState.EXPIRED else request

    def status(self, request_id: str) -> HordeReply:
        """Handle ``GET /v2/generate/chat/status/{id}`` (contract: Status); 404 ``RequestNotFound`` when unknown or
        expired.
        """
        request = self._lookup(request_id)
        if request is None:
            return _refusal(404, NOT_FOUND_MESSAGE, "RequestNotFound")
        request.status_reads += 1
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
            self.jobs.stop_task(request)
            if was_processing:
                self.jobs.end_attempt(request, "cancelled")
            self.queue.set_state(request, RequestState.CANCELLED)
            request.cancelled = True
            self.bus.signal(request.id, "cancelled")
            self.dispatch()
        return HordeReply(200, self.status_body(request))

    def status_body(self, request: ChatRequest) -> dict[str, Any]:
        """The status JSON of a request (contract: Status), recomputed against the workers online now."""
        state = request.state
        attempt = request.attempt
        worker = self.scenario.worker(attempt.worker_name) if attempt is not None else None
        transient_done = state is RequestState.PROCESSING and worker is not None and worker.done_while_processing
        eligible = self.routing.eligible_workers(request)
        is_possible = state is not RequestState.WAITING or bool(eligible)
        position, wait_time = self.queue.queue_stats(
            request, self.scenario, self.now(), self.routing.eligible_workers, self.routing.version
        )
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
                reason = self.routing.impossible_reason(request)
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
        now = self.now()
        for request in list(self.requests.values()):
            if request.state is not RequestState.EXPIRED and now >= request.expires_at:
                self._expire(request)

    def _expire(self, request: ChatRequest) -> None:
        if request.state is RequestState.PROCESSING:
            self.jobs.stop_task(request)
            self.jobs.end_attempt(request, "expired")
        self.queue.set_state(request, RequestState.EXPIRED)

    # ----------------------------------------------------------------- queue and jobs

    def wake(self) -> None:
        """Ask the dispatcher to run now (after a scenario change)."""
        if self._wake is not None:
            self._wake.set()

    def busy(self) -> Counter[str]:
        """Running jobs per worker name, chat and text (both share a worker's threads)."""
        return self.queue.busy() + self.text.busy()

    def dispatch(self) -> None:
        """Pop waiting requests in FIFO order onto eligible workers with a free thread (most free threads first)."""
        busy = self.busy()
        for request in self.queue.waiting():
            free = [worker for worker in self.routing.eligible_workers(request) if busy[worker.name] < worker.threads]
            if not free:
                continue
            worker = max(free, key=lambda w: w.threads - busy[w.name])
            busy[worker.name] += 1
            self.jobs.pop(request, worker)
        self.text.dispatch()

    # ----------------------------------------------------------------- models

    def models_status(self, model_type: str) -> list[dict[str, Any]]:
        """Handle ``GET /v2/status/models?type=text`` (contract: Models): one entry per model with an online worker,
        with a ``chat`` object when an online chat worker serves it.
        """
        if model_type not in ("text", "all", ""):
            return []
        if self.scenario.aihorde is not None:
            return self.text.models_status()
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

    def counts_online(self, worker: WorkerSpec) -> bool:
        """Whether the Horde counts ``worker`` as online: it is, or (``aihorde``) it went offline less than
        ``online_window_seconds`` ago. Such a worker is listed and keeps requests possible, but pops nothing.
        """
        if worker.online:
            return True
        spec = self.scenario.aihorde
        since = self.offline_since.get(worker.name)
        return spec is not None and since is not None and self.now() - since < spec.online_window_seconds

    def _route(self, scenario: Scenario) -> None:
        """Route with ``scenario``, noting when each worker that was online went offline."""
        was_online = {worker.name for worker in self.scenario.workers if worker.online}
        now = self.now()
        for worker in scenario.workers:
            if worker.online:
                self.offline_since.pop(worker.name, None)
            elif worker.name in was_online:
                self.offline_since[worker.name] = now
        self.routing.replace(scenario)

    def replace_scenario(self, scenario: Scenario) -> None:
        """Replace the whole scenario; routing of new and existing requests follows it at once.

        A processing request whose worker is gone, offline, chat-less or now serves another model restarts.
        """
        self._route(scenario)
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
        self._route(self.scenario.model_copy(update={"workers": workers}))
        self._reconcile()
        return patched

    def _reconcile(self) -> None:
        for request in list(self.requests.values()):
            attempt = request.attempt
            if request.state is not RequestState.PROCESSING or attempt is None:
                continue
            worker = self.scenario.worker(attempt.worker_name)
            if worker is None or not worker.online or not worker.chat or worker.model != attempt.model:
                self.jobs.restart(request, counted_for=None)
        self.dispatch()
        self.wake()

    def reset(self) -> int:
        """Forget every request (cancelling running jobs) and the per-worker job counters; return how many."""
        count = len(self.requests)
        for request in self.requests.values():
            self.jobs.stop_task(request)
        count += len(self.text.requests)
        self.text.stop_all()
        self.text.requests.clear()
        self.text.queued_in_totals = None
        self.queue.clear()
        self.jobs.jobs_done.clear()
        self._refusal_uses.clear()
        self.submits.clear()
        return count

    def describe_requests(self) -> list[dict[str, Any]]:
        """Every request for ``GET /_devhorde/requests``: id, state, cancelled, the native payload as received,
        the ``apikey`` header, and the attempts.
        """
        now = self.now()
        self._expire_due()
        return [
            {
                "id": request.id,
                "api": "chat",
                "state": request.state.value,
                "cancelled": request.cancelled,
                "cancel_requests": request.cancel_requests,
                "done_reads": request.done_reads,
                "status_reads": request.status_reads,
                "done_epoch": request.done_epoch,
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
