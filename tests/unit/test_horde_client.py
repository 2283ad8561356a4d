"""The native client: what the Horde answers outside its contract is HordeUnreachable, never a crash."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from chat.horde_client import HordeClient, HordeRefusal, HordeUnreachable
from chat.refusals import error_from_refusal


def client_answering(status: int, content: bytes, headers: dict[str, str] | None = None) -> HordeClient:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["apikey"] == "k"
        assert request.headers["Client-Agent"] == "front:1:test"
        return httpx.Response(status, content=content, headers=headers)

    return HordeClient("http://horde.invalid/api", "front:1:test", 5, transport=httpx.MockTransport(answer))


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content",
    [
        b'{"done": true, "kudos": NaN}',
        b'{"done": true, "wait_time": Infinity}',
        b"<html>",
        b'"a string"',
        b'{"done": "maybe"}',
    ],
)
async def test_a_status_outside_the_contract_is_unreachable(content: bytes) -> None:
    with pytest.raises(HordeUnreachable):
        await client_answering(200, content).status("r1", "k")


@pytest.mark.asyncio
async def test_a_refusal_keeps_status_rc_message_and_headers() -> None:
    with pytest.raises(HordeRefusal) as refused:
        await client_answering(
            429, b'{"message": "Slow down.", "rc": "TooManyPrompts"}', {"Retry-After": "1e400"}
        ).status("r1", "k")
    assert (refused.value.status, refused.value.rc, refused.value.message) == (429, "TooManyPrompts", "Slow down.")
    # An overflowing Retry-After is no header rather than a crash.
    assert error_from_refusal(refused.value).retry_after is None


@pytest.mark.asyncio
async def test_a_submit_sends_compact_utf8_json() -> None:
    """The payload goes out as compact UTF-8 JSON (what httpx's ``json=`` sends), with its content type."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(202, content=b'{"id": "r1", "kudos": 2.5}')

    client = HordeClient("http://horde.invalid/api", "front:1:test", 5, transport=httpx.MockTransport(answer))
    payload = {"messages": [{"role": "user", "content": "Grüße ✓"}], "params": {"temperature": 0.7, "seed": 2**70}}
    result = await client.submit(payload, "k")
    assert (result.id, result.kudos, result.warnings) == ("r1", 2.5, [])
    assert sent[0].headers["Content-Type"] == "application/json"
    assert (
        sent[0].content
        == (
            '{"messages":[{"role":"user","content":"Grüße ✓"}],"params":{"temperature":0.7,"seed":' + str(2**70) + "}}"
        ).encode()
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("content", [b'{"done": true, "kudos": 1e400}', b"[" * 2000 + b"]" * 2000])
async def test_an_overflowing_number_or_deep_nesting_is_unreachable(content: bytes) -> None:
    with pytest.raises(HordeUnreachable):
        await client_answering(200, content).status("r1", "k")


@pytest.mark.asyncio
async def test_calls_beyond_the_connections_wait_their_turn_within_the_timeout() -> None:
    """At most ``connections`` calls reach the pool at once; a call that finds no free turn within the call timeout
    is HordeUnreachable, like a pool timeout."""
    in_flight = 0
    most = 0
    release = asyncio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1
        return httpx.Response(200, content=b'{"done": false}')

    client = HordeClient("http://horde.invalid/api", "a:1:b", 0.3, transport=httpx.MockTransport(answer), connections=2)
    calls = [asyncio.ensure_future(client.status(f"r{n}", "k")) for n in range(5)]
    await asyncio.sleep(0.05)
    assert (in_flight, most) == (2, 2)
    waiting = await asyncio.gather(*calls[2:], return_exceptions=True)  # no turn came within 0.3 s
    assert [str(result) for result in waiting] == [
        f"GET /v2/generate/chat/status/r{n}: no free connection within 0.3 s" for n in (2, 3, 4)
    ]
    release.set()
    assert [status.done for status in await asyncio.gather(*calls[:2])] == [False, False]
    calls = [asyncio.ensure_future(client.status(f"r{n}", "k")) for n in range(5)]
    assert [status.done for status in await asyncio.gather(*calls)] == [False] * 5
    assert most == 2
    await client.aclose()
