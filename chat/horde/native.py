"""The async httpx client of the Horde's native chat routes (native-horde-chat.md).

One pooled ``httpx.AsyncClient`` per process (see chat.serving.runtime). Every call sends the client's key as ``apikey``
and the front's ``Client-Agent``. A refusal (4xx/5xx with the native ``{"message", "rc"}`` body) raises
:class:`HordeRefusal`; a transport failure or an unreadable answer raises :class:`HordeUnreachable`, and a 404 without
the native body (``HORDE_URL`` is not the API root) raises :class:`HordeApiRootWrong`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import orjson
from horde_sdk.generic_api.consts import ANON_API_KEY
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from chat import errors
from chat.errors import OpenAIError
from chat.horde.budget import HordeBudget
from chat.metrics import front_metrics

ANONYMOUS_API_KEY = ANON_API_KEY
"""The Horde's anonymous key (horde-sdk's ``ANON_API_KEY``), sent when the client sent no bearer key."""


POOL_CONNECTIONS: Final[int] = 32
"""The default ``connections`` of :class:`HordeClient` (``HORDE_OAI_HORDE_CONNECTIONS``): calls to the Horde one
process makes at once, and the connections it keeps open for them (all kept alive, so a
busy process never closes and reopens connections). More concurrent calls wait their turn in
:class:`ConnectionSlots` before they reach httpx: httpcore's pool scans every queued request against every connection
on each change (``_assign_requests_to_connections``), which made a queue of a few hundred calls cost most of a core,
and checks each idle connection on each call, so a larger pool costs CPU on every call (bench/README.md)."""

ROUTINE_CALLS: Final[tuple[tuple[str, str], ...]] = (
    ("GET", "/v2/generate/chat/status/"),
    ("DELETE", "/v2/generate/chat/status/"),
    ("GET", "/v2/generate/text/status/"),
    ("DELETE", "/v2/generate/text/status/"),
    ("GET", "/v2/generate/check/"),
    ("GET", "/v2/generate/status/"),
    ("DELETE", "/v2/generate/status/"),
)
"""``(method, path prefix)`` of the calls made for a request already at the Horde: its status reads and its cancel.
Every other call (a submit, a dry run, the reads a request makes before its submit) goes first for a free connection
(:class:`ConnectionSlots`)."""


def is_routine_call(method: str, path: str) -> bool:
    """Whether ``method path`` is one of :data:`ROUTINE_CALLS`."""
    return any(method == verb and path.startswith(prefix) for verb, prefix in ROUTINE_CALLS)


class ConnectionSlots:
    """At most ``connections`` calls at once. A freed slot goes to the longest-waiting call ahead of a submit, else
    to the longest-waiting status read or cancel (:data:`ROUTINE_CALLS`): with hundreds of requests waiting, their
    reads keep every connection busy, and a new request's submit (issue 37: the front's own time before its submit
    reaches the Horde) no longer waits behind them. Reads wait their turn among themselves, first in, first out.
    """

    def __init__(self, connections: int) -> None:
        self.free = connections
        """Slots no call holds now."""
        self._first: deque[asyncio.Future[None]] = deque()
        self._routine: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        """Whether a call arriving now would wait."""
        return self.free == 0

    async def acquire(self, *, routine: bool) -> None:
        """Wait for a slot (``routine``: a call of :data:`ROUTINE_CALLS`, served after every waiting other call)."""
        if self.free > 0 and not self._first and not (routine and self._routine):
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._routine if routine else self._first
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot came with the cancellation: pass it on
            else:
                queue.remove(waiter)
            raise

    def release(self) -> None:
        """Give a slot back: to the next waiting call, first the non-routine ones."""
        for queue in (self._first, self._routine):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.free += 1


JSON_CONTENT_TYPE: Final[dict[str, str]] = {"Content-Type": "application/json"}


class NativeModel(BaseModel):
    """A native model shape that keeps unknown keys (a newer Horde may add fields)."""

    model_config = ConfigDict(extra="allow")


class NativeGeneration(NativeModel):
    """One finished generation of a native chat status."""

    id: str | None = None
    worker_id: str | None = None
    worker_name: str | None = None
    model: str | None = None
    message: dict[str, Any] = {}
    finish_reason: str | None = None
    native_finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None


class NativeStatus(NativeModel):
    """``GET /v2/generate/chat/status/{id}``. Fields an older Horde omits are None: unknown, never zero."""

    done: bool = False
    faulted: bool = False
    waiting: int = 0
    processing: int = 0
    finished: int = 0
    restarted: int = 0
    queue_position: int = 0
    wait_time: int = 0
    kudos: float = 0
    is_possible: bool = True
    eligible_workers: int | None = None
    eligible_worker_threads: int | None = None
    might_stall: bool | None = None
    impossible_reason: Any = None
    """Why no worker can serve the request; an object with ``kind`` in the contract. Any other value is kept as is
    and ignored by the waiter, like an unknown kind."""
    context_adjustments: list[dict[str, Any]] | None = None
    stream_progress: bool = False
    generations: list[NativeGeneration] = []
    fault_reason: str | None = None
    _front_x_horde: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def front_x_horde(self) -> dict[str, Any]:
        """Keys the front adds to ``x_horde`` for this request (the text API path's, chat.serving.text_route); never
        read from the Horde's answer.
        """
        return self._front_x_horde

    @property
    def finished_generation(self) -> NativeGeneration | None:
        """The first generation, or None when the Horde has not finished one."""
        return self.generations[0] if self.generations else None


@dataclass(frozen=True)
class SubmitResult:
    """``202`` of ``POST /v2/generate/chat/async``."""

    id: str
    kudos: float | None
    warnings: list[dict[str, Any]]


@dataclass
class HordeRefusal(Exception):
    """A native refusal: the HTTP status, ``rc`` (None when absent), ``message`` and the whole body and headers."""

    status: int
    message: str
    rc: str | None
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(f"{self.status} {self.rc}: {self.message}")


class HordeUnreachable(Exception):
    """The Horde could not be reached, timed out, or answered something that is not its contract.

    Attributes:
        detail: What happened, without the native route: the transport error (``ConnectError: ...``) when the Horde
            was not reached, else what it answered, worded to follow "The Horde answered" (``HTTP 502 Bad Gateway
            without an error code``, ``a status that does not match the native contract (2 errors)``).
        reached: Whether the Horde answered at all (a 5xx or malformed answer) rather than not being reached.
    """

    def __init__(self, detail: str, *, reached: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.reached = reached

    def to_error(self) -> OpenAIError:
        """502 ``HordeUnavailable`` (``chat.errors.horde_unavailable``) with this failure's detail."""
        return errors.horde_unavailable(self.detail, reached=self.reached)


class HordeApiRootWrong(HordeUnreachable):
    """A 404 without the Horde's ``rc``: ``HORDE_URL`` names a server, but not the Horde's API root (often a URL
    without ``/api``).
    """

    def to_error(self) -> OpenAIError:
        """502 ``HordeUnavailable`` saying the API root looks wrong (``chat.errors.horde_api_root_wrong``)."""
        return errors.horde_api_root_wrong(str(self))


class HordeClient:
    """The native chat routes over one pooled async HTTP client.

    Args:
        base_url: The API root (``HORDE_URL``), such as ``https://aihorde.net/api``.
        client_agent: The ``Client-Agent`` header value.
        timeout: Seconds for one call, the wait for a free connection included.
        connections: Calls made at once and connections kept open (:data:`POOL_CONNECTIONS`).
        transport: An httpx transport for tests (e.g. ``httpx.ASGITransport``).
        budget: The process's budgets at the Horde (chat.horde.budget: pacing, proxy headers, 429 retries), shared
            by every client of one Horde; default a budget of this client's own, without a passkey.
    """

    def __init__(  # noqa: PLR0913 - the Horde, the call bounds, and keyword-only seams: transport, pool, budget
        self,
        base_url: str,
        client_agent: str,
        timeout: float,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        connections: int = POOL_CONNECTIONS,
        budget: HordeBudget | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.budget = HordeBudget() if budget is None else budget
        self.timeout = timeout
        self._slots = ConnectionSlots(connections)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Client-Agent": client_agent},
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _call(
        self, method: str, path: str, apikey: str | None, *, payload: Any = None, params: dict[str, str] | None = None
    ) -> Any:
        headers = {"apikey": apikey or ANONYMOUS_API_KEY}
        content = None
        if payload is not None:
            # orjson's bytes are the compact UTF-8 JSON httpx's json= would send, made in a fraction of the time.
            try:
                content = orjson.dumps(payload)
            except TypeError:  # an integer beyond 64 bits, which orjson does not write
                content = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            headers.update(JSON_CONTENT_TYPE)

        async def attempt(budget_headers: Mapping[str, str]) -> httpx.Response:
            started = time.monotonic()
            if self._slots.locked():  # every connection busy: the call waits (HORDE_OAI_HORDE_CONNECTIONS)
                front_metrics().horde_pool_full.add(1)
            try:
                async with asyncio.timeout(self.timeout):  # the wait for a turn counts, like httpx's pool timeout did
                    await self._slots.acquire(routine=is_routine_call(method, path))
            except TimeoutError:
                raise HordeUnreachable(f"no free connection to the Horde within {self.timeout:g} s") from None
            try:
                sent = {**headers, **budget_headers}
                response = await self._http.request(method, path, headers=sent, content=content, params=params)
            except httpx.HTTPError as exc:
                record_call(method, path, started, None)
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise HordeUnreachable(reason) from exc
            finally:
                self._slots.release()
            record_call(method, path, started, response.status_code)
            return response

        # Paced, with the proxy headers, the limiter's 429 retried (chat.horde.budget).
        response = await self.budget.send(method, path, apikey, attempt)
        try:
            # orjson refuses NaN and Infinity (not JSON) and nesting deeper than 1024, like the contract.
            body = orjson.loads(response.content)
        except (ValueError, RecursionError):
            # Not JSON, or NaN/Infinity, which no reply of the front may carry: outside the contract.
            body = None
        if response.status_code == 404 and not (isinstance(body, dict) and "rc" in body):
            raise HordeApiRootWrong(f"{self.base_url} answered 404 Not Found to {method} {path}", reached=True)
        if response.status_code >= 400:
            if not isinstance(body, dict) or (response.status_code >= 500 and "rc" not in body):
                raise HordeUnreachable(
                    f"HTTP {response.status_code} {response.reason_phrase} without an error code".replace("  ", " "),
                    reached=True,
                )
            raise HordeRefusal(
                status=response.status_code,
                message=str(body.get("message", "")),
                rc=body.get("rc"),
                body=body,
                headers=dict(response.headers),
            )
        if body is None:
            raise HordeUnreachable(f"HTTP {response.status_code} with a body that is not JSON", reached=True)
        return body

    async def call(
        self, method: str, path: str, apikey: str | None, *, payload: Any = None, params: dict[str, str] | None = None
    ) -> Any:
        """One call to any Horde route (the image API's, images.horde), paced, timed and refused like the chat
        routes: returns the JSON body; raises HordeRefusal, HordeUnreachable or HordeApiRootWrong.
        """
        return await self._call(method, path, apikey, payload=payload, params=params)

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """``POST /v2/generate/chat/async``; returns the request id. Raises HordeRefusal or HordeUnreachable."""
        body = await self._call("POST", "/v2/generate/chat/async", apikey, payload=payload)
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise HordeUnreachable("the submit without a request id", reached=True)
        return SubmitResult(id=body["id"], kudos=body.get("kudos"), warnings=list(body.get("warnings") or []))

    async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
        """``GET /v2/generate/chat/status/{id}``. Raises HordeRefusal (404 RequestNotFound) or HordeUnreachable."""
        body = await self._call("GET", f"/v2/generate/chat/status/{request_id}", apikey)
        return _parse_status(body)

    async def cancel(self, request_id: str, apikey: str | None) -> NativeStatus:
        """``DELETE /v2/generate/chat/status/{id}``: cancel and return the status. Raises like :meth:`status`."""
        body = await self._call("DELETE", f"/v2/generate/chat/status/{request_id}", apikey)
        return _parse_status(body)

    async def heartbeat(self) -> None:
        """``GET /v2/status/heartbeat`` (readiness). Raises HordeRefusal or HordeUnreachable when it does not answer."""
        await self._call("GET", "/v2/status/heartbeat", None)

    async def text_models(self) -> list[dict[str, Any]]:
        """``GET /v2/status/models?type=text``: the native model list, entries as JSON objects."""
        body = await self._call("GET", "/v2/status/models", None, params={"type": "text"})
        if not isinstance(body, list):
            raise HordeUnreachable("a model list that is not a list", reached=True)
        return [entry for entry in body if isinstance(entry, dict)]

    async def text_workers(self) -> list[dict[str, Any]]:
        """``GET /v2/workers?type=text``: the online text workers (``models``, ``threads``, ``max_length``,
        ``max_context_length``, ``uptime``, ...), entries as JSON objects (chat.horde.worker_limits).
        """
        body = await self._call("GET", "/v2/workers", None, params={"type": "text"})
        if not isinstance(body, list):
            raise HordeUnreachable("a worker list that is not a list", reached=True)
        return [entry for entry in body if isinstance(entry, dict)]

    async def performance(self) -> dict[str, Any]:
        """``GET /v2/status/performance``: the Horde's totals (``queued_text_requests``, ``text_thread_count``, ...)."""
        body = await self._call("GET", "/v2/status/performance", None)
        if not isinstance(body, dict):
            raise HordeUnreachable("a performance answer that is not an object", reached=True)
        return body

    async def find_user(self, apikey: str | None) -> dict[str, Any]:
        """``GET /v2/find_user``: the user of ``apikey`` (``kudos``, ...). Raises HordeRefusal for an unknown key."""
        body = await self._call("GET", "/v2/find_user", apikey)
        if not isinstance(body, dict):
            raise HordeUnreachable("a user that is not an object", reached=True)
        return body


NATIVE_CALLS: Final[tuple[tuple[str, str, str], ...]] = (
    ("POST", "/v2/generate/chat/async", "submit"),
    ("GET", "/v2/generate/chat/status/", "status"),
    ("DELETE", "/v2/generate/chat/status/", "cancel"),
    ("GET", "/v2/status/models", "models"),
    ("GET", "/v2/status/heartbeat", "heartbeat"),
    ("GET", "/v2/workers", "workers"),
    ("GET", "/v2/status/performance", "performance"),
    ("GET", "/v2/find_user", "find_user"),
    ("POST", "/v2/generate/async", "image_submit"),
    ("GET", "/v2/generate/check/", "image_check"),
    ("GET", "/v2/generate/status/", "image_status"),
    ("DELETE", "/v2/generate/status/", "image_cancel"),
)
"""``(method, path prefix, horde.call)``: the bounded call type of each native route (never the request id)."""


def record_call(method: str, path: str, started: float, status: int | None) -> None:
    """Record one native call's seconds on ``horde.oai.horde.call.duration`` with ``horde.call`` and
    ``horde.status`` (0 when no answer came).
    """
    call = next((name for verb, prefix, name in NATIVE_CALLS if verb == method and path.startswith(prefix)), "other")
    front_metrics().horde_call_duration.record(
        time.monotonic() - started, {"horde.call": call, "horde.status": status or 0}
    )


def _parse_status(body: Any) -> NativeStatus:
    try:
        return NativeStatus.model_validate(body)
    except ValidationError as exc:
        raise HordeUnreachable(
            f"a status that does not match the native contract ({exc.error_count()} errors)", reached=True
        ) from exc
