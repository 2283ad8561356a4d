"""The image route's cost (docs/images.md): the front's CPU and memory per served image request, and the Horde calls
a waiting image request makes, on the devhorde's ``images`` scenario.

1. **served**: ``--served`` requests (``n: 1``, 512x512, ``b64_json`` PNG), ``--concurrency`` at a time; the front's
   CPU seconds over the run per request, its resident memory before and after and its peak (``VmHWM``). The submits
   are paced at the Horde's 2 a second per address, so the run lasts at least ``served / 2`` seconds.
2. **waiting**: ``--waiting`` requests held at a worker that takes an hour, for ``--hold`` seconds after the last
   submit; the checks and status reads the devhorde counted per request and minute, and the front's CPU per waiting
   request and second. Then the clients leave and the cancels are counted.

    .venv/bin/python -m bench.image_cost [--served 40] [--concurrency 8] [--waiting 20] [--hold 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx

from bench.relay_latency import bench_stack, cpu_seconds, rss_megabytes
from devhorde.scenario import load_scenario

BODY = {"model": "dall-e-2", "prompt": "a lighthouse", "size": "512x512", "response_format": "b64_json"}


def peak_megabytes(pid: int) -> float:
    """The peak resident memory of a process in MiB (``VmHWM``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def image_calls(control_url: str) -> dict[str, int]:
    calls: dict[str, int] = httpx.get(f"{control_url}/images", timeout=10).json()["calls"]
    return calls


async def served(front_url: str, pid: int, count: int, concurrency: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)
    statuses: list[int] = []
    async with httpx.AsyncClient(base_url=front_url, timeout=300) as client:

        async def one() -> None:
            async with gate:
                answer = await client.post(
                    "/v1/images/generations", json=BODY, headers={"Authorization": "Bearer 0000000000"}
                )
                statuses.append(answer.status_code)

        rss_before, cpu_before, started = rss_megabytes(pid), cpu_seconds(pid), time.monotonic()
        await asyncio.gather(*(one() for _ in range(count)))
        wall, cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_before
    return {
        "requests": count,
        "ok": statuses.count(200),
        "wall_s": round(wall, 1),
        "cpu_ms_per_request": round(1000 * cpu / count, 1),
        "rss_before_mib": round(rss_before, 1),
        "rss_after_mib": round(rss_megabytes(pid), 1),
        "rss_peak_mib": round(peak_megabytes(pid), 1),
    }


async def waiting(front_url: str, control_url: str, pid: int, count: int, hold: float) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=front_url, timeout=3600) as client:
        tasks = [
            asyncio.ensure_future(
                client.post("/v1/images/generations", json=BODY, headers={"Authorization": "Bearer 0000000000"})
            )
            for _ in range(count)
        ]
        while image_calls(control_url).get("submit", 0) < count:  # paced at 2 a second
            await asyncio.sleep(0.5)
        before, cpu_before, started = image_calls(control_url), cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(hold)
        after, cpu, held = image_calls(control_url), cpu_seconds(pid) - cpu_before, time.monotonic() - started
        rss = rss_megabytes(pid)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(3)
    cancels = image_calls(control_url).get("cancel", 0)
    per_minute = 60 / held / count
    return {
        "waiting": count,
        "held_s": round(held, 1),
        "checks_per_request_minute": round((after.get("check", 0) - before.get("check", 0)) * per_minute, 1),
        "status_reads_per_request_minute": round((after.get("status", 0) - before.get("status", 0)) * per_minute, 2),
        "front_cpu_ms_per_request_second": round(1000 * cpu / held / count, 2),
        "rss_mib": round(rss, 1),
        "cancels_after_leaving": cancels,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--served", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--waiting", type=int, default=20)
    parser.add_argument("--hold", type=float, default=60.0)
    parser.add_argument("--redis-url", default=None, help="a running Redis (default: a throwaway redis-server)")
    args = parser.parse_args(argv)
    scenario = load_scenario("images").model_dump(mode="json")
    slow = json.loads(json.dumps(scenario))
    slow["images"]["workers"][0].update(seconds_per_image=3600, threads=1)
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    with bench_stack(scenario, {}, args.redis_url) as stack:
        results["served"] = asyncio.run(served(stack.front_url, stack.front_pid, args.served, args.concurrency))
        stack.put_scenario(slow)
        results["waiting"] = asyncio.run(
            waiting(stack.front_url, stack.control_url, stack.front_pid, args.waiting, args.hold)
        )
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
