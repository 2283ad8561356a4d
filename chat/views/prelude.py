"""What every ``POST`` view does first, written once: the method, the start time, the body's size, the bearer key,
the read, and the refusal record of a body refused there; and the HTTP form of a stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from chat.errors import CORS_HEADERS, METHOD_NOT_ALLOWED, OpenAIError, json_response, method_not_allowed
from chat.metrics import front_metrics
from chat.reading.api_key import bearer_key
from chat.rendering.progress import QueueProgress
from chat.rendering.sse import SSE_HEADERS
from chat.serving.request_record import record_refusal, record_refused_duration
from chat.serving.service import Answered, Outcome, Refused
from chat.views.event_stream import ChatEventStream


@dataclass(frozen=True)
class Arrival[T]:
    """A request read and validated by its API's reader: the request, the client's key, when the view began."""

    request: T
    apikey: str | None
    started: float


def arrive[T](request: HttpRequest, read: Callable[[bytes], T]) -> Arrival[T] | HttpResponse:
    """Read a ``POST``: its :class:`Arrival`, or the response that ends it already.

    Another method is 405 (chat.errors.method_not_allowed), timed on the duration histogram as ``client_error``
    (chat.serving.request_record.record_refused_duration). The body's size is recorded; a bad bearer key or a body
    ``read`` refuses is answered with its error, counted and timed (chat.serving.request_record.record_refusal).
    ``started`` is ``time.monotonic()`` before the body is read.
    """
    started = time.monotonic()
    if request.method != "POST":
        record_refused_duration(405, METHOD_NOT_ALLOWED, started)
        return method_not_allowed("POST")
    body = request.body
    front_metrics().body_size.record(len(body))
    try:
        apikey = bearer_key(request)
        read_request = read(body)
    except OpenAIError as error:
        record_refusal(error, started)
        return error.to_response()
    return Arrival(read_request, apikey, started)


def event_stream_response(
    events: AsyncIterator[bytes], finish: Callable[[], None], progress: QueueProgress | None = None
) -> HttpResponseBase:
    """The streamed response of ``events``: SSE and CORS headers, the ``x-horde-*`` queue headers of ``progress``
    (the first read), and ``finish`` run once when it ends (however it ends).
    """
    response = ChatEventStream(events, on_end=finish, loop=asyncio.get_running_loop())
    for name, value in {**SSE_HEADERS, **CORS_HEADERS}.items():
        response[name] = value
    return with_progress(response, progress)


def with_progress[R: HttpResponseBase](response: R, progress: QueueProgress | None) -> R:
    """``response`` with ``x-horde-queue-position`` and ``x-horde-wait-time`` of ``progress`` (none when None)."""
    if progress is not None:
        for name, value in progress.headers().items():
            response[name] = value
    return response


def outcome_response(outcome: Outcome) -> HttpResponseBase:
    """A chat-shaped outcome as HTTP (chat completions, and legacy completions whose renderers already ran in the
    service): the error's envelope, the body as JSON, or the event stream, each with the queue-progress headers.
    """
    if isinstance(outcome, Refused):
        return with_progress(outcome.error.to_response(), outcome.progress)
    if isinstance(outcome, Answered):
        return with_progress(json_response(outcome.body), outcome.progress)
    return event_stream_response(outcome.events, outcome.finish, outcome.progress)
