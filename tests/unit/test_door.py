"""The door (oaifront.door): the admission guards decide a connection's first request as its head is parsed.

In process: uvicorn's own ``Config`` loads a stand-in application wrapped by the real :class:`AdmissionGuards` (and,
as uvicorn does by default, its proxy headers middleware), and each connection is a :class:`Transport` that records
what is written. Reference: Refusal attributes (413, 503 ``FrontAtCapacity``), Outcome class; issue 23 (refusals
before work).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import weakref
from collections.abc import Iterator
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


async def front_at_its_cap() -> Front:
    """A front whose client 10.0.0.1 holds its one place (per-client cap 1) with a request the application holds."""
    front = Front()
    holder = front.connect()
    front.send(holder, request())
    await settle()
    return front


def request_head(whole: bytes) -> bytes:
    """The head of the request ``whole`` (its bytes through the blank line), without its body."""
    return whole[: whole.index(b"\r\n\r\n") + 4]


def answer(transport: Transport) -> tuple[bytes, dict[str, str], Any]:
    """The status line, the headers and the JSON body written to ``transport``."""
    return answer_of(bytes(transport.written))


def assert_at_capacity(written: bytes) -> None:
    """``written`` is the 503 ``FrontAtCapacity`` answer."""
    status, _headers, body = answer_of(written)
    assert (status, body["error"]["code"]) == (b"HTTP/1.1 503 Service Unavailable", "FrontAtCapacity")


def answer_of(written: bytes) -> tuple[bytes, dict[str, str], Any]:
    """The status line, the headers and the JSON body of the answer ``written``."""
    head, _, body = written.partition(b"\r\n\r\n")
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
    front = await front_at_its_cap()
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
    whole = request(body=b"x" * 2048)
    front.send(transport, whole[:200])  # the head, and the body's first bytes only
    status, _, body = answer(transport)
    assert status.startswith(b"HTTP/1.1 413 ")
    assert body["error"]["code"] == "RequestTooLarge"
    assert not transport.closed  # the body still comes: read and dropped, then the connection closes
    written = bytes(transport.written)
    front.send(transport, whole[200:])
    assert transport.closed
    assert bytes(transport.written) == written


@pytest.mark.asyncio
async def test_a_head_in_pieces_is_decided_once_whole() -> None:
    front = await front_at_its_cap()
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
@pytest.mark.parametrize("protocol", [DoorProtocol, AdmittingHttpToolsProtocol], ids=["door", "uvicorn's, after it"])
async def test_without_x_forwarded_for_the_client_is_the_proxy_itself(protocol: type[asyncio.Protocol]) -> None:
    """A request from a trusted proxy without ``X-Forwarded-For`` is its proxy's (``X-Forwarded-Proto`` alone gives no
    other client): it shares the proxy's own cap; with the header, the forwarded client has its own. The same for a
    request decided by the door and one decided after it (a later request of a connection)."""
    front = Front()
    first = front.connect(protocol, peer="127.0.0.1")
    front.send(first, request(headers="X-Forwarded-Proto: https\r\n"))
    await settle()
    same = front.connect(protocol, peer="127.0.0.1")
    front.send(same, request())
    forwarded = front.connect(protocol, peer="127.0.0.1")
    front.send(forwarded, request(headers="X-Forwarded-For: 203.0.113.9\r\n"))
    await settle()
    assert [client[0] for _, client, _ in front.served.requests] == ["127.0.0.1", "203.0.113.9"]
    assert_at_capacity(bytes(same.written))
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_refusal_after_uvicorn_renews_its_date_carries_the_new_date() -> None:
    """The door's answers are made once per refusal, and again when uvicorn replaces its default headers (its
    ``date`` changes every second)."""
    front = await front_at_its_cap()
    before = front.connect()
    front.send(before, request())
    front.state.default_headers = [(b"date", b"Wed, 02 Dec 2026 16:00:01 GMT"), (b"server", b"uvicorn")]
    after = front.connect()
    front.send(after, request())
    head = front.connect()
    front.send(head, request(method="HEAD", body=b""))
    assert answer(before)[1]["date"] == "Wed, 02 Dec 2026 16:00:00 GMT"
    assert answer(after)[1]["date"] == "Wed, 02 Dec 2026 16:00:01 GMT"
    assert bytes(after.written).replace(b"16:00:01", b"16:00:00") == bytes(before.written)
    assert bytes(head.written) == bytes(after.written).partition(b"\r\n\r\n")[0] + b"\r\n\r\n"  # no body
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_uncapped_paths_head_requests_and_malformed_ones_go_to_uvicorn() -> None:
    front = await front_at_its_cap()
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


@contextlib.contextmanager
def access_log_lines() -> Iterator[Lines]:
    """uvicorn's access log lines while inside (at uvicorn's ``--log-level info``)."""
    access = logging.getLogger("uvicorn.access")
    lines = Lines()
    access.addHandler(lines)
    level = access.level
    access.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        access.removeHandler(lines)
        access.setLevel(level)


@pytest.mark.asyncio
async def test_a_refusal_at_the_door_has_its_access_log_line() -> None:
    """As uvicorn logs each request it answers (``--access-log``, its default)."""
    front = await front_at_its_cap()
    with access_log_lines() as lines:
        refused = front.connect()
        front.send(refused, request("/v1/chat/completions?x=1"))
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


class Accepted:
    """A connection as the accept loop hands it to :meth:`DoorProtocol.answer_accepted`: the server's end of a socket
    pair (non-blocking) and a client address; the test writes and reads on the client's end."""

    def __init__(self, front: Front, address: tuple[str, int] = ("10.0.0.1", 40001)) -> None:
        self.client, self.server = socket.socketpair()
        self.server.setblocking(False)
        self.client.settimeout(5)
        self.address = address
        self.protocol = DoorProtocol(config=front.config, server_state=front.state, app_state={})

    def offer(self) -> bool:
        return self.protocol.answer_accepted(self.server, self.address)

    def transport_made(self, transport: Transport | None = None) -> Transport:
        """The transport the accept loop makes next, for this protocol."""
        transport = Transport() if transport is None else transport
        transport.protocol = self.protocol
        self.protocol.connection_made(transport)
        return transport

    def read_all(self) -> bytes:
        answer = b""
        while chunk := self.client.recv(65536):
            answer += chunk
        return answer

    def close(self) -> None:
        self.client.close()
        self.server.close()


@pytest.mark.asyncio
async def test_a_refusal_is_written_as_the_connection_is_accepted_with_no_transport() -> None:
    """issue 23 (accept, check, refuse): served on the accept loop, the door reads the head already waiting on the new
    socket, and a refused request is answered and closed there, the same bytes a transport would have carried."""
    front = await front_at_its_cap()
    by_transport = front.connect()
    front.send(by_transport, request())
    total = front.state.total_requests
    accepted = Accepted(front)
    accepted.client.sendall(request())
    try:
        assert accepted.offer() is True
        assert accepted.server.fileno() == -1  # closed by the door
        assert accepted.read_all() == bytes(by_transport.written)
        assert accepted.protocol.transport is None
        assert accepted.protocol not in front.state.connections
        assert front.state.total_requests == total + 1
    finally:
        accepted.close()
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_an_admitted_head_read_at_accept_is_handed_over_as_the_transport_is_made() -> None:
    """The door keeps what it read at accept: the transport made next brings uvicorn's protocol in at once, with
    those bytes."""
    front = Front()
    accepted = Accepted(front, ("10.0.0.7", 40000))
    accepted.client.sendall(request())
    try:
        assert accepted.offer() is False
        transport = accepted.transport_made(Transport("10.0.0.7"))
        await settle()
        assert isinstance(transport.protocol, AdmittingHttpToolsProtocol)
        assert front.served.requests == [("/v1/chat/completions", ("10.0.0.7", 40000), BODY)]
    finally:
        accepted.close()
    front.served.release.set()
    await settle()
    assert transport.written.startswith(b"HTTP/1.1 200 OK")


@pytest.mark.asyncio
@pytest.mark.parametrize("waiting_at_accept", [20, 0], ids=["part of the head", "nothing"])
async def test_a_head_not_whole_at_accept_is_parsed_on_and_refused_with_the_address_accept_gave(
    waiting_at_accept: int,
) -> None:
    """A connection whose head had not all arrived as it was accepted keeps what was read and the client address
    ``accept`` returned: over its client's cap, it is refused by the door, on its transport, when the head is whole."""
    front = await front_at_its_cap()
    whole = request()
    accepted = Accepted(front, ("10.0.0.1", 40011))
    if waiting_at_accept:
        accepted.client.sendall(whole[:waiting_at_accept])
    try:
        assert accepted.offer() is False
        transport = accepted.transport_made()
        assert not transport.written
        accepted.protocol.data_received(whole[waiting_at_accept:])
        assert transport.closed
        assert transport.protocol is accepted.protocol  # refused by the door, not handed over to uvicorn's protocol
        assert_at_capacity(bytes(transport.written))
    finally:
        accepted.close()
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_nothing_waiting_at_accept_leaves_the_connection_to_its_transport() -> None:
    front = Front()
    accepted = Accepted(front)
    try:
        assert accepted.offer() is False
        accepted.client.sendall(b"x")
        assert accepted.server.recv(1) == b"x"  # nothing was read from the socket before
        assert accepted.protocol.received == []
    finally:
        accepted.close()


@pytest.mark.asyncio
async def test_a_request_admitted_at_accept_takes_its_place_under_the_caps_at_once() -> None:
    """The next connection accepted in the same wake, before the first has a transport, finds its client's place
    taken and is refused there; the admitted request keeps that one place through the hand-over, and gives it back
    when it ends."""
    front = Front()
    first = Accepted(front, ("10.0.0.1", 40001))
    second = Accepted(front, ("10.0.0.1", 40002))
    first.client.sendall(request())
    second.client.sendall(request())
    try:
        assert first.offer() is False
        assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (1, {"10.0.0.1": 1})
        assert second.offer() is True
        assert_at_capacity(second.read_all())
        transport = first.transport_made()
        await settle()
        assert len(front.served.requests) == 1
        assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (1, {"10.0.0.1": 1})
        front.served.release.set()
        await settle()
        assert transport.written.startswith(b"HTTP/1.1 200 OK")
        assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (0, {})
    finally:
        first.close()
        second.close()


@pytest.mark.asyncio
async def test_a_connection_admitted_at_accept_that_gets_no_transport_gives_its_place_back() -> None:
    """The accept loop's ``abandon_accepted`` (the client left before its transport was made) frees the place; a
    request whose transport is already closing as it starts goes to the application as uvicorn starts it, and holds
    one place there, not two."""
    front = Front()
    abandoned = Accepted(front)
    closing = Accepted(front)
    abandoned.client.sendall(request())
    closing.client.sendall(request())
    try:
        assert abandoned.offer() is False
        assert front.guards.in_flight == 1
        abandoned.protocol.abandon_accepted()
        assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (0, {})
        assert closing.offer() is False
        assert front.guards.in_flight == 1
        already_closing = Transport()
        already_closing.close()
        closing.transport_made(already_closing)
        await settle()
        assert len(front.served.requests) == 1
        assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (1, {"10.0.0.1": 1})
        front.served.release.set()
        await settle()
        assert (front.guards.in_flight, dict(front.guards.in_flight_by_client)) == (0, {})
    finally:
        abandoned.close()
        closing.close()


@pytest.mark.asyncio
async def test_a_refusal_at_accept_has_its_access_log_line() -> None:
    front = await front_at_its_cap()
    accepted = Accepted(front, ("10.0.0.1", 40009))
    accepted.client.sendall(request("/v1/chat/completions?x=2"))
    try:
        with access_log_lines() as lines:
            assert accepted.offer() is True
    finally:
        accepted.close()
    assert lines.lines == ['10.0.0.1:40009 - "POST /v1/chat/completions?x=2 HTTP/1.1" 503']
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_request_admitted_at_accept_gets_its_transport_in_its_turn_among_the_admitted_work() -> None:
    """issue 23 (refusals before work): the accept loop asks the door what a connection waits for before its transport
    (``transport_turn``): a request admitted at accept waits for its turn among the loop's admitted work
    (chat.loop_turns), held while connections keep arriving, so a burst's hand-overs come after its refusals; a head
    not whole yet and an uncapped path get their transport at once."""
    front = Front()
    admitted = Accepted(front, ("10.0.0.1", 40001))
    partial = Accepted(front, ("10.0.0.2", 40001))
    uncapped = Accepted(front, ("10.0.0.3", 40001))
    admitted.client.sendall(request())
    partial.client.sendall(request()[:20])
    uncapped.client.sendall(request("/healthz", method="GET", body=b""))
    try:
        assert [accepted.offer() for accepted in (admitted, partial, uncapped)] == [False, False, False]
        assert partial.protocol.transport_turn() is None
        assert uncapped.protocol.transport_turn() is None
        turn = admitted.protocol.transport_turn()
        assert turn is not None
        waiting = asyncio.ensure_future(turn)
        await asyncio.sleep(0)
        assert not waiting.done()  # the arrivals of this iteration hold the admitted work
        await asyncio.wait_for(waiting, 5)
        admitted.transport_made()
        await settle()
        assert [path for path, _, _ in front.served.requests] == ["/v1/chat/completions"]
    finally:
        for accepted in (admitted, partial, uncapped):
            accepted.close()
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_connection_refused_at_accept_leaves_nothing_for_the_cyclic_collector() -> None:
    """A refused connection's protocol, parser and request head hold no reference cycle: they are freed as the door
    lets go of them, not by a pass of the cyclic collector (which a burst of thousands would make run mid-burst)."""
    front = await front_at_its_cap()
    accepted = Accepted(front)
    accepted.client.sendall(request())
    gc.disable()
    try:
        assert accepted.offer() is True
        protocol = weakref.ref(accepted.protocol)
        del accepted.protocol
        assert protocol() is None
    finally:
        gc.enable()
        accepted.close()
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_request_refused_before_its_body_is_in_is_answered_then_closed_once_the_body_is_in() -> None:
    """A client that writes the head, then the body (httpx does): the refusal is decided on the head and written at
    once, but the connection closes only once the body is in, since a socket closed with a request's bytes still
    arriving answers them with a reset that can reach the client before the answer (a ``Connection reset by peer``
    in place of the 503). At accept, such a request is answered on its transport."""
    front = await front_at_its_cap()
    whole = request()
    head = request_head(whole)
    accepted = Accepted(front, ("10.0.0.1", 40021))
    accepted.client.sendall(head)
    total = front.state.total_requests
    try:
        assert accepted.offer() is False
        assert accepted.protocol.transport_turn() is None
        transport = accepted.transport_made()
        assert_at_capacity(bytes(transport.written))
        assert not transport.closed
        accepted.protocol.data_received(whole[len(head) :])
        assert transport.closed
        assert front.state.total_requests == total + 1
    finally:
        accepted.close()
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_refused_request_whose_body_never_comes_is_closed_after_the_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The linger is bounded: a body that never comes (or comes forever) closes the connection after
    ``LINGER_SECONDS``."""
    monkeypatch.setattr("oaifront.door.LINGER_SECONDS", 0.05)
    front = Front(max_body_bytes=1024)
    transport = front.connect()
    front.send(transport, request(body=b"x" * 2048)[:200])
    assert not transport.closed
    async with asyncio.timeout(5):
        while not transport.closed:
            await asyncio.sleep(0.01)
    assert answer(transport)[0].startswith(b"HTTP/1.1 413 ")


@pytest.mark.asyncio
async def test_a_later_request_refused_before_its_body_is_in_is_closed_once_the_body_is_in() -> None:
    """The same for a request uvicorn's protocol decides after the door (a later request of a kept-alive connection):
    answered on its head, closed once its body is in, so the body's arrival is not met with a reset; nothing is
    written after the answer."""
    front = await front_at_its_cap()
    whole = request()
    head = request_head(whole)
    later = front.connect(AdmittingHttpToolsProtocol)
    total = front.state.total_requests
    front.send(later, head)
    assert_at_capacity(bytes(later.written))
    assert not later.closed
    written = bytes(later.written)
    front.send(later, whole[len(head) : len(head) + 3])
    assert not later.closed
    front.send(later, whole[len(head) + 3 :])
    assert later.closed
    assert bytes(later.written) == written
    assert front.state.total_requests == total + 1
    front.served.release.set()
    await settle()
    assert len(front.served.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "rest",
    [
        request("/v1/chat/completions"),
        b"NOT HTTP\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    ],
    ids=["a pipelined request", "bytes that are not HTTP", "a websocket upgrade"],
)
async def test_nothing_after_a_later_refused_request_is_served_or_answered(rest: bytes) -> None:
    """A request pipelined after the refused one, bytes uvicorn cannot parse (it would answer 400) or an upgrade (it
    would hand the connection to its WebSocket protocol), in the same write: the connection closes after the
    refusal's answer, with nothing more served or written."""
    front = await front_at_its_cap()
    later = front.connect(AdmittingHttpToolsProtocol)
    front.send(later, request() + rest)
    await settle()
    assert later.closed
    assert_at_capacity(bytes(later.written))
    front.served.release.set()
    await settle()
    assert len(front.served.requests) == 1


@pytest.mark.asyncio
async def test_a_later_refused_request_whose_body_never_comes_is_closed_after_the_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("oaifront.door.LINGER_SECONDS", 0.05)
    front = await front_at_its_cap()
    later = front.connect(AdmittingHttpToolsProtocol)
    front.send(later, request(body=b"x" * 2048)[:200])
    assert_at_capacity(bytes(later.written))
    assert not later.closed
    async with asyncio.timeout(5):
        while not later.closed:
            await asyncio.sleep(0.01)
    front.served.release.set()
    await settle()


@pytest.mark.asyncio
async def test_a_pipelined_request_refused_once_it_is_all_in_closes_at_once() -> None:
    """A request pipelined behind another is decided once the one before is answered, by then often all in: its
    refusal closes the connection at once rather than waiting ``LINGER_SECONDS`` for a rest that will not come."""
    front = Front(max_body_bytes=1024)
    later = front.connect(AdmittingHttpToolsProtocol)
    front.send(later, request() + request(body=b"x" * 2048))
    await settle()
    assert not later.closed
    front.served.release.set()
    await settle()
    assert later.closed
    first, _, second = bytes(later.written).partition(b"ok")
    assert first.startswith(b"HTTP/1.1 200 OK")
    assert answer_of(second)[0] == b"HTTP/1.1 413 Content Too Large"
    assert len(front.served.requests) == 1
