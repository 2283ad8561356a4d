"""Several front worker processes behind one port (``uvicorn --workers``, ``make run WORKERS=n``).

A front of two workers with Redis and the devhorde: streamed requests are served by both processes (the connections
each worker holds are read from ``/proc``), every stream delivers the whole reply, and the native model list cache is
the one both share through django-redis (key ``horde-oai:1:native-text-models:<HORDE_URL>``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis

from tests.conftest import REDIS_URL, LiveStack, start_devhorde, start_front

pytestmark = pytest.mark.integration

API_KEY = "0000000000"
MODEL = "devhorde/workers-3b"
REPLY = "Two processes, one port, and every word of this reply arrives."
SCENARIO = {
    "name": "workers",
    "workers": [
        {
            "name": "workers-1",
            "model": MODEL,
            "threads": 16,
            "max_length": 512,
            "reply_style": "fixed",
            "fixed_reply": REPLY,
            "time_to_first_token_seconds": 0.05,
            "tokens_per_second": 10,
            "post_interval_seconds": 0.2,
        }
    ],
}
"""About a second per reply, posted in pieces: long enough for the streams to overlap."""
STREAMS_PER_ROUND = 8
MAX_ROUNDS = 6
"""Rounds of concurrent streams until both workers served one (the kernel hands connections to either)."""


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    tmp = tmp_path_factory.mktemp("workers")
    devhorde, horde_url = start_devhorde(tmp)
    try:
        front, front_url = start_front(tmp, horde_url, workers=2, env={"HORDE_OAI_MODELS_CACHE_SECONDS": "30"})
    except Exception:
        devhorde.stop()
        raise
    stack = LiveStack(devhorde, horde_url, front, front_url)
    try:
        stack.put_scenario(SCENARIO)
        yield stack
    finally:
        stack.stop()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def established_inodes(port: int) -> set[str]:
    """Socket inodes of the established TCP connections whose local port is ``port`` (the server side)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                inodes.add(fields[9])
    return inodes


def connections_by_worker(master: int, port: int) -> dict[int, int]:
    """How many established connections to ``port`` each child of ``master`` holds."""
    inodes = established_inodes(port)
    held = {}
    for child in children(master):
        count = 0
        try:
            for fd in Path(f"/proc/{child}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    count += 1
        except OSError:
            continue
        held[child] = count
    return held


async def one_stream(client: openai.AsyncOpenAI, started: asyncio.Event, counter: list[int]) -> str:
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=True, max_tokens=64
    )
    parts = []
    first = True
    async for chunk in stream:
        if first:
            first = False
            counter[0] += 1
            if counter[0] == STREAMS_PER_ROUND:
                started.set()
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


def test_two_workers_serve_streams_and_deliver_every_character(two_workers: LiveStack) -> None:
    """Streams opened together are served by both worker processes, and each delivers exactly the reply."""
    master = two_workers.front.popen.pid
    port = int(two_workers.front_url.rsplit(":", 1)[1])
    served_by: set[int] = set()

    async def round_of_streams() -> list[str]:
        started = asyncio.Event()
        counter = [0]
        async with openai.AsyncOpenAI(
            base_url=two_workers.openai_base_url, api_key=API_KEY, max_retries=0, timeout=30
        ) as client:
            tasks = [asyncio.ensure_future(one_stream(client, started, counter)) for _ in range(STREAMS_PER_ROUND)]
            try:
                await asyncio.wait_for(started.wait(), 20)
                held = connections_by_worker(master, port)
                served_by.update(child for child, count in held.items() if count)
            finally:
                replies = await asyncio.gather(*tasks)
        return replies

    for _ in range(MAX_ROUNDS):
        replies = asyncio.run(round_of_streams())
        assert replies == [REPLY] * STREAMS_PER_ROUND
        if len(served_by) >= 2:
            break
    assert len(served_by) == 2, f"connections held by {served_by} only"
    assert len(children(master)) >= 2


def test_the_model_list_cache_is_shared_through_redis(two_workers: LiveStack) -> None:
    """The first GET /v1/models stores the native list in Redis; after the Horde's list changes, every answer, from
    either worker, is still the cached one until it expires (HORDE_OAI_MODELS_CACHE_SECONDS=30)."""
    key = f"horde-oai:1:native-text-models:{two_workers.horde_url}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.delete(key)
        listed = httpx.get(f"{two_workers.front_url}/v1/models", timeout=10).json()["data"]
        assert [card["id"] for card in listed] == [MODEL]
        stored = client.get(key)
        assert stored is not None and [entry["name"] for entry in json.loads(stored)] == [MODEL]
        assert 0 < client.ttl(key) <= 30
        renamed = json.loads(json.dumps(SCENARIO).replace(MODEL, "devhorde/renamed-3b"))
        two_workers.put_scenario(renamed)
        deadline = time.monotonic() + 20
        answers = []
        while len(answers) < 12 and time.monotonic() < deadline:
            # A new connection each time, so either worker may answer.
            answers.append(
                [card["id"] for card in httpx.get(f"{two_workers.front_url}/v1/models", timeout=10).json()["data"]]
            )
        assert answers == [[MODEL]] * 12
        client.delete(key)
        assert [card["id"] for card in httpx.get(f"{two_workers.front_url}/v1/models", timeout=10).json()["data"]] == [
            "devhorde/renamed-3b"
        ]
    finally:
        two_workers.put_scenario(SCENARIO)
        client.delete(key)
        client.close()
