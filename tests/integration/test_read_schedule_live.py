"""Without Redis, a request deep in the devhorde's queue is not read every second (issue 23, read_schedule).

A front without Redis and a devhorde whose one single-thread worker holds its first job for 60 s: the second request
is at the head of the queue (read about every second), the third and fourth are deeper (``wait_time`` over 100 s:
their next read is wanted one ceiling, 30 s, after the first). Some seconds later the devhorde has answered each deep
request exactly one status read. A slower machine only makes fewer reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_devhorde, start_front

pytestmark = pytest.mark.integration

MODEL = "schedule/slow-1b"
SCENARIO = {
    "name": "read-schedule",
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "slow-1",
            "model": MODEL,
            "threads": 1,
            "max_length": 512,
            "time_to_first_token_seconds": 60,
            "tokens_per_second": 8,
            "posts_progress": False,
        }
    ],
}
FRONT_ENV = {
    "HORDE_OAI_SIGNAL_RECHECK_SECONDS": "1.0",
    "HORDE_OAI_SIGNAL_RECHECK_MAX_SECONDS": "30",
    "HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": "120",
}


def test_a_request_deep_in_the_queue_is_read_once_not_every_second(tmp_path: Path) -> None:
    devhorde, horde_url = start_devhorde(tmp_path, redis=False, scenario=None)
    front = None
    try:
        control = horde_url.removesuffix("/api") + "/_devhorde"
        httpx.put(f"{control}/scenario", json=SCENARIO, timeout=5).raise_for_status()
        front, base = start_front(tmp_path, horde_url, redis=False, env=FRONT_ENV)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 512}

        def post() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the front stops first at the end of the test
                httpx.post(f"{base}/v1/chat/completions", json=body, timeout=130)

        for _ in range(4):
            threading.Thread(target=post, daemon=True).start()
            time.sleep(0.3)  # submit order = queue order
        deadline = time.monotonic() + 30
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            rows = [row for row in httpx.get(f"{control}/requests", timeout=5).json() if row["api"] == "chat"]
            if len(rows) == 4:
                break
            time.sleep(0.2)
        assert [row["state"] for row in rows] == ["processing", "waiting", "waiting", "waiting"]
        time.sleep(6)
        rows = [row for row in httpx.get(f"{control}/requests", timeout=5).json() if row["api"] == "chat"]
        assert [row["status_reads"] for row in rows[2:]] == [1, 1]
    finally:
        if front is not None:
            front.stop()
        devhorde.stop()
