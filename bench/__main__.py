"""``make bench`` / ``python -m bench``: run every benchmark in turn with its defaults (see bench/README.md)."""

from __future__ import annotations

import sys

from bench import front_cost, relay_capacity, relay_latency, responses_events, telemetry_cost

BENCHMARKS = (
    ("front_cost", front_cost.main),
    ("relay_latency", relay_latency.main),
    ("relay_capacity", relay_capacity.main),
    ("responses_events", responses_events.main),
    ("telemetry_cost", telemetry_cost.main),
)


def main() -> int:
    status = 0
    for name, run in BENCHMARKS:
        print(f"== bench.{name}", flush=True)
        status = run([]) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
