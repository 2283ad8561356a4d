"""Routing: which simulated workers can serve a chat request, and why none can.

A worker serves a request when it is online, accepts chat, serves one of its models, passes its worker options and
``chat_service_gap`` (horde_sdk) finds no gap against its declaration, the request's applied ``max_length`` and its
``params.max_context_length`` fitting the worker's declared limits. Eligibility is recomputed whenever the scenario or
a worker changes (:attr:`Routing.version`) and cached per request until then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from horde_sdk.generation_parameters.text.chat_policy import ChatLimitField, ChatServiceGap, chat_service_gap

from devhorde.chat_queue import ChatRequest
from devhorde.scenario import Scenario, WorkerSpec


def passes_worker_options(worker: WorkerSpec, payload: Mapping[str, Any]) -> bool:
    """Whether ``worker`` passes the request's worker options: ``trusted_workers``, ``slow_workers: false`` and
    ``workers`` with ``worker_blacklist`` (by name or id).
    """
    if payload.get("trusted_workers") and not worker.trusted:
        return False
    if payload.get("slow_workers") is False and worker.slow:
        return False
    listed = payload.get("workers") or []
    if listed:
        named = worker.name in listed or worker.worker_id in listed
        return not named if payload.get("worker_blacklist") else named
    return True


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


class Routing:
    """The scenario's workers as routing sees them.

    Args:
        scenario: The workers and knobs; :meth:`replace` swaps them (and invalidates every cached eligibility).
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.version = 0
        """Bumped whenever the scenario or a worker changes: the key of every request's eligibility cache."""

    def replace(self, scenario: Scenario) -> None:
        """Route with ``scenario`` from now on, new and existing requests alike."""
        self.scenario = scenario
        self.version += 1

    def online_chat_workers(self, models: list[str] | frozenset[str]) -> list[WorkerSpec]:
        """Online chat workers serving any of ``models``, in scenario order."""
        return [w for w in self.scenario.workers if w.online and w.chat and w.model in models]

    def candidates(self, request: ChatRequest) -> list[WorkerSpec]:
        """Online chat workers of the request's models that pass its worker options (limits not checked)."""
        return [
            worker
            for worker in self.online_chat_workers(request.models)
            if passes_worker_options(worker, request.payload)
        ]

    def eligible_workers(self, request: ChatRequest) -> list[WorkerSpec]:
        """Online workers that can serve the request now: model, worker options, declarations and limits.

        Cached per request until the scenario or a worker changes.
        """
        cached = request.eligible_cache
        if cached is None or cached[0] != self.version:
            names = tuple(worker.name for worker in self.candidates(request) if worker_gap(worker, request) == ((), ()))
            cached = request.eligible_cache = (self.version, names)
        return [worker for worker in self.scenario.workers if worker.name in cached[1]]

    def impossible_reason(self, request: ChatRequest) -> dict[str, Any] | None:
        """Return the ``impossible_reason`` of a request no online worker can serve, or None without a known cause.

        Missing declarations are the request's needs outside the union of the candidate workers' declarations (the
        model list's feature union, as ``chat_service_gap`` documents); a limit is exceeded when every candidate
        exceeds it. When the union covers everything but no single worker does, the closest worker's own gap is
        reported. No candidate (no online worker of the models, or the worker options exclude all) is no known
        cause. The shape is ``horde_sdk``'s ``ChatServiceGap``.
        """
        candidates = self.candidates(request)
        if not candidates:
            return None
        gaps = {worker.name: worker_gap(worker, request) for worker in candidates}
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
