"""The Redis side against the real Redis on 127.0.0.1:6379, database 13: progress stream entries, ``ended``
markers, TTL and the state signals (``native-horde-chat.md``, "Progress stream (Redis)", "Signals")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
import pytest_asyncio
from devhorde_helpers import API, chat, scenario, status, submit_ok, wait_done, worker

from devhorde.limits import SIGNALS_CHANNEL, STREAM_KEY_PREFIX

REASONER = ["reasoning_effort", "prompt_overflow_refused"]


async def stream_entries(redis, request_id: str) -> list[dict[str, str]]:
    return [fields for _, fields in await redis.xrange(f"{STREAM_KEY_PREFIX}{request_id}")]


@pytest_asyncio.fixture
async def signals(redis_db13) -> AsyncIterator:
    """A subscription to ``horde:chat:signals``; other processes may publish there too, so readers filter by id."""
    pubsub = redis_db13.pubsub()
    await pubsub.subscribe(SIGNALS_CHANNEL)
    yield pubsub
    await pubsub.unsubscribe(SIGNALS_CHANNEL)
    await pubsub.aclose()


async def events_for(pubsub, request_id: str, last: str, timeout: float = 3.0) -> list[str]:
    """Collect the events signalled for ``request_id`` until ``last`` arrives."""
    events: list[str] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message is None:
            continue
        try:
            data = json.loads(message["data"])
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("id") == request_id:
            assert set(data) == {"id", "event"}
            events.append(data["event"])
            if data["event"] == last:
                return events
    raise AssertionError(f"no {last!r} signal for {request_id}; got {events}")


@pytest.mark.asyncio
async def test_stream_entries_concatenate_to_the_final_reply(make_client, redis_db13) -> None:
    redis = redis_db13
    client = await make_client(scenario(worker("r1", features=REASONER, reply_words=40)), redis=True)
    request_id = await submit_ok(client, chat(stream=True, params={"reasoning_effort": "low"}))
    body = await wait_done(client, request_id)
    assert body["stream_progress"] is True
    generation = body["generations"][0]
    entries = await stream_entries(redis, request_id)
    *deltas, marker = entries
    assert marker == {"gen": generation["id"], "ended": "1", "reason": "completed"}
    assert len(deltas) > 3
    assert [delta["seq"] for delta in deltas] == [str(seq) for seq in range(1, len(deltas) + 1)]
    for delta in deltas:
        assert set(delta) == {"gen", "seq", "text", "reasoning", "model", "worker"}
        assert delta["gen"] == generation["id"]
        assert delta["model"] == "m/plain" and delta["worker"] == generation["worker_id"]
    assert "".join(delta["text"] for delta in deltas) == generation["message"]["content"]
    assert "".join(delta["reasoning"] for delta in deltas) == generation["message"]["reasoning_content"]
    assert 1190 <= await redis.ttl(f"{STREAM_KEY_PREFIX}{request_id}") <= 1200
    await redis.delete(f"{STREAM_KEY_PREFIX}{request_id}")


@pytest.mark.asyncio
async def test_no_stream_without_stream_true_or_without_progress_posts(make_client, redis_db13) -> None:
    redis = redis_db13
    client = await make_client(
        scenario(worker("w1"), worker("quiet", "m/quiet", posts_progress=False)),
        redis=True,
    )
    plain = await submit_ok(client, chat())
    quiet = await submit_ok(client, chat(models=["m/quiet"], stream=True))
    for request_id in (plain, quiet):
        assert (await wait_done(client, request_id))["stream_progress"] is False
        assert await redis.exists(f"{STREAM_KEY_PREFIX}{request_id}") == 0


@pytest.mark.asyncio
async def test_stream_progress_without_redis_stays_false(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    assert (await wait_done(client, await submit_ok(client, chat(stream=True))))["stream_progress"] is False


@pytest.mark.asyncio
async def test_signals_processing_done_faulted_cancelled(make_client, redis_db13, signals) -> None:
    client = await make_client(
        scenario(
            worker("ok"),
            worker("bad", "m/bad", fault_reason="tool_violation"),
            worker("slow", "m/slow", time_to_first_token_seconds=30.0),
        ),
        redis=True,
    )
    done = await submit_ok(client, chat())
    assert await events_for(signals, done, "done") == ["processing", "done"]
    faulted = await submit_ok(client, chat(models=["m/bad"]))
    assert await events_for(signals, faulted, "faulted") == ["processing", "faulted"]
    assert (await status(client, faulted))["fault_reason"] == "tool_violation"
    cancelled = await submit_ok(client, chat(models=["m/slow"]))
    await client.delete(f"{API}/generate/chat/status/{cancelled}")
    assert await events_for(signals, cancelled, "cancelled") == ["processing", "cancelled"]


@pytest.mark.asyncio
async def test_restarted_attempt_gets_a_new_gen_and_an_ended_marker(make_client, redis_db13, signals) -> None:
    redis = redis_db13
    client = await make_client(scenario(worker("w1", restart_after_posts=2, restarts=1)), redis=True)
    request_id = await submit_ok(client, chat(stream=True))
    assert await events_for(signals, request_id, "done") == ["processing", "processing", "done"]
    body = await wait_done(client, request_id)
    assert body["restarted"] == 1
    entries = await stream_entries(redis, request_id)
    first_gen = entries[0]["gen"]
    assert entries[:3] == [
        {**entries[0], "seq": "1"},
        {**entries[1], "seq": "2"},
        {"gen": first_gen, "ended": "1", "reason": "restarted"},
    ]
    second = [entry for entry in entries[3:] if "ended" not in entry]
    final_gen = body["generations"][0]["id"]
    assert final_gen != first_gen and {entry["gen"] for entry in second} == {final_gen}
    assert "".join(entry["text"] for entry in second) == body["generations"][0]["message"]["content"]
    assert entries[-1] == {"gen": final_gen, "ended": "1", "reason": "completed"}
    await redis.delete(f"{STREAM_KEY_PREFIX}{request_id}")


@pytest.mark.asyncio
async def test_gap_model_less_worker_less_deltas_and_reasonless_marker(make_client, redis_db13) -> None:
    redis = redis_db13
    client = await make_client(
        scenario(
            worker("gap", "m/gap", skip_seq=2),
            worker("anon", "m/anon", omit_model_in_deltas=True, omit_worker_in_deltas=True, ended_reason=False),
        ),
        redis=True,
    )
    gap = await submit_ok(client, chat(models=["m/gap"], stream=True))
    anon = await submit_ok(client, chat(models=["m/anon"], stream=True))
    await wait_done(client, gap)
    await wait_done(client, anon)
    seqs = [entry["seq"] for entry in await stream_entries(redis, gap) if "seq" in entry]
    assert seqs[:3] == ["1", "3", "4"]
    *deltas, marker = await stream_entries(redis, anon)
    assert all(set(delta) == {"gen", "seq", "text", "reasoning"} for delta in deltas)
    assert set(marker) == {"gen", "ended"}
    await redis.delete(f"{STREAM_KEY_PREFIX}{gap}", f"{STREAM_KEY_PREFIX}{anon}")


@pytest.mark.asyncio
async def test_final_text_can_diverge_from_the_relayed_text(make_client, redis_db13) -> None:
    redis = redis_db13
    client = await make_client(scenario(worker("w1", final_text_diverges=True)), redis=True)
    request_id = await submit_ok(client, chat(stream=True))
    content = (await wait_done(client, request_id))["generations"][0]["message"]["content"]
    relayed = "".join(entry.get("text", "") for entry in await stream_entries(redis, request_id))
    assert content == "Correction: " + relayed
    await redis.delete(f"{STREAM_KEY_PREFIX}{request_id}")


@pytest.mark.asyncio
async def test_cancel_writes_an_ended_marker(make_client, redis_db13) -> None:
    redis = redis_db13
    client = await make_client(
        scenario(worker("w1", tokens_per_second=20, post_interval_seconds=0.05)),
        redis=True,
    )
    request_id = await submit_ok(client, chat(stream=True))
    await asyncio.sleep(0.12)
    await client.delete(f"{API}/generate/chat/status/{request_id}")
    await client.app.state.horde.bus.flush()
    entries = await stream_entries(redis, request_id)
    assert entries[-1]["ended"] == "1" and entries[-1]["reason"] == "cancelled"
    assert len(entries) >= 2
    await redis.delete(f"{STREAM_KEY_PREFIX}{request_id}")


class _BrokenRedis:
    """Stands in for a Redis that refuses every write (no network involved)."""

    def __init__(self) -> None:
        self.attempts = 0
        self.connection_pool = SimpleNamespace(connection_kwargs={})

    def pipeline(self, transaction: bool = False):
        broken = self

        class _Pipe:
            async def __aenter__(self):
                return self

            async def __aexit__(self, *exc_info):
                return False

            def xadd(self, *args, **kwargs):
                return None

            def pexpireat(self, *args, **kwargs):
                return None

            async def execute(self):
                broken.attempts += 1
                raise ConnectionError("Redis is down")

        return _Pipe()

    async def publish(self, *args):
        self.attempts += 1
        raise ConnectionError("Redis is down")

    async def aclose(self) -> None:
        return None


@pytest.mark.asyncio
async def test_a_failing_redis_never_stalls_the_jobs(make_client, monkeypatch) -> None:
    broken = _BrokenRedis()
    monkeypatch.setattr("devhorde.redisbus.Redis.from_url", lambda *args, **kwargs: broken)
    client = await make_client(scenario(worker("w1", reply_words=200)), redis=True)
    started = asyncio.get_running_loop().time()
    body = await wait_done(client, await submit_ok(client, chat(stream=True)))
    assert body["finished"] == 1 and body["stream_progress"] is True
    assert asyncio.get_running_loop().time() - started < 1.5
    assert broken.attempts >= 1


@pytest.mark.asyncio
async def test_streams_are_written_to_the_stream_database_even_when_the_url_names_another() -> None:
    """The devhorde writes where the front reads: the stream database, whatever database the URL's path names."""
    import time
    import uuid

    import redis.asyncio

    from devhorde.redisbus import RedisBus

    request_id = f"test-db-{uuid.uuid4().hex}"
    bus = RedisBus("redis://127.0.0.1:6379/0", stream_db=13)
    reader = redis.asyncio.Redis(host="127.0.0.1", port=6379, db=13, decode_responses=True)
    try:
        written = bus.xadd(request_id, {"gen": "g", "seq": "1", "text": "hi"}, int(time.time() * 1000) + 60_000)
        assert written is not None
        await written
        entries = await reader.xrange(f"horde:chat:stream:{request_id}")
        assert [fields for _, fields in entries] == [{"gen": "g", "seq": "1", "text": "hi"}]
    finally:
        await reader.delete(f"horde:chat:stream:{request_id}")
        await reader.aclose()
        await bus.close()
