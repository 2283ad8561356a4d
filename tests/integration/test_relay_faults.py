"""Redis faults in the middle of a relayed stream: the reader recovers, the relay goes on live, and the client reads
exactly the final reply, once.

Reference: "Redis reads and recovery" (a read abandoned after ``DELTA_READ_TIMEOUT_SECONDS`` and made again, a failed
read made again from the last entry read, the stream retaining its entries), "Final reply reconciliation". Each test
runs its own throwaway ``redis-server`` processes on free 127.0.0.1 ports, never the shared 6379 server, and the
devhorde keeps writing every post while the fault lasts, so the stream has no gap and a reader that recovers goes on
relaying live:

- killed: the front reads a replica of the devhorde's Redis; the replica is killed (SIGKILL) mid-stream and started
  again, and it resynchronises the whole stream, including the posts written while it was down, from its primary;
- frozen: the front reaches Redis through a loopback TCP proxy of this module that stops forwarding for longer than
  the read timeout, while the devhorde writes to Redis directly.

Both check that content chunks arrived after the fault while the native request was still ``processing`` (the
relay recovered: a reader that never did would leave everything after the fault to the final reply's single
remainder chunk), that the last content chunk is a small part of the reply, and that the text is the final reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from devhorde.launch import redis_server_args
from tests.conftest import Process, free_port, start_process, wait_http
from tests.integration.test_relay_live import (
    native_request,
    native_requests,
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
"""One word per post, five posts a second: a 75-word reply streams for about fifteen seconds, so it is still being
generated for several seconds after each fault has ended."""

FAULT_SCENARIO: dict[str, Any] = {
    "name": "relay-faults",
    "description": "One slow worker (tests/integration/test_relay_faults.py).",
    "workers": [{"name": "steady-1", "model": "faults/steady-7b", "threads": 4, "reply_words": 75, **SLOW}],
}

OUTAGE_SECONDS = 1.5
"""How long the killed Redis stays down before it is started again."""

STALL_SECONDS = 6.5
"""How long the proxy stops forwarding: longer than the reader's DELTA_READ_TIMEOUT_SECONDS (5 s), so its read is
abandoned and made again on a fresh connection."""

FAULT_AT_CONTENT_CHUNK = 2
"""The fault starts once the client has read this many content chunks, so the relay is exposed when it hits."""

LIVE_AFTER_SHARE = 0.25
"""The content chunks read after the fault ended, while the request was still processing, hold at least this share
of the reply (the scenario leaves about half of it to be generated after the longer fault)."""

REPLY_SECONDS = 0.05 + 75 / 5
"""The scenario's generation time: first token, then 75 words at five a second (:data:`SLOW`)."""

STREAM_BUDGET_SECONDS = round(2 * REPLY_SECONDS + STALL_SECONDS + 10)
"""The front's stream timeout here (47 s): twice the generation time (the devhorde's posts and the front's reads both
slow down on a busy machine), plus the longest fault, plus 10 s for start-up and the final reads. The front's usual
20 s test budget (``tests.conftest.FAST_FRONT_ENV``) left 5 s of margin over the generation alone and ran out on a
busy machine (both tests below, in different runs). A healthy stream ends when the reply does, well within it."""

LAST_CHUNK_SHARE = 0.1
"""The last content chunk holds less than this share of the reply: the relay recovered and kept up until the end."""


@dataclass
class ThrowawayRedis:
    """A ``redis-server`` without persistence bound to 127.0.0.1 on its own port, optionally a replica of another
    one; kill it and start it again."""

    port: int
    workdir: Path
    replica_of: int | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers (and, as a replica, until it is in sync with its primary)."""
        args = [
            *redis_server_args(self.port, self.workdir, f"dump-{self.port}.rdb"),
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        log = (self.workdir / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as client:
                    info = client.info("replication")
                if self.replica_of is None or info.get("master_link_status") == "up":
                    return
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} did not start (or sync)")
            time.sleep(0.05)

    def kill(self) -> None:
        """Kill the server (SIGKILL: no goodbye to its clients) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)


class StallingProxy:
    """A loopback TCP proxy to ``127.0.0.1:<upstream_port>`` that can stop forwarding, in both directions and on
    every connection (new ones included), without closing anything: a network fault that leaves connections open
    and unresponsive. It runs its own event loop in a thread."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="stalling-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)

    async def _serve(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        for source, sink in ((client_reader, upstream_writer), (upstream_reader, client_writer)):
            task = asyncio.ensure_future(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    def stall(self) -> None:
        """Stop forwarding: bytes already read are held, nothing more is passed on, connections stay open."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        """Forward again, the held bytes first."""
        self._loop.call_soon_threadsafe(self._flowing.set)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@dataclass
class FaultStack:
    redis: ThrowawayRedis
    """The Redis the devhorde writes to (never faulted)."""
    horde_url: str
    front_url: str
    devhorde: Process
    front: Process

    @property
    def control_url(self) -> str:
        return self.horde_url.removesuffix("/api") + "/_devhorde"


@dataclass
class FaultyStack:
    """Builds the stack once the test has set up the Redis the front reads; stops everything at the end."""

    tmp_path: Path
    redis: ThrowawayRedis
    processes: list[Process] = field(default_factory=list)

    def start(self, front_redis_url: str) -> FaultStack:
        """A devhorde writing to :attr:`redis` (stream database 0) and a relaying front reading ``front_redis_url``."""
        port = free_port()
        devhorde = start_process(
            [
                sys.executable,
                "-m",
                "devhorde",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--redis-url",
                self.redis.url,
                "--stream-redis-db",
                "0",
            ],
            {},
            self.tmp_path / "devhorde.log",
        )
        self.processes.append(devhorde)
        horde_url = f"http://127.0.0.1:{port}/api"
        wait_http(f"{horde_url}/v2/status/models?type=text", devhorde.popen)
        control = f"http://127.0.0.1:{port}/_devhorde"
        httpx.put(f"{control}/scenario", json=FAULT_SCENARIO, timeout=5).raise_for_status()
        front, front_url = start_relay_front(
            self.tmp_path,
            horde_url,
            front_redis_url,
            0,
            env={"HORDE_OAI_STREAM_TIMEOUT_SECONDS": str(STREAM_BUDGET_SECONDS)},
        )
        self.processes.append(front)
        return FaultStack(self.redis, horde_url, front_url, devhorde, front)


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[FaultyStack]:
    """A throwaway primary Redis; the test adds what the front reads through, then calls ``start``."""
    primary = ThrowawayRedis(free_port(), tmp_path)
    primary.start()
    builder = FaultyStack(tmp_path, primary)
    try:
        yield builder
    finally:
        for process in reversed(builder.processes):
            process.stop()
        primary.kill()


@dataclass
class Observed:
    """What the client saw around a fault run in a background thread."""

    fault_over: threading.Event = field(default_factory=threading.Event)
    states_after_fault: dict[int, str] = field(default_factory=dict)
    """The native request's state when each content chunk read after the fault ended arrived, by chunk number."""
    fault: threading.Thread | None = None


def stream_through_fault(stack: FaultStack, fault: Callable[[], None]) -> tuple[Any, Observed]:
    """Stream one completion; once the client has read ``FAULT_AT_CONTENT_CHUNK`` content chunks, run ``fault`` in a
    thread (the client keeps reading meanwhile) and record the native state at every content chunk after it."""
    observed = Observed()

    def run_fault() -> None:
        try:
            fault()
        finally:
            observed.fault_over.set()

    def on_content(seen: int) -> None:
        if seen == FAULT_AT_CONTENT_CHUNK:
            observed.fault = threading.Thread(target=run_fault, name="redis-fault")
            observed.fault.start()
        elif observed.fault_over.is_set():
            states = {entry["id"]: entry["state"] for entry in native_requests(stack.control_url)}
            (request_id,) = states
            observed.states_after_fault[seen] = states[request_id]

    result = stream_chat(
        stack.front_url,
        stack.control_url,
        watch=FAULT_AT_CONTENT_CHUNK,
        on_content=on_content,
        model="faults/steady-7b",
        max_tokens=300,
    )
    assert observed.fault is not None
    observed.fault.join(30)
    return result, observed


def assert_recovered_with_exactly_the_final_reply(stack: FaultStack, result: Any, observed: Observed) -> None:
    """The relay went on live after the fault, and the stream is exactly the final reply: nothing lost or twice."""
    assert result.error is None
    assert result.states_at_content == ["processing"] * FAULT_AT_CONTENT_CHUNK
    final = native_status(stack.horde_url, result.request_id)["generations"][0]["message"]["content"]
    assert len(final.split()) >= 60
    assert result.content() == final
    kinds = result.kinds()
    assert kinds[0] == "role" and kinds[-1] == "finish:stop"
    assert set(kinds[1:-1]) == {"content"}
    # Relayed live after the fault: content chunks holding a good part of the reply arrived while the request was
    # still being generated (more than the few paced pieces of posts read before the fault could hold).
    contents = result.contents()
    live_after = [contents[seen - 1] for seen, state in observed.states_after_fault.items() if state == "processing"]
    assert len(live_after) >= 3, observed.states_after_fault
    assert len("".join(live_after)) >= LIVE_AFTER_SHARE * len(final), (live_after, len(final))
    # The final reply only filled in a little: a relay that stopped at the fault would leave the rest of the reply
    # (most of it) to one last chunk.
    assert len(contents[-1]) < LAST_CHUNK_SHARE * len(final), (contents[-1], len(final))
    # The devhorde wrote every post (no gap for the relay to break on) and finished the request.
    entries = stream_entries(stack.redis.url, 0, result.request_id)
    seqs = [int(entry["seq"]) for entry in entries if "ended" not in entry]
    assert seqs == list(range(1, len(seqs) + 1))
    assert "".join(entry["text"] for entry in entries if "ended" not in entry) == final
    assert native_request(stack.control_url, result.request_id)["state"] == "done"


def test_redis_killed_and_restarted_mid_stream(faulty: FaultyStack) -> None:
    """The front's Redis (a replica of the devhorde's) is killed mid-stream: the reader's reads fail and are made
    again after 2 s from the last entry read; the restarted Redis has the whole stream again, so the reader goes on
    from where it stopped, relaying live, and the client reads exactly the final reply.

    ref: redis-reads-and-recovery.4, final-reply-reconciliation.4"""
    replica = ThrowawayRedis(free_port(), faulty.tmp_path, replica_of=faulty.redis.port)
    replica.start()
    try:
        stack = faulty.start(replica.url)

        def outage() -> None:
            replica.kill()
            time.sleep(OUTAGE_SECONDS)
            replica.start()

        result, observed = stream_through_fault(stack, outage)
        assert_recovered_with_exactly_the_final_reply(stack, result, observed)
        assert "Delta read failed" in stack.front.log()
    finally:
        replica.kill()


def test_redis_frozen_mid_stream(faulty: FaultyStack) -> None:
    """The connection to Redis stops answering mid-stream (a proxy holds every byte, connections stay open): the
    read is abandoned after 5 s and made again on a fresh connection, which answers once the freeze ends; the reader
    goes on from the last entry read, relaying live, and the client reads exactly the final reply.

    ref: redis-reads-and-recovery.2, redis-reads-and-recovery.4, final-reply-reconciliation.4"""
    proxy = StallingProxy(faulty.redis.port)
    proxy.start()
    try:
        stack = faulty.start(proxy.url)

        def freeze() -> None:
            proxy.stall()
            time.sleep(STALL_SECONDS)
            proxy.resume()

        before = proxy.connections
        result, observed = stream_through_fault(stack, freeze)
        assert_recovered_with_exactly_the_final_reply(stack, result, observed)
        assert "took longer than" in stack.front.log()
        assert proxy.connections > before  # the abandoned read was made again on a fresh connection
    finally:
        proxy.stop()
