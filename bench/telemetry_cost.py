"""What telemetry costs: the same requests through a front with telemetry off, then on.

``python -m bench.telemetry_cost [--requests 200] [--concurrency 4] [--redis-url URL] [--rounds N] [--json]``

For each mode the benchmark starts Redis (a throwaway ``redis-server`` unless ``--redis-url``), the devhorde (one
worker that answers a fixed reply at once) and one front under uvicorn, warms it up, then sends ``--requests``
non-streamed chat completions, ``--concurrency`` at a time, and reports the latency seen by the client and the front
process's CPU seconds per request (``/proc/<pid>/stat``). Mode ``off`` is the default configuration; mode ``on`` sets
``HORDE_OAI_TELEMETRY_ENABLED=true`` (Logfire with its default processors, the ASGI and httpx instrumentations, the
Loguru bridge, metrics with the histogram views) with nothing exported (``LOGFIRE_SEND_TO_LOGFIRE=false``, no OTLP
endpoint), so the figure is the in-process cost of recording, not of shipping.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import Any

import httpx

from bench.relay_latency import MODEL, bench_scenario, bench_stack, cpu_seconds, machine, summary_ms

MODES: dict[str, dict[str, str]] = {
    "off": {},
    "on": {"HORDE_OAI_TELEMETRY_ENABLED": "true", "LOGFIRE_SEND_TO_LOGFIRE": "false"},
}
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Telemetry benchmark."}], "max_tokens": 64}


async def send(front_url: str, requests: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(requests):
        queue.put_nowait(index)
    async with httpx.AsyncClient(base_url=front_url, timeout=60) as client:

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                started = time.perf_counter()
                response = await client.post("/v1/chat/completions", json=BODY)
                response.raise_for_status()
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def run_mode(mode: str, requests: int, concurrency: int, redis_url: str | None) -> dict[str, Any]:
    env = {"HORDE_OAI_SIGNAL_RECHECK_SECONDS": "0.05", **MODES[mode]}
    with bench_stack(bench_scenario("The tide is high.", 0.0, 64), env, redis_url) as stack:
        asyncio.run(send(stack.front_url, 20, concurrency))  # warm-up: imports, pools, first spans
        cpu_before = cpu_seconds(stack.front_pid)
        started = time.perf_counter()
        latencies = asyncio.run(send(stack.front_url, requests, concurrency))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(stack.front_pid) - cpu_before
    return {
        "mode": mode,
        "latency_ms": summary_ms(latencies),
        "front_cpu_ms_per_request": round(cpu / requests * 1000, 3),
        "requests_per_second": round(requests / elapsed, 1),
    }


def run_interleaved(requests: int, concurrency: int, redis_url: str | None, rounds: int) -> list[dict[str, Any]]:
    """Both modes at once, each its own stack, their requests sent in ``rounds`` alternating batches (off, on, off,
    on, ...) of ``requests // rounds``: a change in the machine's load during the run falls on both modes alike.
    Returns the same results as :func:`run_mode` for each mode, summed over its batches."""
    per_round = max(1, requests // rounds)
    with contextlib.ExitStack() as stacks:
        stacks_by_mode = {
            mode: stacks.enter_context(
                bench_stack(
                    bench_scenario("The tide is high.", 0.0, 64),
                    {"HORDE_OAI_SIGNAL_RECHECK_SECONDS": "0.05", **MODES[mode]},
                    redis_url,
                )
            )
            for mode in MODES
        }
        for stack in stacks_by_mode.values():
            asyncio.run(send(stack.front_url, 20, concurrency))  # warm-up: imports, pools, first spans
        cpu = dict.fromkeys(MODES, 0.0)
        elapsed = dict.fromkeys(MODES, 0.0)
        latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(rounds):
            for mode, stack in stacks_by_mode.items():
                cpu_before = cpu_seconds(stack.front_pid)
                started = time.perf_counter()
                latencies[mode] += asyncio.run(send(stack.front_url, per_round, concurrency))
                elapsed[mode] += time.perf_counter() - started
                cpu[mode] += cpu_seconds(stack.front_pid) - cpu_before
    sent = per_round * rounds
    return [
        {
            "mode": mode,
            "latency_ms": summary_ms(latencies[mode]),
            "front_cpu_ms_per_request": round(cpu[mode] / sent * 1000, 3),
            "requests_per_second": round(sent / elapsed[mode], 1),
        }
        for mode in MODES
    ]


def cost(results: list[dict[str, Any]]) -> dict[str, float]:
    """Telemetry's cost from the two modes' results: front CPU ms per request off and on, the difference, and the
    difference as a percentage of off."""
    by_mode = {result["mode"]: result["front_cpu_ms_per_request"] for result in results}
    off, on = by_mode["off"], by_mode["on"]
    return {
        "off_ms": off,
        "on_ms": on,
        "added_ms": round(on - off, 3),
        "added_percent": round((on - off) / off * 100, 1) if off else 0.0,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--redis-url")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="above 1: both fronts at once, the requests in this many alternating batches (run_interleaved)",
    )
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Both modes; prints their table (or one JSON line with ``--json``) and returns the results and :func:`cost`."""
    args = parse(argv)
    if args.rounds > 1:
        results = run_interleaved(args.requests, args.concurrency, args.redis_url, args.rounds)
    else:
        results = [run_mode(mode, args.requests, args.concurrency, args.redis_url) for mode in MODES]
    summary = {"machine": machine(), "results": results, "cost": cost(results)}
    if args.json:
        print(json.dumps(summary))
        return summary
    print(machine())
    print("| telemetry | n | p50 | p90 | p99 | front CPU per request | requests/s |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        latency = result["latency_ms"]
        print(
            f"| {result['mode']} | {latency['n']} | {latency['p50']} ms | {latency['p90']} ms | {latency['p99']} ms "
            f"| {result['front_cpu_ms_per_request']} ms | {result['requests_per_second']} |"
        )
    added = summary["cost"]
    print(f"telemetry costs {added['added_ms']:+} ms of front CPU per request ({added['added_percent']:+} %)")
    return summary


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
