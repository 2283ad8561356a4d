"""The front's own time before its submit reaches the Horde, for users with a key and an address of their own (issue
37: "pacing of a shared key is legitimate; anything else is not"), on the devhorde's text API.

Run: ``.venv/bin/python -m bench.before_submit [--users 200] [--arrival 2] [--rounds 1]``.

The devhorde's ``text-only`` scenario (no chat routes: the front takes the text API path, reading the model list,
the worker list and the performance totals before its submit) with one worker of one thread whose first token comes
after 600 s, so every request after the first stays queued. The front runs as a public deployment would: the proxy
passkey and ``X-Forwarded-For`` trusted, so each user spends their own address budget; each of ``--users`` users has
an API key and an address of their own and sends one non-streamed chat completion, the users arriving evenly over
``--arrival`` seconds. Once every request is listed at the devhorde (or 60 s passed), the time from each user's send
to the devhorde's ``submitted_epoch`` of its request (matched by key) gives p50 / p95 / max; the clients then close
and the front cancels. No pacing wait applies: no key or address sends more than one submit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx

from bench.front_cost import load_average
from bench.relay_latency import bench_stack, machine, percentile
from devhorde.scenario import SCENARIOS_DIR

MODEL = "koboldcpp/Meta-Llama-3-8B-Instruct"
PASSKEY = "bench-passkey-0123456789"


def scenario() -> dict[str, Any]:
    """``text-only`` with its first worker alone, one thread, a first token after 600 s."""
    document: dict[str, Any] = json.loads((SCENARIOS_DIR / "text-only.json").read_text())
    worker = next(worker for worker in document["workers"] if worker["model"] == MODEL)
    document["workers"] = [{**worker, "threads": 1, "time_to_first_token_seconds": 600}]
    return document


async def run(users: int, arrival: float) -> dict[str, Any]:
    env = {"HORDE_OAI_PROXY_PASSKEY": PASSKEY, "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For"}
    with bench_stack(scenario(), env) as stack:
        load = load_average()
        sent: dict[str, float] = {}
        limits = httpx.Limits(max_connections=users + 10, max_keepalive_connections=users + 10)
        async with (
            httpx.AsyncClient(base_url=stack.front_url, timeout=600, limits=limits) as client,
            httpx.AsyncClient(base_url=stack.horde_url.removesuffix("/api"), timeout=30) as control,
        ):
            # One request first, so the model list, worker list and totals are cached as in a running front.
            warm = asyncio.ensure_future(user(client, "warm-key", "10.9.9.9", sent))
            await wait_listed(control, 1, 30)

            tasks = []
            for index in range(users):
                tasks.append(asyncio.ensure_future(user(client, f"user-key-{index}", address(index), sent)))
                await asyncio.sleep(arrival / users)
            listed = await wait_listed(control, users + 1, 60)
            for task in [warm, *tasks]:
                task.cancel()
            await asyncio.gather(warm, *tasks, return_exceptions=True)
    submitted = {entry["apikey"]: entry["submitted_epoch"] for entry in listed}
    before = sorted((submitted[key] - at) * 1000 for key, at in sent.items() if key in submitted and key != "warm-key")
    return {
        "users": users,
        "arrival_s": arrival,
        "load": load,
        "submitted": len(before),
        "before_submit_ms": {
            "p50": round(percentile(before, 0.5), 1) if before else None,
            "p95": round(percentile(before, 0.95), 1) if before else None,
            "max": round(before[-1], 1) if before else None,
        },
    }


def address(index: int) -> str:
    return f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"


async def user(client: httpx.AsyncClient, key: str, forwarded_for: str, sent: dict[str, float]) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Before submit."}], "max_tokens": 64}
    headers = {"Authorization": f"Bearer {key}", "X-Forwarded-For": forwarded_for}
    sent[key] = time.time()
    await client.post("/v1/chat/completions", json=body, headers=headers)


async def wait_listed(control: httpx.AsyncClient, count: int, seconds: float) -> list[dict[str, Any]]:
    """The devhorde's text requests once ``count`` are listed, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        listed = [entry for entry in (await control.get("/_devhorde/requests")).json() if entry.get("api") == "text"]
        if len(listed) >= count or time.monotonic() > deadline:
            return listed
        await asyncio.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--arrival", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    print(machine())
    for _ in range(args.rounds):
        print(json.dumps(asyncio.run(run(args.users, args.arrival))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
