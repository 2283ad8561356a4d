"""What the front costs per request and per waiting request, measured against a floor in the same run.

Run: ``.venv/bin/python -m bench.front_cost [--part nonstream,workers,waiting] [--levels 1,16,128] [--seconds 6]
[--workers-level 64] [--waiting 100,1000,5000]``.

**Non-streamed cost** (rows 1 and 2 of ``make bench``). A throwaway ``redis-server``, the devhorde (one worker,
512 threads, no latency, a fixed 8-word reply), the front with Redis (one uvicorn worker, production defaults) and
:mod:`bench.passthrough` (the bare pass-through) all on loopback. For each concurrency ``c`` a closed loop of ``c``
keep-alive connections, each sending one request after another for ``--seconds``, against, in this order: the front
(an OpenAI body), the pass-through (the native payload), and the native calls made directly (submit, then status
reads back to back until done, by this process). Per target: served requests per second, latency p50 / p99, and
for the front and the pass-through their CPU seconds per served request (``/proc/<pid>/stat``). The latency the
front adds is its latency minus the direct calls' at the same ``c``. Every request must succeed; a failure is
counted and printed.

**Waiting cost** (row 3). The devhorde's one worker has 1 thread and a first token after 600 s, so after the first
request every other one stays queued. ``N`` non-streamed requests are opened at ``--open-rate`` a second (``N``
client sockets, ``RLIMIT_NOFILE`` raised for this process and the ones it starts; clients arrive over time, as they
do: a burst of thousands at the same instant measures admission, not waiting); once they are all submitted (the
devhorde lists them) and the settle time passed, the front's CPU share of one core and its RSS are read over the
window. Then the clients close their sockets (the front cancels the requests) and the next level runs on a fresh
stack. With Redis on and with Redis off (``HORDE_OAI_REDIS_URL`` empty: the waiter re-reads every
``signal_recheck_seconds``). With Redis on, the settle time and the window default to the steady state of the
backed-off timer (:func:`steady_state_seconds`): settle until every waiter's timer reached its ceiling, then a
window of one whole ceiling, so every waiter re-reads once in it; with Redis off, 5 s and 10 s.

**The deep queue** (row 7, ``--part queue``) and **the burst** (row 8, ``--part burst``): see :func:`deep_queue` and
:func:`burst` (issue 23).

**Scale-out** (row 6). The non-streamed closed loop of ``--workers-level`` clients against a front with one uvicorn
worker, then against a fresh stack whose front has two (``uvicorn --workers 2``, one port, Redis shared); served
requests per second of each, the front's CPU (every worker's) per request, and the ratio of the two rates. The
devhorde and this client share the same cores, so on a 2-core machine the ratio is what is left to the front, not
what two cores of its own would give.

Everything is bounded: fixed durations, a fixed number of levels, every wait with a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.edge import running_edge
from bench.relay_latency import (
    API_KEY,
    MODEL,
    STARTUP_SECONDS,
    WORKER_ID,
    BenchStack,
    bench_stack,
    cpu_seconds,
    machine,
    percentile,
    rss_megabytes,
)
from chat.settings import FrontSettings
from chat.waiting.read_schedule import backoff_ceiling
from devhorde.launch import free_port, wait_http

REPLY = "The quick brown fox jumps over the lazy dog."
WAIT_FIRST_TOKEN_SECONDS = 600.0
"""The waiting scenario's first token: longer than any level, so queued requests stay queued."""
OPEN_FILES = 16_384
"""The ``RLIMIT_NOFILE`` soft limit asked for (5,000 waiting clients need 5,000 sockets here and in the front)."""
MAX_DIRECT_POLLS = 10_000
WAITING_BUDGET_SECONDS = 3600
"""``HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS`` of the waiting benchmark's front: longer than any level's wait."""


def scenario(threads: int, first_token_seconds: float) -> dict[str, Any]:
    """One worker on :data:`bench.relay_latency.MODEL` that answers :data:`REPLY`."""
    return {
        "name": "front-cost",
        "queue_position_delay_seconds": 0,
        "workers": [
            {
                "name": "bench-1",
                "id": WORKER_ID,
                "model": MODEL,
                "threads": threads,
                "max_length": 4096,
                "reply_style": "fixed",
                "fixed_reply": REPLY,
                "posts_progress": False,
                "time_to_first_token_seconds": first_token_seconds,
                "tokens_per_second": 1_000_000,
                "post_interval_seconds": 0,
            }
        ],
    }


OPENAI_BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "Benchmark."}], "max_tokens": 64}
).encode()
NATIVE_BODY = json.dumps(
    {"models": [MODEL], "messages": [{"role": "user", "content": "Benchmark."}], "params": {"max_length": 64}}
).encode()


def load_average() -> str:
    """The one-minute load average (``/proc/loadavg``): the machine is shared, so each figure carries it."""
    with open("/proc/loadavg") as loadavg:
        return loadavg.read().split()[0]


def raise_open_files() -> int:
    """Raise this process's ``RLIMIT_NOFILE`` soft limit (children inherit it); return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---------------------------------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 keep-alive client: the load generator must cost far less than what it measures.


class Connection:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1:port (answers with Content-Length or chunked)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 20)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        assert self.reader is not None
        assert self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"apikey: {API_KEY}\r\nClient-Agent: bench:0:none\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        length = -1
        chunked = False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readline()
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readline()
            return status, b"".join(parts)
        return status, await self.reader.readexactly(length) if length >= 0 else await self.reader.read()


# ---------------------------------------------------------------------------------------------------------------------
# Non-streamed cost


@dataclass
class LoopResult:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cpu: float | None = None

    def row(self) -> dict[str, Any]:
        served = len(self.latencies)
        row: dict[str, Any] = {
            "served": served,
            "failures": len(self.failures),
            "rps": round(served / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": round(percentile(self.latencies, 0.5) * 1000, 2) if served else None,
            "p99_ms": round(percentile(self.latencies, 0.99) * 1000, 2) if served else None,
        }
        if self.cpu is not None and served:
            row["cpu_ms_per_request"] = round(self.cpu / served * 1000, 2)
        if self.failures:
            row["first_failure"] = self.failures[0][:200]
        return row


async def abandon(tasks: Sequence[asyncio.Task[Any]], conns: Sequence[Connection]) -> None:
    """Cancel the requests still open, close their connections (the front sees each client go) and wait until every
    task has ended."""
    for task in tasks:
        task.cancel()
    for conn in conns:
        conn.close()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _one_front(conn: Connection, path: str, body: bytes) -> None:
    status, answer = await conn.request("POST", path, body)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {answer[:200]!r}")


async def _one_direct(conn: Connection, api: str) -> None:
    status, answer = await conn.request("POST", f"{api}/v2/generate/chat/async", NATIVE_BODY)
    if status != 202:
        raise RuntimeError(f"submit HTTP {status}: {answer[:200]!r}")
    request_id = json.loads(answer)["id"]
    for _ in range(MAX_DIRECT_POLLS):
        status, answer = await conn.request("GET", f"{api}/v2/generate/chat/status/{request_id}")
        if status != 200:
            raise RuntimeError(f"status HTTP {status}: {answer[:200]!r}")
        if json.loads(answer).get("done"):
            return
    raise RuntimeError("not done")


async def closed_loop(port: int, concurrency: int, seconds: float, one: Any, pid: int | None) -> LoopResult:
    """``concurrency`` connections each running ``one(conn)`` back to back for ``seconds``."""
    result = LoopResult()
    conns = [Connection(port) for _ in range(concurrency)]
    for conn in conns:
        await conn.open()
    start = time.perf_counter()
    deadline = start + seconds
    cpu_before = cpu_seconds(pid) if pid else 0.0

    async def client(conn: Connection) -> None:
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            try:
                await asyncio.wait_for(one(conn), 60)
            except Exception as error:  # noqa: BLE001 - every failure is counted and reported
                result.failures.append(repr(error))
                conn.close()
                await asyncio.sleep(0.05)
                continue
            result.latencies.append(time.perf_counter() - began)

    await asyncio.gather(*(client(conn) for conn in conns))
    result.seconds = time.perf_counter() - start
    if pid:
        result.cpu = cpu_seconds(pid) - cpu_before
    for conn in conns:
        conn.close()
    return result


@contextlib.contextmanager
def passthrough(stack: BenchStack) -> Iterator[tuple[int, int]]:
    port = free_port()
    process = stack.start(
        "passthrough",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.passthrough:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        {"HORDE_URL": stack.horde_url},
    )
    wait_http(f"http://127.0.0.1:{port}/", process, STARTUP_SECONDS)
    try:
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(10)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


async def nonstream(levels: list[int], seconds: float, front_env: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    with bench_stack(scenario(512, 0.0), front_env) as stack, passthrough(stack) as (pt_port, pt_pid):
        front_port = port_of(stack.front_url)
        horde_port = port_of(stack.horde_url)
        api = "/api"
        # Warm each path (imports, pools, first-request work).
        await closed_loop(front_port, 4, 1.0, lambda c: _one_front(c, "/v1/chat/completions", OPENAI_BODY), None)
        await closed_loop(pt_port, 4, 1.0, lambda c: _one_front(c, "/", NATIVE_BODY), None)
        for level in levels:
            load = load_average()
            front = await closed_loop(
                front_port,
                level,
                seconds,
                lambda c: _one_front(c, "/v1/chat/completions", OPENAI_BODY),
                stack.front_pid,
            )
            bare = await closed_loop(pt_port, level, seconds, lambda c: _one_front(c, "/", NATIVE_BODY), pt_pid)
            direct = await closed_loop(horde_port, level, seconds, lambda c: _one_direct(c, api), None)
            stack.reset()
            rows.append(
                {"c": level, "load": load, "front": front.row(), "passthrough": bare.row(), "direct": direct.row()}
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# Scale-out: one worker process, then two behind the same port


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc/<pid>/task/*/children``)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += process_tree(int(child))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (a uvicorn master and its workers)."""
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(member)
    return total


async def scale_out(level: int, seconds: float) -> dict[str, Any]:
    """The non-streamed closed loop at ``level`` clients against one front worker, then two."""
    row: dict[str, Any] = {"c": level, "load": load_average()}
    for workers in (1, 2):
        with bench_stack(scenario(512, 0.0), {}, workers=workers) as stack:
            front_port = port_of(stack.front_url)
            one = lambda c: _one_front(c, "/v1/chat/completions", OPENAI_BODY)  # noqa: E731
            await closed_loop(front_port, max(4, 2 * workers), 1.5, one, None)  # warm every worker
            cpu_before = tree_cpu_seconds(stack.front_pid)
            result = await closed_loop(front_port, level, seconds, one, None)
            result.cpu = tree_cpu_seconds(stack.front_pid) - cpu_before
            row[f"workers_{workers}"] = result.row()
    one_rate, two_rate = row["workers_1"]["rps"], row["workers_2"]["rps"]
    row["ratio"] = round(two_rate / one_rate, 2) if one_rate else None
    print(json.dumps(row), flush=True)
    return row


# ---------------------------------------------------------------------------------------------------------------------
# Waiting cost


def steady_state_seconds(count: int) -> tuple[float, float]:
    """``(settle, window)`` for ``count`` requests waiting with Redis on and the front's default settings: the
    waiter's timer doubles from ``signal_recheck_seconds`` to its ceiling
    (``chat.waiting.read_schedule.backoff_ceiling``: at least ``count / signal_recheck_reads_per_second``); settle
    until the last read before the ceiling, then one whole ceiling. 100 waiting: 31 s and 30 s; 1,000: 63 s and
    40 s; 5,000: 255 s and 200 s.
    """
    defaults = FrontSettings()
    ceiling = backoff_ceiling(defaults, count)
    delay, settle = defaults.signal_recheck_seconds, 0.0
    while delay < ceiling:
        settle += delay
        delay *= 2
    return settle, ceiling


async def hold_waiting(
    stack: BenchStack, count: int, settle: float, window: float, open_rate: float = 50.0
) -> dict[str, Any]:
    front_port = port_of(stack.front_url)
    conns = [Connection(front_port) for _ in range(count)]
    tasks: list[asyncio.Task[Any]] = []
    opened = 0
    began = time.monotonic()
    for conn in conns:
        try:
            await conn.open()
        except OSError:
            break
        opened += 1
        tasks.append(asyncio.ensure_future(conn.request("POST", "/v1/chat/completions", OPENAI_BODY)))
        await asyncio.sleep(max(0.0, began + opened / open_rate - time.monotonic()))
    # All submitted: the devhorde lists them (bounded wait).
    deadline = time.monotonic() + max(60.0, count / 25)
    listed = 0
    while time.monotonic() < deadline:
        async with httpx.AsyncClient(timeout=30) as http:
            body = (await http.get(f"{stack.control_url}/requests")).json()
        listed = len(body["requests"] if isinstance(body, dict) else body)
        if listed >= opened:
            break
        await asyncio.sleep(1.0)
    await asyncio.sleep(settle)
    pid = stack.front_pid
    load = load_average()
    horde_pid = stack.processes["devhorde"].pid
    cpu_before, horde_before, started = cpu_seconds(pid), cpu_seconds(horde_pid), time.monotonic()
    await asyncio.sleep(window)
    elapsed = time.monotonic() - started
    cpu = (cpu_seconds(pid) - cpu_before) / elapsed * 100
    horde_cpu = (cpu_seconds(horde_pid) - horde_before) / elapsed * 100
    answered = sum(1 for task in tasks if task.done())
    early: dict[str, int] = {}
    early_example = ""
    for task in tasks:
        if task.done():
            outcome = f"HTTP {task.result()[0]}" if task.exception() is None else type(task.exception()).__name__
            early[outcome] = early.get(outcome, 0) + 1
            if not early_example and task.exception() is None:
                early_example = task.result()[1][:300].decode(errors="replace")
    row = {
        "waiting": count,
        "opened": opened,
        "submitted": listed,
        "answered_early": answered,
        **({"answered_early_as": early, "answered_early_example": early_example} if early else {}),
        "front_cpu_pct": round(cpu, 1),
        "front_rss_mib": round(rss_megabytes(pid), 1),
        "devhorde_cpu_pct": round(horde_cpu, 1),
        "load": load,
    }
    await abandon(tasks, conns)
    return row


async def waiting(
    levels: list[int], settle: float | None, window: float | None, redis: bool, open_rate: float
) -> list[dict[str, Any]]:
    """One row per level; ``settle`` / ``window`` None: :func:`steady_state_seconds` with Redis, 5 s / 10 s without."""
    rows = []
    # The requests must outlive the settle time and the window (the 5,000 level: 255 s + 200 s after the last one
    # opened), so the non-streamed budget is raised above the 300 s default.
    front_env = {"HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": str(WAITING_BUDGET_SECONDS)}
    if not redis:
        front_env["HORDE_OAI_REDIS_URL"] = ""
    for level in levels:
        steady = steady_state_seconds(level) if redis else (5.0, 10.0)
        level_settle = steady[0] + 2.0 if settle is None else settle
        level_window = steady[1] if window is None else window
        with bench_stack(scenario(1, WAIT_FIRST_TOKEN_SECONDS), front_env) as stack:
            row = await hold_waiting(stack, level, level_settle, level_window, open_rate)
        row.update(redis=redis, settle_seconds=level_settle, window_seconds=level_window)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


DEEP_QUEUE_SCENARIO = Path(__file__).resolve().parent.parent / "devhorde" / "scenarios" / "deep-queue.json"
"""The deep queue: one worker with 4 threads, about 3 s per 16-token generation."""
DEEP_QUEUE_BODY = json.dumps(
    {"model": "devhorde/deep-queue-4b", "messages": [{"role": "user", "content": "Benchmark."}], "max_tokens": 16}
).encode()


async def _timed_request(conn: Connection) -> tuple[float, int, bytes]:
    status, body = await conn.request("POST", "/v1/chat/completions", DEEP_QUEUE_BODY)
    return time.time(), status, body


async def _devhorde_requests(stack: BenchStack) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=60) as http:
        body = (await http.get(f"{stack.control_url}/requests")).json()
    return [row for row in (body["requests"] if isinstance(body, dict) else body) if row.get("api") == "chat"]


async def deep_queue(count: int, settle: float, window: float, open_rate: float) -> dict[str, Any]:
    """``count`` non-streamed requests opened at ``open_rate`` a second into the ``deep-queue`` scenario, Redis off;
    after ``settle`` seconds, over ``window``: the front's CPU share of one core and the status reads per second the
    devhorde answered (its ``status_reads``); for every request answered from the settle on, the delay between the
    devhorde marking it done (``done_epoch``) and this client having the whole reply: median, p99 and max. Every
    answer must be a 200.
    """
    scenario_document = json.loads(DEEP_QUEUE_SCENARIO.read_text())
    front_env = {"HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": str(WAITING_BUDGET_SECONDS), "HORDE_OAI_REDIS_URL": ""}
    with bench_stack(scenario_document, front_env) as stack:
        front_port = port_of(stack.front_url)
        conns = [Connection(front_port) for _ in range(count)]
        tasks: list[asyncio.Task[tuple[float, int, bytes]]] = []
        began = time.monotonic()
        for conn in conns:
            await conn.open()
            tasks.append(asyncio.ensure_future(_timed_request(conn)))
            await asyncio.sleep(max(0.0, began + len(tasks) / open_rate - time.monotonic()))
        await asyncio.sleep(settle)
        settled_epoch = time.time()
        pid = stack.front_pid
        load = load_average()
        reads_before = sum(row["status_reads"] for row in await _devhorde_requests(stack))
        cpu_before, started = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(window)
        elapsed = time.monotonic() - started
        cpu = (cpu_seconds(pid) - cpu_before) / elapsed * 100
        rows = await _devhorde_requests(stack)
        reads = (sum(row["status_reads"] for row in rows) - reads_before) / elapsed
        done_at = {row["id"]: row["done_epoch"] for row in rows if row["done_epoch"] is not None}
        delays: list[float] = []
        failures: dict[str, int] = {}
        for task in tasks:
            if not task.done():
                continue
            if task.exception() is not None:
                failures[type(task.exception()).__name__] = failures.get(type(task.exception()).__name__, 0) + 1
                continue
            received, status, body = task.result()
            if status != 200:
                failures[f"HTTP {status}"] = failures.get(f"HTTP {status}", 0) + 1
                continue
            request_id = json.loads(body)["id"].removeprefix("chatcmpl-")
            finished = done_at.get(request_id)
            if finished is not None and finished >= settled_epoch - settle / 2:
                delays.append(received - finished)
        answered = sum(1 for task in tasks if task.done())
        await abandon(tasks, conns)
    row = {
        "waiting": count,
        "redis": False,
        "answered": answered,
        "failures": failures,
        "front_cpu_pct": round(cpu, 1),
        "status_reads_per_second": round(reads, 1),
        "delivery_samples": len(delays),
        "delivery_p50_s": round(percentile(delays, 0.5), 3) if delays else None,
        "delivery_p99_s": round(percentile(delays, 0.99), 3) if delays else None,
        "delivery_max_s": round(max(delays), 3) if delays else None,
        "settle_seconds": settle,
        "window_seconds": window,
        "load": load,
    }
    print(json.dumps(row), flush=True)
    return row


async def burst(
    count: int, hold: float, front_env: dict[str, str], *, connect_first: bool = False, edge: bool = False
) -> dict[str, Any]:
    """``count`` non-streamed requests opened at once from this one address into the ``deep-queue`` scenario (Redis
    on, the default caps: ``HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT`` admitted, the rest refused 503 ``FrontAtCapacity``),
    by :mod:`bench.burst_client` in a process of its own (each request written as soon as its connection is made;
    ``connect_first``: once every connection is). The refusals' time from their connect started to the whole answer
    (median, p99, max, how many over 50 and 500 ms) and from their request sent; the front's CPU seconds over the
    burst; after ``hold`` seconds, the admitted requests that ended in anything but a 200 (there should be none: they
    wait in the queue; the client then closes them all and the front cancels them). ``edge``: through nginx with
    deploy/nginx.conf (bench.edge; the front reads ``X-Forwarded-For``), whose per-address limits refuse first.
    """
    scenario_document = json.loads(DEEP_QUEUE_SCENARIO.read_text())
    fields = FrontSettings.model_fields
    env = {
        "HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": str(WAITING_BUDGET_SECONDS),
        # The front's default caps (bench_stack lifts them for the other benchmarks).
        "HORDE_OAI_MAX_IN_FLIGHT": str(fields["max_in_flight"].default),
        "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": str(fields["max_in_flight_per_client"].default),
        **({"HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For"} if edge else {}),
        **front_env,
    }
    with contextlib.ExitStack() as exits:
        stack = exits.enter_context(bench_stack(scenario_document, env))
        target = port_of(stack.front_url)
        if edge:
            prefix = Path(exits.enter_context(tempfile.TemporaryDirectory(prefix="bench-edge-")))
            target = exits.enter_context(running_edge(prefix, stack.front_url))
        load = load_average()
        cpu_before = cpu_seconds(stack.front_pid)
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.burst_client",
            "--port",
            str(target),
            "--count",
            str(count),
            "--body",
            DEEP_QUEUE_BODY.decode(),
            "--api-key",
            API_KEY,
            "--timeout",
            str(hold),
            *(["--connect-first"] if connect_first else []),
            stdout=asyncio.subprocess.PIPE,
        )
        # The refusals come first: the front's CPU is read once they are all in (the client prints at the end).
        output, _ = await client.communicate()
        front_cpu = cpu_seconds(stack.front_pid) - cpu_before
        rows = json.loads(output)
        listed = len(await _devhorde_requests(stack))
    refused = [row for row in rows if row["status"] == 503 and row["code"] == "FrontAtCapacity"]
    others = [
        row
        for row in rows
        if row["status"] not in (None, 200, 503) or (row["status"] == 503 and row["code"] != "FrontAtCapacity")
    ]
    refusals = [row["from_connect"] for row in refused]
    served = [row["from_send"] for row in refused]
    completed = sum(1 for row in rows if row["status"] == 200)
    waiting = sum(1 for row in rows if row["status"] is None)
    other: dict[str, int] = {}
    for row in others:
        key = f"HTTP {row['status']} {row['code']}"
        other[key] = other.get(key, 0) + 1
    result = {
        "burst": count,
        "through_edge": edge,
        "connect_first": connect_first,
        "refused": len(refused),
        "still_waiting_after_hold": waiting,
        "admitted_completed": completed,
        "submitted_to_devhorde": listed,
        "admitted_failures_and_others": other,
        "refusal_p50_ms": round(percentile(refusals, 0.5) * 1000, 1) if refusals else None,
        "refusal_p99_ms": round(percentile(refusals, 0.99) * 1000, 1) if refusals else None,
        "refusal_max_ms": round(max(refusals) * 1000, 1) if refusals else None,
        "refusals_over_50_ms": sum(1 for seconds in refusals if seconds > 0.05),
        "refusals_over_500_ms": sum(1 for seconds in refusals if seconds > 0.5),
        "refusal_after_sent_p50_ms": round(percentile(served, 0.5) * 1000, 1) if served else None,
        "refusal_after_sent_max_ms": round(max(served) * 1000, 1) if served else None,
        "front_cpu_seconds": round(front_cpu, 2),
        "hold_seconds": hold,
        "load": load,
    }
    print(json.dumps(result), flush=True)
    return result


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, run the parts (printing each row) and return ``{"nonstream": rows, "workers": row,
    "waiting": rows}``."""
    parser = argparse.ArgumentParser(prog="python -m bench.front_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part", default="nonstream,workers,waiting", help="also: queue (the deep queue, Redis off), burst"
    )
    parser.add_argument("--burst", type=int, default=3000, help="requests opened at once (part burst)")
    parser.add_argument("--burst-hold", type=float, default=20.0, help="seconds the burst is watched (part burst)")
    parser.add_argument(
        "--burst-connect-first", action="store_true", help="open every connection before sending (part burst)"
    )
    parser.add_argument(
        "--burst-edge", action="store_true", help="through nginx with deploy/nginx.conf (part burst; bench.edge)"
    )
    parser.add_argument("--queue", type=int, default=1000, help="requests of the deep queue (part queue)")
    parser.add_argument("--queue-settle", type=float, default=45.0, help="seconds after the last open (part queue)")
    parser.add_argument("--queue-window", type=float, default=30.0, help="seconds measured (part queue)")
    parser.add_argument("--levels", default="1,16,128", help="concurrent clients of the non-streamed loop")
    parser.add_argument("--seconds", type=float, default=6.0, help="duration of each closed loop")
    parser.add_argument("--waiting", default="100,1000,5000", help="waiting request counts")
    parser.add_argument("--redis", default="on,off", help="waiting with Redis on, off, or both")
    parser.add_argument("--settle", type=float, default=None, help="seconds after the last submit (default: steady)")
    parser.add_argument("--window", type=float, default=None, help="seconds measured (default: one timer ceiling)")
    parser.add_argument("--open-rate", type=float, default=50.0, help="waiting requests opened per second")
    parser.add_argument("--workers-level", type=int, default=64, help="clients of the scale-out loop (part workers)")
    parser.add_argument("--front-env", default="", help="extra front variables, NAME=VALUE,NAME=VALUE")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    limit = raise_open_files()
    front_env = dict(item.split("=", 1) for item in args.front_env.split(",") if item)
    parts = args.part.split(",")
    levels = [min(int(x), 512) for x in args.levels.split(",") if x][:6]
    counts = [min(int(x), 10_000) for x in args.waiting.split(",") if x][:6]
    print(f"# {machine()}; open files {limit}", flush=True)
    results: dict[str, Any] = {}
    if "nonstream" in parts:
        results["nonstream"] = asyncio.run(nonstream(levels, min(args.seconds, 60.0), front_env))
    if "workers" in parts:
        results["workers"] = asyncio.run(scale_out(min(args.workers_level, 512), min(args.seconds, 60.0)))
    if "waiting" in parts:
        results["waiting"] = []
        for mode in args.redis.split(","):
            results["waiting"] += asyncio.run(
                waiting(
                    counts,
                    None if args.settle is None else min(args.settle, 600.0),
                    None if args.window is None else min(args.window, 600.0),
                    mode == "on",
                    max(1.0, args.open_rate),
                )
            )
    if "burst" in parts:
        results["burst"] = asyncio.run(
            burst(
                min(args.burst, 10_000),
                min(args.burst_hold, 300.0),
                front_env,
                connect_first=args.burst_connect_first,
                edge=args.burst_edge,
            )
        )
    if "queue" in parts:
        results["queue"] = asyncio.run(
            deep_queue(
                min(args.queue, 10_000),
                min(args.queue_settle, 600.0),
                min(args.queue_window, 600.0),
                max(1.0, args.open_rate),
            )
        )
    if args.json:
        print(json.dumps(results))
    return results


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
