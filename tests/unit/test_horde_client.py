"""The native client: what the Horde answers outside its contract is HordeUnreachable, never a crash."""

from __future__ import annotations

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
