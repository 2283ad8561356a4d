"""An ``httpx.MockTransport`` that answers as the real AI Horde does (the team's ``spec/real-horde.md``), and a
``FrontRuntime`` whose Horde clients use it, installed for the running event loop so Django's ``AsyncClient`` reaches
it through the views. Shared by the unit tests of issue 22's refusals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from chat.horde.budget import HordeBudget
from chat.horde.cancels import CancelQueue
from chat.horde.native import HordeClient
from chat.horde.text import TextHordeClient
from chat.serving import route_choice
from chat.serving import runtime as runtime_module
from chat.serving.runtime import FrontRuntime
from chat.settings import front_settings

HORDE_URL = "http://real-horde.test/api"
MODEL = "koboldcpp/Qwen2.5-7B-Instruct"
FLASK_404 = (
    b"<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n<p>The requested URL was not "
    b"found on the server. If you entered the URL manually please check your spelling and try again.</p>\n"
)
"""Flask's HTML 404: what the real Horde answers on ``/v2/generate/chat/...``."""

LIMITER_HEADERS = {"Retry-After": "1", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1"}
"""flask-limiter's headers, on every answer of the real Horde (``headers_enabled=True``)."""

DONE_STATUS: dict[str, Any] = {
    "finished": 1,
    "processing": 0,
    "restarted": 0,
    "waiting": 0,
    "done": True,
    "faulted": False,
    "wait_time": 0,
    "queue_position": 0,
    "kudos": 3.0,
    "is_possible": True,
    "generations": [
        {
            "text": " Hello there.",
            "seed": 1,
            "gen_metadata": [],
            "worker_id": "w-1",
            "worker_name": "sim",
            "model": MODEL,
            "state": "ok",
        }
    ],
}

EMPTIED_STATUS: dict[str, Any] = {
    "finished": 0,
    "processing": 0,
    "restarted": 0,
    "waiting": 0,
    "done": False,
    "faulted": False,
    "wait_time": 0,
    "queue_position": 0,
    "kudos": 0.0,
    "is_possible": False,
    "generations": [],
}
"""A text status after a cancel (``n = 0``), as the real Horde reads it until the request expires."""


@dataclass
class BudgetTime:
    """The clock and sleep of the Horde budget :func:`installed` gives the front: a sleep (a ``Retry-After`` retry, a
    pacing turn) is recorded in ``sleeps`` (seconds) and moves the clock on at once, so it costs no real time."""

    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)


@dataclass
class RealHorde:
    """The answers; ``calls`` records ``(method, path)`` of every call made."""

    models: list[dict[str, Any]] = field(default_factory=lambda: [{"name": MODEL, "count": 1, "type": "text"}])
    heartbeat_alive: bool = True
    models_status: int = 200
    submit: tuple[int, dict[str, Any]] = (202, {"id": "text-1", "kudos": 0.0})
    status: dict[str, Any] = field(default_factory=lambda: dict(DONE_STATUS))
    calls: list[tuple[str, str]] = field(default_factory=list)
    budget_time: BudgetTime = field(default_factory=BudgetTime)
    """The front's budget clock (:func:`installed`): the ``Retry-After`` waits it slept."""
    submitted: list[dict[str, Any]] = field(default_factory=list)
    image_models: list[dict[str, Any]] = field(default_factory=list)
    """``GET /v2/status/models?type=image``."""
    image_workers: list[dict[str, Any]] = field(default_factory=list)
    """``GET /v2/workers?type=image``."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api")
        self.calls.append((request.method, path))
        if path == "/v2/status/heartbeat":
            if self.heartbeat_alive:
                return self.json(200, {"message": "OK", "version": "5.1.5"})
            return httpx.Response(404, content=FLASK_404, headers={"Content-Type": "text/html"})
        if path == "/v2/status/models" and request.url.params.get("type") == "image":
            return self.json(200, self.image_models)
        if path == "/v2/workers" and request.url.params.get("type") == "image":
            return self.json(200, self.image_workers)
        if path == "/v2/status/models":
            if self.models_status != 200:
                return self.json(self.models_status, {"message": "2 per 1 second"})
            return self.json(200, self.models)
        if path.startswith("/v2/generate/chat/"):
            return httpx.Response(404, content=FLASK_404, headers={"Content-Type": "text/html", **LIMITER_HEADERS})
        if path == "/v2/generate/text/async":
            self.submitted.append(json.loads(request.content))
            return self.json(*self.submit)
        if path.startswith("/v2/generate/text/status/"):
            return self.json(200, self.status)
        return httpx.Response(404, content=FLASK_404, headers={"Content-Type": "text/html"})

    @staticmethod
    def json(status: int, body: Any) -> httpx.Response:
        return httpx.Response(status, json=body, headers=LIMITER_HEADERS)

    @property
    def submits(self) -> int:
        return sum(1 for call in self.calls if call[1] in {"/v2/generate/text/async", "/v2/generate/chat/async"})


@contextmanager
def installed(horde: RealHorde, **settings: Any) -> Iterator[FrontRuntime]:
    """A ``FrontRuntime`` on :data:`HORDE_URL` whose clients call ``horde``, as the running loop's runtime; their budget
    (pacing, ``Retry-After`` retries) runs on ``horde.budget_time``, never sleeping for real."""
    configured = front_settings().model_copy(
        update={
            "horde_url": HORDE_URL,
            "models_cache_seconds": 0,
            "redis_url": None,
            "signal_recheck_seconds": 0.01,
            "nonstream_timeout_seconds": 5,
            "stream_timeout_seconds": 5,
            **settings,
        }
    )
    runtime = FrontRuntime(configured)
    transport = httpx.MockTransport(horde.handle)
    agent, timeout = configured.client_agent, configured.horde_timeout_seconds
    runtime.budget = HordeBudget(clock=horde.budget_time.clock, sleep=horde.budget_time.sleep)
    runtime.horde = HordeClient(HORDE_URL, agent, timeout, transport=transport, budget=runtime.budget)
    runtime.text_horde = TextHordeClient(HORDE_URL, agent, timeout, transport=transport, budget=runtime.budget)
    runtime.cancels = CancelQueue(runtime.horde, retry_seconds=0.01, attempt_timeout=timeout)
    runtime.text_cancels = CancelQueue(runtime.text_horde, retry_seconds=0.01, attempt_timeout=timeout)
    loop = asyncio.get_running_loop()
    previous = runtime_module._runtimes.get(loop)
    runtime_module._runtimes[loop] = runtime
    route_choice.forget_verdicts()
    try:
        yield runtime
    finally:
        route_choice.forget_verdicts()
        if previous is None:
            runtime_module._runtimes.pop(loop, None)
        else:
            runtime_module._runtimes[loop] = previous
