"""A simulated AI Horde text worker of the lane's own: it pops ``POST /v2/generate/text/pop`` and submits each job
through ``POST /v2/generate/text/submit`` with a chosen ``state`` (``ok``, ``faulted``, ``censored``, ``csam``).

It runs in a thread of the test process (httpx), so a fixture starts one per test and stops it at the end:

    worker = SimWorker(horde_url, key, name="lane-1-w1", models=["lane/chat-ab12"], delay=0.2)
    worker.start()
    worker.wait_registered()   # the first pop answered 200: the worker and its models are on the Horde's lists
    ...
    worker.stop()

A worker with ``prompted=True`` answers a prompt that holds the front's tools or JSON instruction the way the
devhorde's text API does (``devhorde.prompted``: a call in the model family's own syntax, a text answer quoting the
result once a tool result is in the prompt, JSON for the JSON instruction) and any other prompt with ``text``.

Every popped job and every submit answer is kept (``jobs``, ``submits``). Stopping lets a job already popped finish
(``stop(abandon=True)`` drops it, so the Horde sees a worker that took a job and vanished). Runnable alone as well:
``python -m tests.realhorde.worker --key KEY --name NAME --models M1,M2 --state censored``.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from devhorde.prompted import prompted_reply
from devhorde.replies import conversation_seed

BRIDGE_AGENT = "AI Horde Worker:24:https://github.com/Haidra-Org/AI-Horde-Worker"
CLIENT_AGENT = "horde-oai-realhorde-lane-worker:1:local"
DEFAULT_TEXT = "Hello from the lane's worker."


@dataclass
class SimWorker:
    """One simulated text worker (see the module docstring); ``text`` may hold ``{prompt_tail}``."""

    horde_url: str
    key: str
    name: str
    models: list[str]
    max_length: int = 512
    max_context_length: int = 4096
    threads: int = 1
    delay: float = 0.2
    state: str = "ok"
    text: str = DEFAULT_TEXT
    prompted: bool = False
    idle_sleep: float = 1.0
    """Seconds between empty pops: the harness's own worker's (``WORKER_IDLE_SLEEP``, 1.0). Every pop costs the real
    Horde a request and its database queries, and the lane's ten-odd workers poll all along the lane."""
    bridge_agent: str = BRIDGE_AGENT
    jobs: list[dict[str, Any]] = field(default_factory=list)
    submits: list[dict[str, Any]] = field(default_factory=list)
    pop_errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _abandon: threading.Event = field(default_factory=threading.Event)
    _registered: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SimWorker:
        self._thread = threading.Thread(target=self._run, name=f"simworker-{self.name}", daemon=True)
        self._thread.start()
        return self

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Wait for the first pop answered 200 (the Horde has the worker, its models and limits from then on)."""
        if not self._registered.wait(timeout):
            raise RuntimeError(f"worker {self.name} got no 200 pop in {timeout} s: {self.pop_errors[-3:]}")

    def stop(self, *, abandon: bool = False, timeout: float = 30.0) -> None:
        if abandon:
            self._abandon.set()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def popped_prompts(self) -> list[str]:
        return [str((job.get("payload") or {}).get("prompt", "")) for job in self.jobs]

    def _pop_body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "models": self.models,
            "max_length": self.max_length,
            "max_context_length": self.max_context_length,
            "nsfw": True,
            "threads": self.threads,
            "bridge_agent": self.bridge_agent,
            "amount": 1,
            "softprompts": [],
        }

    def _run(self) -> None:
        base = self.horde_url.rstrip("/") + "/v2/generate/text"
        headers = {"apikey": self.key, "Client-Agent": CLIENT_AGENT}
        with httpx.Client(headers=headers, timeout=30) as http:
            while not self._stop.is_set():
                try:
                    answer = http.post(f"{base}/pop", json=self._pop_body())
                except httpx.HTTPError as exc:
                    self.pop_errors.append(repr(exc))
                    self._stop.wait(1.0)
                    continue
                if answer.status_code != 200:
                    self.pop_errors.append(f"{answer.status_code} {answer.text[:300]}")
                    self._stop.wait(float(answer.headers.get("Retry-After") or 1) if answer.status_code == 429 else 2)
                    continue
                self._registered.set()
                job = answer.json()
                if not job.get("id"):
                    self._stop.wait(self.idle_sleep)
                    continue
                self.jobs.append(job)
                self._abandon.wait(self.delay)
                if self._abandon.is_set():
                    return
                prompt = str((job.get("payload") or {}).get("prompt", ""))
                generation = self.text.replace("{prompt_tail}", prompt[-40:])
                if self.prompted:
                    generation = prompted_reply(prompt, conversation_seed(prompt)) or generation
                body = {"id": job["id"], "generation": generation, "state": self.state, "seed": 0}
                try:
                    submitted = http.post(f"{base}/submit", json=body)
                    self.submits.append({"id": job["id"], "status": submitted.status_code, "body": submitted.text})
                except httpx.HTTPError as exc:
                    self.submits.append({"id": job["id"], "status": None, "body": repr(exc)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--horde-url", default="http://127.0.0.1:17001/api")
    parser.add_argument("--key", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--models", required=True, help="comma-separated")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--max-context-length", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--state", choices=["ok", "faulted", "censored", "csam"], default="ok")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    args = parser.parse_args()
    worker = SimWorker(
        args.horde_url,
        args.key,
        args.name,
        [m for m in args.models.split(",") if m],
        max_length=args.max_length,
        max_context_length=args.max_context_length,
        threads=args.threads,
        delay=args.delay,
        state=args.state,
        text=args.text,
    ).start()
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        worker.stop()


if __name__ == "__main__":
    main()
