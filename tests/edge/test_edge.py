"""The edge (deploy/nginx.conf) in front of a real front and the devhorde, on loopback (issue 34; docs/edge.md).

Each test speaks from its own loopback address (127.0.0.x), since the edge's limits are per address.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest

from chat.settings import DEFAULT_MAX_BODY_BYTES
from oaifront.guards import at_capacity_error, refusal_answer, too_large_error
from tests.edge.conftest import Edge

pytestmark = pytest.mark.integration

AT_CAPACITY_BODY = refusal_answer(at_capacity_error(1, per_client=True))[1]
TOO_LARGE_BODY = refusal_answer(too_large_error(DEFAULT_MAX_BODY_BYTES))[1]


def client(source: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30)


def test_a_streamed_reply_arrives_in_pieces_through_the_edge(edge: Edge) -> None:
    """The scenario's reply is 30 words at 20 tokens a second after 50 ms: about 1.5 s of deltas. Buffered by the
    edge, they would arrive together at the end; through it, the first content arrives well before the last."""
    body = {"model": "edge/paced-7b", "messages": [{"role": "user", "content": "Hi."}], "stream": True}
    arrivals: list[tuple[float, str]] = []
    with (
        client("127.0.0.2") as http,
        http.stream(
            "POST", f"{edge.url}/v1/chat/completions", json=body, headers={"Authorization": "Bearer 0000000000"}
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line.removeprefix("data: ")))
    assert arrivals[-1][1] == "[DONE]"
    content = [
        at
        for at, data in arrivals[:-1]
        if any(choice.get("delta", {}).get("content") for choice in json.loads(data).get("choices", []))
    ]
    assert len(content) >= 5
    assert content[-1] - content[0] > 0.5


def test_a_burst_from_one_address_gets_the_json_503_from_the_edge(edge: Edge) -> None:
    """300 requests at once from one address: the edge lets through its burst (100, then 50 a second) and answers
    the rest with the front's own 503 ``FrontAtCapacity`` body (the front's caps are out of reach here); another
    address is served meanwhile."""

    async def burst() -> list[httpx.Response]:
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.3", limits=httpx.Limits(max_connections=300))
        async with httpx.AsyncClient(transport=transport, timeout=60) as http:
            return await asyncio.gather(*(http.get(f"{edge.url}/healthz") for _ in range(300)))

    answers = asyncio.run(burst())
    refused = [answer for answer in answers if answer.status_code == 503]
    assert {answer.status_code for answer in answers} == {200, 503}
    assert len(refused) >= 100
    for answer in refused:
        assert answer.content == AT_CAPACITY_BODY
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["retry-after"] == "1"
        assert answer.headers["x-should-retry"] == "true"
        assert answer.headers["access-control-allow-origin"] == "*"
    with client("127.0.0.4") as http:
        assert http.get(f"{edge.url}/healthz").status_code == 200


def test_a_slow_header_client_is_cut_off_while_another_client_is_served(edge: Edge) -> None:
    """A request head that never ends is closed at the edge's ``client_header_timeout`` (10 s); the front never sees
    it, and another client is served all along."""
    slow = socket.socket()
    slow.bind(("127.0.0.5", 0))
    slow.connect(("127.0.0.1", edge.port))
    started = time.monotonic()
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n")
    with client("127.0.0.6") as http:
        for _ in range(5):
            assert http.get(f"{edge.url}/healthz").status_code == 200
            time.sleep(0.5)
    slow.settimeout(20)  # the edge's 10 s, and a margin for a loaded machine
    try:
        answer = slow.recv(65536)
    except ConnectionResetError:
        answer = b""
    finally:
        slow.close()
    waited = time.monotonic() - started
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408")
    assert 9 < waited < 20


def test_an_oversized_body_gets_openais_413_envelope_from_the_edge(edge: Edge) -> None:
    """A declared body over ``client_max_body_size`` (the front's ``HORDE_OAI_MAX_BODY_BYTES``) is answered at once
    with the front's own 413 body, before any of it is sent."""
    with socket.create_connection(("127.0.0.1", edge.port), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {DEFAULT_MAX_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    assert lines[0] == "HTTP/1.1 413 Request Entity Too Large"
    assert headers["content-type"] == "application/json"
    assert body == TOO_LARGE_BODY
