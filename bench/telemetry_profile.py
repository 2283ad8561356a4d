"""Where telemetry's CPU goes: the front profiled (cProfile on process CPU time) with telemetry off, then on.

``python -m bench.telemetry_profile [--requests 300] [--concurrency 4] [--redis-url URL] [--top 25]``

For each mode the benchmark starts Redis (unless ``--redis-url``) and the devhorde as :mod:`bench.telemetry_cost` does,
then a front under uvicorn inside this module's ``--serve`` mode, which runs it under ``cProfile`` with
``time.process_time`` as the clock (so time blocked in ``epoll`` counts for nothing), from a ``SIGUSR1`` sent after a
warm-up of 20 requests, and writes the statistics when uvicorn stops. It sends ``--requests`` non-streamed chat
completions, stops the front, and prints the CPU milliseconds per request each package's own code took (``tottime``,
grouped by the file's top-level package), off beside on, then the telemetry functions with the most cumulative CPU per
request. cProfile's own cost is paid per function call, so the profiled figures are several times the real ones
(:mod:`bench.telemetry_cost` measures those): read them as shares.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.relay_latency import BENCH_MAX_IN_FLIGHT, STARTUP_SECONDS, STREAM_DB, bench_scenario, bench_stack, machine
from bench.telemetry_cost import MODES, send
from devhorde.launch import free_port, wait_http

TELEMETRY_PACKAGES = ("opentelemetry", "logfire", "google", "wrapt")
"""Packages whose code runs only for telemetry (protobuf is ``google``)."""


def package_of(filename: str) -> str:
    """The top-level package of a profiled function's file (``site-packages/<pkg>/...``), or the repository folder."""
    path = Path(filename)
    parts = path.parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].removesuffix(".py")
    for top in ("chat", "oaifront", "models_list", "devhorde"):
        if top in parts:
            return top
    if filename.startswith(("~", "<")):
        return "builtins"
    return "stdlib"


def serve(port: int, out: str) -> None:
    """Run the front under uvicorn, profiled; write the statistics to ``out`` when uvicorn stops."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    import uvicorn  # noqa: PLC0415 - only in the served process

    profile = cProfile.Profile(time.process_time)
    # Profiling starts at SIGUSR1, sent after the warm-up, so start-up (imports, first connections) is left out.
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: profile.enable())
    try:
        uvicorn.run("oaifront.asgi:application", host="127.0.0.1", port=port, log_level="warning", access_log=False)
    except KeyboardInterrupt:
        pass
    finally:
        profile.disable()
        profile.dump_stats(out)


def profile_mode(mode: str, requests: int, concurrency: int, redis_url: str | None, workdir: Path) -> Path:
    """Profile one front in ``mode``; return the statistics file."""
    out = workdir / f"front-{mode}.prof"
    with bench_stack(bench_scenario("The tide is high.", 0.0, 64), {}, redis_url) as stack:
        port = free_port()
        env = {
            **os.environ,
            "HORDE_URL": stack.horde_url,
            "HORDE_OAI_REDIS_URL": stack.redis_url or "",
            "HORDE_OAI_STREAM_REDIS_DB": str(STREAM_DB),
            "HORDE_OAI_MAX_IN_FLIGHT": str(BENCH_MAX_IN_FLIGHT),
            "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": str(BENCH_MAX_IN_FLIGHT),
            "HORDE_OAI_SIGNAL_RECHECK_SECONDS": "0.05",
            **MODES[mode],
        }
        args = [sys.executable, "-m", "bench.telemetry_profile", "--serve", str(port), "--out", str(out)]
        with (workdir / f"front-{mode}.log").open("wb") as log:
            front = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                url = f"http://127.0.0.1:{port}"
                wait_http(f"{url}/healthz", front, STARTUP_SECONDS)
                asyncio.run(send(url, 20, concurrency))
                front.send_signal(signal.SIGUSR1)
                time.sleep(0.5)
                asyncio.run(send(url, requests, concurrency))
            finally:
                front.send_signal(signal.SIGINT)  # uvicorn re-raises it after shutdown: the finally still runs
                front.wait(60)
    return out


def by_package(stats: pstats.Stats, requests: int) -> dict[str, float]:
    """CPU milliseconds per request of each package's own code."""
    totals: dict[str, float] = {}
    raw: Any = stats.stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    for (filename, _line, _name), (_calls, _primitive, tottime, _cumtime, _callers) in raw.items():
        package = package_of(filename)
        totals[package] = totals.get(package, 0.0) + tottime * 1000 / requests
    return totals


def telemetry_functions(stats: pstats.Stats, requests: int, top: int) -> list[tuple[float, float, str]]:
    """The telemetry functions with the most cumulative CPU: (cumulative ms, own ms per request, name)."""
    raw: Any = stats.stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    rows = [
        (cumtime * 1000 / requests, tottime * 1000 / requests, f"{package_of(filename)}:{Path(filename).name}:{name}")
        for (filename, _line, name), (_calls, _primitive, tottime, cumtime, _callers) in raw.items()
        if package_of(filename) in TELEMETRY_PACKAGES
    ]
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--redis-url")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.out)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="telemetry-profile-"))
    print(machine())
    served = args.requests
    profiles = {
        mode: pstats.Stats(str(profile_mode(mode, args.requests, args.concurrency, args.redis_url, workdir)))
        for mode in MODES
    }
    packages = {mode: by_package(stats, served) for mode, stats in profiles.items()}
    names = sorted(set().union(*packages.values()), key=lambda name: -packages["on"].get(name, 0.0))
    print("| package | off, CPU ms per request | on | difference |")
    print("|---|---|---|---|")
    for name in names:
        off, on = packages["off"].get(name, 0.0), packages["on"].get(name, 0.0)
        if max(off, on) >= 0.01:
            print(f"| {name} | {off:.3f} | {on:.3f} | {on - off:+.3f} |")
    print(f"| total | {sum(packages['off'].values()):.3f} | {sum(packages['on'].values()):.3f} | |")
    print()
    print("| telemetry function (on) | cumulative ms per request | own ms per request |")
    print("|---|---|---|")
    for cumulative, own, name in telemetry_functions(profiles["on"], served, args.top):
        print(f"| {name} | {cumulative:.3f} | {own:.3f} |")
    print(f"profiles: {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
