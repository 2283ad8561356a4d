"""uvloop's loop with servers that accept the waiting connections together (oaifront.accept_loop, issue 23).

Counted in loop iterations (a callback that re-schedules itself runs once per iteration), not in seconds: plain uvloop
accepts one connection per iteration (libuv 1.45 and later), :class:`AcceptLoop` what waits, so a burst is accepted in
a few iterations however busy each one is.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

import oaifront.accept_loop
from oaifront.accept_loop import ACCEPTS_PER_WAKE, AcceptLoop, AcceptServer

BURST = 300


class Counting(asyncio.Protocol):
    """Counts the connections made, with the loop iteration of each."""

    made: list[int]
    iteration: list[int]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counting.made.append(Counting.iteration[0])
        transport.close()


def run(loop_factory: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main)


async def iterations_to_accept_a_burst() -> int:
    """Open :data:`BURST` connections to a server at once (the kernel completes them into the listen queue), then
    count the loop iterations until the server made them all."""
    loop = asyncio.get_running_loop()
    Counting.made, Counting.iteration = [], [0]

    def tick() -> None:
        Counting.iteration[0] += 1
        if len(Counting.made) < BURST:
            loop.call_soon(tick)

    server = await loop.create_server(Counting, "127.0.0.1", 0, backlog=BURST * 2)
    port = server.sockets[0].getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(BURST)]
    try:
        loop.call_soon(tick)
        async with asyncio.timeout(60):
            while len(Counting.made) < BURST:
                await asyncio.sleep(0)
        return Counting.made[-1]
    finally:
        for client in clients:
            client.close()
        server.close()
        await server.wait_closed()


def test_a_burst_is_accepted_in_a_few_iterations_where_uvloop_takes_one_each() -> None:
    accept_loop = run(AcceptLoop, iterations_to_accept_a_burst())
    plain_uvloop = run(uvloop.new_event_loop, iterations_to_accept_a_burst())
    assert accept_loop <= 10
    assert plain_uvloop >= BURST  # why the accept loop exists (if libuv changes again, this says so)


async def serve_one_request(host: str) -> tuple[type, bytes]:
    loop = asyncio.get_running_loop()

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(data.upper())  # type: ignore[attr-defined]

    server = await loop.create_server(Echo, host, 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"ping")
    answer = await reader.readexactly(4)
    writer.close()
    server.close()
    await server.wait_closed()
    return type(server), answer


def test_an_ip_address_is_served_by_the_accept_server_and_a_host_name_by_uvloops_own() -> None:
    assert run(AcceptLoop, serve_one_request("127.0.0.1")) == (AcceptServer, b"PING")
    kind, answer = run(AcceptLoop, serve_one_request("localhost"))
    assert kind is not AcceptServer
    assert answer == b"PING"


def test_a_given_listening_socket_is_served_too() -> None:
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = await loop.create_server(asyncio.Protocol, sock=sock, backlog=16)
        serving = isinstance(server, AcceptServer) and server.is_serving()
        server.close()
        await server.wait_closed()
        return serving, server.is_serving()

    assert run(AcceptLoop, main()) == (True, False)


def test_closing_stops_accepting() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        assert server.sockets == ()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)

    run(AcceptLoop, main())


class OutOfFiles(socket.socket):
    """A listening socket whose ``accept`` fails with EMFILE ``failures`` times, then works."""

    failures = 1

    def accept(self) -> tuple[socket.socket, Any]:
        if OutOfFiles.failures:
            OutOfFiles.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_out_of_file_descriptors_pauses_accepting_then_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """As asyncio's loop does: the error goes to the loop's exception handler, the socket is not watched for
    ``ACCEPT_RETRY_DELAY``, then accepting resumes (Linux keeps reporting the socket ready, so without the pause the
    loop would spin)."""
    monkeypatch.setattr(oaifront.accept_loop, "ACCEPT_RETRY_DELAY", 0.05)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        reported: list[str] = []
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        made = asyncio.Event()

        class Made(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                made.set()
                transport.close()

        sock = OutOfFiles()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        server = AcceptServer(loop, [sock], Made)
        client = socket.create_connection(sock.getsockname())
        try:
            async with asyncio.timeout(30):
                await made.wait()
        finally:
            client.close()
            server.close()
        return reported

    assert run(AcceptLoop, main()) == ["socket.accept() out of system resource"]


def test_a_wake_accepts_at_most_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes sharing a socket each take a share of a burst, not the whole queue: with batches of 30 the
    burst of 300 takes at least ten wakes."""
    assert ACCEPTS_PER_WAKE == 512
    monkeypatch.setattr(oaifront.accept_loop, "ACCEPTS_PER_WAKE", 30)
    assert run(AcceptLoop, iterations_to_accept_a_burst()) >= BURST // 30


def trusting_client() -> ssl.SSLContext:
    """A client TLS context that takes the throwaway certificate of :func:`self_signed_context`."""
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    return client


def self_signed_context(tmp_path: Any) -> ssl.SSLContext:
    """A server TLS context with a throwaway self-signed certificate for 127.0.0.1."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context


def test_tls_is_served_and_a_failed_handshake_is_closed_without_a_log_line(tmp_path: Any) -> None:
    """Plain bytes sent to the TLS port (a scanner, a load balancer's TCP check) are closed quietly, as uvloop's own
    server does; a real TLS client is served."""
    context = self_signed_context(tmp_path)

    async def main() -> tuple[list[str], bytes]:
        loop = asyncio.get_running_loop()
        reported: list[str] = []
        loop.set_exception_handler(lambda _, error: reported.append(error["message"]))

        class Echo(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def data_received(self, data: bytes) -> None:
                self.transport.write(data.upper())  # type: ignore[attr-defined]

        server = await loop.create_server(Echo, "127.0.0.1", 0, ssl=context, ssl_handshake_timeout=5)
        assert isinstance(server, AcceptServer)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        await reader.read()  # the server closes it
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting_client())
        writer.write(b"ping")
        answer = await reader.readexactly(4)
        writer.close()
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)
        return reported, answer

    assert run(AcceptLoop, main()) == ([], b"PING")


class AnswersAtOnce(asyncio.Protocol):
    """Answers a connection as it is accepted when its first bytes (already waiting) are ``now``; otherwise takes
    the transport and echoes upper-cased. Records each call: ("accepted", address) / ("made",) / ("data", bytes)."""

    calls: list[tuple[Any, ...]]

    def answer_accepted(self, connection: socket.socket, address: Any) -> bool:
        AnswersAtOnce.calls.append(("accepted", address))
        try:
            waiting = connection.recv(64, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        if waiting == b"boom":
            raise RuntimeError("the protocol failed")
        if waiting != b"now":
            return False
        connection.recv(64)
        connection.send(b"answered at once")
        connection.close()
        return True

    def abandon_accepted(self) -> None:
        AnswersAtOnce.calls.append(("abandoned",))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        AnswersAtOnce.calls.append(("made",))
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        AnswersAtOnce.calls.append(("data", data))
        self.transport.write(data.upper())  # type: ignore[attr-defined]


async def answering_server() -> tuple[asyncio.Server, int, list[str]]:
    """An :class:`AnswersAtOnce` server on 127.0.0.1 (its calls cleared), its port, and the messages of what the
    loop's exception handler is given."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _, error: reported.append(error["message"]))
    AnswersAtOnce.calls = []
    server = await loop.create_server(AnswersAtOnce, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], reported


async def exchange(port: int, first: bytes) -> bytes:
    """Connect, send ``first`` (it waits on the socket before the server accepts it), and read the answer: the
    echo, or what came before the server closed (or reset) the connection."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(first)
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    answer = b""
    async with asyncio.timeout(5):
        while answer not in (b"answered at once", first.upper()):
            try:
                chunk = await loop.sock_recv(client, 64)
            except ConnectionResetError:  # closed with the request unread
                break
            if not chunk:
                break
            answer += chunk
    client.close()
    return answer


def test_a_protocol_may_answer_a_connection_as_it_is_accepted_without_a_transport() -> None:
    """issue 23 (accept, check, refuse): the protocol's ``answer_accepted`` sees the new socket and its client's
    address; True and the connection gets nothing more, False and it gets its transport and this same protocol; a
    failure there closes that connection, is reported, and the server goes on."""

    async def main() -> tuple[list[bytes], list[str]]:
        server, port, reported = await answering_server()
        answers = [await exchange(port, first) for first in (b"now", b"later", b"boom", b"now")]
        server.close()
        await server.wait_closed()
        return answers, reported

    answers, reported = run(AcceptLoop, main())
    assert answers == [b"answered at once", b"LATER", b"", b"answered at once"]
    assert reported == ["an accepted connection failed"]
    kinds = [call[0] for call in AnswersAtOnce.calls]
    assert kinds == ["accepted", "accepted", "made", "data", "accepted", "accepted"]
    assert all(call[1][0] == "127.0.0.1" for call in AnswersAtOnce.calls if call[0] == "accepted")


def test_a_connection_left_to_its_transport_that_gets_none_is_abandoned_to_its_protocol() -> None:
    """A connection ``answer_accepted`` left to its transport, which then cannot be made (the client left): the
    protocol hears it through ``abandon_accepted``, since it never sees ``connection_made`` nor ``connection_lost``
    (the door frees a request's place under the caps there); the server goes on, quiet, as uvloop's."""

    async def main() -> tuple[bytes, bytes, list[str]]:
        loop = asyncio.get_running_loop()
        server, port, reported = await answering_server()
        made = loop.connect_accepted_socket

        async def client_left(*args: Any, **kwargs: Any) -> Any:
            loop.connect_accepted_socket = made  # type: ignore[method-assign]
            raise ConnectionResetError(errno.ECONNRESET, "the client left")

        loop.connect_accepted_socket = client_left  # type: ignore[method-assign]
        left = await exchange(port, b"later")
        served = await exchange(port, b"later")
        server.close()
        await server.wait_closed()
        return left, served, reported

    left, served, reported = run(AcceptLoop, main())
    assert (left, served, reported) == (b"", b"LATER", [])
    assert [call[0] for call in AnswersAtOnce.calls] == ["accepted", "abandoned", "accepted", "made", "data"]


def test_a_tls_connection_is_not_offered_before_its_handshake(tmp_path: Any) -> None:
    """The bytes waiting on a TLS connection are its handshake: no ``answer_accepted``, the transport decrypts."""
    context = self_signed_context(tmp_path)

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        AnswersAtOnce.calls = []
        server = await loop.create_server(AnswersAtOnce, "127.0.0.1", 0, ssl=context, ssl_handshake_timeout=5)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting_client())
        writer.write(b"now")
        answer = await reader.readexactly(3)
        writer.close()
        server.close()
        await server.wait_closed()
        return answer

    assert run(AcceptLoop, main()) == b"NOW"
    assert [call[0] for call in AnswersAtOnce.calls] == ["made", "data"]


class WaitsItsTurn(AnswersAtOnce):
    """Leaves every connection to its transport, which waits for :attr:`turn` (one future shared by every connection
    of the test) before it is made."""

    turn: asyncio.Future[None]

    def answer_accepted(self, connection: socket.socket, address: Any) -> bool:
        AnswersAtOnce.calls.append(("accepted", address))
        return False

    def transport_turn(self) -> asyncio.Future[None]:
        AnswersAtOnce.calls.append(("turn asked",))
        return WaitsItsTurn.turn


def test_a_connection_left_to_its_transport_waits_for_the_turn_its_protocol_gives() -> None:
    """issue 23 (refusals before work): the protocol's ``transport_turn()`` is what the connection waits for before its
    transport is made (the door: an admitted request's turn among the loop's admitted work); once it comes, the
    transport is made with this same protocol, and the bytes that waited are delivered."""

    async def main() -> tuple[list[str], list[str], bytes]:
        loop = asyncio.get_running_loop()
        AnswersAtOnce.calls, WaitsItsTurn.turn = [], loop.create_future()
        server = await loop.create_server(WaitsItsTurn, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(b"later")
        async with asyncio.timeout(5):
            while len(AnswersAtOnce.calls) < 2:
                await asyncio.sleep(0.01)
        for _ in range(20):
            await asyncio.sleep(0)
        before_turn = [call[0] for call in AnswersAtOnce.calls]
        WaitsItsTurn.turn.set_result(None)
        client.setblocking(False)
        async with asyncio.timeout(5):
            answer = await loop.sock_recv(client, 64)
        client.close()
        server.close()
        await server.wait_closed()
        return before_turn, [call[0] for call in AnswersAtOnce.calls], answer

    before_turn, calls, answer = run(AcceptLoop, main())
    assert before_turn == ["accepted", "turn asked"]
    assert calls == ["accepted", "turn asked", "made", "data"]
    assert answer == b"LATER"


def test_a_connection_still_waiting_for_its_turn_when_the_server_closes_is_served() -> None:
    """Closing the server stops the accepting, not a connection already accepted and waiting for its turn (the door:
    a request it admitted): it gets its transport in its turn, so uvicorn's graceful stop serves its request instead
    of the client finding its connection closed without an answer."""

    async def main() -> tuple[list[str], bytes, bool]:
        loop = asyncio.get_running_loop()
        AnswersAtOnce.calls, WaitsItsTurn.turn = [], loop.create_future()
        server = await loop.create_server(WaitsItsTurn, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(b"later")
        async with asyncio.timeout(5):
            while len(AnswersAtOnce.calls) < 2:
                await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()
        WaitsItsTurn.turn.set_result(None)
        client.setblocking(False)
        async with asyncio.timeout(5):
            answer = await loop.sock_recv(client, 64)
        client.close()
        return [call[0] for call in AnswersAtOnce.calls], answer, server.is_serving()

    calls, answer, serving = run(AcceptLoop, main())
    assert (calls, answer, serving) == (["accepted", "turn asked", "made", "data"], b"LATER", False)


def test_a_tls_connection_whose_task_is_cancelled_before_it_ran_is_abandoned(tmp_path: Any) -> None:
    """A TLS connection is closed when the server closes before its handshake is done; one accepted in the same
    callback as the close, whose task never ran, is closed and abandoned to its protocol too."""
    context = self_signed_context(tmp_path)

    async def main() -> tuple[list[str], bytes]:
        loop = asyncio.get_running_loop()
        AnswersAtOnce.calls = []
        server = await loop.create_server(AnswersAtOnce, "127.0.0.1", 0, ssl=context, ssl_handshake_timeout=5)
        assert isinstance(server, AcceptServer)
        listening = server.sockets[0]
        loop.remove_reader(listening.fileno())  # this test accepts, in the same callback as the close
        client = socket.create_connection(listening.getsockname()[:2], timeout=5)
        await asyncio.sleep(0.05)  # the connection waits in the listen queue
        server._accept(listening)
        server.close()
        await asyncio.sleep(0)
        client.setblocking(False)
        async with asyncio.timeout(5):
            try:
                answer = await loop.sock_recv(client, 64)
            except ConnectionResetError:
                answer = b"(reset)"
        client.close()
        return [call[0] for call in AnswersAtOnce.calls], answer

    calls, answer = run(AcceptLoop, main())
    assert calls == ["abandoned"]
    assert answer in (b"", b"(reset)")  # closed, with no handshake answered
