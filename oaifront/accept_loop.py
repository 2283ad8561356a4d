"""uvloop's event loop, with TCP servers that accept the connections waiting on a socket together, not one a turn.

Serve the front with ``uvicorn ... --loop oaifront.accept_loop:AcceptLoop`` (as ``make run``, the Dockerfile, the tests
and the benchmarks do, beside the door: oaifront.door). Since libuv 1.45 a uvloop server accepts one connection each
time the loop polls its sockets ("unix: don't accept() connections in a loop", libuv/libuv#3696), so a loop whose
iterations take milliseconds (a few hundred waiting requests reading their status, the admitted requests of a burst)
accepts a few hundred connections a second, however many wait: 3,000 opened at once waited up to two seconds to be
accepted, their refusals with them (bench/README.md, row 8). The standard library's loop accepts what waits, as
servers did before; so does :class:`AcceptServer`, up to :data:`ACCEPTS_PER_WAKE` at a time, with uvloop's transports.

:meth:`AcceptLoop.create_server` serves this way a listening socket it is given (uvicorn's ``--fd``, and every socket
of its worker processes, ``--uds`` included) or a host that is an IP address (uvicorn's ``--host``, 127.0.0.1 by
default), TLS included; anything else (a host name, address family flags, ``reuse_port``, ``start_serving=False``)
goes to uvloop's own ``create_server`` unchanged, and so does ``create_unix_server`` (one process's ``--uds``). A TLS
handshake that fails or a client that leaves before its transport is made is closed without a log line, as uvloop's
own server does.

A protocol may answer a connection before it has a transport: when the first protocol ``protocol_factory`` gives for
a plain TCP connection has an ``answer_accepted(connection, address) -> bool`` method (the door's:
:meth:`oaifront.door.DoorProtocol.answer_accepted`), it is called with the new non-blocking socket and the client's
address as they are accepted. True: it answered and closed the socket, and nothing more is made for the connection
(a refusal under a burst costs an ``accept``, a ``recv``, a ``send`` and a ``close``, no transport and no task);
False: the connection gets its transport with this same protocol; when none can be made (the client left, the server
closed first), the protocol's ``abandon_accepted()`` is called, if it has one, since it will never see
``connection_made`` or ``connection_lost`` (the door frees there the place a request it admitted took). Before that
transport is made, a protocol with a ``transport_turn()`` method is asked what the connection waits for first: an
awaitable, or None for nothing (the door's: :meth:`oaifront.door.DoorProtocol.transport_turn`, the turn of a request
it admitted at accept among the loop's admitted work, so that a burst's hand-overs wait for its refusals); closing the
server does not drop a connection waiting so (:meth:`AcceptServer.close`).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import socket
import ssl as ssl_module
from asyncio.constants import ACCEPT_RETRY_DELAY
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import uvloop

__all__ = ["ACCEPTS_PER_WAKE", "AcceptLoop", "AcceptServer"]

ACCEPTS_PER_WAKE: Final[int] = 512
"""Connections accepted from one socket each time it is ready: every waiting one in a burst of thousands within a few
iterations, yet, when worker processes share the socket (``--workers``), never the whole queue for one of them."""

OUT_OF_RESOURCES: Final[frozenset[int]] = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""``accept()`` errors after which the socket stays ready: accepting pauses for ``ACCEPT_RETRY_DELAY`` (as asyncio's
own loop does), instead of spinning."""

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class AcceptServer(asyncio.AbstractServer):
    """Listening sockets served on an :class:`AcceptLoop`: each time one is ready, up to :data:`ACCEPTS_PER_WAKE`
    connections are accepted and each gets a protocol from ``protocol_factory``, which may answer it at once (see the
    module), and otherwise a transport (``loop.connect_accepted_socket``).

    Args:
        loop: The loop serving them.
        sockets: Bound, listening sockets (made non-blocking here).
        protocol_factory: The protocol of each connection (uvicorn's).
        ssl: The TLS context, or None for plain TCP.
        ssl_handshake_timeout: uvloop's, for TLS.
        ssl_shutdown_timeout: uvloop's, for TLS.
    """

    def __init__(  # noqa: PLR0913 - asyncio's server options, keyword-only
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: Iterable[socket.socket],
        protocol_factory: ProtocolFactory,
        *,
        ssl: ssl_module.SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> None:
        self._loop = loop
        self._sockets = tuple(sockets)
        self._protocol_factory = protocol_factory
        self._tls: dict[str, Any] = (
            {}
            if ssl is None
            else {
                "ssl": ssl,
                "ssl_handshake_timeout": ssl_handshake_timeout,
                "ssl_shutdown_timeout": ssl_shutdown_timeout,
            }
        )
        self._closed = asyncio.Event()
        self._connecting: set[asyncio.Task[None]] = set()
        for sock in self._sockets:
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), self._accept, sock)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening sockets (empty once closed)."""
        return () if self._closed.is_set() else self._sockets

    def _accept(self, sock: socket.socket) -> None:
        """The socket is ready: accept what waits on it, up to :data:`ACCEPTS_PER_WAKE`."""
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                connection, address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in OUT_OF_RESOURCES:
                    raise  # the loop logs it and keeps serving
                self._loop.call_exception_handler(
                    {"message": "socket.accept() out of system resource", "exception": exc, "socket": sock}
                )
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_DELAY, self._resume, sock)
                return
            connection.setblocking(False)
            protocol = self._protocol_factory()
            if self._answered_at_once(protocol, connection, address):
                continue
            task = self._loop.create_task(self._connect(connection, protocol))
            self._connecting.add(task)
            task.add_done_callback(functools.partial(self._connect_done, connection, protocol))

    def _answered_at_once(self, protocol: asyncio.BaseProtocol, connection: socket.socket, address: Any) -> bool:
        """Whether ``protocol`` answered and closed the plain TCP ``connection`` as it was accepted (see the module);
        a failure there is logged and closes the connection, the server goes on.
        """
        answer_accepted = None if self._tls else getattr(protocol, "answer_accepted", None)
        if answer_accepted is None:
            return False
        try:
            return bool(answer_accepted(connection, address))
        except Exception as exc:  # noqa: BLE001 - one connection's failure: logged, the server goes on
            connection.close()
            self._loop.call_exception_handler({"message": "an accepted connection failed", "exception": exc})
            return True

    def _resume(self, sock: socket.socket) -> None:
        if not self._closed.is_set():
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _connect(self, connection: socket.socket, protocol: asyncio.BaseProtocol) -> None:
        try:
            transport_turn = getattr(protocol, "transport_turn", None)
            turn = None if transport_turn is None else transport_turn()
            if turn is not None:
                await turn
            await self._loop.connect_accepted_socket(lambda: protocol, connection, **self._tls)
        except OSError:  # the client left, or its TLS handshake failed (a port scan, a health check): as uvloop, quiet
            _abandon(connection, protocol)
        except asyncio.CancelledError:  # the server closed first
            _abandon(connection, protocol)
            raise
        except Exception as exc:  # noqa: BLE001 - one connection's failure: logged, the server goes on
            _abandon(connection, protocol)
            self._loop.call_exception_handler({"message": "an accepted connection failed", "exception": exc})

    def _connect_done(
        self, connection: socket.socket, protocol: asyncio.BaseProtocol, task: asyncio.Task[None]
    ) -> None:
        """``task`` (:meth:`_connect`) ended; one cancelled before its first step never reached its own clean-up."""
        self._connecting.discard(task)
        if task.cancelled() and connection.fileno() != -1:
            _abandon(connection, protocol)

    def close(self) -> None:
        """Stop accepting and close the listening sockets. A TLS connection accepted but still in its handshake is
        closed (uvicorn's graceful stop would not know of it); a plain one still waiting for its transport (for its
        turn: ``transport_turn``) gets it, and uvicorn's graceful stop serves its request as it serves those already
        made (the front answers it, as every open request, with its shutdown answer); connections already made stay
        open.
        """
        if self._closed.is_set():
            return
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        if self._tls:
            for task in self._connecting:
                task.cancel()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Return once :meth:`close` was called."""
        await self._closed.wait()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop serving the sockets."""
        return self._loop

    def is_serving(self) -> bool:
        """Whether the sockets are still accepting."""
        return not self._closed.is_set()

    async def start_serving(self) -> None:
        """Nothing to do: an :class:`AcceptServer` serves from its creation."""

    async def serve_forever(self) -> None:
        """Wait until the server is closed."""
        await self._closed.wait()


def _abandon(connection: socket.socket, protocol: asyncio.BaseProtocol) -> None:
    """Close ``connection``, which got no transport, and tell ``protocol`` if it asks to know (see the module)."""
    connection.close()
    abandon_accepted = getattr(protocol, "abandon_accepted", None)
    if abandon_accepted is not None:
        abandon_accepted()


def _listening_socket(host: str, port: int, backlog: int) -> socket.socket | None:
    """A socket bound to ``host`` (an IP address) and ``port`` and listening, as asyncio's ``create_server`` binds
    one (``SO_REUSEADDR``; an IPv6 address without IPv4 beside it); None when ``host`` is not an IP address.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


class AcceptLoop(uvloop.Loop):
    """uvloop's loop whose TCP servers are :class:`AcceptServer` (see the module); uvicorn's ``--loop``."""

    async def create_server(  # type: ignore[override] # noqa: PLR0913 - asyncio's signature
        self,
        protocol_factory: ProtocolFactory,
        host: str | None = None,
        port: int | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: ssl_module.SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        **options: Any,
    ) -> asyncio.AbstractServer:
        """An :class:`AcceptServer` on ``sock`` or on ``host`` (an IP address) and ``port``; uvloop's own server for
        anything else. The arguments are asyncio's (``loop.create_server``).
        """
        tls: dict[str, Any] = {
            "ssl": ssl,
            "ssl_handshake_timeout": ssl_handshake_timeout,
            "ssl_shutdown_timeout": ssl_shutdown_timeout,
        }
        listening: socket.socket | None = None
        if not options:
            if sock is not None:
                sock.listen(backlog)
                listening = sock
            elif host is not None and port is not None:
                listening = _listening_socket(host, port, backlog)
        if listening is None:
            uvloop_create_server: Callable[..., Awaitable[asyncio.AbstractServer]] = super().create_server
            return await uvloop_create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, **tls, **options
            )
        return AcceptServer(self, [listening], protocol_factory, **tls)
