"""The door: the admission guards decided as a connection's request is parsed, before anything waits on the loop.

Serve the front with ``uvicorn oaifront.asgi:application --http oaifront.door:DoorProtocol`` (as ``make run``, the
Dockerfile, the tests and the benchmarks do). Under plain uvicorn every request becomes a task on the event loop, and
its refusal is decided when that task's turn comes, behind every admitted request's work queued before it, through
uvicorn's whole request cycle: 3,000 requests opened at once from one address waited seconds for their 503
(bench/README.md, row 8). At the door the decision is made in the callback that reads the request's head from its
socket (issue 23: accept, check, refuse):

- :class:`DoorProtocol` is each new connection's protocol. It parses the first request's head alone (httptools, the
  parser uvicorn uses) and asks :meth:`oaifront.guards.AdmissionGuards.refusal_for`. A refusal (503
  ``FrontAtCapacity`` over an in-flight cap, 413 for a declared body over the limit) is written at once, in one
  write, and the connection closes: no task, no request cycle, nothing of the application runs. Any other request
  (admitted, uncapped, ``HEAD``, malformed, an upgrade) is handed with the bytes read so far to
- :class:`AdmittingHttpToolsProtocol`, uvicorn's own httptools protocol, which serves the connection from then on
  exactly as uvicorn does, except that each request it starts is decided by the guards first
  (:meth:`~oaifront.guards.AdmissionGuards.admit`): the admitted one takes its slot under the caps there (so the next
  request parsed in the same pass sees it) and the guards find it in the scope (:data:`oaifront.guards.DOOR_ADMISSION`);
  a refusal (a later request of a kept-alive connection) is written by uvicorn's response writer.

The answer is byte for byte the one the guards send through ASGI (their headers after uvicorn's ``date`` and
``server``), and the refusal is counted the same way (``horde.oai.requests.refused``, ``horde.oai.request.duration``);
it has no server span, since the ASGI application, where the OpenTelemetry instrumentation sits, never sees it. The
client address is the one the guards would see: after uvicorn's proxy headers when they apply
(``--forwarded-allow-ips``). An application with no :class:`~oaifront.guards.AdmissionGuards` (a host project's) is
served exactly as uvicorn serves it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import time
import urllib.parse
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import ServerState

from chat.loop_turns import loop_turns
from oaifront.guards import DOOR_ADMISSION, AdmissionGuards, Refusal, Scope

__all__ = ["AdmittingHttpToolsProtocol", "DoorProtocol", "find_guards"]


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
        """``scope`` after uvicorn's proxy headers (a copy) when they apply; ``scope`` itself otherwise."""
        if self._proxy_view is None:
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


class _DefaultHeaders:
    """uvicorn's default headers (``date``, ``server``) as response header lines, made again only when uvicorn
    replaces them (once a second, for the date).
    """

    def __init__(self) -> None:
        self._source: list[tuple[bytes, bytes]] | None = None
        self._lines = b""

    def lines(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        if headers is not self._source:
            self._lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
            self._source = headers
        return self._lines


_default_headers = _DefaultHeaders()


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
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_complete = False
        self.parser = httptools.HttpRequestParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep ``transport``; join uvicorn's connections (its graceful stop calls :meth:`shutdown`)."""
        self.transport = transport  # type: ignore[assignment]
        loop_turns().hold_for_arrival()
        self.server_state.connections.add(self)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        """Leave uvicorn's connections."""
        self.server_state.connections.discard(self)

    def shutdown(self) -> None:
        """Uvicorn's graceful stop: no request of this connection has started, so it closes."""
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        """Parse ``data`` up to the first request's head; then refuse the request or hand the connection over."""
        self.received.append(data)
        if self.door is None:
            self.hand_over()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:  # malformed or an upgrade: uvicorn answers it
            self.hand_over()
            return
        if not self.head_complete:
            return
        if self.parser.get_method() == b"HEAD":  # an answer without its body: uvicorn's writer knows how
            self.hand_over()
            return
        refusal = self.door.guards.refusal_for(self.door.scope_as_guards_see(self.scope()), time.monotonic())
        if refusal is None:
            self.hand_over()
            return
        self.refuse(refusal)

    def on_url(self, url: bytes) -> None:
        """The parser's callback: part of the first request's target."""
        if not self.head_complete:
            self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        """The parser's callback: one header of the first request (its name lower-cased, as uvicorn's scope has it)."""
        if not self.head_complete:
            self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        """The parser's callback: the first request's head is whole; what follows is not the door's."""
        self.head_complete = True

    def scope(self) -> Scope:
        """What the guards read of the request, as uvicorn's scope gives it: ``path`` (percent-decoded, after the root
        path), ``client`` and ``headers`` (names lower-cased).
        """
        path = httptools.parse_url(self.url).path.decode("ascii", "replace")
        if "%" in path:
            path = urllib.parse.unquote(path)
        assert self.transport is not None
        return {
            "type": "http",
            "path": self.config.root_path + path,
            "client": get_remote_addr(self.transport),
            "headers": self.headers,
        }

    def refuse(self, refusal: Refusal) -> None:
        """Write ``refusal`` (its status line, uvicorn's default headers, its own, its body) and close."""
        assert self.transport is not None
        self.transport.write(
            b"".join(
                (
                    STATUS_LINE[refusal.status],
                    _default_headers.lines(self.server_state.default_headers),
                    refusal.head,
                    refusal.body,
                )
            )
        )
        self.transport.close()
        self.server_state.total_requests += 1

    def hand_over(self) -> None:
        """Give the connection, and every byte read so far, to :class:`AdmittingHttpToolsProtocol`."""
        assert self.transport is not None
        self.server_state.connections.discard(self)
        served = AdmittingHttpToolsProtocol(self.config, self.server_state, self.app_state, self.loop)
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

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        """Decide the request with the guards, then start it as uvicorn does unless it was refused. uvicorn calls this
        once a request's head is parsed (or, for a pipelined request, once the one before it is answered).
        """
        door = self.door
        if door is not None and app is self.app and not self.flow.write_paused:
            scope: Scope = cycle.scope  # type: ignore[assignment]
            admission = door.guards.admit(door.scope_as_guards_see(scope), time.monotonic())
            if isinstance(admission, Refusal):
                # uvicorn's response writer, run to its end now; it closes the connection (``connection: close``).
                _run_now(
                    cycle.send(
                        {"type": "http.response.start", "status": admission.status, "headers": admission.headers}
                    )
                )
                _run_now(cycle.send({"type": "http.response.body", "body": admission.body}))
                return
            if admission is not None:
                scope[DOOR_ADMISSION] = admission
        super()._start_asgi_task(cycle, app)
