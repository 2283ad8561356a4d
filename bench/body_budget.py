"""The front's memory under concurrent maximum bodies, with and without the request-body budget (issue 35).

Run: ``.venv/bin/python -m bench.body_budget [--clients 16] [--budgets unbounded,default]``.

For each budget a fresh front (one uvicorn worker, no Redis, ``HORDE_URL`` a closed loopback port, so a request that
passes validation ends quickly with 502 ``HordeUnavailable`` and nothing else holds memory) receives ``--clients``
chat completions at once, each body just under the default ``HORDE_OAI_MAX_BODY_BYTES`` (one user message of text).
The front's resident memory (``VmRSS``) is sampled every 10 ms from before the burst until every answer is in:
baseline, peak, and after; and the answers' statuses are counted. ``unbounded`` sets
``HORDE_OAI_MAX_BUFFERED_BODY_BYTES`` beyond any burst (the front before the budget existed), ``default`` leaves the
setting at its default (two maximum bodies).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.relay_latency import machine, rss_megabytes
from chat.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_BUFFERED_BODY_BYTES
from devhorde.launch import free_port, wait_http

UNBOUNDED = 1 << 50
"""A budget no burst reaches: the front as it was before the budget."""
SAMPLE_SECONDS = 0.01
DEADLINE_SECONDS = 300.0


def maximum_body() -> bytes:
    """A chat completions body of just under :data:`DEFAULT_MAX_BODY_BYTES` bytes."""
    frame = json.dumps({"model": "bench/model", "messages": [{"role": "user", "content": ""}]}).encode()
    text = "a" * (DEFAULT_MAX_BODY_BYTES - len(frame) - 16)
    return json.dumps({"model": "bench/model", "messages": [{"role": "user", "content": text}]}).encode()


async def burst(url: str, body: bytes, clients: int) -> Counter[int | str]:
    """``clients`` posts of ``body`` at once; their statuses."""
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=DEADLINE_SECONDS, limits=limits) as client:

        async def one() -> int | str:
            try:
                response = await client.post(
                    f"{url}/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
                )
            except httpx.TransportError as error:  # refused on its head and closed while the client still sent
                return type(error).__name__
            return response.status_code

        statuses = await asyncio.gather(*(one() for _ in range(clients)))
    return Counter(statuses)


def run(budget: int | None, clients: int, body: bytes) -> dict[str, object]:
    """One fresh front, one burst; its RSS figures and statuses."""
    import subprocess  # noqa: PLC0415 - only the runner starts processes

    port = free_port()
    env = {
        "HORDE_URL": f"http://127.0.0.1:{free_port()}/api",
        "HORDE_OAI_REDIS_URL": "",
        "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": str(max(clients, 256)),
    }
    if budget is not None:
        env["HORDE_OAI_MAX_BUFFERED_BODY_BYTES"] = str(budget)
    log = Path(tempfile.mkdtemp(prefix="body-budget-")) / "front.log"
    args = [sys.executable, "-m", "uvicorn", "oaifront.asgi:application", "--port", str(port), "--no-access-log"]
    import os  # noqa: PLC0415

    front = subprocess.Popen(args, env={**os.environ, **env}, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/healthz", front, timeout=60)
        time.sleep(1)
        baseline = rss_megabytes(front.pid)
        samples: list[float] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                samples.append(rss_megabytes(front.pid))
                time.sleep(SAMPLE_SECONDS)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        statuses = asyncio.run(burst(url, body, clients))
        wall = time.monotonic() - started
        done.set()
        sampler.join()
        return {
            "budget": "unbounded" if budget == UNBOUNDED else f"{budget or DEFAULT_MAX_BUFFERED_BODY_BYTES}",
            "baseline_mib": round(baseline, 1),
            "peak_mib": round(max(samples), 1),
            "after_mib": round(rss_megabytes(front.pid), 1),
            "statuses": {str(key): count for key, count in statuses.items()},
            "wall_s": round(wall, 2),
        }
    finally:
        front.terminate()
        front.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--budgets", default="unbounded,default")
    options = parser.parse_args()
    body = maximum_body()
    print(f"# {machine()}; {options.clients} bodies of {len(body)} bytes at once")
    for name in options.budgets.split(","):
        budget = UNBOUNDED if name == "unbounded" else None if name == "default" else int(name)
        print(json.dumps(run(budget, options.clients, body)))


if __name__ == "__main__":
    main()
