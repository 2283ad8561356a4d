"""Without Redis, a request deep in the devhorde's queue is not read every second (issue 23, read_schedule).

A front without Redis and a devhorde whose one single-thread worker holds its first job for 60 s: the second request
is at the head of the queue (read about every second), the third and fourth are deeper (``wait_time`` over 100 s:
their next read is wanted one ceiling, 30 s, after the first). By the time the head request has had its sixth read
(some seconds later), the devhorde has answered each deep request exactly one status read. The test waits on the
devhorde's own counts, never on sleeps: a slower machine only takes longer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
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


def chat_rows(control: str) -> list[dict[str, object]]:
    """The devhorde's chat requests, in submit order."""
    return [row for row in httpx.get(f"{control}/requests", timeout=5).json() if row["api"] == "chat"]


def as_int(value: object) -> int:
    assert isinstance(value, int), value
    return value


def chat_rows_when(
    control: str, condition: Callable[[list[dict[str, object]]], bool], timeout: float = 60
) -> list[dict[str, object]]:
    """The devhorde's chat requests once ``condition`` holds of them; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    rows = chat_rows(control)
    while not condition(rows):
        assert time.monotonic() < deadline, f"not within {timeout} s: {rows}"
        time.sleep(0.1)
        rows = chat_rows(control)
    return rows


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

        rows: list[dict[str, object]] = []
        for submitted in range(1, 5):  # submit order = queue order: each submit is in before the next is sent
            threading.Thread(target=post, daemon=True).start()
            rows = chat_rows_when(control, lambda rows, n=submitted: len(rows) == n)
        assert [row["state"] for row in rows] == ["processing", "waiting", "waiting", "waiting"]
        # The head of the queue is read about every second: by its sixth read, a deep request read on that schedule
        # would have been read five times; on its own it waits one ceiling (30 s) after its first read.
        rows = chat_rows_when(
            control, lambda rows: as_int(rows[1]["status_reads"]) >= 6 and all(row["status_reads"] for row in rows[2:])
        )
        assert [row["status_reads"] for row in rows[2:]] == [1, 1]
    finally:
        if front is not None:
            front.stop()
        devhorde.stop()
