"""Django's ASGI handler as the front serves it (``oaifront.asgi``): without a thread-sensitive context per request.

Django's ``ASGIHandler.__call__`` enters asgiref's ``ThreadSensitiveContext`` around each request, so that one
request's thread-sensitive synchronous code (an ORM query, say) runs in a thread of its own, apart from other
requests'. The first thread-sensitive ``sync_to_async`` call of the request then creates an executor and starts its
thread, and the end of the request joins that thread: Django makes one such call for every request (it closes the
response through ``sync_to_async``, as ``request_finished`` receivers may be synchronous), so every request started
and stopped a thread. A profile of the non-streamed path showed that as the largest single cost of a request
(``Thread.start``, ``ThreadPoolExecutor.shutdown``; bench/README.md).

The front has no database and no synchronous view; what remains synchronous per request is closing the response
(``chat.streaming.ChatEventStream.close`` hands its end back to the event loop) and Django's ``request_finished``
signal, whose database receivers the chat app disconnects (chat.apps). Without the per-request context, those calls
run in asgiref's one shared thread-sensitive thread, started once per process, as they would outside any request.
"""

from __future__ import annotations

from typing import Any

from django.core.handlers.asgi import ASGIHandler


class FrontASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose requests share asgiref's process-wide thread-sensitive thread (see the module)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one HTTP connection with Django's ``handle``, outside a per-request ``ThreadSensitiveContext``.
        Raises ``ValueError`` for a scope that is not HTTP, as Django's handler does.
        """
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)
