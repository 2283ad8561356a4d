"""Redis faults in the middle of a relayed stream: the client still reads exactly the final reply, once.

Reference: "Redis reads and recovery" (a read abandoned after ``DELTA_READ_TIMEOUT_SECONDS``, a failed read made
again from the last entry read, a stream that stops), "Final reply reconciliation", "Pacing" (pending pieces flushed
when the relay breaks). Each test runs its own throwaway ``redis-server`` on a free 127.0.0.1 port, shared by a
devhorde and a relaying front of this module, never the shared 6379 server. The fault starts after the client has
read two content chunks, so the relay is exposed when Redis goes away.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import Process, free_port, start_process, wait_http
from tests.integration.test_relay_live import (
    native_request,
    native_status,
    start_relay_front,
    stream_chat,
    stream_entries,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary"),
]

SLOW = {"time_to_first_token_seconds": 0.05, "tokens_per_second": 5, "post_interval_seconds": 0.2}
"""One word per post, five posts a second: a 50-word reply streams for about ten seconds, outlasting each fault."""

FAULT_SCENARIO: dict[str, Any] = {
    "name": "relay-faults",
    "description": "One slow worker (tests/integration/test_relay_faults.py).",
    "workers": [{"name": "steady-1", "model": "faults/steady-7b", "threads": 4, "reply_words": 50, **SLOW}],
}

PAUSE_MILLISECONDS = 6500
"""Longer than the reader's DELTA_READ_TIMEOUT_SECONDS (5 s), so its read is abandoned at least once."""


@dataclass
class ThrowawayRedis:
    """A ``redis-server`` with no persistence, bound to 127.0.0.1 on its own port; stop and start it again."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.workdir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Kill the server (SIGKILL: no goodbye to its clients) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)


@dataclass
class FaultStack:
    redis: ThrowawayRedis
    horde_url: str
    front_url: str
    devhorde: Process
    front: Process

    @property
    def control_url(self) -> str:
        return self.horde_url.removesuffix("/api") + "/_devhorde"


@pytest.fixture
def fault_stack(tmp_path: Path) -> Iterator[FaultStack]:
    """A throwaway Redis, a devhorde writing to it (stream database 0) and a relaying front reading it."""
    server = ThrowawayRedis(free_port(), tmp_path)
    server.start()
    processes: list[Process] = []
    try:
        port = free_port()
        devhorde = start_process(
            [sys.executable, "-m", "devhorde", "--host", "127.0.0.1", "--port", str(port), "--redis-url", server.url,
             "--stream-redis-db", "0"],
            {}, tmp_path / "devhorde.log",
        )
        processes.append(devhorde)
        horde_url = f"http://127.0.0.1:{port}/api"
        wait_http(f"{horde_url}/v2/status/models?type=text", devhorde.popen)
        control = f"http://127.0.0.1:{port}/_devhorde"
        httpx.put(f"{control}/scenario", json=FAULT_SCENARIO, timeout=5).raise_for_status()
        front, front_url = start_relay_front(tmp_path, horde_url, server.url, 0)
        processes.append(front)
        yield FaultStack(server, horde_url, front_url, devhorde, front)
    finally:
        for process in reversed(processes):
            process.stop()
        server.stop()


def assert_exactly_the_final_reply(stack: FaultStack, result: Any) -> str:
    """The stream ended normally and its text is the final reply: nothing lost, nothing twice. Returns the reply."""
    assert result.error is None
    final = native_status(stack.horde_url, result.request_id)["generations"][0]["message"]["content"]
    assert len(final.split()) >= 20
    assert result.content() == final
    kinds = result.kinds()
    assert kinds[0] == "role" and kinds[-1] == "finish:stop"
    assert set(kinds[1:-1]) == {"content"}
    return final


def test_redis_killed_and_restarted_mid_stream(fault_stack: FaultStack) -> None:
    """The reader's reads fail while Redis is down and are made again from the last entry read; the restarted Redis
    has lost the stream, so the deltas stop or resume after a gap, and the final reply completes the text.

    ref: redis-reads-and-recovery.4, redis-reads-and-recovery.6, final-reply-reconciliation.4,
    final-reply-reconciliation.5, pacing.16"""
    def outage(seen: int) -> None:
        if seen == 2:
            fault_stack.redis.stop()
            time.sleep(1.5)
            fault_stack.redis.start()

    result = stream_chat(fault_stack.front_url, fault_stack.control_url, watch=2, on_content=outage,
                         model="faults/steady-7b", max_tokens=300)
    assert result.states_at_content == ["processing", "processing"]
    assert_exactly_the_final_reply(fault_stack, result)
    # The outage hit the relay: the reader logged a failed read, and the worker went on writing after the restart
    # into a stream that starts past its first posts.
    assert "Delta read failed" in fault_stack.front.log()
    after_restart = stream_entries(fault_stack.redis.url, 0, result.request_id)
    assert after_restart and int(after_restart[0]["seq"]) > 2
    assert native_request(fault_stack.control_url, result.request_id)["state"] == "done"


def test_redis_frozen_with_client_pause_mid_stream(fault_stack: FaultStack) -> None:
    """CLIENT PAUSE ALL leaves the reader's connection unresponsive: the read is abandoned after 5 s and made again
    on a fresh connection; the client still reads exactly the final reply.

    ref: redis-reads-and-recovery.2, redis-reads-and-recovery.6, final-reply-reconciliation.4"""
    def freeze(seen: int) -> None:
        if seen == 2:
            assert fault_stack.redis.client().execute_command("CLIENT", "PAUSE", PAUSE_MILLISECONDS, "ALL")

    result = stream_chat(fault_stack.front_url, fault_stack.control_url, watch=2, on_content=freeze,
                         model="faults/steady-7b", max_tokens=300)
    assert result.states_at_content == ["processing", "processing"]
    assert_exactly_the_final_reply(fault_stack, result)
    assert "took longer than" in fault_stack.front.log()
