"""The native client: what the Horde answers outside its contract is HordeUnreachable, never a crash."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from chat.errors import horde_unavailable
from chat.horde.native import HordeClient, HordeRefusal, HordeUnreachable
from chat.horde.refusals import error_from_refusal


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
    with pytest.raises(HordeUnreachable) as caught:
        await client_answering(200, content).status("r1", "k")
    assert caught.value.reached is True


def failing_client(exc: Exception) -> HordeClient:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    return HordeClient("http://horde.invalid/api", "front:1:test", 5, transport=httpx.MockTransport(fail))


ROUTE_NAMES = ("/v2/", "generate", "status/", "async", "submit:", "models:")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("make", "call", "message", "metadata"),
    [
        (
            lambda: failing_client(httpx.ConnectError("All connection attempts failed")),
            "submit",
            "The Horde could not be reached (ConnectError: All connection attempts failed).",
            None,
        ),
        (
            lambda: failing_client(httpx.ReadTimeout("")),
            "status",
            "The Horde could not be reached (ReadTimeout). The request was cancelled.",
            {"request_id": "r1"},
        ),
        (
            lambda: client_answering(502, b"<html>Bad gateway</html>"),
            "submit",
            "The Horde answered HTTP 502 Bad Gateway without an error code.",
            None,
        ),
        (
            lambda: client_answering(500, b'{"message": "boom"}'),
            "status",
            "The Horde answered HTTP 500 Internal Server Error without an error code. The request was cancelled.",
            {"request_id": "r1"},
        ),
        (
            lambda: client_answering(200, b"<html>"),
            "status",
            "The Horde answered HTTP 200 with a body that is not JSON. The request was cancelled.",
            {"request_id": "r1"},
        ),
        (
            lambda: client_answering(200, b'{"done": "maybe"}'),
            "status",
            "The Horde answered a status that does not match the native contract (1 errors). The request was "
            "cancelled.",
            {"request_id": "r1"},
        ),
        (
            lambda: client_answering(202, b'{"kudos": 1}'),
            "submit",
            "The Horde answered the submit without a request id.",
            None,
        ),
        (
            lambda: HordeClient(
                "http://horde.invalid/api",
                "front:1:test",
                5,
                transport=httpx.MockTransport(lambda _: httpx.Response(200, content=b"{}")),
            ),
            "models",
            "The Horde answered a model list that is not a list.",
            None,
        ),
    ],
    ids=["connect", "timeout", "502-html", "500-no-rc", "not-json", "off-contract-status", "no-id", "models"],
)
async def test_horde_unavailable_says_could_not_be_reached_only_when_it_was_not(
    make: Any, call: str, message: str, metadata: dict[str, str] | None
) -> None:
    """``HordeUnavailable`` says "could not be reached" only for a transport failure; a 5xx or malformed answer
    says what the Horde answered, without the native route, and a submitted request's refusal ends with "The request
    was cancelled." and names it.

    ref: error-attributes.1"""
    client = make()
    calls = {
        "submit": lambda: client.submit({"messages": []}, "k"),
        "status": lambda: client.status("r1", "k"),
        "models": client.text_models,
    }
    with pytest.raises(HordeUnreachable) as caught:
        await calls[call]()
    request_id = "r1" if call == "status" else None
    error = horde_unavailable(caught.value.detail, reached=caught.value.reached, request_id=request_id)
    assert (error.status, error.code, error.type, error.message, error.metadata) == (
        502,
        "HordeUnavailable",
        "api_error",
        message,
        metadata,
    )
    assert not any(name in error.message for name in ROUTE_NAMES)


def test_a_5xx_refusal_with_an_rc_says_what_the_horde_answered() -> None:
    """ref: error-attributes.1"""
    error = error_from_refusal(HordeRefusal(status=500, message="boom", rc="InternalError"))
    assert (error.status, error.code, error.message) == (
        502,
        "HordeUnavailable",
        "The Horde answered HTTP 500 InternalError: boom.",
    )


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
    assert [str(result) for result in waiting] == ["no free connection to the Horde within 0.3 s"] * 3
    release.set()
    assert [status.done for status in await asyncio.gather(*calls[:2])] == [False, False]
    calls = [asyncio.ensure_future(client.status(f"r{n}", "k")) for n in range(5)]
    assert [status.done for status in await asyncio.gather(*calls)] == [False] * 5
    assert most == 2
    await client.aclose()
