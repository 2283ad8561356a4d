"""The Horde's text generation API, simulated: ``POST /v2/generate/text/async``, ``GET`` and ``DELETE
/v2/generate/text/status/{id}``.

The shapes are horde_sdk's: a submit body validates as ``TextGenerateAsyncRequest`` (400 with ``errors`` per field
otherwise), a dry run answers 200 ``TextGenerateAsyncDryRunResponse`` (``{"kudos"}``), a submit 202
``TextGenerateAsyncResponse`` (``{"id", "kudos"}``), a status ``TextGenerateStatusResponse`` with
``GenerationKobold`` generations (``text``, ``seed``, ``worker_id``, ``worker_name``, ``model``, ``state``,
``gen_metadata``).

Every online worker of a scenario serves the text API for its model, chat or not (a text-only worker is one with
``chat: false``). A worker is eligible when it serves one of the request's models and its declared
``max_length`` and ``max_context_length`` are at least the request's ``params``. A request no online worker can serve
is accepted and reads ``is_possible: false`` (as the public Horde does). Jobs share the workers' threads with chat
jobs. The reply is the scenario worker's reply style over the prompt, cut at ``max_length`` simulator tokens and at
the first stop sequence; it is written whole when the job ends (the text API has no progress stream).

On an ``aihorde`` scenario the public AI Horde's own rules apply (devhorde.aihorde): its parameter bounds and
messages, upfront kudos and ``allow_downgrade``, ``kudos: 0.0`` at submit with the no-worker warning, cancel that only
empties the request, faults that restart a request until its third, and workers that count online for a window after
their last pop (:meth:`TextHorde.counts_online`), in the model list and ``/v2/workers`` this module answers then.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from horde_sdk.ai_horde_api.apimodels.generate.text.async_ import ModelPayloadRootKobold, TextGenerateAsyncRequest
from pydantic import ValidationError

from devhorde.aihorde import (
    DEFAULT_MAX_CONTEXT_LENGTH,
    DEFAULT_MAX_LENGTH,
    FAULTED_JOBS_TO_FAULT,
    KUDOS_HOLDER_KUDOS,
    NO_WORKER_WARNING,
    free_token_ceiling,
    kudos_upfront_message,
    not_found_message,
    param_bound_errors,
    param_rule_refusal,
    performance_totals,
    required_kudos,
    user_not_found_message,
)
from devhorde.answers import (
    CONTROL_INVALID_KEY_MESSAGE,
    MAINTENANCE_MESSAGE,
    NOT_FOUND_MESSAGE,
    HordeReply,
    refusal,
)
from devhorde.prompted import prompted_reply
from devhorde.replies import conversation_seed, count_tokens, cut_reply, reply_text
from devhorde.scenario import AiHordeSpec, Scenario, WorkerSpec

DEFAULT_TEXT_MAX_LENGTH: Final[int] = int(ModelPayloadRootKobold.model_fields["max_length"].default)
"""``params.max_length`` when a text request sets none (horde_sdk's ``ModelPayloadRootKobold`` default)."""

DEFAULT_TEXT_MAX_CONTEXT_LENGTH: Final[int] = int(ModelPayloadRootKobold.model_fields["max_context_length"].default)
"""``params.max_context_length`` when a text request sets none (horde_sdk's default)."""

TEXT_VALIDATION_FAILED_MESSAGE: Final[str] = "Input payload validation failed"
"""The message of a 400 whose ``errors`` name each invalid field."""


@dataclass(slots=True)
class TextRequest:
    """One text generation request."""

    id: str
    seq: int
    payload: dict[str, Any]
    apikey: str
    prompt: str
    models: list[str]
    max_length: int
    max_context_length: int
    stop_sequence: list[str]
    submitted_at: float
    expires_at: float
    kudos_estimate: float
    state: str = "waiting"
    worker_name: str | None = None
    generations: list[dict[str, Any]] = field(default_factory=list)
    cancelled: bool = False
    restarted: int = 0
    """``aihorde``: jobs that faulted and returned the request to the queue."""
    emptied: bool = False
    """``aihorde``: a cancel set ``n = 0``; the request reads not done, not waiting, impossible until it expires."""
    cancel_requests: int = 0
    kudos_consumed: float = 0.0
    task: asyncio.Task[None] | None = None


def _field_errors(error: ValidationError) -> dict[str, str]:
    return {
        ".".join(str(part) for part in item["loc"]): item["msg"]
        for item in error.errors(include_url=False, include_context=False, include_input=False)
    }


class TextHorde(Protocol):
    """What the text API simulation needs of the Horde it runs in (:class:`devhorde.horde.DevHorde`)."""

    offline_since: dict[str, float]
    """When each offline worker went offline (its last pop), by name."""

    @property
    def scenario(self) -> Scenario:
        """The workers and knobs now."""
        ...

    def now(self) -> float:
        """The Horde's clock (the event loop's monotonic time)."""
        ...

    def busy(self) -> Counter[str]:
        """Running jobs per worker name, chat and text (both share a worker's threads)."""
        ...

    def dispatch(self) -> None:
        """Pop waiting requests, chat and text, onto free threads."""
        ...

    def scripted_refusal(self, payload: Mapping[str, Any], apikey: str, models: list[str]) -> HordeReply | None:
        """The scenario's first matching ``submit_refusals`` rule as an answer, or None."""
        ...

    def counts_online(self, worker: WorkerSpec) -> bool:
        """Whether the Horde counts the worker as online (on an ``aihorde`` scenario, for a while after its last
        pop).
        """
        ...


class TextQueue:
    """The text generation requests of one Horde and their simulated jobs."""

    def __init__(self, horde: TextHorde) -> None:
        self.horde = horde
        self.requests: dict[str, TextRequest] = {}
        self._next_seq = 0
        self._started: float | None = None
        self.queued_in_totals: tuple[float, int] | None = None
        """``(when, count)`` of the waiting text requests as the Horde's totals last counted them (:meth:`_load`);
        None until the first count (and after a reset)."""

    # ----------------------------------------------------------------- routing

    def eligible_workers(self, request: TextRequest, *, counted: bool = False) -> list[WorkerSpec]:
        """Online workers of the request's models whose declared limits cover its ``params`` (those that pop it);
        ``counted``: also the workers the Horde still counts online (those that keep it possible).
        """
        return [
            worker
            for worker in self.horde.scenario.workers
            if (worker.online or (counted and self.horde.counts_online(worker)))
            and worker.model in request.models
            and worker.max_length >= request.max_length
            and worker.max_context_length >= request.max_context_length
        ]

    def busy(self) -> Counter[str]:
        """Running text jobs per worker name."""
        return Counter(r.worker_name for r in self.requests.values() if r.state == "processing" and r.worker_name)

    # ----------------------------------------------------------------- routes

    def submit(self, payload: Any, apikey: str | None) -> HordeReply:
        """``POST /v2/generate/text/async``: 400 for a body that is not a valid ``TextGenerateAsyncRequest`` or
        without a prompt, 401 ``InvalidAPIKey``, 503 ``MaintenanceMode``, a scripted refusal; a dry run is 200
        ``{"kudos"}``; else 202 ``{"id", "kudos"}``.
        """
        if not isinstance(payload, dict):
            return HordeReply(400, {"message": TEXT_VALIDATION_FAILED_MESSAGE, "errors": {"": "not an object"}})
        spec = self.horde.scenario.aihorde
        raw_params = payload.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        if spec is not None:
            bounds = param_bound_errors(params)
            if bounds:
                return HordeReply(400, {"errors": bounds, "message": TEXT_VALIDATION_FAILED_MESSAGE})
        errors: dict[str, str] = {}
        try:
            parsed = TextGenerateAsyncRequest.model_validate(payload)
        except ValidationError as error:
            errors = _field_errors(error)
            parsed = None
        if apikey is None:
            errors = {"apikey": "Missing required parameter in the HTTP headers", **errors}
        if parsed is not None and not parsed.prompt:
            errors["prompt"] = "Missing required parameter in the JSON body"
        if errors or parsed is None or apikey is None:
            return HordeReply(400, {"message": TEXT_VALIDATION_FAILED_MESSAGE, "errors": errors})
        scenario = self.horde.scenario
        if apikey in scenario.invalid_api_keys:
            return refusal(401, CONTROL_INVALID_KEY_MESSAGE, "InvalidAPIKey")
        if scenario.maintenance:
            return refusal(503, MAINTENANCE_MESSAGE, "MaintenanceMode")
        scripted = self.horde.scripted_refusal(payload, apikey, list(parsed.models))
        if scripted is not None:
            return scripted
        if spec is not None:
            return self._submit_aihorde(payload, parsed, apikey, spec)
        max_length = int(params.get("max_length") or DEFAULT_TEXT_MAX_LENGTH)
        kudos = round(max_length * scenario.kudos_per_token, 2)
        if parsed.dry_run:
            return HordeReply(200, {"kudos": kudos})
        context = int(params.get("max_context_length") or DEFAULT_TEXT_MAX_CONTEXT_LENGTH)
        request = self._queue_request(payload, parsed, apikey, (max_length, context), kudos)
        return HordeReply(202, {"id": request.id, "kudos": kudos})

    def _submit_aihorde(
        self, payload: dict[str, Any], parsed: TextGenerateAsyncRequest, apikey: str, spec: AiHordeSpec
    ) -> HordeReply:
        """The public AI Horde's submit after payload validation and the key: its parameter rules, upfront kudos
        (or ``allow_downgrade`` to the free ceiling), then 202 ``{"id", "kudos": 0.0}`` with the warning
        ``message`` when no worker can serve it, or a dry run's 200 ``{"kudos"}``.
        """
        params = payload.get("params") or {}
        rule = param_rule_refusal(params)
        if rule is not None:
            return rule
        max_length = int(params.get("max_length", DEFAULT_MAX_LENGTH))
        models = list(parsed.models)
        threads, queued = self._load()
        slow_workers = payload.get("slow_workers", True) is not False
        ceiling = free_token_ceiling(threads, queued, slow_workers=slow_workers)
        needs_kudos = not slow_workers or max_length > ceiling
        required = required_kudos(max_length, models, spec.model_parameters)
        if needs_kudos and required > 0 and apikey not in spec.kudos_api_keys:
            if payload.get("allow_downgrade") is True:
                max_length = min(max_length, ceiling)
            else:
                return refusal(403, kudos_upfront_message(ceiling, required), "KudosUpfront")
        kudos = round(max_length * self.horde.scenario.kudos_per_token, 2)
        if parsed.dry_run:
            return HordeReply(200, {"kudos": float(round(kudos))})
        context = int(params.get("max_context_length", DEFAULT_MAX_CONTEXT_LENGTH))
        request = self._queue_request(payload, parsed, apikey, (max_length, context), kudos)
        body: dict[str, Any] = {"id": request.id, "kudos": 0.0}
        if not self.eligible_workers(request, counted=True):
            body["message"] = NO_WORKER_WARNING
        return HordeReply(202, body)

    def _queue_request(
        self,
        payload: dict[str, Any],
        parsed: TextGenerateAsyncRequest,
        apikey: str,
        lengths: tuple[int, int],
        kudos: float,
    ) -> TextRequest:
        """Queue an accepted request with its ``(max_length, max_context_length)`` and pop what can pop."""
        params = payload.get("params") or {}
        scenario = self.horde.scenario
        now = self.horde.now()
        request = TextRequest(
            id=str(uuid.uuid4()),
            seq=self._next_seq,
            payload=payload,
            apikey=apikey,
            prompt=parsed.prompt or "",
            models=list(parsed.models),
            max_length=lengths[0],
            max_context_length=lengths[1],
            stop_sequence=[stop for stop in params.get("stop_sequence") or [] if isinstance(stop, str)],
            submitted_at=now,
            expires_at=now + scenario.request_expiry_seconds,
            kudos_estimate=kudos,
        )
        self._next_seq += 1
        self.requests[request.id] = request
        self.dispatch()
        return request

    def _lookup(self, request_id: str) -> TextRequest | None:
        request = self.requests.get(request_id)
        if request is not None and self.horde.now() >= request.expires_at:
            self._stop(request)
            del self.requests[request_id]
            return None
        return request

    def _not_found(self, request_id: str, action: str, path: str) -> HordeReply:
        if self.horde.scenario.aihorde is not None:
            return refusal(404, not_found_message(request_id, action, path), "RequestNotFound")
        return refusal(404, NOT_FOUND_MESSAGE, "RequestNotFound")

    def status(self, request_id: str, path: str = "") -> HordeReply:
        """``GET /v2/generate/text/status/{id}``; 404 ``RequestNotFound``."""
        request = self._lookup(request_id)
        if request is None:
            return self._not_found(request_id, "Status", path)
        return HordeReply(200, self.status_body(request))

    def cancel(self, request_id: str, path: str = "") -> HordeReply:
        """``DELETE /v2/generate/text/status/{id}``: a waiting or processing request ends done with no generation.

        On an ``aihorde`` scenario the answer is the status from before the cancel, which only sets ``n = 0``: the
        job stops and every later read says ``done: false, waiting: 0, processing: 0, is_possible: false``.
        """
        request = self._lookup(request_id)
        if request is None:
            return self._not_found(request_id, "Delete", path)
        request.cancel_requests += 1
        if self.horde.scenario.aihorde is not None:
            before = self.status_body(request)
            if request.state in ("waiting", "processing"):
                self._stop(request)
                request.state = "cancelled"
                request.cancelled = request.emptied = True
                self.horde.dispatch()
            return HordeReply(200, before)
        if request.state in ("waiting", "processing"):
            self._stop(request)
            request.state = "cancelled"
            request.cancelled = True
            self.dispatch()
        return HordeReply(200, self.status_body(request))

    def status_body(self, request: TextRequest) -> dict[str, Any]:
        """A ``TextGenerateStatusResponse``: progress counts, queue estimate, kudos and the generations."""
        if request.emptied:
            return {
                "generations": [],
                "finished": 0,
                "processing": 0,
                "restarted": 0,
                "waiting": 0,
                "done": False,
                "faulted": False,
                "wait_time": 0,
                "queue_position": 0,
                "kudos": float(request.kudos_estimate),
                "is_possible": False,
            }
        eligible = self.eligible_workers(request, counted=True)
        waiting = request.state == "waiting"
        position, wait_time = 0, 0
        if waiting:
            ahead = [r for r in self.requests.values() if r.state == "waiting" and r.seq < request.seq]
            throughput = sum(worker.tokens_per_second * worker.threads for worker in eligible)
            position = len(ahead) + 1
            if throughput > 0:
                wait_time = math.ceil((sum(r.max_length for r in ahead) + request.max_length) / throughput)
        terminal = request.state in ("done", "cancelled", "faulted")
        return {
            "generations": [dict(generation) for generation in request.generations],
            "finished": len(request.generations),
            "processing": int(request.state == "processing"),
            "restarted": request.restarted,
            "waiting": int(waiting),
            "done": terminal,
            "faulted": request.state == "faulted",
            "wait_time": wait_time,
            "queue_position": position,
            "kudos": float(request.kudos_consumed if terminal else request.kudos_estimate),
            "is_possible": not waiting or bool(eligible),
        }

    # ----------------------------------------------------------------- jobs

    def dispatch(self) -> None:
        """Pop waiting text requests in FIFO order onto eligible workers with a free thread."""
        busy = self.horde.busy()
        for request in sorted((r for r in self.requests.values() if r.state == "waiting"), key=lambda r: r.seq):
            free = [worker for worker in self.eligible_workers(request) if busy[worker.name] < worker.threads]
            if not free:
                continue
            worker = max(free, key=lambda w: w.threads - busy[w.name])
            busy[worker.name] += 1
            request.state = "processing"
            request.worker_name = worker.name
            request.task = asyncio.get_running_loop().create_task(self._run(request, worker))

    def _stop(self, request: TextRequest) -> None:
        task, request.task = request.task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _run(self, request: TextRequest, worker: WorkerSpec) -> None:
        if worker.fault_reason is not None and self.horde.scenario.aihorde is not None:
            await asyncio.sleep(worker.time_to_first_token_seconds)
            self._fault(request)
            return
        messages = [{"role": "user", "content": request.prompt}]
        if worker.reply_style == "echo":
            content = "You said: " + request.prompt.strip().splitlines()[-1] if request.prompt.strip() else ""
        elif worker.reply_style == "fixed":
            content = worker.fixed_reply
        else:
            seed = conversation_seed(request.prompt)
            prompted = prompted_reply(request.prompt, seed, malformed_first=self.horde.scenario.malformed_first_replies)
            content = prompted if prompted is not None else reply_text(messages, words=worker.reply_words, seed=seed)
        plan = cut_reply(
            "",
            content,
            None,
            max_length=min(request.max_length, worker.max_length),
            stop=request.stop_sequence,
            prompt=count_tokens(request.prompt),
        )
        await asyncio.sleep(worker.time_to_first_token_seconds + plan.completion_tokens / worker.tokens_per_second)
        request.generations = [
            {
                "text": plan.content or "",
                "seed": conversation_seed(request.prompt) % 2**31,
                "worker_id": worker.worker_id,
                "worker_name": worker.name,
                "model": worker.model,
                "state": worker.text_state,
                "gen_metadata": [{"type": "censorship", "value": "csam"}] if worker.text_state == "csam" else [],
            }
        ]
        request.kudos_consumed = round(plan.completion_tokens * self.horde.scenario.kudos_per_token, 2)
        request.state = "done"
        request.task = None
        self.horde.dispatch()

    # ----------------------------------------------------------------- the public Horde's lists

    def models_status(self) -> list[dict[str, Any]]:
        """``GET /v2/status/models?type=text`` as the public AI Horde answers it: one entry per model with a worker
        it counts online, ``{"performance", "queued", "jobs", "eta", "type", "name", "count"}`` (no chat entry).
        """
        entries: list[dict[str, Any]] = []
        for model in sorted(self.horde.scenario.text_models):
            workers = [w for w in self.horde.scenario.workers if w.model == model and self.horde.counts_online(w)]
            if not workers:
                continue
            waiting = [r for r in self.requests.values() if r.state == "waiting" and model in r.models]
            jobs = waiting + [r for r in self.requests.values() if r.state == "processing" and model in r.models]
            queued = sum(r.max_length for r in waiting)
            throughput = sum(w.tokens_per_second * w.threads for w in workers)
            entries.append(
                {
                    "performance": round(sum(w.tokens_per_second for w in workers) / len(workers), 1),
                    "queued": float(queued),
                    "jobs": float(len(jobs)),
                    "eta": math.ceil(queued / throughput) if throughput else 0,
                    "type": "text",
                    "name": model,
                    "count": len(workers),
                }
            )
        return entries

    def _load(self) -> tuple[int, int]:
        """The threads of the text workers counted online and the waiting text requests: the counts of the upfront
        kudos ceiling and of ``GET /v2/status/performance``. The waiting requests are those of the Horde's totals,
        counted again once ``aihorde.totals_refresh_seconds`` have passed since the last count (the real Horde's
        ``store_totals`` runs every 60 s), or live when that is 0.
        """
        threads = sum(w.threads for w in self.horde.scenario.workers if self.horde.counts_online(w))
        queued = sum(1 for request in self.requests.values() if request.state == "waiting")
        spec = self.horde.scenario.aihorde
        refresh = spec.totals_refresh_seconds if spec is not None else 0.0
        if refresh <= 0:
            return threads, queued
        now = self.horde.now()
        if self.queued_in_totals is None or now - self.queued_in_totals[0] >= refresh:
            self.queued_in_totals = (now, queued)
        return threads, self.queued_in_totals[1]

    def performance(self) -> HordeReply:
        """``GET /v2/status/performance`` (``aihorde``): the totals whose text counts the upfront kudos ceiling uses
        (devhorde.aihorde.performance_totals).
        """
        threads, queued = self._load()
        workers = sum(1 for w in self.horde.scenario.workers if self.horde.counts_online(w))
        return HordeReply(
            200, performance_totals(text_workers=workers, text_threads=threads, queued_text_requests=queued)
        )

    def find_user(self, apikey: str | None) -> HordeReply:
        """``GET /v2/find_user`` (``aihorde``): 401 ``InvalidAPIKey`` without a key, 404 ``UserNotFound`` for a key
        of ``invalid_api_keys``, else the user: ``kudos`` :data:`~devhorde.aihorde.KUDOS_HOLDER_KUDOS` for a key of
        ``kudos_api_keys``, 0 for a new user's.
        """
        if not apikey:
            return refusal(401, CONTROL_INVALID_KEY_MESSAGE, "InvalidAPIKey")
        if apikey in self.horde.scenario.invalid_api_keys:
            return refusal(404, user_not_found_message(apikey), "UserNotFound")
        spec = self.horde.scenario.aihorde
        holder = spec is not None and apikey in spec.kudos_api_keys
        user_id = int(hashlib.sha256(apikey.encode()).hexdigest()[:6], 16)
        return HordeReply(
            200,
            {
                "username": f"devhorde user#{user_id}",
                "id": user_id,
                "kudos": KUDOS_HOLDER_KUDOS if holder else 0.0,
                "concurrency": 30,
                "worker_count": 0,
                "trusted": False,
                "flagged": False,
                "pseudonymous": True,
            },
        )

    def workers_status(self) -> list[dict[str, Any]]:
        """``GET /v2/workers?type=text``: every worker the Horde counts online, with the real fields (``models``,
        ``threads``, ``max_length``, ``max_context_length``, ``online``, ``trusted``, ``maintenance_mode``,
        ``uptime``, ...).
        """
        now = self.horde.now()
        if self._started is None:
            self._started = now
        started = self._started
        # A worker's uptime grows at its check-ins only: one that stopped (counted online for the window after its
        # last pop) keeps the uptime it had then (horde/classes/base/worker.py check_in).
        stopped = self.horde.offline_since if self.horde.scenario.aihorde is not None else {}
        return [
            {
                "requests_fulfilled": 0,
                "kudos_rewards": 0.0,
                "kudos_details": {"generated": None, "uptime": None},
                "performance": f"{float(worker.tokens_per_second):.1f} tokens per second",
                "threads": worker.threads,
                "uptime": int(min(now, stopped.get(worker.name, now)) - started),
                "maintenance_mode": False,
                "nsfw": True,
                "trusted": worker.trusted,
                "flagged": False,
                "uncompleted_jobs": 0,
                "models": [worker.model],
                "team": {"name": None, "id": None},
                "bridge_agent": "devhorde simulated text worker",
                "max_length": worker.max_length,
                "max_context_length": worker.max_context_length,
                "type": "text",
                "name": worker.name,
                "id": worker.worker_id,
                "online": True,
            }
            for worker in self.horde.scenario.workers
            if self.horde.counts_online(worker)
        ]

    def _fault(self, request: TextRequest) -> None:
        """A faulted job (``aihorde``): the request returns to the queue with ``restarted`` raised, and faults (``done``
        and ``faulted``, no generation) at its third faulted job, as the real Horde's cleaner does.
        """
        request.restarted += 1
        request.task = None
        request.worker_name = None
        request.state = "faulted" if request.restarted >= FAULTED_JOBS_TO_FAULT else "waiting"
        self.horde.dispatch()

    def stop_all(self) -> list[asyncio.Task[None]]:
        """Cancel every running job; return their tasks."""
        tasks = [request.task for request in self.requests.values() if request.task is not None]
        for task in tasks:
            task.cancel()
        return tasks

    def describe(self) -> list[dict[str, Any]]:
        """Every text request for ``GET /_devhorde/requests`` (``api: "text"``)."""
        now = self.horde.now()
        return [
            {
                "id": request.id,
                "api": "text",
                "state": request.state,
                "cancelled": request.cancelled,
                "cancel_requests": request.cancel_requests,
                "payload": request.payload,
                "apikey": request.apikey,
                "models": request.models,
                "max_length": request.max_length,
                "worker_name": request.worker_name,
                "age_seconds": round(now - request.submitted_at, 3),
                "submitted_epoch": round(time.time() - (now - request.submitted_at), 3),
            }
            for request in sorted(self.requests.values(), key=lambda r: r.seq)
        ]
