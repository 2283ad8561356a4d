"""The door: the admission guards decided as a connection's request is parsed, before anything waits on the loop.

Serve the front with ``uvicorn oaifront.asgi:application --http oaifront.door:DoorProtocol`` (as ``make run``, the
Dockerfile, the tests and the benchmarks do). Under plain uvicorn every request becomes a task on the event loop, and
its refusal is decided when that task's turn comes, behind every admitted request's work queued before it, through
uvicorn's whole request cycle: 3,000 requests opened at once from one address waited seconds for their 503
(bench/README.md, row 8). At the door the decision is made in the callback that reads the request's head from its
socket (issue 23: accept, check, refuse):

- :class:`DoorProtocol` is each new connection's protocol. It parses the first request's head alone (httptools, the
  parser uvicorn uses) and asks :meth:`oaifront.guards.AdmissionGuards.admit`. A refusal (503
  ``FrontAtCapacity`` over an in-flight cap, 413 for a declared body over the limit) is written at once, in one
  write, and the connection closes: no task, no request cycle, nothing of the application runs. Served on
  :class:`oaifront.accept_loop.AcceptLoop`, this happens as the connection is accepted
  (:meth:`DoorProtocol.answer_accepted`): the head already waiting on the new socket is read and decided there, and a
  refused connection never gets a transport. An admitted request takes its place under the caps there and then (so
  the next connection accepted in the same wake sees it), and it keeps that place through the hand-over; its
  transport is made in its turn among the loop's admitted work (:meth:`DoorProtocol.transport_turn`), after the
  refusals of the connections that keep arriving with it (for as long as chat.loop_turns holds admitted work). Any
  other
  request (admitted, uncapped, ``HEAD``, malformed, an upgrade, ``CONNECT``, a target without a path) is handed with
  the bytes read so far to
- :class:`AdmittingHttpToolsProtocol`, uvicorn's own httptools protocol, which serves the connection from then on
  exactly as uvicorn does, except that each request it starts is decided by the guards first (the first one by the
  door, :meth:`~oaifront.guards.AdmissionGuards.admit` for the others): the admitted one takes its slot (so the next
  request parsed in the same pass sees it), the guards find it in the scope (:data:`oaifront.guards.DOOR_ADMISSION`),
  and it is freed however the request ends; a refusal (a later request of a kept-alive connection) is written the
  same way, in one write.

The answer is byte for byte the one the guards send through ASGI (their headers after uvicorn's ``date`` and
``server``), and the refusal is counted the same way (``horde.oai.requests.refused``, ``horde.oai.request.duration``);
it has no server span and is not on the ``http.server.*`` metrics, since the ASGI application, where the
OpenTelemetry instrumentation sits, never sees it; uvicorn's access log (``--access-log``) has its line. The
client address is the one the guards would see: after uvicorn's proxy headers when they apply
(``--forwarded-allow-ips``). An application with no :class:`~oaifront.guards.AdmissionGuards` (a host project's) is
served exactly as uvicorn serves it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import socket
import time
import urllib.parse
from collections.abc import Awaitable
from typing import Any, Final

import httptools
from uvicorn.config import Config
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string, get_remote_addr
from uvicorn.server import ServerState

from chat.loop_turns import loop_turns
from oaifront.guards import DOOR_ADMISSION, AdmissionGuards, Refusal, Scope, Slot

__all__ = ["READ_AT_ACCEPT", "SEND_WITH_FIN", "AdmittingHttpToolsProtocol", "DoorProtocol", "find_guards"]

READ_AT_ACCEPT: Final[int] = 65536
"""Bytes read from a new connection's socket as it is accepted (:meth:`DoorProtocol.answer_accepted`), as much as
uvloop reads at a time: a request's head and a chat body, in one ``recv``."""

LINGER_SECONDS: Final[float] = 2.0
"""How long a refused connection whose request is not all in yet (a body still coming, as httpx sends it: a second
write after the head) stays open after its answer, reading and dropping the rest, before it closes. A socket closed
with a request's bytes still arriving answers them with a reset, which can reach the client before it has read the
answer (seen: httpx's ``ReadError: Connection reset by peer`` in place of a 503); the connection closes as soon as
the request is all in, or after this long."""


class RefusedClose:
    """The close of a connection whose request was refused: at once when the request is all in, else when it is
    (:meth:`request_in`) or :data:`LINGER_SECONDS` after the refusal, whichever comes first (see there). One per
    refused connection, for :class:`DoorProtocol` and :class:`AdmittingHttpToolsProtocol` alike.
    """

    __slots__ = ("timer", "transport")

    def __init__(self, transport: asyncio.BaseTransport, *, request_in: bool) -> None:
        self.transport = transport
        self.timer: asyncio.TimerHandle | None = None
        if request_in:
            transport.close()
        else:
            self.timer = asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)

    def request_in(self) -> None:
        """The refused request is all in (or what follows cannot be parsed): close now."""
        self.forget()
        self.transport.close()

    def forget(self) -> None:
        """The connection is gone: the pending close is dropped."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


FORWARDED_CLIENT_HEADER: Final[bytes] = b"x-forwarded-for"
"""The header through which uvicorn's proxy headers middleware gives a request another client (its other header,
``X-Forwarded-Proto``, changes only the scheme, which the guards do not read): a request without it is decided on its
scope as it is, without running the middleware (about 7 µs of a refusal's 50, bench/README.md row 8)."""

SEND_WITH_FIN: Final[int] = getattr(socket, "MSG_MORE", 0)
"""The flag of a refusal's ``send`` at accept: Linux's ``MSG_MORE`` holds the answer until the ``close`` right after,
whose FIN then goes out in the same segment (one segment and one wake of the client where there were two; a refused
connection cost the front about 45 µs of CPU without it, 30 µs with it, bench/README.md row 8); 0 where there is no
such flag."""


def find_guards(app: object) -> AdmissionGuards | None:
    """The :class:`AdmissionGuards` inside ``app``'s chain of wrappers (each wrapper's ``app`` attribute, or
    ``__wrapped__`` as :func:`functools.update_wrapper` sets it), or None when there is none.
    """
    seen: set[int] = set()
    while app is not None and id(app) not in seen:
        if isinstance(app, AdmissionGuards):
            return app
        seen.add(id(app))
        app = getattr(app, "app", None) or getattr(app, "__wrapped__", None)
    return None


class Door:
    """What the door needs of one loaded application: its guards, and the scope as they will see it.

    Args:
        app: uvicorn's loaded application (``Config.loaded_app``), with its proxy headers middleware when on.
        guards: The guards inside it (:func:`find_guards`).
    """

    def __init__(self, app: object, guards: AdmissionGuards) -> None:
        self.guards = guards
        self._proxy_view: ProxyHeadersMiddleware | None = None
        if isinstance(app, ProxyHeadersMiddleware):
            # uvicorn's own middleware, pointed at a recorder: it rewrites the client as it will for the application.
            self._proxy_view = copy.copy(app)
            self._proxy_view.app = _scope_rewritten

    def scope_as_guards_see(self, scope: Scope) -> Scope:
        """``scope`` after uvicorn's proxy headers (a copy) when they apply (they are on and the request has a
        :data:`FORWARDED_CLIENT_HEADER`); ``scope`` itself otherwise.
        """
        if self._proxy_view is None:
            return scope
        for name, _ in scope["headers"]:
            if name == FORWARDED_CLIENT_HEADER:
                break
        else:
            return scope
        seen = dict(scope)
        _run_now(self._proxy_view(seen, _never, _never))  # type: ignore[arg-type]
        return seen


async def _scope_rewritten(scope: Any, receive: Any, send: Any) -> None:
    """The proxy view's application: nothing to do, the middleware has rewritten ``scope`` in place."""


async def _never(*_: Any) -> Any:
    raise RuntimeError("the door's proxy view neither receives nor sends")


def _run_now(step: Any) -> None:
    """Run a coroutine that never waits (uvicorn's response writer on a connection whose writes are not paused, the
    proxy headers middleware) to its end, here and now; raise if it would have waited.
    """
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise RuntimeError("a step the door runs at once tried to wait")


@functools.cache
def door_for(app: object) -> Door | None:
    """The :class:`Door` of uvicorn's loaded application ``app``, made once; None when it has no guards."""
    guards = find_guards(app)
    return None if guards is None else Door(app, guards)


class _Answers:
    """Each refusal's whole answer (:func:`answer_bytes`), made once, and again only when uvicorn replaces its default
    headers (once a second, for the date).
    """

    def __init__(self) -> None:
        self._source: list[tuple[bytes, bytes]] | None = None
        self._made: dict[tuple[int, bool], tuple[Refusal, bytes]] = {}

    def answer(self, refusal: Refusal, default_headers: list[tuple[bytes, bytes]], *, with_body: bool) -> bytes:
        if default_headers is not self._source:
            self._source, self._made = default_headers, {}
        key = (id(refusal), with_body)
        made = self._made.get(key)
        if made is None:  # each answer is kept with its refusal, so no other refusal has that id while it is here
            lines = b"".join(name + b": " + value + b"\r\n" for name, value in default_headers)
            body = refusal.body if with_body else b""
            made = self._made[key] = (refusal, b"".join((STATUS_LINE[refusal.status], lines, refusal.head, body)))
        return made[1]


_answers = _Answers()


def answer_bytes(refusal: Refusal, server_state: ServerState, *, with_body: bool = True) -> bytes:
    """``refusal`` as uvicorn's writer puts it on the wire: the status line, uvicorn's default headers, the refusal's
    headers (``connection: close`` among them), and its body unless the request was a ``HEAD``.
    """
    return _answers.answer(refusal, server_state.default_headers, with_body=with_body)


ACCESS_LOG_FORMAT = '%s - "%s %s HTTP/%s" %d'
"""uvicorn's access log line (``--access-log``): client, method, path and query, HTTP version, status."""


def log_access(scope: Scope, status: int) -> None:
    """The access log line of a refused request, as uvicorn writes one for the requests it answers."""
    logging.getLogger("uvicorn.access").info(
        ACCESS_LOG_FORMAT,
        get_client_addr(scope),  # type: ignore[arg-type]
        scope["method"],
        get_path_with_query_string(scope),  # type: ignore[arg-type]
        scope["http_version"],
        status,
    )


class RequestHead:
    """The first request's head as the parser gives it (its callbacks): target, headers (names lower-cased, as uvicorn's
    scope has them) and whether it is whole; what follows it is not the door's. Apart from the protocol, so a refused
    connection's protocol and parser hold no cycle and are freed at once, not by the cyclic collector.
    """

    __slots__ = ("complete", "headers", "message_complete", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.message_complete = False

    def on_url(self, url: bytes) -> None:
        """Part of the target."""
        if not self.complete:
            self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header."""
        if not self.complete:
            self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        """The head is whole."""
        self.complete = True

    def on_message_complete(self) -> None:
        """The request is all in, its body included."""
        self.message_complete = True


class DoorProtocol(asyncio.Protocol):
    """Each new connection's protocol (uvicorn's ``--http``): refuses the first request on its head, or hands the
    connection to :class:`AdmittingHttpToolsProtocol` (see the module). Constructed by uvicorn for each connection.
    """

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.server_state = server_state
        self.app_state = app_state
        self.loop = _loop
        self.door = door_for(config.loaded_app)
        self.transport: asyncio.Transport | None = None
        self.received: list[bytes] = []
        self.head = RequestHead()
        self.parser = httptools.HttpRequestParser(self.head)
        self.client: tuple[str, int] | None = None
        self.accepted_here = False
        self.unsent = b""
        self.refused: RefusedClose | None = None  # a refusal was written: the rest is read and dropped until it is in
        self.decided: Refusal | bool = False  # what decide() found: False until the head is whole, True: hand over
        self.first_scope: Scope | None = None  # the first request's scope, as the door decided it
        self.slot: Slot | None = None  # the first request's place under the caps, taken as it was admitted here

    def answer_accepted(self, connection: socket.socket, address: Any) -> bool:
        """The accept loop's offer (oaifront.accept_loop), before ``connection`` (non-blocking, accepted from
        ``address``) has a transport: read what already waits on it (at most :data:`READ_AT_ACCEPT` bytes) and, when
        that is the first request, all of it, and the guards refuse it, write the refusal (:data:`SEND_WITH_FIN`),
        close the socket and return True (a refused request whose body is still coming is answered on its transport,
        which lingers: :data:`LINGER_SECONDS`); no transport, protocol cycle or task is made for it. False: the
        connection goes on to a transport and to this protocol, which keeps what it read and decided (an admitted head
        has its place under the caps already and is handed over as the transport is made; a partial one is parsed on;
        if no transport comes, :meth:`abandon_accepted` frees the place). Holds the loop's admitted work for the burst
        the connection may belong to (chat.loop_turns).
        """
        loop_turns().hold_for_arrival()
        self.accepted_here = True
        self.client = (str(address[0]), int(address[1])) if isinstance(address, tuple) else None
        if self.door is None:
            return False
        try:
            data = connection.recv(READ_AT_ACCEPT)
        except OSError:  # nothing waits yet (or the client left): the transport reads, or sees the error, as usual
            return False
        if not data:
            return False
        self.received.append(data)
        verdict = self.decide(data)
        if not isinstance(verdict, Refusal):
            return False
        answer = answer_bytes(verdict, self.server_state)
        if not self.head.message_complete:  # its body still comes: answered on the transport, closed once it is in
            self.unsent = answer
            return False
        try:
            written = connection.send(answer, SEND_WITH_FIN)
        except OSError:  # the client left: nothing to answer
            written = len(answer)
        if written < len(answer):  # the socket's buffer is full (never on a new connection): the transport ends it
            self.unsent = answer[written:]
            return False
        connection.close()
        self.counted(verdict)
        return True

    def transport_turn(self) -> Awaitable[None] | None:
        """The accept loop's question before it makes the transport of a connection :meth:`answer_accepted` left to it:
        a request admitted there waits for its turn among the loop's admitted work (chat.loop_turns), so a burst's
        admitted connections, their transports, hand-overs and tasks (about 100 µs each), are made once its refusals
        are answered (bench/README.md row 8); None (at once) for any other connection. The request then takes its own
        turn to enter the application, as every admitted request does (oaifront.guards).
        """
        return loop_turns().take() if self.slot is not None else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep ``transport``; join uvicorn's connections (its graceful stop calls :meth:`shutdown`); hold the loop's
        admitted work for the burst this connection may belong to (chat.loop_turns), unless that was done as it was
        accepted (:meth:`answer_accepted`), and act on what was decided there: finish writing a refusal, or hand an
        admitted request's connection over.
        """
        self.transport = transport  # type: ignore[assignment]
        if not self.accepted_here:
            loop_turns().hold_for_arrival()
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        if self.unsent:
            assert isinstance(self.decided, Refusal)
            self.write_refusal(self.decided, self.unsent)
        elif self.decided is True:
            self.hand_over()

    def connection_lost(self, exc: Exception | None) -> None:
        """Leave uvicorn's connections (and the caps, if the first request was admitted but never handed over)."""
        self.server_state.connections.discard(self)
        if self.refused is not None:
            self.refused.forget()
        self.abandon_accepted()

    def abandon_accepted(self) -> None:
        """The accept loop's word that the connection offered to :meth:`answer_accepted` got no transport after all
        (the client left, the server closed): the place its admitted first request took under the caps is freed.
        """
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    def shutdown(self) -> None:
        """Uvicorn's graceful stop: no request of this connection has started, so it closes."""
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        """Parse ``data`` up to the first request's head; then refuse the request or hand the connection over. After a
        refusal, the rest of the request is read and dropped (:data:`LINGER_SECONDS`).
        """
        if self.refused is not None:
            self.drop_rest(data, self.refused)
            return
        self.received.append(data)
        verdict = self.decide(data)
        if verdict is True:
            self.hand_over()
        elif isinstance(verdict, Refusal):
            self.write_refusal(verdict, answer_bytes(verdict, self.server_state))

    def write_refusal(self, refusal: Refusal, answer: bytes) -> None:
        """Write ``answer`` (``refusal``'s) on the transport and close it once the request is all in: at once, or as
        the rest arrives, or after :data:`LINGER_SECONDS` (see there).
        """
        assert self.transport is not None
        self.transport.write(answer)
        self.counted(refusal)
        self.received = []
        self.refused = RefusedClose(self.transport, request_in=self.head.message_complete)

    def drop_rest(self, data: bytes, refused: RefusedClose) -> None:
        """Part of a refused request's rest: parsed only to see where the request ends, then the connection closes."""
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self.head.message_complete = True
        if self.head.message_complete:
            refused.request_in()

    def decide(self, data: bytes) -> Refusal | bool:
        """Feed ``data`` to the parser and decide the first request once its head is whole: its :class:`Refusal`;
        True when the connection goes to uvicorn (admitted, uncapped, ``HEAD``, malformed, an upgrade, ``CONNECT``, a
        target without a path, an application without guards); False while the head is not whole.
        """
        self.decided = self._decide(data)
        return self.decided

    def _decide(self, data: bytes) -> Refusal | bool:
        if self.door is None:
            return True
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # malformed, an upgrade, CONNECT: uvicorn's
            return True
        if not self.head.complete:
            return False
        if self.parser.get_method() == b"HEAD":  # an answer without its body: uvicorn's writer knows how
            return True
        try:
            self.first_scope = self.scope()
            admission = self.door.guards.admit(self.door.scope_as_guards_see(self.first_scope), time.monotonic())
        except Exception:  # noqa: BLE001 - a head the door cannot read (a target without a path): uvicorn answers it
            return True
        if isinstance(admission, Refusal):
            return admission
        self.slot = admission  # None for an uncapped path: uvicorn's protocol asks the guards again, as cheaply
        return True

    def scope(self) -> Scope:
        """What the guards (and the access log) read of the request, as uvicorn's scope gives it: ``path``
        (percent-decoded, after the root path), ``query_string``, ``client``, ``headers`` (names lower-cased),
        ``method`` and ``http_version``. Raises when the target has no path (an absolute URI such as
        ``http://host``).
        """
        target = httptools.parse_url(self.head.url)
        path = target.path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        return {
            "type": "http",
            "method": self.parser.get_method().decode("ascii"),
            "http_version": self.parser.get_http_version(),
            "path": self.config.root_path + path,
            "query_string": target.query or b"",
            "client": self.client if self.accepted_here else get_remote_addr(self.transport),  # type: ignore[arg-type]
            "headers": self.head.headers,
        }

    def counted(self, refusal: Refusal) -> None:
        """``refusal`` of the first request was written: uvicorn's request count and its ``--access-log`` line."""
        self.server_state.total_requests += 1
        if (
            self.first_scope is not None
            and self.config.access_log
            and logging.getLogger("uvicorn.access").hasHandlers()
        ):
            log_access(self.first_scope, refusal.status)

    def hand_over(self) -> None:
        """Give the connection, and every byte read so far, to :class:`AdmittingHttpToolsProtocol`."""
        assert self.transport is not None
        self.server_state.connections.discard(self)
        served = AdmittingHttpToolsProtocol(self.config, self.server_state, self.app_state, self.loop)
        served.first_admission, self.slot = self.slot, None
        served.connection_made(self.transport)
        self.transport.set_protocol(served)
        received, self.received = self.received, []
        for data in received:
            served.data_received(data)


class AdmittingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that decides each request it starts with the admission guards first (see the
    module). :class:`DoorProtocol` hands connections to it; it also works as uvicorn's ``--http`` on its own.
    """

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.door = door_for(self.app)
        self._answering_pipelined = False
        self.first_admission: Slot | None = None  # the place the door took for the first request as it admitted it
        self.refused: RefusedClose | None = None
        """Set when a request of this connection was refused: the connection closes once that request is all in, and
        nothing after it is served or answered."""

    def on_response_complete(self) -> None:
        """Uvicorn starts a pipelined request here, inside the last ``send`` of the one before, whose slot the guards
        free only once that ``send`` returns: :meth:`_start_asgi_task` decides it a moment later.
        """
        self._answering_pipelined = True
        try:
            super().on_response_complete()
        finally:
            self._answering_pipelined = False

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        """Decide the request with the guards, then start it as uvicorn does unless it was refused. uvicorn calls this
        once a request's head is parsed (for a pipelined request: once the one before it is answered, and then the
        decision waits for the next loop callback, when that one's slot is free).
        """
        if self._answering_pipelined:
            self.loop.call_soon(self._decide_and_start, cycle, app)
            return
        self._decide_and_start(cycle, app)

    def _decide_and_start(self, cycle: RequestResponseCycle, app: Any) -> None:
        door = self.door
        taken, self.first_admission = self.first_admission, None
        if self.refused is not None:  # a request after a refusal, on a connection that closes: not served
            if taken is not None:
                taken.release()
            return
        if door is None or app is not self.app or self.transport.is_closing():
            if taken is not None:
                taken.release()
        else:
            scope: Scope = cycle.scope  # type: ignore[assignment]
            admission: Refusal | Slot | None = taken
            if taken is None:
                admission = door.guards.admit(door.scope_as_guards_see(scope), time.monotonic())
            if isinstance(admission, Refusal):
                self._refuse(cycle, admission)
                return
            if admission is not None:
                scope[DOOR_ADMISSION] = admission
                app = _releasing(app, admission)
        super()._start_asgi_task(cycle, app)

    def _refuse(self, cycle: RequestResponseCycle, refusal: Refusal) -> None:
        """Write ``refusal`` in one write (without its body for a ``HEAD``, as uvicorn's writer does) and close once
        the request is all in, as :class:`DoorProtocol` does: uvicorn decides a request on its head, so the rest
        (already here, or still coming) is parsed and dropped (uvicorn's ``on_body`` drops a body once the response is
        complete) and :meth:`on_message_complete` closes, or :data:`LINGER_SECONDS` later; a pipelined request decided
        once it was all in closes at once. Nothing after it is served or answered (:attr:`refused`).
        """
        self.transport.write(answer_bytes(refusal, self.server_state, with_body=cycle.scope["method"] != "HEAD"))
        cycle.response_started = cycle.response_complete = True
        cycle.keep_alive = False
        if cycle.more_body:  # uvicorn's: False once the request is all in (a pipelined request decided late)
            self.flow.resume_reading()  # a pipelined request was decided with reading paused: its rest must come in
        self.refused = RefusedClose(self.transport, request_in=not cycle.more_body)
        self.server_state.total_requests += 1
        if self.access_log:
            log_access(cycle.scope, refusal.status)  # type: ignore[arg-type]

    def on_message_complete(self) -> None:
        """uvicorn's, then, when a refusal is waiting for its request to be all in (:meth:`_refuse`), the close."""
        super().on_message_complete()
        if self.refused is not None:
            self.refused.request_in()

    def handle_websocket_upgrade(self) -> None:
        """Uvicorn's hand-over to its WebSocket protocol, unless the upgrade follows a refusal: then the connection
        just closes (nothing after a refusal is served).
        """
        if self.refused is not None:
            self.refused.request_in()
            return
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        """Uvicorn's answer to bytes it cannot parse, unless they follow a refusal: then the connection just closes
        (nothing is written after the refusal's answer).
        """
        if self.refused is not None:
            self.refused.request_in()
            return
        super().send_400_response(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        """uvicorn's, and a refusal's pending close is dropped."""
        if self.refused is not None:
            self.refused.forget()
        super().connection_lost(exc)


def _releasing(app: Any, slot: Slot) -> Any:
    """``app``, with ``slot`` freed when it returns or raises whatever happens inside it (the guards free it first
    when the response ends: :meth:`Slot.release` does it once).
    """

    async def app_then_release(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            slot.release()

    return app_then_release
