"""How many concurrent relayed streams one front process holds.

Run: ``.venv/bin/python -m bench.relay_capacity [--levels 100,200,400,800] [--deltas 10] [--post-interval 0.5]``.

The stack is :mod:`bench.relay_latency`'s (a throwaway ``redis-server``, the devhorde, one front process under
uvicorn), all on loopback. Each level opens ``N`` streamed requests, ``--open-rate`` per second, and waits for all
their response headers; then this script plays the Horde's progress writer for all of them: every stream gets
``--deltas`` deltas, one every ``--post-interval`` seconds (a worker's post rate), the streams' posts spread evenly
over the interval. The devhorde's worker (``N`` threads, no progress of its own) submits the same text as the final
reply once the deltas are written. The front runs with the production defaults (status recheck 1 s, keepalive
10 s), pacing off unless ``--pacing`` (then the default 2 s window and 20 pieces per second).

Per level it reports: the streams that ended with exactly the reply, ``finish_reason: stop`` and ``[DONE]``; the
deltas seen by the client and the deltas missing; the latency from issuing a seen delta's ``XADD`` to its first
character on the client's wire (p50/p99/max); the CPU share of the front, the devhorde, Redis and this client while
the streams are admitted (ramp) and while the deltas are written (relay; one CPU = 100); the front's resident memory.

A delta is seen when the client had its first character as a relayed delta. It is missing when that character never
came, came in or after the finish chunk (the final reply's remainder is the content chunk sent together with the
finish chunk: arriving less than ``FINISH_BURST_SECONDS`` before it counts as with it), or came
``MISSED_LATENCY_SECONDS`` (2 s) or more after its ``XADD``: the devhorde makes the final reply available at least 2 s
after the last ``XADD``, so a delta the relay missed, which only the final reply carries, arrives that late. Such a
delta is not a latency sample.

A level **holds** when every stream ended with exactly the reply, no delta is missing, and the p99 latency stays
under ``--max-p99-ms`` (default 250 ms, about half a worker's post interval). A level whose streams are not all
admitted (response headers) within ``max(5, 0.05 * N, 2 * N / open rate)`` seconds does not hold either. Levels run
in increasing order and stop after the first that does not hold. Bounded: at most 6 levels of at most 2000 streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from bisect import bisect_right
from typing import Any

import httpx
from redis.asyncio import BlockingConnectionPool, Redis

from bench.relay_latency import (
    STREAM_DB,
    BenchStack,
    ClientStream,
    bench_scenario,
    bench_stack,
    chat_body,
    cpu_seconds,
    delta_texts,
    entry_fields,
    machine,
    percentile,
    read_stream,
    rss_megabytes,
)

JOIN_WAIT_SECONDS = 0.5
"""Between the last response headers and the first ``XADD``: every stream has joined the reader's ``XREAD``."""

FINAL_REPLY_DELAY_SECONDS = 2.0
"""The devhorde makes the final reply available this long after the last ``XADD`` of a level (at the least)."""

MISSED_LATENCY_SECONDS = FINAL_REPLY_DELAY_SECONDS
"""A delta first seen this long or longer after its ``XADD`` came with the final reply: the relay missed it."""

FINISH_BURST_SECONDS = 0.05
"""A content chunk arriving less than this before the finish chunk was sent with it: the final reply's remainder
(the front writes the remainder and the finish chunk back to back; a relayed delta comes 2 s or more earlier)."""


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimedStream(ClientStream):
    """A :class:`bench.relay_latency.ClientStream` that also notes when the finish chunk arrived (``finish_at``,
    ``time.perf_counter`` seconds) and how many content chunks had arrived by then (``finish_index``)."""

    finish_at: float | None = None
    finish_index: int | None = None

    @property  # type: ignore[override]
    def finish_reason(self) -> str | None:
        return self.__dict__.get("_finish_reason")

    @finish_reason.setter
    def finish_reason(self, value: str | None) -> None:
        self.__dict__["_finish_reason"] = value
        if value and self.finish_at is None:
            self.finish_at = time.perf_counter()
            self.finish_index = len(self.timeline)


def first_visible(stream: TimedStream, offset: int) -> float | None:
    """When the client first had the character at ``offset`` of the content as a relayed delta, or None when it never
    came or came in or after the finish chunk (in the remainder chunk sent with it, see ``FINISH_BURST_SECONDS``)."""
    counts = [count for count, _ in stream.timeline]
    index = bisect_right(counts, offset)
    if index >= len(stream.timeline):
        return None
    arrived = stream.timeline[index][1]
    if stream.finish_index is not None and index >= stream.finish_index:
        return None  # after the finish chunk
    if stream.finish_at is not None and arrived >= stream.finish_at - FINISH_BURST_SECONDS:
        return None  # the final reply's remainder, written with the finish chunk
    return arrived


async def write_deltas(
    redis: Redis, key: str, gen: str, texts: list[str], start: float, interval: float, issued: list[float]
) -> None:
    """XADD ``texts`` to ``key`` one every ``interval`` seconds from ``start`` (perf_counter), noting issue times."""
    for seq, text in enumerate(texts, start=1):
        delay = start + (seq - 1) * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        issued.append(time.perf_counter())
        await redis.xadd(key, entry_fields(gen, seq, text))


def cpu_percent(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, int]:
    """Each process's CPU share between two :func:`cpu_snapshot` readings ``seconds`` apart (one CPU = 100)."""
    return {name: round(100 * (after[name] - before[name]) / seconds) for name in before}


def cpu_snapshot(stack: BenchStack) -> dict[str, float]:
    """CPU seconds so far of each process of the stack and of this client."""
    return {
        **{name: cpu_seconds(process.pid) for name, process in stack.processes.items()},
        "client": own_cpu_seconds(),
    }


async def open_stream(
    client: httpx.AsyncClient, stack: BenchStack, result: TimedStream, event: asyncio.Event, delay: float
) -> None:
    """Open one stream after ``delay`` seconds and read it to its end."""
    await asyncio.sleep(delay)
    await read_stream(client, stack.front_url, chat_body(), result, event)


async def run_level(
    stack: BenchStack, streams: int, deltas: int, interval: float, max_p99_ms: float, open_rate: float
) -> dict[str, Any]:
    texts = delta_texts(deltas)
    reply = "".join(texts)
    offsets = [sum(len(text) for text in texts[:index]) for index in range(deltas)]
    ramp_budget = max(5.0, streams * 0.05, 2 * streams / open_rate)
    stack.reset()
    stack.put_scenario(
        bench_scenario(
            reply,
            finish_after_seconds=ramp_budget + JOIN_WAIT_SECONDS + deltas * interval + FINAL_REPLY_DELAY_SECONDS,
            threads=streams,
        )
    )
    cpu_start = cpu_snapshot(stack)
    started = time.perf_counter()

    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:
        results = [TimedStream() for _ in range(streams)]
        header_events = [asyncio.Event() for _ in range(streams)]
        readers = [
            asyncio.ensure_future(open_stream(client, stack, result, event, index / open_rate))
            for index, (result, event) in enumerate(zip(results, header_events, strict=True))
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*(event.wait() for event in header_events)), ramp_budget)
        except TimeoutError:
            opened = sum(event.is_set() for event in header_events)
            ramp_cpu = cpu_percent(cpu_start, cpu_snapshot(stack), time.perf_counter() - started)
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            return {
                "streams": streams,
                "holds": False,
                "reason": f"only {opened} of {streams} streams were admitted within {ramp_budget:g} s",
                "ramp_cpu_percent": ramp_cpu,
            }
        ramp = time.perf_counter() - started
        ramp_cpu = cpu_percent(cpu_start, cpu_snapshot(stack), ramp)
        refused = [result.error for result in results if result.error is not None]
        natives = [entry for entry in stack.native_requests() if entry["state"] in ("waiting", "processing")]
        pool = BlockingConnectionPool.from_url(stack.redis_url, db=STREAM_DB, max_connections=32)
        redis = Redis(connection_pool=pool)
        issued: dict[str, list[float]] = {entry["id"]: [] for entry in natives}
        inject_start = time.perf_counter() + JOIN_WAIT_SECONDS
        writers = [
            write_deltas(
                redis,
                f"horde:chat:stream:{entry['id']}",
                f"gen-{entry['id']}",
                texts,
                inject_start + interval * index / max(1, len(natives)),
                interval,
                issued[entry["id"]],
            )
            for index, entry in enumerate(natives)
        ]
        await asyncio.sleep(JOIN_WAIT_SECONDS)
        relay_start = cpu_snapshot(stack)
        await asyncio.gather(*writers)
        relay_cpu = cpu_percent(relay_start, cpu_snapshot(stack), time.perf_counter() - inject_start)
        front_rss = rss_megabytes(stack.front_pid)
        _, unfinished = await asyncio.wait(readers, timeout=ramp_budget + deltas * interval + 60)
        for reader in unfinished:  # counted below as streams without the exact reply
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await redis.aclose()
        await pool.aclose()
    elapsed = time.perf_counter() - started

    latencies: list[float] = []
    seen_count = missing = exact = 0
    for result in results:
        complete = result.done and result.error is None and result.finish_reason == "stop"
        if complete and "".join(result.contents) == reply:
            exact += 1
        times = issued.get(result.request_id or "", [])
        for index, offset in enumerate(offsets):
            seen = first_visible(result, offset)
            if seen is None or index >= len(times) or seen - times[index] >= MISSED_LATENCY_SECONDS:
                missing += 1  # never came, came with the final reply, or so late that only the final reply has it
                continue
            seen_count += 1
            latencies.append(seen - times[index])
    p99 = percentile(latencies, 0.99) * 1000 if latencies else float("inf")
    holds = exact == streams and missing == 0 and not refused and p99 <= max_p99_ms
    return {
        "streams": streams,
        "holds": holds,
        "exact_replies": exact,
        "refused": len(refused),
        "deltas_seen": seen_count,
        "deltas_missing": missing,
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50) * 1000, 1) if latencies else None,
            "p99": round(p99, 1) if latencies else None,
            "max": round(max(latencies) * 1000, 1) if latencies else None,
        },
        "ramp_seconds": round(ramp, 2),
        "ramp_cpu_percent": ramp_cpu,
        "relay_cpu_percent": relay_cpu,
        "front_rss_mib": round(front_rss),
        "elapsed_seconds": round(elapsed, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_capacity", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--levels", default="100,200,400,800", help="concurrent streams per level, increasing (default 100,200,400,800)"
    )
    parser.add_argument("--deltas", type=int, default=10, help="deltas per stream (default 10)")
    parser.add_argument("--post-interval", type=float, default=0.5, help="seconds between a stream's deltas")
    parser.add_argument("--max-p99-ms", type=float, default=250.0, help="the latency a holding level stays under")
    parser.add_argument(
        "--open-rate", type=float, default=100.0, help="streams opened per second while a level ramps up (default 100)"
    )
    parser.add_argument("--pacing", action="store_true", help="pace deltas with the default settings")
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of a throwaway redis-server")
    parser.add_argument("--json", action="store_true", help="print the results as JSON only")
    args = parser.parse_args(argv)
    levels = [int(level) for level in args.levels.split(",") if level.strip()]
    if not (1 <= len(levels) <= 6 and all(1 <= level <= 2000 for level in levels) and levels == sorted(levels)):
        parser.error("bounded: 1 to 6 increasing levels of 1 to 2000 streams")
    if not (2 <= args.deltas <= 100 and 0.05 <= args.post_interval <= 5 and 1 <= args.open_rate <= 10000):
        parser.error("bounded: 2..100 deltas, a post interval of 0.05..5 s, an open rate of 1..10000 per second")
    front_env = {} if args.pacing else {"HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS": "0"}
    description = machine()
    rows: list[dict[str, Any]] = []
    with bench_stack(bench_scenario("x", 1.0, 1), front_env, args.redis_url) as stack:
        for level in levels:
            row = asyncio.run(run_level(stack, level, args.deltas, args.post_interval, args.max_p99_ms, args.open_rate))
            rows.append(row)
            if not args.json:
                print(json.dumps(row), flush=True)
            if not row["holds"]:
                break
    held = [row["streams"] for row in rows if row["holds"]]
    summary = {
        "machine": description,
        "deltas": args.deltas,
        "post_interval_seconds": args.post_interval,
        "open_rate": args.open_rate,
        "pacing": args.pacing,
        "max_p99_ms": args.max_p99_ms,
        "levels": rows,
        "holds": max(held) if held else 0,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"one front process held {summary['holds']} concurrent relayed streams "
            f"(largest level that held; {description})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
