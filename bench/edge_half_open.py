"""Half-open connections through the edge against another client's ``/healthz`` (issue 34; docs/edge.md).

Run: ``bin/with-redis .venv/bin/python -m bench.edge_half_open [--connections 20000] [--probes 50]``.

The stack of the other benchmarks (bench.relay_latency.bench_stack) with nginx and deploy/nginx.conf in front
(bench.edge). From 127.0.0.1, ``--connections`` sockets connect to the edge and each sends an unfinished request
head, then nothing (nginx's ``client_header_timeout``, 10 s, closes them). Meanwhile another client, from 127.0.0.2,
times ``--probes`` ``GET /healthz`` one after another through the edge. Prints one JSON line: connections opened,
probe p50 / p99 / max in ms, probes that failed. Bounded: every socket is closed after ``--hold`` seconds (default 15),
``RLIMIT_NOFILE`` raised for this process only.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.edge import running_edge
from bench.relay_latency import bench_scenario, bench_stack, machine

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"


def half_open(port: int, count: int, opened: list[socket.socket], stop: threading.Event) -> None:
    """Open up to ``count`` half-sent requests from 127.0.0.1 into ``opened`` (stops early on an error or ``stop``)."""
    for _ in range(count):
        if stop.is_set():
            return
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(HEAD)
        except OSError:
            return
        opened.append(sock)


def probe(url: str, count: int) -> tuple[list[float], int]:
    """``count`` ``GET /healthz`` from 127.0.0.2, one after another: their times and how many failed."""
    times: list[float] = []
    failed = 0
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=transport, timeout=10) as client:
        for _ in range(count):
            started = time.perf_counter()
            try:
                ok = client.get(f"{url}/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            times.append(time.perf_counter() - started)
            failed += not ok
            time.sleep(0.05)
    return times, failed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.edge_half_open", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--hold", type=float, default=15.0, help="seconds before every socket is closed")
    args = parser.parse_args()
    count = min(args.connections, 30_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 1024)), hard))
    print(f"# {machine()}", flush=True)
    scenario = bench_scenario("ok", 0.0, 8)
    with (
        bench_stack(scenario, {}) as stack,
        tempfile.TemporaryDirectory(prefix="bench-edge-") as prefix,
        running_edge(Path(prefix), stack.front_url) as port,
    ):
        url = f"http://127.0.0.1:{port}"
        opened: list[socket.socket] = []
        stop = threading.Event()
        opener = threading.Thread(target=half_open, args=(port, count, opened, stop), daemon=True)
        started = time.monotonic()
        opener.start()
        time.sleep(1.0)  # the flood under way before the first probe
        times, failed = probe(url, args.probes)
        opener.join(max(0.0, args.hold - (time.monotonic() - started)))
        stop.set()
        for sock in opened:
            sock.close()
    print(
        json.dumps(
            {
                "half_open": len(opened),
                "asked": count,
                "probes": len(times),
                "probe_p50_ms": round(percentile(times, 0.5) * 1000, 1),
                "probe_p99_ms": round(percentile(times, 0.99) * 1000, 1),
                "probe_max_ms": round(max(times) * 1000, 1),
                "probes_failed": failed,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
