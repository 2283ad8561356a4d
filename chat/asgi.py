"""The front's process lifecycle for any ASGI application serving the chat apps.

Django's ASGI handler does not speak the ASGI lifespan protocol (uvicorn logs "ASGI 'lifespan' protocol appears
unsupported" and skips it), so nothing would run at shutdown. :func:`with_front_lifespan` wraps the application and
answers the lifespan events itself:

- at startup, one log line names the Redis and the progress streams' database (or says there is none, or that it is
  unreachable and why: :func:`redis_problem`), and
  :func:`chat.serving.runtime.chain_shutdown_signals` puts :func:`chat.serving.runtime.stop_open_requests` ahead of the
  server's SIGTERM/SIGINT handler, so a stop ends every open request at once (streams with an error event and ``data:
  [DONE]``, waiting requests with a 503, each native request cancelled);
- at shutdown, :func:`chat.serving.runtime.close_runtime` retries pending cancels once more, stops the Redis tasks and
  closes the HTTP pool.

Each HTTP request runs with a thread of its own for Django's thread-sensitive work, borrowed from a pool
(:class:`RequestThreads`), not one started and joined per request:
Django's ``ASGIHandler`` enters asgiref's ``ThreadSensitiveContext()`` around every request, and closes every
response through ``sync_to_async(response.close)`` (thread-sensitive: ``request_finished`` receivers may be
synchronous); the cache's ``aget``/``aset`` (django-redis has no async client) go the same way. In a context of its
own, the first such call of a request creates a ``ThreadPoolExecutor`` and starts its thread, and the end of the
request starts a second thread to join it: two threads started and stopped per request, the loop thread handing the
GIL to each (bench/README.md, "Stop 41: the non-streamed regression").

asgiref documents the remedy (``ThreadSensitiveContext``, its README): a context entered with ``executor=`` runs the
block's thread-sensitive calls on that executor, the caller owns it and "may use it again for a later block, for
example in a pool", and the handler's own ``ThreadSensitiveContext()`` inside it is a no-op ("only the outermost
sets the context"). :class:`RequestThreads` wraps Django's application so: each HTTP request borrows an idle
single-thread executor (or makes one), enters a context of its own with it, and gives it back at its end, so each
request still has a thread of its own while it runs (never two blocks on one executor at once) and threads are started
only when more requests run at once than ever before. At most :data:`IDLE_EXECUTORS` are kept idle; one returned
beyond that is shut down without waiting.

A host project's ``asgi.py``::

    from django.core.asgi import get_asgi_application
    from chat.asgi import with_front_lifespan

    application = with_front_lifespan(get_asgi_application())
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final
from urllib.parse import urlsplit

from asgiref.sync import ThreadSensitiveContext
from django.core.exceptions import ImproperlyConfigured
from loguru import logger
from redis.asyncio import Redis
from redis.exceptions import RedisError

from chat.horde.budget import describe_address_budget
from chat.horde.client_address import address_header_name, scope_client_address, serving_client
from chat.settings import front_settings
from chat.views.event_stream import REQUEST_END_HOOKS

Scope = dict[str, Any]
"""An ASGI connection scope (a JSON-like dict, as Django's ``ASGIHandler`` takes it)."""
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
"""The ASGI ``receive`` callable: the next event message."""
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
"""The ASGI ``send`` callable."""
ASGIApplication = Callable[[Scope, Receive, Send], Awaitable[None]]
"""An ASGI 3 application, such as ``django.core.asgi.get_asgi_application()``."""


IDLE_EXECUTORS: Final[int] = 256
"""The most idle executors (each with its one thread once used) kept for later requests."""

THREAD_NAME_PREFIX: Final[str] = "horde-oai-request"
"""The name prefix of the executors' threads (``horde-oai-request_0``), as a thread dump shows them."""


class RequestThreads:
    """An ASGI application that serves each HTTP request of ``app`` inside ``ThreadSensitiveContext(executor=...)``
    with a single-thread executor borrowed from a pool (:func:`with_front_lifespan` serves every HTTP request through
    one).

    Args:
        app: Django's ASGI application (``django.core.asgi.get_asgi_application()``), or what wraps it.
        idle_executors: :data:`IDLE_EXECUTORS`.
    """

    def __init__(self, app: ASGIApplication, *, idle_executors: int = IDLE_EXECUTORS) -> None:
        self.app = app
        self.idle_executors = idle_executors
        self.idle: list[ThreadPoolExecutor] = []
        """The executors no request holds now, the most recently returned last."""
        self.made = 0
        """Executors made so far (one per request that found none idle)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope`` with a borrowed executor (an HTTP request), else pass it to ``app`` as it is."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        executor = self.borrow()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            self.give_back(executor)

    def borrow(self) -> ThreadPoolExecutor:
        """An idle executor, or a new one (its thread starts at its first call)."""
        if self.idle:
            return self.idle.pop()
        self.made += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME_PREFIX)

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Keep ``executor`` for a later request, or shut it down without waiting when enough are idle."""
        if len(self.idle) < self.idle_executors:
            self.idle.append(executor)
        else:
            executor.shutdown(wait=False)

    def shutdown(self) -> None:
        """Shut every idle executor down without waiting (their threads end once idle); the list is swapped first,
        so a request still giving its executor back meanwhile does not race the loop.
        """
        idle, self.idle = self.idle, []
        for executor in idle:
            executor.shutdown(wait=False)


def with_front_lifespan(
    application: ASGIApplication, *, at_shutdown: Sequence[Callable[[], object]] = ()
) -> ASGIApplication:
    """Return ``application`` with the front's lifespan: every other scope goes to ``application``, each HTTP request
    with a thread borrowed from a :class:`RequestThreads` pool.
    ``at_shutdown``: blocking calls made (in a thread) once the runtime is closed, such as the project's telemetry
    flush (oaifront.telemetry.flush_telemetry).

    The wrapper handles the lifespan scope itself and does not forward it, so ``application`` should be one that
    does not need its own lifespan (Django's does not have one). Around each HTTP request it runs the hooks a view
    registered in :data:`REQUEST_END_HOOKS` once the request's call returns, and serves it with its client address
    (chat.horde.client_address.CLIENT_ADDRESS: the admission guards' address, ``HORDE_OAI_CLIENT_ADDRESS_HEADER``
    included), the ``Proxied-For`` of its calls to the Horde.

    A setting the front cannot use (``HORDE_OAI_KEEPALIVE_SECONDS=abc``, ``HORDE_OAI`` given as a string) ends the
    process here, as the host's ASGI module is imported, with one line on standard error and status 1.
    """
    try:
        front_settings()
    except ImproperlyConfigured as invalid:
        sys.exit(str(invalid))

    request_threads = RequestThreads(application)
    shutdown_calls = [*at_shutdown, request_threads.shutdown]

    async def front_application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, shutdown_calls)
            return
        if scope["type"] != "http":
            await application(scope, receive, send)
            return
        hooks: list[Callable[[], object]] = []
        token = REQUEST_END_HOOKS.set(hooks)
        # The client's address (the guards' own), for the Horde's proxy headers and budgets
        # (chat.horde.client_address).
        address = scope_client_address(scope, address_header_name(front_settings().client_address_header))
        with serving_client(address):
            try:
                await request_threads(scope, receive, send)
            finally:
                REQUEST_END_HOOKS.reset(token)
                for hook in hooks:
                    hook()

    # ``__wrapped__`` names the wrapped application, as functools.wraps does.
    return functools.update_wrapper(front_application, application, assigned=(), updated=())


def keep_out_of_collections() -> None:
    """Collect once, then freeze what is left (:func:`gc.freeze`): the objects of start-up (Django, the URLconf, the
    schemas, the runtime) live as long as the process, and the cyclic collector's full passes no longer walk them.
    A full pass over them took 120 ms of the loop in a burst of 3,000 requests (bench/README.md, row 8), once every
    few thousand requests.
    """
    gc.collect()
    gc.freeze()


REDIS_CHECK_TIMEOUT_SECONDS: Final = 2.0
"""How long the start-up check waits for Redis to answer ``PING`` (a refused connection answers at once)."""


async def redis_problem(url: str) -> str | None:
    """Why Redis at ``url`` does not answer ``PING`` within :data:`REDIS_CHECK_TIMEOUT_SECONDS`, or None: the
    system's reason when the connection failed (``Connection refused``), else redis-py's message with the URL's
    password, should it hold it, replaced by ``***``. The start log line says it (settings.describe_redis), after the
    Redis's address.
    """
    client = Redis.from_url(
        url, socket_connect_timeout=REDIS_CHECK_TIMEOUT_SECONDS, socket_timeout=REDIS_CHECK_TIMEOUT_SECONDS
    )
    try:
        await asyncio.wait_for(client.ping(), REDIS_CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"no answer within {REDIS_CHECK_TIMEOUT_SECONDS:g} seconds"
    except (RedisError, OSError) as failed:
        cause = failed.__cause__ or failed.__context__
        if isinstance(cause, OSError) and cause.errno is not None:
            return os.strerror(cause.errno)  # "Connection refused" on every event loop (their messages differ)
        why = str(failed) or type(failed).__name__
        password = urlsplit(url).password
        return why.replace(password, "***") if password else why
    finally:
        await client.aclose()
    return None


async def serve_lifespan(receive: Receive, send: Send, at_shutdown: Sequence[Callable[[], object]] = ()) -> None:
    """Answer ``lifespan.startup`` (logging the Redis line, making the process's runtime: its Horde clients, SSL
    contexts and pools, then :func:`keep_out_of_collections`) and ``lifespan.shutdown`` (closing the runtime).

    The runtime is made at startup rather than by the first request, whose first step it lengthened by about 50 ms of
    the loop (bench/README.md, row 8).
    """
    from chat.serving.runtime import (  # noqa: PLC0415 - the apps load once Django is set up
        chain_shutdown_signals,
        close_runtime,
        get_runtime,
    )

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            redis_url = front_settings().redis_url
            unreachable = await redis_problem(redis_url) if redis_url else None
            logger.info(front_settings().describe_redis(unreachable))
            logger.info(describe_address_budget(front_settings()))
            chain_shutdown_signals()
            get_runtime()
            keep_out_of_collections()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await close_runtime()
                for call in at_shutdown:
                    await asyncio.to_thread(call)
            except Exception as exc:  # noqa: BLE001 - the server reports it; the process is ending anyway
                logger.exception("Front shutdown failed")
                await send({"type": "lifespan.shutdown.failed", "message": f"{type(exc).__name__}: {exc}"})
                return
            await send({"type": "lifespan.shutdown.complete"})
            return
