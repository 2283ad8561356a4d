"""The Redis reader of progress streams and the signal listener, against a real Redis.

The shared Redis is 127.0.0.1:6379, database 12 only; every key and request id is unique to the test. Faults that
would disturb other users of that server (stopping it, ``CLIENT PAUSE``) use a throwaway ``redis-server`` started by
the test on a free 127.0.0.1 port.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chat.horde import delta_stream
from chat.horde.delta_stream import DELTA_READ_SPAN, DeltaEntry, DeltaStreamReader, SignalListener, stream_key
from devhorde.launch import redis_server_args
from tests.loopback import free_port

SHARED_URL = "redis://127.0.0.1:6379"
TEST_DB = 12


def unique(prefix: str) -> str:
    return f"test-{prefix}-{uuid.uuid4().hex}"


async def shared_client() -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(SHARED_URL, db=TEST_DB)


async def take(queue: asyncio.Queue[Any], count: int, timeout: float = 3.0) -> list[Any]:
    """Return the next ``count`` items of ``queue``, failing after ``timeout`` seconds."""
    items = []
    async with asyncio.timeout(timeout):
        while len(items) < count:
            items.append(await queue.get())
    return items


async def stays_empty(queue: asyncio.Queue[Any], seconds: float = 0.6) -> bool:
    await asyncio.sleep(seconds)
    return queue.empty()


async def connection_id(client: redis.asyncio.Redis, name: str, timeout: float = 3.0) -> str:
    """The id of the connection named ``name``, waiting until it exists."""
    async with asyncio.timeout(timeout):
        while True:
            for connection in await client.client_list():
                if connection.get("name") == name:
                    return str(connection["id"])
            await asyncio.sleep(0.05)


def delta(gen: str, seq: int, text: str, reasoning: str = "", **extra: str) -> dict[str, str]:
    """The fields of a progress post as the Horde writes them."""
    return {"gen": gen, "seq": str(seq), "text": text, "reasoning": reasoning, **extra}


def texts(entries: list[DeltaEntry]) -> list[str]:
    return [entry.text for entry in entries]


class ThrowawayRedis:
    """A private ``redis-server`` on a free loopback port, stoppable and restartable with its data."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            redis_server_args(self.port, self.directory, "dump.rdb"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with redis.Redis(port=self.port, socket_timeout=0.5) as probe:
                    probe.dbsize()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("throwaway redis-server did not start")

    def stop(self) -> None:
        """Save the data set, then stop the server (a restart loads it back)."""
        if self.process is None:
            return
        with redis.Redis(port=self.port, socket_timeout=2) as client:
            client.save()
        self.process.terminate()
        self.process.wait(timeout=5)
        self.process = None


@pytest.fixture
def throwaway_redis(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = ThrowawayRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.process.kill()
            server.process.wait(timeout=5)


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def xread_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[bytes], Any]]:
    """Record the stream keys and BLOCK of every XREAD made through redis.asyncio."""
    calls: list[tuple[list[bytes], Any]] = []
    original = redis.asyncio.Redis.xread

    def spy(self: redis.asyncio.Redis, streams: dict[bytes, bytes], *args: Any, **kwargs: Any) -> Any:
        calls.append((list(streams), kwargs.get("block")))
        return original(self, streams, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.Redis, "xread", spy)
    return calls


# --- reading ------------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_two_requests_are_read_in_order_with_one_xread(xread_calls: list[tuple[list[bytes], Any]], spans) -> None:
    """Every registered stream is read by one XREAD BLOCK 250 from its start, and each entry is queued on its request
    in order, with its fields parsed. ref: redis-reads-and-recovery.1, delta-fields.1"""
    provider, _ = spans
    first, second = unique("a"), unique("b")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB, tracer=provider.get_tracer("test"))
    try:
        await client.xadd(
            stream_key(first),
            {"gen": "g1", "seq": "1", "text": "Hello", "reasoning": "hmm", "model": "m/one", "worker": "w-1"},
        )
        first_queue = reader.register(first)
        second_queue = reader.register(second)
        await client.xadd(stream_key(second), {"gen": "g2", "seq": "1", "text": "Hi", "reasoning": ""})
        for index in range(2, 5):
            await client.xadd(stream_key(first), delta("g1", index, f" t{index}"))
            await client.xadd(stream_key(second), delta("g2", index, f" u{index}"))
        got_first = await take(first_queue, 4)
        got_second = await take(second_queue, 4)
        assert texts(got_first) == ["Hello", " t2", " t3", " t4"]
        assert texts(got_second) == ["Hi", " u2", " u3", " u4"]
        assert [entry.seq for entry in got_first] == [1, 2, 3, 4]
        head = got_first[0]
        assert (head.gen, head.reasoning, head.model, head.worker, head.ended, head.reason) == (
            "g1",
            "hmm",
            "m/one",
            "w-1",
            False,
            None,
        )
        assert head.ms == int(head.stream_id.split("-")[0])
        assert got_second[0].model is None and got_second[0].worker is None
        both = {stream_key(first).encode(), stream_key(second).encode()}
        assert any(set(keys) == both for keys, _ in xread_calls)
        assert all(block == 250 for _, block in xread_calls)
        assert await stays_empty(first_queue) and await stays_empty(second_queue, 0)
    finally:
        await reader.aclose()
        await client.delete(stream_key(first), stream_key(second))
        await client.aclose()


@pytest.mark.asyncio
async def test_ended_markers_are_parsed() -> None:
    """An ended marker carries gen, ended and maybe a reason; a missing seq reads as 0.
    ref: final-reply-reconciliation.6, final-reply-reconciliation.7"""
    request = unique("ended")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB)
    try:
        queue = reader.register(request)
        await client.xadd(stream_key(request), {"gen": "g1", "seq": "1", "text": "partial", "reasoning": ""})
        await client.xadd(stream_key(request), {"gen": "g1", "ended": "1", "reason": "restarted"})
        await client.xadd(stream_key(request), delta("g2", 1, "again", ended="0"))
        await client.xadd(stream_key(request), {"gen": "g2", "ended": "1"})
        partial, marker, restarted, last = await take(queue, 4)
        assert not partial.ended and partial.seq == 1
        assert (marker.gen, marker.ended, marker.reason, marker.seq, marker.text) == ("g1", True, "restarted", 0, "")
        assert not restarted.ended and restarted.gen == "g2"
        assert last.ended and last.reason is None
    finally:
        await reader.aclose()
        await client.delete(stream_key(request))
        await client.aclose()


@pytest.mark.asyncio
async def test_read_span_is_a_root_span_for_non_empty_reads_only(spans) -> None:
    """Each non-empty read records one root horde.oai.delta_read span with horde.* attributes; empty reads record
    none. ref: delta-read-attributes.1, delta-read-attributes.2, delta-read-attributes.3"""
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    request, idle = unique("span"), unique("idle")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB, tracer=tracer)
    try:
        with tracer.start_as_current_span("a request"):
            queue = reader.register(request)  # the reader starts inside a request's span
            reader.register(idle)
        await asyncio.sleep(0.6)  # empty reads
        assert [span.name for span in exporter.get_finished_spans()] == ["a request"]
        await client.xadd(stream_key(request), {"gen": "g", "seq": "1", "text": "a", "reasoning": ""})
        await client.xadd(stream_key(request), {"gen": "g", "seq": "2", "text": "b", "reasoning": ""})
        await take(queue, 2)
        await asyncio.sleep(0.6)
        reads = [span for span in exporter.get_finished_spans() if span.name == DELTA_READ_SPAN]
        assert reads
        assert all(span.parent is None for span in reads)
        assert sum(span.attributes["horde.entries"] for span in reads) == 2
        assert all(span.attributes["horde.streams"] == 2 for span in reads)
        assert all(span.attributes["horde.streams_with_entries"] == 1 for span in reads)
        assert all(key.startswith("horde.") for span in reads for key in span.attributes)
    finally:
        await reader.aclose()
        await client.delete(stream_key(request))
        await client.aclose()


@pytest.mark.asyncio
async def test_unregistered_reader_idles_and_resumes(xread_calls: list[tuple[list[bytes], Any]]) -> None:
    """With no registered request the reader makes no reads; a new registration starts them again, from the
    stream's start. ref: redis-reads-and-recovery.1"""
    request = unique("idle")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB)
    try:
        queue = reader.register(request)
        await client.xadd(stream_key(request), {"gen": "g", "seq": "1", "text": "one", "reasoning": ""})
        await take(queue, 1)
        reader.unregister(request)
        await asyncio.sleep(0.4)  # a read in flight ends
        before = len(xread_calls)
        await asyncio.sleep(0.6)
        assert len(xread_calls) == before
        queue = reader.register(request)
        with pytest.raises(ValueError, match="is already registered"):
            reader.register(request)
        assert texts(await take(queue, 1)) == ["one"]
        assert len(xread_calls) > before
    finally:
        await reader.aclose()
        await client.delete(stream_key(request))
        await client.aclose()


@pytest.mark.asyncio
async def test_a_registration_made_while_the_idle_reader_closes_its_connection_is_read() -> None:
    """The reader clears its wake-up before closing the idle connection, so a request registered during that close
    is read, not left waiting for some later registration. ref: redis-reads-and-recovery.1"""
    first, second = unique("idle-first"), unique("idle-second")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB)
    registered: list[asyncio.Queue[DeltaEntry]] = []
    original_drop = reader._drop_client

    async def drop_then_register() -> None:
        await original_drop()
        if not registered:
            registered.append(reader.register(second))

    reader._drop_client = drop_then_register  # type: ignore[method-assign]
    try:
        await client.xadd(stream_key(first), delta("g", 1, "one"))
        await client.xadd(stream_key(second), delta("g", 1, "two"))
        await take(reader.register(first), 1)
        reader.unregister(first)
        async with asyncio.timeout(5):
            while not registered:
                await asyncio.sleep(0.01)
        assert texts(await take(registered[0], 1)) == ["two"]
    finally:
        await reader.aclose()
        await client.delete(stream_key(first), stream_key(second))
        await client.aclose()


# --- recovery -----------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_failed_read_resumes_after_two_seconds_without_skipping_or_repeating() -> None:
    """Killing the reader's connection fails its read; it reads again after 2 s from the last entry read, so entries
    written meanwhile arrive once each. No PING is needed to notice. ref: redis-reads-and-recovery.3,
    redis-reads-and-recovery.4"""
    request, name = unique("kill"), unique("reader")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB, client_name=name)
    try:
        queue = reader.register(request)
        for index in range(1, 4):
            await client.xadd(stream_key(request), delta("g", index, f"e{index}"))
        assert texts(await take(queue, 3)) == ["e1", "e2", "e3"]
        await client.client_kill_filter(_id=await connection_id(client, name))
        killed = time.monotonic()
        for index in range(4, 7):
            await client.xadd(stream_key(request), delta("g", index, f"e{index}"))
        assert texts(await take(queue, 3, timeout=5)) == ["e4", "e5", "e6"]
        assert time.monotonic() - killed >= delta_stream.DELTA_READ_RETRY_SECONDS - 0.1
        assert await stays_empty(queue)
        assert reader.stats.failures >= 1
    finally:
        await reader.aclose()
        await client.delete(stream_key(request))
        await client.aclose()


@pytest.mark.asyncio
async def test_read_resumes_after_the_server_restarts_and_sends_no_ping(
    throwaway_redis: ThrowawayRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While Redis is down reads fail and are retried; once it is back (with its data), reading continues from the
    last entry read: nothing skipped, nothing repeated, and the reader never sent a PING.
    ref: redis-reads-and-recovery.3, redis-reads-and-recovery.4"""
    monkeypatch.setattr(delta_stream, "DELTA_READ_RETRY_SECONDS", 0.5)
    request = unique("restart")
    key = stream_key(request)
    reader = DeltaStreamReader(throwaway_redis.url, 0)
    try:
        queue = reader.register(request)
        with redis.Redis(port=throwaway_redis.port) as client:
            client.xadd(key, {"gen": "g", "seq": "1", "text": "before", "reasoning": ""})
            client.xadd(key, {"gen": "g", "seq": "2", "text": "stop", "reasoning": ""})
        assert texts(await take(queue, 2)) == ["before", "stop"]
        throwaway_redis.stop()
        await asyncio.sleep(1.2)
        assert reader.stats.failures >= 1
        throwaway_redis.start()
        with redis.Redis(port=throwaway_redis.port) as client:
            client.config_resetstat()
            client.xadd(key, {"gen": "g", "seq": "3", "text": "after", "reasoning": ""})
        assert texts(await take(queue, 1, timeout=5)) == ["after"]
        assert await stays_empty(queue)
        with redis.Redis(port=throwaway_redis.port) as client:
            commands = client.info("commandstats")
        assert "cmdstat_xread" in commands
        assert "cmdstat_ping" not in commands
    finally:
        await reader.aclose()


@pytest.mark.asyncio
async def test_read_longer_than_the_timeout_is_abandoned_and_made_again(
    throwaway_redis: ThrowawayRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read left unanswered (CLIENT PAUSE) past DELTA_READ_TIMEOUT_SECONDS is abandoned and made again on a fresh
    connection; the entry written during the pause arrives once. ref: redis-reads-and-recovery.2"""
    assert delta_stream.DELTA_READ_TIMEOUT_SECONDS == 5
    monkeypatch.setattr(delta_stream, "DELTA_READ_TIMEOUT_SECONDS", 0.4)
    request = unique("pause")
    key = stream_key(request)
    reader = DeltaStreamReader(throwaway_redis.url, 0)
    client = redis.asyncio.Redis.from_url(throwaway_redis.url)
    writer = redis.asyncio.Redis.from_url(throwaway_redis.url)
    try:
        queue = reader.register(request)
        await writer.xadd(key, {"gen": "g", "seq": "1", "text": "first", "reasoning": ""})
        assert texts(await take(queue, 1)) == ["first"]
        await client.execute_command("CLIENT", "PAUSE", 1500, "ALL")
        paused = time.monotonic()
        write = asyncio.create_task(writer.xadd(key, {"gen": "g", "seq": "2", "text": "second", "reasoning": ""}))
        assert texts(await take(queue, 1, timeout=5)) == ["second"]
        assert time.monotonic() - paused >= 1.4
        await write
        assert reader.stats.timeouts >= 1
        assert await stays_empty(queue)
    finally:
        await reader.aclose()
        await client.aclose()
        await writer.aclose()


@pytest.mark.asyncio
async def test_deleted_expired_or_recreated_stream_stops_deltas_silently() -> None:
    """A deleted or expired stream, or one recreated with ids below the last id read, produces no entries and no
    error; other streams keep flowing. ref: redis-reads-and-recovery.5, redis-reads-and-recovery.6"""
    deleted, expired, alive = unique("deleted"), unique("expired"), unique("alive")
    client = await shared_client()
    reader = DeltaStreamReader(SHARED_URL, TEST_DB)
    try:
        deleted_queue = reader.register(deleted)
        expired_queue = reader.register(expired)
        alive_queue = reader.register(alive)
        await client.xadd(stream_key(deleted), {"gen": "g", "seq": "1", "text": "a", "reasoning": ""}, id="5000-1")
        await client.xadd(stream_key(deleted), {"gen": "g", "seq": "2", "text": "b", "reasoning": ""}, id="5000-2")
        await client.xadd(stream_key(expired), {"gen": "g", "seq": "1", "text": "x", "reasoning": ""})
        assert texts(await take(deleted_queue, 2)) == ["a", "b"]
        assert texts(await take(expired_queue, 1)) == ["x"]
        await client.delete(stream_key(deleted))
        await client.pexpire(stream_key(expired), 50)
        await asyncio.sleep(0.4)
        assert not await client.exists(stream_key(expired))
        # recreated after a "failover" with lower ids
        await client.xadd(stream_key(deleted), {"gen": "g", "seq": "3", "text": "lost", "reasoning": ""}, id="1000-0")
        await client.xadd(stream_key(deleted), {"gen": "g", "seq": "4", "text": "lost", "reasoning": ""}, id="5000-2")
        await client.xadd(stream_key(alive), {"gen": "g", "seq": "1", "text": "still here", "reasoning": ""})
        assert texts(await take(alive_queue, 1)) == ["still here"]
        assert await stays_empty(deleted_queue) and expired_queue.empty()
        assert reader.stats.failures == 0 and reader.stats.timeouts == 0
    finally:
        await reader.aclose()
        await client.delete(stream_key(deleted), stream_key(expired), stream_key(alive))
        await client.aclose()


# --- signals ------------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_signals_are_dispatched_by_request_id() -> None:
    """Each {"id", "event"} signal goes to its request's waiter; other ids and malformed messages are ignored without
    stopping the listener. ref: native-horde-chat.md, Signals (Redis pub/sub)"""
    first, second = unique("sig-a"), unique("sig-b")
    client = await shared_client()
    listener = SignalListener(SHARED_URL, client_name=unique("signals"))
    try:
        first_queue = listener.register(first)
        second_queue = listener.register(second)
        assert listener.register(first) is first_queue
        assert await listener.wait_subscribed(3)
        for bad in [
            "not json",
            '"a string"',
            "[1, 2]",
            json.dumps({"id": 5, "event": "done"}),
            json.dumps({"id": first}),
            b"\xff\xfe\x00",
            "{" * 10_000,
        ]:
            await client.publish(delta_stream.SIGNAL_CHANNEL, bad)
        await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": unique("other"), "event": "done"}))
        await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": first, "event": "processing"}))
        await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": second, "event": "cancelled"}))
        await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": first, "event": "done"}))
        assert await take(first_queue, 2) == ["processing", "done"]
        assert await take(second_queue, 1) == ["cancelled"]
        listener.unregister(second)
        await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": second, "event": "done"}))
        assert await stays_empty(second_queue, 0.3)
        assert listener.subscribed
    finally:
        await listener.aclose()
        await client.aclose()


@pytest.mark.asyncio
async def test_signal_listener_reconnects_after_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed subscription is made again after SIGNAL_RETRY_SECONDS and signals flow again.
    ref: native-horde-chat.md, Signals (Redis pub/sub)"""
    monkeypatch.setattr(delta_stream, "SIGNAL_RETRY_SECONDS", 0.2)
    request, name = unique("sig-kill"), unique("signals")
    client = await shared_client()
    listener = SignalListener(SHARED_URL, client_name=name)
    try:
        queue = listener.register(request)
        assert await listener.wait_subscribed(3)
        assert queue.empty()  # the first subscription wakes nobody
        old = await connection_id(client, name)
        await client.client_kill_filter(_id=old)
        events: list[str] = []
        async with asyncio.timeout(5):
            while "processing" not in events:
                await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": request, "event": "processing"}))
                await asyncio.sleep(0.1)
                while not queue.empty():
                    events.append(queue.get_nowait())
        assert await connection_id(client, name) != old
        # Subscribed again, the listener woke the waiter once, before any signal of the new subscription: signals
        # published meanwhile were lost, so the waiter re-reads at once.
        assert events[0] == delta_stream.RESUBSCRIBED_EVENT
        assert events.count(delta_stream.RESUBSCRIBED_EVENT) == 1
    finally:
        await listener.aclose()
        await client.aclose()


@pytest.mark.asyncio
async def test_signal_listener_reconnects_when_ping_goes_unanswered(
    throwaway_redis: ThrowawayRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet connection is checked with a pub/sub PING; answered, the subscription stays; unanswered (CLIENT
    PAUSE), the listener subscribes again on a fresh connection."""
    monkeypatch.setattr(delta_stream, "SIGNAL_POLL_SECONDS", 0.1)
    monkeypatch.setattr(delta_stream, "SIGNAL_PONG_TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(delta_stream, "SIGNAL_RETRY_SECONDS", 0.1)
    request, name = unique("sig-ping"), unique("signals")
    client = redis.asyncio.Redis.from_url(throwaway_redis.url)
    listener = SignalListener(throwaway_redis.url, client_name=name, liveness_interval_seconds=0.2)
    try:
        queue = listener.register(request)
        assert await listener.wait_subscribed(3)
        first = await connection_id(client, name)
        await asyncio.sleep(1.0)  # several answered PINGs
        assert await connection_id(client, name) == first
        await client.execute_command("CLIENT", "PAUSE", 1200, "ALL")
        await asyncio.sleep(1.5)
        events: list[str] = []
        async with asyncio.timeout(5):
            while "done" not in events:
                await client.publish(delta_stream.SIGNAL_CHANNEL, json.dumps({"id": request, "event": "done"}))
                await asyncio.sleep(0.1)
                while not queue.empty():
                    events.append(queue.get_nowait())
        assert await connection_id(client, name) != first
        assert events[0] == delta_stream.RESUBSCRIBED_EVENT
    finally:
        await listener.aclose()
        await client.aclose()


@pytest.mark.asyncio
async def test_streams_are_read_on_the_stream_database_even_when_the_url_names_another() -> None:
    """``HORDE_OAI_STREAM_REDIS_DB`` decides where the streams are read, not a database in ``HORDE_OAI_REDIS_URL``'s
    path. ref: redis-reads-and-recovery.1"""
    request = unique("db")
    writer = redis.asyncio.Redis(host="127.0.0.1", port=6379, db=TEST_DB)
    reader = DeltaStreamReader(f"{SHARED_URL}/0", TEST_DB)
    try:
        await writer.xadd(stream_key(request), delta("g", 1, "on the stream database"))
        assert texts(await take(reader.register(request), 1)) == ["on the stream database"]
    finally:
        await reader.aclose()
        await writer.delete(stream_key(request))
        await writer.aclose()
