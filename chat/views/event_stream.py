"""The HTTP response of every event stream, and the hooks that end it however the request ends.

:class:`ChatEventStream` serves a stream's bytes (chat.streaming) as a Django streaming response and runs its end (the
native request's cancel) once, when the stream closes or when the request's ASGI call returns
(:data:`REQUEST_END_HOOKS`, run by chat.asgi.with_front_lifespan).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar

from django.http import StreamingHttpResponse

REQUEST_END_HOOKS: ContextVar[list[Callable[[], object]] | None] = ContextVar("chat_request_end_hooks", default=None)
"""The hooks to run when the ASGI call of the current HTTP request returns (set by chat.asgi.with_front_lifespan).

Django runs the view in tasks that copy this context, so a view can register work that must happen however the
request ends: :class:`ChatEventStream` registers its end (the native request's cancel), because a
client that leaves while the response is still on its way back through the middleware cancels that await and Django then
never closes the response. The hooks are idempotent; for a stream that ended normally they do nothing."""


def _run_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: the process is shutting down
        loop.call_soon_threadsafe(callback)


class ChatEventStream(StreamingHttpResponse):
    """A ``text/event-stream`` response that runs ``on_end`` on the event loop when Django closes it, or when it is
    dropped without being closed.

    The events' own ``finally`` runs ``on_end`` when the stream ends, fails or the client leaves mid-stream. A client
    that leaves after the view returned but before Django started the events never starts them, so their ``finally``
    never runs; Django still closes a response its handler received (from a worker thread), and this runs ``on_end``
    then, on ``loop``. A client that leaves while the response is still on its way back through the middleware (a
    synchronous ``process_response``, such as ``CommonMiddleware``'s, awaited in a thread) cancels that await: the
    handler never gets the response and never closes it. Served through ``chat.asgi.with_front_lifespan`` (the
    front's own ASGI application and the documented host-project one), ``on_end`` then runs as soon as the request's
    ASGI call returns (``chat.asgi.REQUEST_END_HOOKS``); otherwise a finalizer runs it when the dropped response is
    collected, which may be a minute later (a gen-2 collection; seen in ``tests/integration/test_chaos.py``), so the
    native request is still cancelled. ``on_end`` must therefore be idempotent (chat.serving.service makes it
    so).
    """

    def __init__(
        self, events: AsyncIterator[bytes], *, on_end: Callable[[], None], loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(events, content_type="text/event-stream")
        self._on_end = on_end
        self._loop = loop
        self._unclosed = weakref.finalize(self, _run_soon, loop, on_end)
        hooks = REQUEST_END_HOOKS.get()
        if hooks is not None:  # served through chat.asgi.with_front_lifespan: ended when the request's call returns
            hooks.append(self._unclosed)

    def close(self) -> None:
        """Close the response (Django calls it when the stream ends or the client leaves), then run ``on_end``."""
        self._unclosed.detach()
        try:
            _run_soon(self._loop, self._on_end)
        finally:
            super().close()
