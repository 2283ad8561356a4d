"""``make bench`` / ``python -m bench``: every benchmark in turn, then one summary table (rows 1-5 of issue 12, row 6:
one front worker against two, rows 7 and 8 of issue 23: the deep queue without Redis, the burst, row 9: telemetry
off against on, and rows 10 and 11 of issue 36: reading a text path reply for tool calls, and the repair's share of
submits with the devhorde's ``malformed_first_replies`` knob).

The defaults fit in about 10 minutes on 2 cores (see bench/README.md): front cost at 1, 16 and 128 clients for 4 s
each, 100 and 1,000 waiting requests with Redis on and off, 1,000 in a deep queue without Redis, 3,000 opened at once,
relay latency over 10 streams, relayed streams held at 100 and 1,000. ``--large`` adds the 5,000 levels (waiting and
relayed streams; several more minutes); ``--small`` runs every part at tiny levels to check that the benchmarks work.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench import (
    front_cost,
    public_load,
    relay_capacity,
    relay_latency,
    repair_share,
    responses_events,
    telemetry_cost,
    text_tools,
)

PARTS = ["--part", "nonstream,workers,waiting,queue,burst"]
"""Every part of bench.front_cost, with the deep queue without Redis (row 7) and the burst (row 8) at their defaults:
1,000 waiting, 3,000 opened at once."""
DEFAULT_ARGS: dict[str, list[str]] = {
    "front_cost": [
        "--levels",
        "1,16,128",
        "--seconds",
        "4",
        "--workers-level",
        "64",
        "--waiting",
        "100,1000",
        *PARTS,
    ],
    "relay_latency": ["--requests", "10"],
    "relay_capacity": ["--levels", "100,1000"],
    "responses_events": [],
    "telemetry_cost": [],
    "public_load": ["--users", "30", "--turns", "3", "--arrival", "20", "--fleet", "10", "--delays", "2", "6"],
    "text_tools": [],
    "repair_share": ["--conversations", "5"],
}
"""Waiting rows measure the steady state of the backed-off timer (``bench.front_cost.steady_state_seconds``)."""
LARGE_ARGS: dict[str, list[str]] = {
    **DEFAULT_ARGS,
    "front_cost": [*DEFAULT_ARGS["front_cost"][:6], "--waiting", "100,1000,5000", *PARTS],
    "relay_capacity": ["--levels", "100,1000,5000"],
}
SMALL_ARGS: dict[str, list[str]] = {
    "front_cost": [
        "--levels",
        "1,4",
        "--seconds",
        "2",
        "--workers-level",
        "8",
        "--waiting",
        "20",
        "--settle",
        "3",
        "--window",
        "2",
        *PARTS,
        "--queue",
        "50",
        "--queue-settle",
        "10",
        "--queue-window",
        "5",
        "--burst",
        "300",
        "--burst-hold",
        "5",
    ],
    "relay_latency": ["--requests", "3", "--deltas", "5"],
    "relay_capacity": ["--levels", "10,30", "--deltas", "4", "--idle-window", "1"],
    "responses_events": ["--streams", "20", "--deltas", "20"],
    "telemetry_cost": ["--requests", "20"],
    "public_load": ["--users", "6", "--turns", "2", "--arrival", "4", "--fleet", "3", "--delays", "2", "4"],
    "text_tools": ["--replies", "100"],
    "repair_share": ["--conversations", "1"],
}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}x"


def summary_rows(
    cost: dict[str, Any], latency: dict[str, Any], capacity: dict[str, Any]
) -> list[tuple[str, str, str, str]]:
    """``(row, measure, figures, ratio)`` for each line of the summary table, from the benchmarks' results."""
    rows: list[tuple[str, str, str, str]] = []
    for level in cost.get("nonstream", []):
        front, bare, direct = level["front"], level["passthrough"], level["direct"]
        added_front = added_bare = None
        if front["p50_ms"] is not None and bare["p50_ms"] is not None and direct["p50_ms"] is not None:
            added_front, added_bare = front["p50_ms"] - direct["p50_ms"], bare["p50_ms"] - direct["p50_ms"]
        rows.append(
            (
                f"1 (c={level['c']})",
                "req/s front / pass-through / direct; p50 (p99) ms; ratio: added p50 front / pass-through",
                f"{front['rps']} / {bare['rps']} / {direct['rps']}; {front['p50_ms']} ({front['p99_ms']}) / "
                f"{bare['p50_ms']} ({bare['p99_ms']}) / {direct['p50_ms']} ({direct['p99_ms']})",
                ratio(added_front, added_bare),
            )
        )
    for level in cost.get("nonstream", []):
        front_cpu = level["front"].get("cpu_ms_per_request")
        bare_cpu = level["passthrough"].get("cpu_ms_per_request")
        rows.append(
            (
                f"2 (c={level['c']})",
                "CPU ms per request, front / pass-through",
                f"{front_cpu} / {bare_cpu}",
                ratio(front_cpu, bare_cpu),
            )
        )
    waiting: dict[int, dict[bool, dict[str, Any]]] = {}
    for row in cost.get("waiting", []):
        waiting.setdefault(row["waiting"], {})[row["redis"]] = row
    for count, modes in sorted(waiting.items()):
        on, off = modes.get(True), modes.get(False)
        figures = "; ".join(
            f"Redis {name}: {row['front_cpu_pct']} % CPU, {row['front_rss_mib']} MiB ({row['submitted']} submitted)"
            for name, row in (("on", on), ("off", off))
            if row is not None
        )
        rows.append(
            (
                f"3 (N={count})",
                "front CPU and RSS, N waiting; ratio: CPU Redis off / on",
                figures,
                ratio(off["front_cpu_pct"], on["front_cpu_pct"]) if on and off else "-",
            )
        )
    added, base = latency.get("added_latency_ms", {}), latency.get("baseline_xadd_to_xread_ms", {})
    rows.append(
        (
            "4 (latency)",
            "XADD -> chunk p50 / p99 ms, pacing off; ratio: p50 over XADD -> XREAD BLOCK p50",
            f"{added.get('p50')} / {added.get('p99')} (baseline {base.get('p50')} / {base.get('p99')})",
            ratio(added.get("p50"), base.get("p50")),
        )
    )
    levels = capacity.get("levels", [])
    for level in levels:
        if "reason" in level:
            rows.append((f"4 (N={level['streams']})", "relayed streams held", level["reason"], "-"))
            continue
        rows.append(
            (
                f"4 (N={level['streams']})",
                "streams held: every character delivered; RSS before -> held; p50 / p99 ms; ratio: RSS held / before",
                f"{level['every_character_delivered']} ({level['exact_replies']} exact, {level['deltas_missing']} "
                f"missing); {level['front_rss_before_mib']} -> {level['front_rss_held_mib']} MiB = "
                f"{level['rss_kib_per_stream']} KiB/stream; "
                f"{level['latency_ms']['p50']} / {level['latency_ms']['p99']}",
                ratio(level["front_rss_held_mib"], level["front_rss_before_mib"]),
            )
        )
    for level in (level for level in levels if "reason" not in level):
        rows.append(
            (
                f"5 (N={level['streams']})",
                "XREAD/s held idle (BLOCK 250: 4/s expected); XREAD/s and XADD/s relaying; ratio: XREAD per XADD",
                f"{level['xread_per_second_idle']}; {level['xread_per_second_relay']} and "
                f"{level['xadd_per_second_relay']}",
                ratio(level["xread_per_second_relay"], level["xadd_per_second_relay"]),
            )
        )
    scale = cost.get("workers")
    if scale:
        one, two = scale["workers_1"], scale["workers_2"]
        rows.append(
            (
                f"6 (c={scale['c']})",
                "non-streamed req/s, 1 / 2 front workers (CPU ms per request, every worker); ratio: 2 over 1",
                f"{one['rps']} / {two['rps']} ({one.get('cpu_ms_per_request')} / {two.get('cpu_ms_per_request')})",
                ratio(two["rps"], one["rps"]),
            )
        )
    queue = cost.get("queue")
    if queue:
        rows.append(
            (
                f"7 (N={queue['waiting']})",
                "deep queue, Redis off: front CPU; status reads/s to the Horde; delivery after done p50 / p99 / max s "
                "(samples); ratio: reads/s per waiting request",
                f"{queue['front_cpu_pct']} %; {queue['status_reads_per_second']}; {queue['delivery_p50_s']} / "
                f"{queue['delivery_p99_s']} / {queue['delivery_max_s']} ({queue['delivery_samples']}); failures "
                f"{queue['failures'] or 'none'}; load {queue['load']}",
                ratio(queue["status_reads_per_second"], queue["waiting"]),
            )
        )
    burst = cost.get("burst")
    if burst:
        rows.append(
            (
                f"8 (N={burst['burst']})",
                "burst at the default caps: refused; refusal p50 / max ms from its connect (from its request sent); "
                "over 500 ms; "
                "admitted failures; ratio: refused / opened",
                f"{burst['refused']}; {burst['refusal_p50_ms']} / {burst['refusal_max_ms']} "
                f"({burst['refusal_after_sent_p50_ms']} / {burst['refusal_after_sent_max_ms']}); "
                f"{burst['refusals_over_500_ms']}; {burst['admitted_failures_and_others'] or 'none'}; "
                f"front CPU {burst['front_cpu_seconds']} s; load {burst['load']}",
                ratio(burst["refused"], burst["burst"]),
            )
        )
    return rows


def telemetry_row(telemetry: dict[str, Any]) -> tuple[str, str, str, str]:
    """Row 9: front CPU per non-streamed request with telemetry off and on in the same run, and the difference."""
    figures = telemetry["cost"]
    return (
        "9 (telemetry)",
        "front CPU ms per request, telemetry off / on (added ms, added %); ratio: on over off",
        f"{figures['off_ms']} / {figures['on_ms']} ({figures['added_ms']:+} ms, {figures['added_percent']:+} %)",
        ratio(figures["on_ms"], figures["off_ms"]),
    )


def text_tools_row(tools: dict[str, Any]) -> tuple[str, str, str, str]:
    """Row 10: CPU per text path reply read for tool calls (parse and jsonschema validation), per family."""
    figures = tools["families"]
    return (
        "10 (text tools)",
        "CPU us per reply read for tool calls, one call / 20 calls, per family; ratio: 20 calls over one (chatml)",
        "; ".join(
            f"{family} {values['one_call_us']} / {values['twenty_calls_us']}" for family, values in figures.items()
        ),
        ratio(figures["chatml"]["twenty_calls_us"], figures["chatml"]["one_call_us"]),
    )


def repair_share_row(share: dict[str, Any]) -> tuple[str, str, str, str]:
    """Row 11: the repairs' share of text submits over agent turns, ``malformed_first_replies`` off and on."""
    off, on = share["runs"]
    return (
        f"11 (repairs, {share['conversations_per_family']} conversations per family)",
        "text submits / repairs / failed of the client requests, knob off; knob on; ratio: repairs' share knob on",
        f"off: {off['text_submits']} / {off['repairs']} / {off['failed']} of {off['client_requests']}; "
        f"on: {on['text_submits']} / {on['repairs']} / {on['failed']} of {on['client_requests']}",
        f"{on['repair_share_pct']} %",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--large", action="store_true", help="add the 5,000 levels (waiting, relayed streams)")
    size.add_argument("--small", action="store_true", help="tiny levels, to check the benchmarks work")
    args = parser.parse_args(argv)
    plan = LARGE_ARGS if args.large else SMALL_ARGS if args.small else DEFAULT_ARGS
    started, load_start = time.monotonic(), load_average()
    print(f"== bench.front_cost {' '.join(plan['front_cost'])}", flush=True)
    cost = front_cost.run(plan["front_cost"])
    print(f"== bench.relay_latency {' '.join(plan['relay_latency'])}", flush=True)
    latency = relay_latency.run(plan["relay_latency"])
    print(f"== bench.relay_capacity {' '.join(plan['relay_capacity'])}", flush=True)
    capacity = relay_capacity.run(plan["relay_capacity"])
    print(f"== bench.responses_events {' '.join(plan['responses_events'])}", flush=True)
    status = responses_events.main(plan["responses_events"])
    print(f"== bench.telemetry_cost {' '.join(plan['telemetry_cost'])}", flush=True)
    telemetry = telemetry_cost.run(plan["telemetry_cost"])
    # Issue 37's load test against a real-Horde harness; it says "skipped" and returns when none answers.
    print(f"== bench.public_load {' '.join(plan['public_load'])}", flush=True)
    public_load.main(plan["public_load"])
    print(f"== bench.text_tools {' '.join(plan['text_tools'])}", flush=True)
    tools = text_tools.run(plan["text_tools"])
    print(f"== bench.repair_share {' '.join(plan['repair_share'])}", flush=True)
    share = repair_share.run(plan["repair_share"])
    elapsed = time.monotonic() - started
    print()
    print(
        f"## Summary: {platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}; "
        f"load average {load_start} at start, {load_average()} at end; "
        f"{elapsed / 60:.1f} min"
    )
    print("| row | measure | figures | ratio |")
    print("|---|---|---|---|")
    issue_rows = [telemetry_row(telemetry), text_tools_row(tools), repair_share_row(share)]
    for row in [*summary_rows(cost, latency, capacity), *issue_rows]:
        print("| " + " | ".join(row) + " |")
    return status or (1 if latency.get("failures") else 0)


if __name__ == "__main__":
    sys.exit(main())
