"""The relay's added latency: from a progress entry's ``XADD`` to its content chunk on the client's wire.

Run: ``.venv/bin/python -m bench.relay_latency [--requests 20] [--deltas 20] [--interval 0.05]``.

Everything runs on loopback, started here and stopped at the end: a throwaway ``redis-server`` on a free port (or
``--redis-url``), the devhorde, and one front process under uvicorn with pacing off
(``HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS=0``, so each delta is one chunk as it arrives, reference ``pacing.18``).

The devhorde's worker posts no progress and finishes after a fixed delay with a fixed reply; this script plays the
Horde's progress writer instead: for each streamed request it ``XADD``\\ s the reply's deltas to
``horde:chat:stream:<id>`` one at a time, ``--interval`` seconds apart, with the fields the Horde writes (``gen``,
``seq``, ``text``, ``reasoning``, ``model``, ``worker``). Each delta's text is unique, so its chunk is recognised on
arrival. A sample is the time from issuing the ``XADD`` to the moment the client has parsed the chunk's ``data:`` line
(``time.perf_counter`` in this one process, whose event loop also reads the ``XADD`` reply, so the time from the
``XADD`` reply would not be a lower bound). The first delta of each request is reported apart: it includes the
time until the reader adds the newly registered stream to its ``XREAD`` (at most one ``BLOCK 250``). A baseline
measures the same path without the front: ``XADD`` to a reader blocked in ``XREAD`` on its own connection.

Bounded: ``--requests`` sequential streams of ``--deltas`` deltas each (400 samples by default, about 70 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from devhorde.launch import free_port, redis_server_args, wait_http
from oaifront.serve import UVICORN_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
MODEL = "bench/relay-7b"
WORKER_ID = "00000000-0000-4000-8000-00000000be01"
STREAM_DB = 0
API_KEY = "0000000000"
ARRIVAL_WAIT_SECONDS = 2.0
STARTUP_SECONDS = 120.0
"""How long a started process may take to answer: on a loaded 2-core machine Django alone can take 30 s."""
"""How long a delta's chunk is awaited before the next ``XADD``; a missed delta is reported as a failure."""

# ---------------------------------------------------------------------------------------------------------------------
# The stack: Redis, devhorde, front (shared with bench.relay_capacity)


@dataclass
class BenchStack:
    """The processes of one benchmark run; :func:`bench_stack` starts and stops them."""

    workdir: Path
    redis_url: str = ""
    horde_url: str = ""
    front_url: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def control_url(self) -> str:
        return self.horde_url.removesuffix("/api") + "/_devhorde"

    @property
    def front_pid(self) -> int:
        return self.processes["front"].pid

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes[name] = process
        return process

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)

    def put_scenario(self, scenario: dict[str, Any]) -> None:
        httpx.put(f"{self.control_url}/scenario", json=scenario, timeout=10).raise_for_status()

    def reset(self) -> None:
        httpx.post(f"{self.control_url}/reset", timeout=30).raise_for_status()

    def native_requests(self) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.control_url}/requests", timeout=30).json()
        return body["requests"] if isinstance(body, dict) else body


BENCH_MAX_IN_FLIGHT = 20_000
"""The admission caps of a benchmark's front: above every level a benchmark opens (5,000 at most)."""


@contextlib.contextmanager
def bench_stack(
    scenario: dict[str, Any], front_env: dict[str, str], redis_url: str | None = None, workers: int = 1
) -> Iterator[BenchStack]:
    """Start Redis (a throwaway ``redis-server`` unless ``redis_url``), the devhorde with ``scenario`` and one front
    with ``front_env`` (``workers`` uvicorn worker processes behind its port); stop them all on exit. Logs go to a
    temporary folder, printed on failure."""
    stack = BenchStack(Path(tempfile.mkdtemp(prefix="relay-bench-")))
    try:
        if redis_url is None:
            if shutil.which("redis-server") is None:
                raise SystemExit("redis-server is not installed; pass --redis-url redis://127.0.0.1:6379/0")
            port = free_port()
            stack.start("redis", redis_server_args(port, stack.workdir))
            redis_url = f"redis://127.0.0.1:{port}/0"
            _wait_redis(port)
        stack.redis_url = redis_url
        horde_port = free_port()
        devhorde = stack.start(
            "devhorde",
            [
                sys.executable,
                "-m",
                "devhorde",
                "--host",
                "127.0.0.1",
                "--port",
                str(horde_port),
                "--redis-url",
                redis_url,
                "--stream-redis-db",
                str(STREAM_DB),
                "--log-level",
                "warning",
            ],
        )
        stack.horde_url = f"http://127.0.0.1:{horde_port}/api"
        wait_http(f"{stack.horde_url}/v2/status/models?type=text", devhorde, STARTUP_SECONDS)
        stack.put_scenario(scenario)
        front_port = free_port()
        env = {
            "HORDE_URL": stack.horde_url,
            "HORDE_OAI_REDIS_URL": redis_url,
            "HORDE_OAI_STREAM_REDIS_DB": str(STREAM_DB),
            # Every benchmark client is one loopback address: lift the admission caps (oaifront.guards) above the
            # largest level, so the benchmarks measure the front, not its FrontAtCapacity refusals.
            "HORDE_OAI_MAX_IN_FLIGHT": str(BENCH_MAX_IN_FLIGHT),
            "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": str(BENCH_MAX_IN_FLIGHT),
            **front_env,
        }
        front = stack.start(
            "front",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "oaifront.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(front_port),
                "--no-access-log",
                "--log-level",
                "warning",
                *UVICORN_OPTIONS,
                *(["--workers", str(workers)] if workers > 1 else []),
            ],
            env,
        )
        stack.front_url = f"http://127.0.0.1:{front_port}"
        wait_http(f"{stack.front_url}/healthz", front, STARTUP_SECONDS)
        yield stack
    except BaseException:
        print(f"logs: {stack.workdir}", file=sys.stderr)
        raise
    finally:
        stack.stop()


def _wait_redis(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            if sock.recv(16).startswith(b"+PONG"):
                return
        time.sleep(0.05)
    raise RuntimeError(f"redis-server on port {port} did not start")


def bench_scenario(reply: str, finish_after_seconds: float, threads: int) -> dict[str, Any]:
    """One worker that posts no progress (this script writes it) and submits ``reply`` after the delay."""
    return {
        "name": "relay-bench",
        "workers": [
            {
                "name": "bench-1",
                "id": WORKER_ID,
                "model": MODEL,
                "threads": threads,
                "max_length": 4096,
                "reply_style": "fixed",
                "fixed_reply": reply,
                "posts_progress": False,
                "time_to_first_token_seconds": finish_after_seconds,
                "tokens_per_second": 1_000_000,
                "post_interval_seconds": 0,
            }
        ],
    }


def delta_texts(count: int, tag: str = "") -> list[str]:
    """``count`` unique delta texts (``" w001"``, ...), optionally tagged so several requests' texts differ."""
    return [f" {tag}w{seq:03d}" if seq > 1 else f"{tag}w{seq:03d}" for seq in range(1, count + 1)]


def entry_fields(gen: str, seq: int, text: str) -> dict[str, str]:
    """The fields the Horde writes for one progress post."""
    return {"gen": gen, "seq": str(seq), "text": text, "reasoning": "", "model": MODEL, "worker": WORKER_ID}


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process (Linux ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_megabytes(pid: int) -> float:
    """Resident memory of a process in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (``fraction`` in 0..1)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def summary_ms(values: list[float]) -> dict[str, float]:
    """``n``, ``mean``, ``p50``, ``p90``, ``p99`` and ``max`` of ``values`` (seconds), in milliseconds."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "mean": round(statistics.fmean(values) * 1000, 2),
        "p50": round(percentile(values, 0.50) * 1000, 2),
        "p90": round(percentile(values, 0.90) * 1000, 2),
        "p99": round(percentile(values, 0.99) * 1000, 2),
        "max": round(max(values) * 1000, 2),
    }


def machine() -> str:
    """A one-line description of the machine and its load."""
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    return (
        f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {' '.join(load)} at start"
    )


# ---------------------------------------------------------------------------------------------------------------------
# SSE client


@dataclass
class ClientStream:
    """One streamed request read as raw SSE: each content chunk's text and arrival time, the events' order."""

    arrivals: dict[str, float] = field(default_factory=dict)
    """Each content chunk's text and when it arrived (the first time, for a text sent twice)."""
    contents: list[str] = field(default_factory=list)
    timeline: list[tuple[int, float]] = field(default_factory=list)
    """``(content characters received so far, arrival time)`` after each content chunk."""
    request_id: str | None = None
    finish_reason: str | None = None
    error: Any = None
    done: bool = False
    headers_at: float | None = None


async def read_stream(
    client: httpx.AsyncClient,
    front_url: str,
    body: dict[str, Any],
    result: ClientStream,
    headers: asyncio.Event | None = None,
) -> None:
    """POST the streamed request and read its events until ``[DONE]``, filling ``result``."""
    async with client.stream(
        "POST", f"{front_url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"}
    ) as response:
        result.headers_at = time.perf_counter()
        if headers is not None:
            headers.set()
        if response.status_code != 200:
            result.error = (response.status_code, (await response.aread()).decode(errors="replace"))
            return
        async for line in response.aiter_lines():
            now = time.perf_counter()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                result.done = True
                return
            event = json.loads(data)
            if "error" in event:
                result.error = event["error"]
                continue
            result.request_id = event["id"].removeprefix("chatcmpl-")
            if not event["choices"]:
                continue
            choice = event["choices"][0]
            text = choice["delta"].get("content")
            if text:
                result.arrivals.setdefault(text, now)
                result.contents.append(text)
                received = (result.timeline[-1][0] if result.timeline else 0) + len(text)
                result.timeline.append((received, now))
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]


def chat_body(max_tokens: int = 2048) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Relay benchmark."}],
        "stream": True,
        "max_tokens": max_tokens,
    }


# ---------------------------------------------------------------------------------------------------------------------
# The benchmark


async def baseline(redis_url: str, samples: int, interval: float) -> list[float]:
    """From issuing an ``XADD`` to a reader blocked in ``XREAD BLOCK`` on another connection getting the entry (both
    replies read), in seconds: the floor of any relay through this Redis."""
    writer = Redis.from_url(redis_url, db=STREAM_DB)
    reader = Redis.from_url(redis_url, db=STREAM_DB)
    key = "bench:baseline"
    await writer.delete(key)
    latencies: list[float] = []
    last: bytes | str = "0-0"
    try:
        for index in range(samples):
            read = asyncio.ensure_future(reader.xread({key: last}, block=1000))
            await asyncio.sleep(interval)  # the read is blocked on the server by now
            issued = time.perf_counter()
            last = await writer.xadd(key, {"i": str(index)})
            await read
            latencies.append(time.perf_counter() - issued)
    finally:
        await writer.delete(key)
        await writer.aclose()
        await reader.aclose()
    return latencies


async def measure(stack: BenchStack, requests: int, deltas: int, interval: float, join_wait: float) -> dict[str, Any]:
    redis = Redis.from_url(stack.redis_url, db=STREAM_DB)
    first_samples: list[float] = []
    later_samples: list[float] = []
    xadd_rtts: list[float] = []
    failures: list[str] = []
    front_cpu_start = cpu_seconds(stack.front_pid)
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        for index in range(requests):
            texts = delta_texts(deltas, tag=f"r{index}")
            reply = "".join(texts)
            stack.reset()
            stack.put_scenario(
                bench_scenario(reply, finish_after_seconds=join_wait + deltas * interval + 2.0, threads=4)
            )
            result = ClientStream()
            headers = asyncio.Event()
            reading = asyncio.ensure_future(read_stream(client, stack.front_url, chat_body(), result, headers))
            await asyncio.wait_for(headers.wait(), 30)
            if result.error is not None:
                failures.append(f"request {index}: {result.error}")
                await reading
                continue
            (native,) = [entry for entry in stack.native_requests() if entry["state"] in ("waiting", "processing")]
            key = f"horde:chat:stream:{native['id']}"
            await asyncio.sleep(join_wait)  # the stream joins the reader's XREAD within one BLOCK 250
            issued_at: dict[str, float] = {}
            relaying = True
            for seq, text in enumerate(texts, start=1):
                issued_at[text] = time.perf_counter()
                await redis.xadd(key, entry_fields(f"gen-{index}", seq, text))
                xadd_rtts.append(time.perf_counter() - issued_at[text])
                arrival_deadline = time.perf_counter() + (ARRIVAL_WAIT_SECONDS if relaying else 0)
                while text not in result.arrivals and time.perf_counter() < arrival_deadline:
                    await asyncio.sleep(0.0005)
                relaying = text in result.arrivals  # a relay that missed a delta is not waited for again
                await asyncio.sleep(interval)
            await asyncio.wait_for(reading, 60)
            if "".join(result.contents) != reply or result.finish_reason != "stop" or not result.done:
                failures.append(f"request {index}: content mismatch or no finish (error {result.error})")
            missed = [seq for seq, text in enumerate(texts, start=1) if text not in result.arrivals]
            if missed:
                failures.append(f"request {index} ({native['id']}): deltas {missed} not relayed as their own chunks")
            for seq, text in enumerate(texts, start=1):
                if text in result.arrivals:
                    latency = result.arrivals[text] - issued_at[text]
                    (first_samples if seq == 1 else later_samples).append(latency)
        elapsed = time.perf_counter() - started
    front_cpu = cpu_seconds(stack.front_pid) - front_cpu_start
    base = await baseline(stack.redis_url, samples=200, interval=0.005)
    await redis.aclose()
    return {
        "added_latency_ms": summary_ms(later_samples),
        "first_delta_latency_ms": summary_ms(first_samples),
        "xadd_round_trip_ms": summary_ms(xadd_rtts),
        "baseline_xadd_to_xread_ms": summary_ms(base),
        "front_cpu_seconds": round(front_cpu, 2),
        "elapsed_seconds": round(elapsed, 1),
        "failures": failures,
    }


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, measure (printing the result) and return it."""
    parser = argparse.ArgumentParser(prog="python -m bench.relay_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20, help="sequential streamed requests (default 20)")
    parser.add_argument("--deltas", type=int, default=20, help="deltas per request (default 20)")
    parser.add_argument(
        "--interval",
        type=float,
        default=0.05,
        help="seconds between a delta's arrival on the client and the next XADD (default 0.05)",
    )
    parser.add_argument(
        "--join-wait",
        type=float,
        default=0.3,
        help="seconds between the response headers and the first XADD (default 0.3)",
    )
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of a throwaway redis-server")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = parser.parse_args(argv)
    if not (1 <= args.requests <= 200 and 2 <= args.deltas <= 200 and 0 <= args.interval <= 2):
        parser.error("bounded: 1..200 requests, 2..200 deltas, an interval of 0..2 s")
    front_env = {"HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS": "0"}
    description = machine()
    with bench_stack(bench_scenario("x", 1.0, 4), front_env, args.redis_url) as stack:
        result = asyncio.run(measure(stack, args.requests, args.deltas, args.interval, args.join_wait))
    result = {
        "machine": description,
        "requests": args.requests,
        "deltas": args.deltas,
        "interval_seconds": args.interval,
        **result,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"relay latency, {args.requests} requests x {args.deltas} deltas, pacing off ({description})")
        for name in ("added_latency_ms", "first_delta_latency_ms", "xadd_round_trip_ms", "baseline_xadd_to_xread_ms"):
            print(f"  {name:28} {result[name]}")
        print(f"  front CPU {result['front_cpu_seconds']} s over {result['elapsed_seconds']} s")
        print(f"  failures: {result['failures'] or 'none'}")
    return result


def main(argv: list[str] | None = None) -> int:
    return 1 if run(argv)["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
