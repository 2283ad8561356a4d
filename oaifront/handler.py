"""Django's ASGI handler as the front serves it (``oaifront.asgi``): the API's requests without a thread-sensitive
context of their own.

Django's ``ASGIHandler.__call__`` enters asgiref's ``ThreadSensitiveContext`` around each request, so that one
request's thread-sensitive synchronous code (an ORM query, a synchronous view) runs in a thread of its own, apart
from other requests'. The first thread-sensitive ``sync_to_async`` call of the request then creates an executor and
starts its thread, and the end of the request joins that thread: Django makes one such call for every request (it
closes the response through ``sync_to_async``, as ``request_finished`` receivers may be synchronous), so every
request started and stopped two threads. A profile of the non-streamed path showed that as the largest single cost
of a request (``Thread.start``, ``ThreadPoolExecutor.shutdown``; bench/README.md).

The API's views (:data:`API_PATH_PREFIX`) are all async; what stays synchronous in their requests is closing the
response (``chat.views.event_stream.ChatEventStream.close`` hands its end back to the event loop) and Django's
``request_finished`` signal, whose database receivers the chat app disconnects (chat.apps). Those requests are served
without the per-request context: the close runs in asgiref's one shared thread-sensitive thread, started once per
process. Every other path (the API description, whose view is synchronous and may wait on the Horde; the docs pages;
health) keeps Django's context, so a slow synchronous view never holds up the API's closes.
"""

from __future__ import annotations

from typing import Any, Final

from django.core.handlers.asgi import ASGIHandler

API_PATH_PREFIX: Final[str] = "/v1/"
"""The paths served without a per-request ``ThreadSensitiveContext``: the OpenAI-compatible routes, all async views."""


class FrontASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose API requests share asgiref's process-wide thread-sensitive thread (see the module)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve an API request with Django's ``handle`` outside a per-request ``ThreadSensitiveContext``; any other
        scope as Django's handler does (which raises ``ValueError`` for a scope that is not HTTP).
        """
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(API_PATH_PREFIX):
            await self.handle(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
