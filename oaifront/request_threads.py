"""Each request's thread for Django's thread-sensitive work, reused from request to request (oaifront.asgi).

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
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Final

from asgiref.sync import ThreadSensitiveContext

from oaifront.guards import ASGIApp, Receive, Scope, Send

IDLE_EXECUTORS: Final[int] = 256
"""The most idle executors (each with its one thread once used) kept for later requests."""

THREAD_NAME_PREFIX: Final[str] = "horde-oai-request"
"""The name prefix of the executors' threads (``horde-oai-request_0``), as a thread dump shows them."""


class RequestThreads:
    """An ASGI application that serves each HTTP request of ``app`` inside
    ``ThreadSensitiveContext(executor=...)`` with a single-thread executor borrowed from a pool (see the module).

    Args:
        app: Django's ASGI application (``django.core.asgi.get_asgi_application()``).
        idle_executors: :data:`IDLE_EXECUTORS`.
    """

    def __init__(self, app: ASGIApp, *, idle_executors: int = IDLE_EXECUTORS) -> None:
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
        """Shut every idle executor down without waiting (their threads end once idle)."""
        while self.idle:
            self.idle.pop().shutdown(wait=False)
