"""Admission guards: ASGI middleware that refuses a request before Django reads its body.

Reference: Refusal attributes (body size 413, body read timeout 408 ``RequestBodyTimeout``) and Outcome class
(``FrontAtCapacity``). In the order they apply:

1. In-flight caps: a request beyond ``HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT`` requests in flight from its client address,
   or beyond ``HORDE_OAI_MAX_IN_FLIGHT`` in total, gets 503 ``FrontAtCapacity`` with ``Retry-After``
   (``HORDE_OAI_CAPACITY_RETRY_AFTER_SECONDS``). A request is in flight until its response ends: its slot is freed
   when the last body message is sent (``http.response.body`` without ``more_body``; a stream's last event
   included), not when the application returns after it, so a client that waits for each answer before the next is
   never refused; a request that ends without a whole response frees its slot when the application returns. The
   probes and the API description (:data:`UNCAPPED_PATHS`) are never capped. The client address is the connection's
   peer, or, behind a trusted proxy, the first entry of ``HORDE_OAI_CLIENT_ADDRESS_HEADER``.
2. Body size: a ``Content-Length`` over ``HORDE_OAI_MAX_BODY_BYTES`` gets 413 at once, without reading the body; a
   body without one (chunked) gets 413 as soon as the bytes received pass the limit.
3. Body memory: the bodies being read and those of requests being served count against
   ``HORDE_OAI_MAX_BUFFERED_BODY_BYTES`` for the whole process, byte by byte as they arrive, until their request
   ends; a body that would pass it gets 503 ``FrontAtCapacity`` with ``Retry-After`` and ``x-should-retry: true``
   (at once, unread, when its ``Content-Length`` already says so).
4. Body time: a body not wholly received within ``HORDE_OAI_BODY_TIMEOUT_SECONDS`` of the request's start gets 408
   ``RequestBodyTimeout``.

The front serves HTTP requests only: a WebSocket upgrade gets 400 ``BadRequest`` on any route (an HTTP request
asking ``Upgrade: websocket``, as uvicorn passes it with ``--ws none``), and a ``websocket`` scope (a server that
speaks WebSocket) is closed before it is accepted, which the server answers with 403. Neither reaches Django, whose
handler raises on a scope that is not HTTP.

The guard reads the body itself under these limits and hands it to Django whole, so Django never buffers more than
the limit. Every refusal is OpenAI's error envelope, counted on ``horde.oai.requests.refused`` and recorded on
``horde.oai.request.duration`` from the moment the guard saw the request (chat.serving.request_record.record_refusal),
and logged in one line (:func:`log_refusal`: method, status, code, ``Retry-After``; no path, address or header). The
guards sit under the OpenTelemetry instrumentation (oaifront.asgi), so a refusal has its server span and its
``http.server.*`` points like any other answer.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from loguru import logger

from chat import errors
from chat.errors import CORS_HEADERS, OpenAIError
from chat.horde.client_address import address_header_name, scope_client_address
from chat.serving.request_record import record_refusal
from chat.settings import FrontSettings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNCAPPED_PATHS: Final[frozenset[str]] = frozenset(
    {
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/docs",
        "/docs/behaviour",
        "/docs/clients",
        "/docs/assets/redoc.standalone.js",
        "/redoc",
        "/favicon.ico",
        "/",
    }
)
"""Paths the in-flight caps never refuse: the probes, the metrics and the API description."""


def too_large_error(limit: int) -> OpenAIError:
    """413 ``RequestTooLarge``: the body is over ``limit`` bytes."""
    return errors.failure(
        errors.REQUEST_TOO_LARGE, f"The request body is larger than this front's limit of {limit} bytes."
    )


def bodies_full_error(retry_after: int) -> OpenAIError:
    """503 ``FrontAtCapacity`` with ``Retry-After`` and ``x-should-retry: true``: the process's request-body memory
    budget (``HORDE_OAI_MAX_BUFFERED_BODY_BYTES``) has no room for this body now.
    """
    return errors.failure(
        errors.FRONT_AT_CAPACITY,
        "The front is holding as many request bodies as its memory allows. Retry shortly.",
        retry_after=retry_after,
    )


def body_timeout_error(seconds: float) -> OpenAIError:
    """408 ``RequestBodyTimeout``: the body did not arrive within ``seconds``."""
    return errors.failure(errors.REQUEST_BODY_TIMEOUT, f"The request body was not received within {seconds:g} seconds.")


def upgrade_refused_error() -> OpenAIError:
    """400 ``BadRequest``: the request asks for a WebSocket (or other protocol) upgrade."""
    return errors.failure(
        errors.BAD_REQUEST, "This front serves HTTP requests only; it does not accept WebSocket connections."
    )


def at_capacity_error(retry_after: int, *, per_client: bool) -> OpenAIError:
    """503 ``FrontAtCapacity`` with ``Retry-After``: the per-client or the total in-flight cap is reached."""
    which = "from your address" if per_client else "in total"
    return errors.failure(
        errors.FRONT_AT_CAPACITY,
        f"The front is serving as many requests {which} as it accepts at once. Retry shortly.",
        retry_after=retry_after,
    )


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal decided on a request's head, built once: its error and its whole answer (status, headers, body)."""

    error: OpenAIError
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @classmethod
    def of(cls, error: OpenAIError) -> Refusal:
        """The answer to ``error`` (:func:`refusal_answer`)."""
        headers, body = refusal_answer(error)
        return cls(error, error.status, headers, body)


class Slot:
    """One admitted request's place under the in-flight caps, from ``started`` (``time.monotonic()``) until
    :meth:`release` (idempotent).
    """

    __slots__ = ("_guards", "_held", "client", "started")

    def __init__(self, guards: AdmissionGuards, client: str, started: float) -> None:
        self._guards = guards
        self._held = True
        self.client = client
        self.started = started

    def release(self) -> None:
        """Give the place back (once; later calls do nothing)."""
        if self._held:
            self._held = False
            self._guards._release(self.client)


class AdmissionGuards:
    """Wraps an ASGI application with the in-flight caps, the body size limit and the body read timeout.

    The caps and the declared size are decided on the request's head alone (:meth:`admit`).

    Args:
        app: The wrapped application (Django's ASGI handler).
        settings: ``max_in_flight``, ``max_in_flight_per_client``, ``client_address_header``,
            ``capacity_retry_after_seconds``, ``max_body_bytes`` and ``body_timeout_seconds``.
    """

    def __init__(self, app: ASGIApp, settings: FrontSettings) -> None:
        self.app = app
        self.max_in_flight = settings.max_in_flight
        self.max_in_flight_per_client = settings.max_in_flight_per_client
        self.address_header = address_header_name(settings.client_address_header)
        self.retry_after = settings.capacity_retry_after_seconds
        self.max_body_bytes = settings.max_body_bytes
        self.max_buffered_body_bytes = settings.max_buffered_body_bytes
        self.buffered_body_bytes = 0
        """Bytes of request bodies held now: read so far, or read whole and still held by their request."""
        self.body_timeout_seconds = settings.body_timeout_seconds
        self.in_flight = 0
        self.in_flight_by_client: Counter[str] = Counter()
        # The refusals on a request's head, built once: under a burst of thousands each refusal only counts and sends.
        self._at_capacity_per_client = Refusal.of(at_capacity_error(self.retry_after, per_client=True))
        self._at_capacity_in_total = Refusal.of(at_capacity_error(self.retry_after, per_client=False))
        self._too_large = Refusal.of(too_large_error(self.max_body_bytes))
        self._upgrade_refused = Refusal.of(upgrade_refused_error())
        self._bodies_full = Refusal.of(bodies_full_error(self.retry_after))

    def refusal_for(self, scope: Scope, started: float) -> Refusal | None:
        """The refusal of an HTTP request on its head (path, client address, ``Content-Length``), in the order the
        guards apply: 503 ``FrontAtCapacity`` over the per-client cap, then over the total cap (never for
        :data:`UNCAPPED_PATHS`), then 413 for a declared body over the limit; counted and recorded from ``started``
        (``time.monotonic()``). None: the request may go on (:meth:`admit` then gives it its slot).
        """
        refusal = self._refusal(scope)
        if refusal is not None:
            record_refusal(refusal.error, started)
            log_refusal(scope, refusal.error)
        return refusal

    def admit(self, scope: Scope, started: float) -> Refusal | Slot | None:
        """Decide an HTTP request on its head, without waiting: :meth:`refusal_for`'s refusal; else a :class:`Slot`
        the request now holds under the caps (from ``started``); or None for :data:`UNCAPPED_PATHS` (no slot).
        """
        refusal = self.refusal_for(scope, started)
        if refusal is not None:
            return refusal
        if scope.get("path") in UNCAPPED_PATHS:
            return None
        client = self.client_address(scope)
        self.in_flight += 1
        self.in_flight_by_client[client] += 1
        return Slot(self, client, started)

    def _refusal(self, scope: Scope) -> Refusal | None:
        if asks_upgrade(scope):
            return self._upgrade_refused
        if scope.get("path") not in UNCAPPED_PATHS:
            if self.in_flight_by_client[self.client_address(scope)] >= self.max_in_flight_per_client:
                return self._at_capacity_per_client
            if self.in_flight >= self.max_in_flight:
                return self._at_capacity_in_total
        declared = content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            return self._too_large
        if declared is not None and self.buffered_body_bytes + declared > self.max_buffered_body_bytes:
            return self._bodies_full
        return None

    def _release(self, client: str) -> None:
        self.in_flight -= 1
        self.in_flight_by_client[client] -= 1
        if self.in_flight_by_client[client] <= 0:
            del self.in_flight_by_client[client]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit the request, refuse it, or call the app once its body is in."""
        if scope["type"] == "websocket":
            await refuse_websocket(receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        admission = self.admit(scope, time.monotonic())
        if isinstance(admission, Refusal):
            await send_answer(send, admission.status, list(admission.headers), admission.body)
            return
        if admission is None:  # an uncapped path
            await self._admit_body(scope, receive, send, time.monotonic())
            return
        slot = admission

        async def send_then_release(message: Message) -> None:
            try:
                await send(message)
            finally:
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    slot.release()

        try:
            await self._admit_body(scope, receive, send_then_release, slot.started)
        finally:
            slot.release()

    def client_address(self, scope: Scope) -> str:
        """The trusted header's first entry when configured and present, else the connection's peer address (the
        ``Proxied-For`` of the request's calls to the Horde too: chat.horde.client_address.scope_client_address).
        """
        return scope_client_address(scope, self.address_header)

    async def _admit_body(self, scope: Scope, receive: Receive, send: Send, started: float) -> None:
        held = HeldBody(self)
        try:
            try:
                async with asyncio.timeout(self.body_timeout_seconds):
                    body = await self._read_body(receive, held)
            except TimeoutError:
                await refuse(scope, send, body_timeout_error(self.body_timeout_seconds), started)
                return
            except BodyTooLarge:
                await refuse(scope, send, too_large_error(self.max_body_bytes), started)
                return
            except BodiesFull:
                held.release()
                await refuse(scope, send, bodies_full_error(self.retry_after), started)
                return
            if body is None:  # the client left while sending its body
                return
            await self.app(scope, replay(body, receive), send)
        finally:
            held.release()

    async def _read_body(self, receive: Receive, held: HeldBody) -> bytes | None:
        """The whole body, None if the client disconnected; each chunk is counted on ``held`` as it arrives. Raises
        :class:`BodyTooLarge` past the size limit, :class:`BodiesFull` past the process's body budget.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge
            held.take(len(chunk))
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class HeldBody:
    """One request's bytes counted on :attr:`AdmissionGuards.buffered_body_bytes`, given back once by
    :meth:`release` (idempotent).
    """

    __slots__ = ("_guards", "size")

    def __init__(self, guards: AdmissionGuards) -> None:
        self._guards = guards
        self.size = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes; raises :class:`BodiesFull` (counting nothing) when the budget has no room."""
        guards = self._guards
        if guards.buffered_body_bytes + size > guards.max_buffered_body_bytes:
            raise BodiesFull
        guards.buffered_body_bytes += size
        self.size += size

    def release(self) -> None:
        """Give every byte counted back."""
        self._guards.buffered_body_bytes -= self.size
        self.size = 0


class BodiesFull(Exception):
    """The process's request-body budget has no room for the next chunk."""


class BodyTooLarge(Exception):
    """The body received so far is over the limit."""


def asks_upgrade(scope: Scope) -> bool:
    """Whether the request carries an ``Upgrade`` header naming ``websocket`` (any case)."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"upgrade" and b"websocket" in value.lower():
            return True
    return False


async def refuse_websocket(receive: Receive, send: Send) -> None:
    """Close a ``websocket`` scope before accepting it (the server answers the handshake with 403)."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})


def content_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, or None when absent or not a number."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` as one message, then waits on the original (for the disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def refuse(scope: Scope, send: Send, error: OpenAIError, started: float) -> None:
    """Send ``error`` as the whole response (envelope, status, retry and CORS headers), count it with its duration
    from ``started`` (``time.monotonic()``) and log it (:func:`log_refusal`).
    """
    record_refusal(error, started)
    log_refusal(scope, error)
    await send_answer(send, error.status, *refusal_answer(error))


def log_refusal(scope: Scope, error: OpenAIError) -> None:
    """The INFO line ``Request refused by the admission guards: method=<method> status=<status> code=<code>
    retry_after=<seconds|None>`` (no path: it may hold a stored response's id; no address, no header).
    """
    method = str(scope.get("method", ""))
    logger.bind(method=method, status=error.status, code=error.code, retry_after=error.retry_after).info(
        "Request refused by the admission guards: method={} status={} code={} retry_after={}",
        method,
        error.status,
        error.code,
        error.retry_after,
    )


def refusal_answer(error: OpenAIError) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of ``error``'s answer, built without Django (a refusal under a burst must be cheap)."""
    body = errors.dumps(error.envelope())
    headers = [(b"content-type", b"application/json")]
    for name, value in {**error.headers(), **CORS_HEADERS}.items():
        headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    headers.append((b"content-length", str(len(body)).encode()))
    headers.append((b"connection", b"close"))
    return headers, body


async def send_answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send one whole response."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
