"""The server-sent event sequence of a streamed chat completion.

Reference sections: "Buffered stream events" (the chunk order), "Stream errors" (an error after the 200 headers is
``data: {"error": ...}`` then ``data: [DONE]``; so is the process stopping, ``FrontShuttingDown``). While the request
waits, a keepalive frame goes out every ``HORDE_OAI_KEEPALIVE_SECONDS`` so proxies and clients keep the connection
open: a comment with the queue progress, or after a long quiet a progress chunk (chat.streaming.progress). The frames
are chat.rendering.sse's; the HTTP response that carries them is chat.views.event_stream's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from chat.errors import OpenAIError
from chat.horde.native import NativeStatus
from chat.protocol.chat_request import ChatCompletionRequest
from chat.rendering.completion import buffered_chunks
from chat.rendering.sse import DONE_EVENT, KEEPALIVE_COMMENT, data_event
from chat.streaming.progress import StreamProgress
from chat.waiting.waiter import ChatWaiter


async def unless_stopping[T](waiter: ChatWaiter, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``, unless the front's process starts stopping first: then 503 ``FrontShuttingDown`` is
    raised (``chat.serving.runtime.FrontRuntime.unless_stopping``), which a stream sends as its error event before
    ``data: [DONE]``. A waiter whose runtime has no shutdown (a test's) just awaits.
    """
    guard = getattr(getattr(waiter, "runtime", None), "unless_stopping", None)
    if guard is None:
        return await awaitable
    result: T = await guard(awaitable, waiter.request_id)
    return result


def error_events(error: OpenAIError) -> list[bytes]:
    """The end of a stream whose wait failed after the 200 headers: ``data: {"error": ...}`` then ``data: [DONE]``
    (reference: Stream errors). The error's ``metadata.retry_after`` holds the interval its ``Retry-After`` header
    would have had (``no_eligible_worker`` after the grace: 30); its HTTP status is never sent.
    """
    return [error.stream_event(), DONE_EVENT]


async def with_keepalives(
    task: asyncio.Future[Any], interval: float, frame: Callable[[], bytes] | None = None
) -> AsyncIterator[bytes]:
    """Yield a keepalive frame every ``interval`` seconds until ``task`` is done (its result is not read here):
    ``frame()`` (chat.streaming.progress.StreamProgress.keepalive), by default the bare keepalive comment.
    """
    while True:
        done, _ = await asyncio.wait({task}, timeout=interval)
        if done:
            return
        yield KEEPALIVE_COMMENT if frame is None else frame()


async def buffered_stream(  # noqa: PLR0913, PLR0917 - the parts wait_for_outcome hands a stream: request, waiter, status, hooks
    request: ChatCompletionRequest | Any,
    waiter: ChatWaiter,
    first_status: NativeStatus,
    created: int,
    on_end: Callable[[], None],
    build_chunks: Callable[[NativeStatus], list[dict[str, Any]]] | None = None,
    on_error: Callable[[OpenAIError], None] | None = None,
    on_content: Callable[[bool], None] | None = None,
) -> AsyncIterator[bytes]:
    """The whole event stream of a reply delivered whole: keepalives while waiting, then the buffered chunks.

    ``on_end`` runs when the stream ends for any reason (finished, error, client disconnect); the caller cancels the
    native request there when it is not terminal. ``build_chunks`` makes the chunks of the finished status; by
    default the chat chunks (:func:`chat.rendering.completion.buffered_chunks`); the legacy completions route passes its
    own. ``request`` is the validated request; only chat chunks read it. ``on_error`` is told the error of an error
    event, ``on_content`` (with False: not relayed) when the reply's chunks go out (chat.serving.request_record).
    """
    wait_task = asyncio.ensure_future(unless_stopping(waiter, waiter.wait_done(first_status)))
    loop = asyncio.get_running_loop()
    progress = StreamProgress(request, waiter, created, loop.time())
    try:
        async for frame in with_keepalives(
            wait_task, waiter.settings.keepalive_seconds, lambda: progress.keepalive(loop.time())
        ):
            yield frame
        try:
            status = wait_task.result()
        except OpenAIError as error:
            if on_error is not None:
                on_error(error)
            for event in error_events(error):
                yield event
            return
        if build_chunks is None:
            chunks = buffered_chunks(request, status, waiter.request_id, created)
        else:
            chunks = build_chunks(status)
        if on_content is not None:
            on_content(False)
        for chunk in chunks:
            yield data_event(chunk)
        yield DONE_EVENT
    finally:
        if not wait_task.done():
            wait_task.cancel()
        on_end()
