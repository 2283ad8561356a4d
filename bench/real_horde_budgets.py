"""``python -m bench.real_horde_budgets``: bursts through the front against the REAL AI Horde (chat.horde.budget).

Not part of ``make bench``: it needs the real Horde on loopback (/work/shared/realhorde, ``. /tmp/realhorde/keys.env``
for ``HORDE_URL``, ``CLIENT_KEY`` and ``PROXY_PASSKEY``) and spends its rate limits, which other users of that Horde
share. Two runs, each against a fresh front (``--workers`` uvicorn workers, default one; no Redis unless
``--redis-url``, with which the processes share their pacing):

1. ``one-key``: ``--requests`` chat completions at once on ``CLIENT_KEY``, no passkey. The front paces the submits
   at 2 a second; every request should be served, none 429.
2. ``users``: ``--users`` clients at once, each with its own address (``X-Forwarded-For: 10.77.0.<n>`` from
   loopback, the front trusting that header), through a front with ``HORDE_OAI_PROXY_PASSKEY``; every one served.
   ``--users-key anonymous`` sends no key, so the per-key limit (60 a second) does not hide the per-address budgets.

Each run prints the statuses and error codes, the slowest and the median answer, the wall time and how many 429s the
front waited out itself (its "rate-limited" log lines). Requests go through httpx with no retry of their own, so a
429 the front lets through is counted, not hidden.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from devhorde.launch import free_port, wait_http
from oaifront.serve import UVICORN_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
MODEL = "koboldcpp/Qwen2.5-7B-Instruct"


def start_front(env: dict[str, str], log_path: Path, workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    if "HORDE_OAI_REDIS_URL" not in env:
        full_env.pop("HORDE_OAI_REDIS_URL", None)
    args = [sys.executable, "-m", "uvicorn", "oaifront.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    args += UVICORN_OPTIONS
    if workers > 1:
        args += ["--workers", str(workers)]
    log = log_path.open("wb")
    process = subprocess.Popen([*args, "--no-access-log"], cwd=ROOT, env=full_env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", process, 60 * workers)
    return process, base


async def one(client: httpx.AsyncClient, base: str, headers: dict[str, str], max_tokens: int) -> tuple[int, str, float]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": max_tokens}
    started = time.monotonic()
    response = await client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
    seconds = time.monotonic() - started
    code = "ok" if response.status_code == 200 else str(response.json().get("error", {}).get("code"))
    return response.status_code, code, seconds


async def burst(base: str, header_sets: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.monotonic()
        results = await asyncio.gather(*(one(client, base, headers, max_tokens) for headers in header_sets))
        wall = time.monotonic() - started
    latencies = [seconds for _, _, seconds in results]
    return {
        "statuses": dict(Counter(status for status, _, _ in results)),
        "codes": dict(Counter(code for _, code, _ in results)),
        "median_s": round(statistics.median(latencies), 1),
        "slowest_s": round(max(latencies), 1),
        "wall_s": round(wall, 1),
    }


def run(
    name: str, env: dict[str, str], header_sets: list[dict[str, str]], max_tokens: int, workers: int = 1
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "front.log"
        process, base = start_front(env, log_path, workers)
        try:
            result = asyncio.run(burst(base, header_sets, max_tokens))
        finally:
            process.terminate()
            process.wait(30)
        log = log_path.read_text(errors="replace")
    result["front_429_retries"] = log.count("The Horde rate-limited")
    print(f"{name}: {result}", flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--users-key", choices=["client", "anonymous"], default="client")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--only", choices=["one-key", "users"], default=None)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes of the front")
    parser.add_argument("--redis-url", default=None, help="HORDE_OAI_REDIS_URL: the processes share their pacing")
    args = parser.parse_args(argv)
    horde_url, key, passkey = os.environ["HORDE_URL"], os.environ["CLIENT_KEY"], os.environ["PROXY_PASSKEY"]
    base_env = {"HORDE_URL": horde_url, "HORDE_OAI_LOG_LEVEL": "INFO"}
    if args.redis_url:
        base_env["HORDE_OAI_REDIS_URL"] = args.redis_url
    if args.only in (None, "one-key"):
        headers = [{"Authorization": f"Bearer {key}"}] * args.requests
        label = f"one-key x{args.requests}, {args.workers} worker(s){', Redis' if args.redis_url else ''}"
        run(label, base_env, headers, args.max_tokens, args.workers)
    if args.only in (None, "users"):
        env = {**base_env, "HORDE_OAI_PROXY_PASSKEY": passkey, "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For"}
        auth = {"Authorization": f"Bearer {key}"} if args.users_key == "client" else {}
        headers = [{**auth, "X-Forwarded-For": f"10.77.0.{index + 1}"} for index in range(args.users)]
        run(f"users x{args.users} (passkey, {args.users_key} key)", env, headers, args.max_tokens, args.workers)


if __name__ == "__main__":
    main()
