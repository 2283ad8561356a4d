"""The door (oaifront.door): the admission guards decide a connection's first request as its head is parsed.

In process: uvicorn's own ``Config`` loads a stand-in application wrapped by the real :class:`AdmissionGuards` (and,
as uvicorn does by default, its proxy headers middleware), and each connection is a :class:`Transport` that records
what is written. Reference: Refusal attributes (413, 503 ``FrontAtCapacity``), Outcome class; issue 23 (refusals
before work).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from chat.asgi import with_front_lifespan
from chat.settings import FrontSettings
from oaifront.door import AdmittingHttpToolsProtocol, DoorProtocol, find_guards
from oaifront.guards import AdmissionGuards
from oaifront.telemetry import instrument_app

DATE = [(b"date", b"Wed, 02 Dec 2026 16:00:00 GMT"), (b"server", b"uvicorn")]
BODY = b'{"model":"m","messages":[{"role":"user","content":"Hi."}]}'


def request(
    path: str = "/v1/chat/completions", *, method: str = "POST", headers: str = "", body: bytes = BODY
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: front\r\nContent-Type: application/json\r\n{headers}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


class Transport(asyncio.Transport):
    """A connection from ``peer``: keeps what is written, whether it closed, and the protocol it was handed to."""

    def __init__(self, peer: str = "10.0.0.1") -> None:
        super().__init__()
        self.peer = peer
        self.written = bytearray()
        self.closed = False
        self.protocol: Any = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": (self.peer, 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_protocol(self) -> Any:
        return self.protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Served:
    """The requests the stand-in application received: (path, client, body); each held until released."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any, bytes]] = []
        self.release = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.requests.append((scope["path"], scope["client"], message["body"]))
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


class Front:
    """uvicorn's configuration, state and one application behind the guards (one request per client at most)."""

    def __init__(self, *, proxy_headers: bool = True, **settings: Any) -> None:
        self.served = Served()
        self.guards = AdmissionGuards(self.served, FrontSettings(max_in_flight_per_client=1, **settings))
        self.config = Config(with_front_lifespan(self.guards), proxy_headers=proxy_headers, log_level="warning")
        self.config.load()
        self.state = ServerState()
        self.state.default_headers = list(DATE)

    def connect(self, protocol: type[asyncio.Protocol] = DoorProtocol, peer: str = "10.0.0.1") -> Transport:
        transport = Transport(peer)
        served = protocol(config=self.config, server_state=self.state, app_state={})  # type: ignore[call-arg]
        transport.protocol = served
        served.connection_made(transport)
        return transport

    def send(self, transport: Transport, data: bytes) -> None:
        transport.protocol.data_received(data)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def answer(transport: Transport) -> tuple[bytes, dict[str, str], Any]:
    """The status line, the headers and the JSON body written to ``transport``."""
    head, _, body = bytes(transport.written).partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {name.decode(): value.decode() for name, _, value in (line.partition(b": ") for line in lines)}
    return status, headers, json.loads(body) if body else None


@pytest.mark.asyncio
async def test_a_request_over_the_per_client_cap_is_refused_at_the_door_with_no_task() -> None:
    """ref: refusal-attributes.1"""
    front = Front()
    first = front.connect()
    front.send(first, request())
    await settle()
    assert isinstance(first.protocol, AdmittingHttpToolsProtocol)
    assert len(front.served.requests) == 1
    tasks = set(front.state.tasks)
    refused = front.connect()
    front.send(refused, request())
    assert refused.closed
    assert front.state.tasks == tasks  # nothing started for it
    status, headers, body = answer(refused)
    assert status == b"HTTP/1.1 503 Service Unavailable"
    assert list(headers)[:2] == ["date", "server"]
    assert headers["retry-after"] == "1"
    assert headers["connection"] == "close"
    assert body["error"]["code"] == "FrontAtCapacity"
    assert body["error"]["message"] == (
        "The front is serving as many requests from your address as it accepts at once. Retry shortly."
    )
    front.served.release.set()
    await settle()
    front.served.release.clear()
    again = front.connect()
    front.send(again, request())
    await settle()
    assert not again.written  # the slot is free again: admitted, waiting on the stand-in
    assert len(front.served.requests) == 2
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_the_door_writes_the_bytes_the_guards_send_through_uvicorn() -> None:
    """The same refusal through plain uvicorn (the guards answer it in the ASGI application) is byte for byte the
    door's."""
    front = Front()
    holder = front.connect()
    front.send(holder, request())
    await settle()
    at_the_door = front.connect()
    front.send(at_the_door, request())
    through_asgi = front.connect(HttpToolsProtocol)
    front.send(through_asgi, request())
    await settle()
    assert through_asgi.closed
    assert bytes(at_the_door.written) == bytes(through_asgi.written)
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_declared_body_over_the_limit_is_413_at_the_door() -> None:
    """ref: refusal-attributes.1"""
    front = Front(max_body_bytes=1024)
    transport = front.connect()
    front.send(transport, request(body=b"x" * 2048)[:200])  # the head, and the body's first bytes only
    status, _, body = answer(transport)
    assert status.startswith(b"HTTP/1.1 413 ")
    assert body["error"]["code"] == "RequestTooLarge"
    assert transport.closed


@pytest.mark.asyncio
async def test_a_head_in_pieces_is_decided_once_whole() -> None:
    front = Front()
    holder = front.connect()
    front.send(holder, request())
    await settle()
    transport = front.connect()
    data = request()
    front.send(transport, data[:20])
    assert not transport.written
    front.send(transport, data[20:])
    assert answer(transport)[0] == b"HTTP/1.1 503 Service Unavailable"
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_the_client_is_the_one_uvicorns_proxy_headers_give() -> None:
    """Behind a trusted proxy (uvicorn's ``--forwarded-allow-ips``, 127.0.0.1 by default) each forwarded client has
    its own cap."""
    front = Front()
    first = front.connect(peer="127.0.0.1")
    front.send(first, request(headers="X-Forwarded-For: 203.0.113.7\r\n"))
    await settle()
    other = front.connect(peer="127.0.0.1")
    front.send(other, request(headers="X-Forwarded-For: 203.0.113.8\r\n"))
    same = front.connect(peer="127.0.0.1")
    front.send(same, request(headers="X-Forwarded-For: 203.0.113.7\r\n"))
    await settle()
    assert [client[0] for _, client, _ in front.served.requests] == ["203.0.113.7", "203.0.113.8"]
    assert answer(same)[2]["error"]["code"] == "FrontAtCapacity"
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_uncapped_paths_head_requests_and_malformed_ones_go_to_uvicorn() -> None:
    front = Front()
    holder = front.connect()
    front.send(holder, request())
    await settle()
    health = front.connect()
    front.send(health, request("/healthz", method="GET", body=b""))
    head = front.connect()
    front.send(head, request(method="HEAD", body=b""))
    malformed = front.connect()
    front.send(malformed, b"NOT HTTP\r\n\r\n")
    await settle()
    assert isinstance(health.protocol, AdmittingHttpToolsProtocol)
    assert front.served.requests[-1][0] == "/healthz"
    assert isinstance(head.protocol, AdmittingHttpToolsProtocol)
    head_status, head_headers, head_body = answer(head)
    assert (head_status, head_body) == (b"HTTP/1.1 503 Service Unavailable", None)  # uvicorn's writer: no body
    assert int(head_headers["content-length"]) > 0
    assert bytes(malformed.written).startswith(b"HTTP/1.1 400 Bad Request")
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_later_request_of_a_kept_alive_connection_is_decided_by_the_guards_too() -> None:
    front = Front()
    kept = front.connect()
    front.send(kept, request(path="/healthz", method="GET", body=b""))
    await settle()
    front.served.release.set()
    await settle()
    assert bytes(kept.written).startswith(b"HTTP/1.1 200 OK")
    front.served.release.clear()
    holder = front.connect()
    front.send(holder, request())
    await settle()
    kept.written.clear()
    front.send(kept, request())
    await settle()
    assert answer(kept)[2]["error"]["code"] == "FrontAtCapacity"
    assert kept.closed
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_an_application_without_guards_is_served_as_uvicorn_serves_it() -> None:
    front = Front()
    plain = Config(front.served, log_level="warning")
    plain.load()
    assert find_guards(plain.loaded_app) is None
    transport = Transport()
    door = DoorProtocol(config=plain, server_state=front.state, app_state={})
    transport.protocol = door
    door.connection_made(transport)
    door.data_received(request())
    await settle()
    assert isinstance(transport.protocol, AdmittingHttpToolsProtocol)
    assert len(front.served.requests) == 1
    front.served.release.set()
    await settle()


def test_the_guards_are_found_through_every_wrapper() -> None:
    front = Front()
    assert find_guards(front.config.loaded_app) is front.guards


H2C_UPGRADE = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
"""What ``curl --http2 http://...`` adds to a request."""


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("first_bytes", "status_line"),
    [
        (
            request(
                path="/healthz",
                method="GET",
                body=b"",
                headers=H2C_UPGRADE,
            ),
            b"HTTP/1.1 200 OK",
        ),
        (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GET http://x HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
    ],
    ids=["upgrade-h2c", "connect", "absolute-uri-without-path"],
)
async def test_heads_the_door_cannot_read_are_answered_by_uvicorn(first_bytes: bytes, status_line: bytes) -> None:
    """An upgrade, a ``CONNECT`` and a target without a path go to uvicorn, which answers them as it does without the
    door (the door once dropped them with no answer and a traceback)."""
    front = Front()
    front.served.release.set()
    transport = front.connect()
    front.send(transport, first_bytes)
    await settle()
    assert isinstance(transport.protocol, AdmittingHttpToolsProtocol)
    assert bytes(transport.written).startswith(status_line)


@pytest.mark.asyncio
async def test_pipelined_requests_at_the_cap_are_each_served() -> None:
    """A client that sends its next request before the answer to the last (HTTP/1.1 pipelining) at a per-client cap of
    one is never refused: the next one is decided once the last one's slot is free (ref: guards' "a client that waits
    for each answer ... is never refused")."""
    front = Front()
    front.served.release.set()
    transport = front.connect()
    front.send(transport, request("/v1/chat/completions") + request("/v1/chat/completions"))
    await settle()
    assert bytes(transport.written).count(b"HTTP/1.1 200 OK") == 2
    assert b"FrontAtCapacity" not in bytes(transport.written)
    assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (0, {})


@pytest.mark.asyncio
async def test_a_slot_taken_at_the_door_is_freed_when_the_application_fails() -> None:
    front = Front()

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("the application failed")

    front.guards.app = failing
    transport = front.connect()
    front.send(transport, request())
    await settle()
    assert bytes(transport.written).startswith(b"HTTP/1.1 500 Internal Server Error")
    assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (0, {})


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.asyncio
async def test_a_refusal_at_the_door_has_its_access_log_line() -> None:
    """As uvicorn logs each request it answers (``--access-log``, its default)."""
    front = Front()
    holder = front.connect()
    front.send(holder, request())
    await settle()
    access = logging.getLogger("uvicorn.access")
    lines = Lines()
    access.addHandler(lines)
    level = access.level
    access.setLevel(logging.INFO)  # uvicorn's --log-level info
    try:
        refused = front.connect()
        front.send(refused, request("/v1/chat/completions?x=1"))
    finally:
        access.removeHandler(lines)
        access.setLevel(level)
    assert lines.lines == ['10.0.0.1:40000 - "POST /v1/chat/completions?x=1 HTTP/1.1" 503']
    front.served.release.set()
    await settle()


def test_the_guards_are_found_behind_the_telemetry_instrumentation() -> None:
    """With telemetry on, the OpenTelemetry ASGI middleware (behind oaifront.telemetry.PrivateScopeTracing) wraps the
    guards: the door still finds them (it once found none, and every refusal went back through the application)."""
    front = Front()
    traced = Config(with_front_lifespan(instrument_app(front.guards)), log_level="warning")
    traced.load()
    assert find_guards(traced.loaded_app) is front.guards
