"""``POST /v1/chat/completions``: read -> screen -> validate -> submit -> wait or stream -> respond.

The view is thin; each step lives in its module (screening, mapping, waiter, streaming, cancels). A request the front
abandons after submit (client disconnect, timeout, refusal) is cancelled at the Horde.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat import errors
from chat.errors import CORS_HEADERS, OpenAIError, json_response
from chat.horde_client import HordeRefusal, HordeUnreachable, SubmitResult
from chat.mapping import build_completion, build_native_payload, relays_deltas
from chat.relayed_stream import relayed_stream
from chat.responses import (
    ResponseEventWriter,
    as_responses_error,
    build_response,
    read_responses_request,
    response_events,
)
from chat.runtime import FrontRuntime, get_runtime
from chat.schema import ChatCompletionRequest
from chat.screening import read_chat_request
from chat.streaming import SSE_HEADERS, ChatEventStream, buffered_stream
from chat.waiter import ChatWaiter, submit_refusal_error

INVALID_API_KEY_MESSAGE = (
    "The API key in the Authorization header is not a valid Horde API key: a key is printable ASCII. "
    "Send 'Authorization: Bearer <your Horde API key>', or no header for the anonymous key."
)
"""401 message for a bearer key that cannot be forwarded as the native ``apikey`` header."""


def bearer_key(request: HttpRequest) -> str | None:
    """The client's key from ``Authorization: Bearer <key>``, forwarded to the Horde as ``apikey``; None if absent.

    Raises:
        OpenAIError: 401 ``InvalidAPIKey`` (``authentication_error``) for a key that is not printable ASCII, which no
            Horde key is and no HTTP header can carry.
    """
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    if not (key.isascii() and key.isprintable()):
        raise OpenAIError(status=401, message=INVALID_API_KEY_MESSAGE, code=errors.INVALID_API_KEY)
    return key


def method_not_allowed(allowed: str) -> HttpResponse:
    """405 in OpenAI's envelope."""
    return OpenAIError(
        status=405,
        message=f"Method not allowed. Use {allowed}.",
        code="method_not_allowed",
        extra_headers={"Allow": allowed},
    ).to_response()


async def submit_shielded(runtime: FrontRuntime, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
    """Submit, so that a client disconnecting meanwhile still gets the request cancelled once the Horde answers.

    The submit runs as its own task; when the view is cancelled while it runs, the request it creates is handed to
    the cancel queue (reference: Cancel outcomes). Raises what ``runtime.horde.submit`` raises.
    """
    task = asyncio.ensure_future(runtime.horde.submit(payload, apikey))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        submitted_at = time.time()

        def cancel_created(done: asyncio.Future[SubmitResult]) -> None:
            if not done.cancelled() and done.exception() is None:
                runtime.cancels.cancel_soon(done.result().id, apikey, submitted_at)

        task.add_done_callback(cancel_created)
        raise


ChatEventsWrapper = Callable[[AsyncIterator[bytes], str, int], AsyncIterator[bytes]]
"""Rewrites a chat completion's event stream (its bytes, the native request id, ``created``) into another wire
format's; chat.responses uses one for ``POST /v1/responses``."""

CompletionRenderer = Callable[[dict[str, Any], str, int], Any]
"""Rewrites a ``chat.completion`` (with the native request id and ``created``) into another wire format's body."""


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    """Serve one chat completion, streamed or not (OpenAI's ``POST /v1/chat/completions``).

    Every refusal before the stream's headers is OpenAI's JSON error with its status, ``Retry-After`` and
    ``x-should-retry`` (reference: No eligible worker, Stream errors); a request abandoned after submit (refusal,
    timeout, client disconnect, the process stopping) is cancelled at the Horde. When the process stops
    (chat.runtime), a request not yet answered gets 503 ``FrontShuttingDown`` with ``Retry-After``.
    """
    if request.method != "POST":
        return method_not_allowed("POST")
    try:
        apikey = bearer_key(request)
        chat_request = read_chat_request(request.body)
    except OpenAIError as error:
        return error.to_response()
    return await serve_chat(chat_request, apikey)


async def serve_chat(
    chat_request: ChatCompletionRequest,
    apikey: str | None,
    *,
    render: CompletionRenderer | None = None,
    wrap_events: ChatEventsWrapper | None = None,
    on_error: Callable[[OpenAIError], OpenAIError] | None = None,
) -> HttpResponseBase:
    """Submit a validated chat request, wait or stream, and answer: the one path every wire format shares.

    ``render`` rewrites the completion of a non-streamed request, ``wrap_events`` the event stream of a streamed one
    and ``on_error`` an error before the headers (``POST /v1/responses`` maps its param); without them the answer is
    a chat completion. A request abandoned after submit (refusal, timeout, client disconnect) is cancelled at the
    Horde.
    """

    def error_response(error: OpenAIError) -> HttpResponse:
        return (on_error(error) if on_error is not None else error).to_response()

    runtime = get_runtime()
    if runtime.stopping.is_set():
        return error_response(errors.front_shutting_down(None))  # stopping: nothing is submitted any more
    stream_progress = relays_deltas(chat_request) and runtime.has_redis
    payload = build_native_payload(chat_request, stream_progress=stream_progress)
    created = int(time.time())

    try:
        submitted = await submit_shielded(runtime, payload, apikey)
    except HordeRefusal as refusal:
        return error_response(await submit_refusal_error(runtime.horde, refusal, chat_request))
    except HordeUnreachable as exc:
        return error_response(exc.to_error())
    submitted_at = time.time()

    settings = runtime.settings
    timeout = settings.stream_timeout_seconds if chat_request.is_stream else settings.nonstream_timeout_seconds
    waiter = ChatWaiter(runtime, submitted.id, apikey, timeout_seconds=timeout, request=chat_request)

    finished = False

    def finish() -> None:
        """Once: stop listening for signals and cancel the native request unless it is terminal."""
        nonlocal finished
        if finished:
            return
        finished = True
        waiter.close()
        if not waiter.terminal:
            runtime.cancels.cancel_soon(submitted.id, apikey, submitted_at)

    handed_to_stream = False
    try:
        first_status = await runtime.unless_stopping(waiter.first_read(), submitted.id)
        if chat_request.is_stream:
            events: AsyncIterator[bytes]
            if stream_progress:
                events = relayed_stream(chat_request, waiter, first_status, created, finish, runtime)
            else:
                events = buffered_stream(chat_request, waiter, first_status, created, on_end=finish)
            served: AsyncIterator[bytes] = events if wrap_events is None else wrap_events(events, submitted.id, created)
            response = ChatEventStream(served, on_end=finish, loop=asyncio.get_running_loop())
            for name, value in {**SSE_HEADERS, **CORS_HEADERS}.items():
                response[name] = value
            handed_to_stream = True
            return response
        status = await runtime.unless_stopping(waiter.wait_done(first_status), submitted.id)
        completion = build_completion(chat_request, status, submitted.id, created)
        return json_response(completion if render is None else render(completion, submitted.id, created))
    except OpenAIError as error:
        return error_response(error)
    finally:
        if not handed_to_stream:
            finish()


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """Serve one response, streamed or not (OpenAI's ``POST /v1/responses``, stateless; chat.responses).

    The body becomes a chat completions request (same screening rules, native payload, waiter, cancels and
    availability errors); the completion becomes a ``response`` object and the chunk stream OpenAI's typed Responses
    events. Every error's ``param`` names the Responses request's path.
    """
    if request.method != "POST":
        return method_not_allowed("POST")
    try:
        apikey = bearer_key(request)
        responses_request, chat_request, sources = read_responses_request(request.body)
    except OpenAIError as error:
        return error.to_response()

    def render(completion: dict[str, Any], request_id: str, created: int) -> dict[str, Any]:
        return build_response(responses_request, completion, request_id, created, int(time.time()))

    def wrap_events(events: AsyncIterator[bytes], request_id: str, created: int) -> AsyncIterator[bytes]:
        writer = ResponseEventWriter(responses_request, request_id, created, responses_request.model)
        return response_events(writer, events, sources, time.time)

    return await serve_chat(
        chat_request,
        apikey,
        render=render,
        wrap_events=wrap_events,
        on_error=lambda error: as_responses_error(error, sources),
    )
