"""A submit waiting for a connection goes ahead of the status reads waiting for one (chat.horde.native.ConnectionSlots):
with every connection busy with the reads of waiting requests, a new request's submit is sent at the next free
connection, not after every read queued before it (issue 37: the front's own time before its submit)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from chat.horde.native import ConnectionSlots, HordeClient, is_routine_call

BASE = "http://horde.test/api"


def test_status_reads_and_cancels_are_routine_and_submits_and_reads_before_submit_are_not() -> None:
    assert is_routine_call("GET", "/v2/generate/text/status/abc")
    assert is_routine_call("DELETE", "/v2/generate/text/status/abc")
    assert is_routine_call("GET", "/v2/generate/chat/status/abc")
    assert is_routine_call("GET", "/v2/generate/check/abc")
    assert not is_routine_call("POST", "/v2/generate/text/async")
    assert not is_routine_call("POST", "/v2/generate/chat/async")
    assert not is_routine_call("GET", "/v2/status/models")
    assert not is_routine_call("GET", "/v2/workers")
    assert not is_routine_call("GET", "/v2/status/performance")


@pytest.mark.asyncio
async def test_a_submit_queued_behind_status_reads_is_sent_at_the_first_free_connection() -> None:
    """One connection, held by a read; three reads then a submit queue for it: the submit is sent second."""
    sent: list[str] = []
    first_read_answered = asyncio.Event()

    async def horde(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.method} {request.url.path.removeprefix('/api')}")
        if len(sent) == 1:
            await first_read_answered.wait()
        if request.method == "POST":
            return httpx.Response(202, json={"id": "new", "kudos": 1})
        return httpx.Response(
            200, json={"done": False, "waiting": 1, "finished": 0, "processing": 0, "generations": []}
        )

    client = HordeClient(BASE, "test:0:none", 30, transport=httpx.MockTransport(horde), connections=1)
    reads = [
        asyncio.ensure_future(client.call("GET", f"/v2/generate/text/status/r{index}", "key")) for index in range(4)
    ]
    for _ in range(5):
        await asyncio.sleep(0)
    submit = asyncio.ensure_future(client.call("POST", "/v2/generate/text/async", "key", payload={"prompt": "x"}))
    for _ in range(5):
        await asyncio.sleep(0)
    first_read_answered.set()
    await asyncio.gather(*reads, submit)
    await client.aclose()
    assert sent == [
        "GET /v2/generate/text/status/r0",
        "POST /v2/generate/text/async",
        "GET /v2/generate/text/status/r1",
        "GET /v2/generate/text/status/r2",
        "GET /v2/generate/text/status/r3",
    ]


@pytest.mark.asyncio
async def test_a_waiting_call_cancelled_as_its_slot_arrives_passes_the_slot_on() -> None:
    slots = ConnectionSlots(1)
    await slots.acquire(routine=True)
    leaving = asyncio.ensure_future(slots.acquire(routine=False))
    staying = asyncio.ensure_future(slots.acquire(routine=True))
    await asyncio.sleep(0)
    slots.release()  # to the waiting submit ...
    leaving.cancel()  # ... which leaves before it runs
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await asyncio.wait_for(staying, 1)
    assert slots.free == 0
    slots.release()
    assert slots.free == 1
