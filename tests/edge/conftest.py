"""The edge lane: Debian's nginx (``bin/ensure-nginx``; ``make test`` runs it) with ``deploy/nginx.conf`` in front of
a real front and the devhorde, all on loopback (docs/edge.md).

bench.edge renders the shipped configuration for a prefix directory under the test's tmp (loopback ports from the
OS; every limit and timeout the shipped one) and runs nginx. Without nginx every test here is skipped with the
reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.edge import NGINX, running_edge
from tests.conftest import LiveStack, running_stack

PACE = {"time_to_first_token_seconds": 0.05, "tokens_per_second": 20, "post_interval_seconds": 0.05}
SCENARIO = {
    "name": "edge",
    "description": "A paced reply, so a stream lasts about two seconds (tests/edge).",
    "queue_position_delay_seconds": 0,
    "workers": [{"name": "paced-1", "model": "edge/paced-7b", "threads": 64, "reply_words": 30, **PACE}],
}
FRONT_ENV = {
    "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For",
    # The front's own caps out of the way: a 503 FrontAtCapacity in these tests is the edge's.
    "HORDE_OAI_MAX_IN_FLIGHT": "100000",
    "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": "100000",
}


@dataclass
class Edge:
    """nginx running in front of a live stack."""

    url: str
    port: int
    prefix: Path
    stack: LiveStack

    def error_log(self) -> str:
        return (self.prefix / "error.log").read_text(errors="replace")


@pytest.fixture(scope="session")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    if NGINX is None:
        pytest.skip("no nginx (bin/ensure-nginx installs Debian's package when it can)")
    tmp = tmp_path_factory.mktemp("edge")
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    with running_stack(tmp, scenario=scenario, front_env=FRONT_ENV) as stack:
        prefix = tmp / "nginx"
        prefix.mkdir()
        with running_edge(prefix, stack.front_url) as port:
            yield Edge(f"http://127.0.0.1:{port}", port, prefix, stack)
