"""``POST /v1/chat/completions`` and ``POST /v1/responses``: read -> screen -> validate -> submit -> wait or stream
-> respond.

The views are thin; each step lives in its module (screening, mapping, text_api, waiter, streaming, cancels). Both
wire formats go through :func:`serve_chat`, which picks the Horde path (native chat, or the text generation API for
a model with text workers but no chat worker, chat.text_api); the legacy ``POST /v1/completions``
(chat.legacy_completions) shares :func:`wait_and_respond`. A request the front abandons after submit (client
disconnect, timeout, refusal) is cancelled at the Horde.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat import errors, refusals, text_api, text_limits, worker_limits
from chat.cancels import CancelQueue
from chat.errors import CORS_HEADERS, OpenAIError, json_response
from chat.horde_client import HordeRefusal, HordeUnreachable, NativeStatus, SubmitResult
from chat.logs import RequestRecord, record_refusal
from chat.mapping import build_completion, build_native_payload, relays_deltas
from chat.metrics import STAGE_SUBMIT, front_metrics
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
from chat.seams import HordeApi, WaitedRequest
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


async def submit_shielded(
    runtime: FrontRuntime,
    payload: dict[str, Any],
    apikey: str | None,
    *,
    horde: HordeApi | None = None,
    cancels: CancelQueue | None = None,
) -> SubmitResult:
    """Submit, so that a client disconnecting meanwhile still gets the request cancelled once the Horde answers.

    The submit runs as its own task; when the view is cancelled while it runs, the request it creates is handed to
    the cancel queue (reference: Cancel outcomes). ``horde`` and ``cancels`` default to the native route's
    (``runtime.horde``, ``runtime.cancels``); the text API path passes its own. Raises what ``horde.submit`` raises.
    """
    routes: HordeApi = runtime.horde if horde is None else horde
    queue = runtime.cancels if cancels is None else cancels
    task = asyncio.ensure_future(routes.submit(payload, apikey))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        submitted_at = time.time()

        def cancel_created(done: asyncio.Future[SubmitResult]) -> None:
            if not done.cancelled() and done.exception() is None:
                queue.cancel_soon(done.result().id, apikey, submitted_at)

        task.add_done_callback(cancel_created)
        raise


ChatEventsWrapper = Callable[[AsyncIterator[bytes], str, int], AsyncIterator[bytes]]
"""Rewrites a chat completion's event stream (its bytes, the native request id, ``created``) into another wire
format's; chat.responses uses one for ``POST /v1/responses``."""

CompletionRenderer = Callable[[dict[str, Any], str, int], Any]
"""Rewrites a ``chat.completion`` (with the native request id and ``created``) into another wire format's body."""

ErrorMapper = Callable[[OpenAIError], OpenAIError]
"""Rewrites an error answered before the headers (``POST /v1/responses`` maps its ``param``)."""


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
    started = time.monotonic()
    body = request.body
    front_metrics().body_size.record(len(body))
    try:
        apikey = bearer_key(request)
        chat_request = read_chat_request(body)
    except OpenAIError as error:
        record_refusal(error)
        return error.to_response()
    return await serve_chat(chat_request, apikey, started=started)


async def serve_chat(
    chat_request: ChatCompletionRequest,
    apikey: str | None,
    *,
    started: float,
    render: CompletionRenderer | None = None,
    wrap_events: ChatEventsWrapper | None = None,
    on_error: ErrorMapper | None = None,
) -> HttpResponseBase:
    """Submit a validated chat request, wait or stream, and answer: the one path every wire format shares.

    The Horde path is the native chat route, or the text generation API when every requested model has text workers
    but no chat worker (chat.text_api, ``HORDE_OAI_TEXT_API_FALLBACK``). ``render`` rewrites the completion of a
    non-streamed request, ``wrap_events`` the event stream of a streamed one and ``on_error`` an error before the
    headers (``POST /v1/responses`` maps its param); without them the answer is a chat completion. A request
    abandoned after submit (refusal, timeout, client disconnect) is cancelled at the Horde. Every request is logged and
    counted (chat.logs.RequestRecord) from ``started`` (``time.monotonic()`` when the view began), whatever its wire
    format and Horde path; the record keeps the chat completions error, before ``on_error``.
    """

    def error_response(error: OpenAIError) -> HttpResponse:
        return (on_error(error) if on_error is not None else error).to_response()

    runtime = get_runtime()
    if runtime.stopping.is_set():
        return error_response(errors.front_shutting_down(None))  # stopping: nothing is submitted any more
    record = RequestRecord(chat_request, started=started)
    horde: HordeApi = runtime.horde
    cancels = runtime.cancels
    text_route = await text_api.find_text_route(runtime, chat_request.requested_models)
    if text_route:
        # The model has text workers but no chat worker: the text generation API (chat.text_api).
        try:
            bounds = await text_limits.chat_text_bounds(runtime.text_horde, chat_request, apikey)
            prepared = text_api.prepare_chat_request(chat_request, bounds)
            max_kudos = chat_request.horde.max_kudos if chat_request.horde is not None else None
            if max_kudos is not None:
                await text_api.check_max_kudos(runtime.text_horde, prepared.payload, apikey, max_kudos)
        except OpenAIError as error:
            record.failed(error)
            record.finish()
            return error_response(error)
        except HordeUnreachable as exc:
            unavailable = exc.to_error()
            record.failed(unavailable)
            record.finish()
            return error_response(unavailable)
        horde = text_api.TextRoutes(runtime.text_horde, prepared, worker_limits.directory_for(runtime.text_horde))
        cancels = runtime.text_cancels
        stream_progress = False
        payload = prepared.payload
    else:
        stream_progress = relays_deltas(chat_request) and runtime.has_redis
        payload = build_native_payload(chat_request, stream_progress=stream_progress)
    record.relayed = stream_progress
    created = int(time.time())
    record.submitted_at = time.time()
    try:
        submitted = await submit_shielded(runtime, payload, apikey, horde=horde, cancels=cancels)
    except HordeRefusal as refusal:
        refused: OpenAIError = (
            refusals.error_from_refusal(refusal, request=chat_request)
            if text_route
            else await submit_refusal_error(runtime.horde, refusal, chat_request)
        )
        record.failed(refused, stage=STAGE_SUBMIT)
        record.finish()
        return error_response(refused)
    except HordeUnreachable as exc:
        unavailable = exc.to_error()
        record.failed(unavailable)
        record.finish()
        return error_response(unavailable)
    except asyncio.CancelledError:
        record.disconnected = True
        record.finish()
        raise
    record.request_id = submitted.id

    def completion_of(status: NativeStatus) -> dict[str, Any]:
        return build_completion(chat_request, status, submitted.id, created)

    def rendered(completion: dict[str, Any]) -> Any:
        return completion if render is None else render(completion, submitted.id, created)

    return await wait_and_respond(
        runtime,
        chat_request,
        submitted.id,
        apikey,
        horde=horde,
        cancels=cancels,
        created=created,
        build_body=completion_of,
        render=rendered,
        relay=stream_progress,
        wrap_events=wrap_events,
        on_error=on_error,
        record=record,
    )


async def wait_and_respond(
    runtime: FrontRuntime,
    request: WaitedRequest,
    request_id: str,
    apikey: str | None,
    *,
    horde: HordeApi,
    cancels: CancelQueue,
    created: int,
    build_body: Callable[[NativeStatus], dict[str, Any]],
    render: Callable[[dict[str, Any]], Any] | None = None,
    build_chunks: Callable[[NativeStatus], list[dict[str, Any]]] | None = None,
    relay: bool = False,
    wrap_events: ChatEventsWrapper | None = None,
    on_error: ErrorMapper | None = None,
    record: RequestRecord | None = None,
) -> HttpResponseBase:
    """Wait for a submitted request and answer it: the body ``build_body`` makes from the finished status (rewritten
    by ``render`` when given), or an event stream (the relayed stream when ``relay``, else the buffered stream of
    ``build_chunks``, by default the chat chunks), rewritten by ``wrap_events`` when given. Shared by both wire
    formats on both Horde paths (:func:`serve_chat`) and the legacy completions route.

    ``request`` is the validated request (``is_stream``, and what chat.waiter.ChatWaiter reads); ``horde`` and
    ``cancels`` are the routes the request was submitted to; ``on_error`` rewrites an error answered before the
    headers. A request left before it is terminal (refusal, timeout, client disconnect, the process stopping) is
    cancelled there. ``record`` (chat.logs), when given, gets the waiter, the outcome and the delivered completion
    (``build_body``'s), and is logged and counted when the request ends.
    """
    submitted_at = time.time()
    settings = runtime.settings
    timeout = settings.stream_timeout_seconds if request.is_stream else settings.nonstream_timeout_seconds
    waiter = ChatWaiter(runtime, request_id, apikey, timeout_seconds=timeout, request=request, horde=horde)
    if record is not None:
        record.submitted_at = submitted_at
        record.waiter = waiter

    finished = False

    def finish() -> None:
        """Once: stop listening for signals, cancel the native request unless it is terminal, log and count it."""
        nonlocal finished
        if finished:
            return
        finished = True
        waiter.close()
        if not waiter.terminal:
            cancels.cancel_soon(request_id, apikey, submitted_at)
            if record is not None and record.error is None:
                record.disconnected = True
        elif record is not None and record.completion is None and record.error is None:
            status = waiter.last_status
            if status is not None and status.finished_generation is not None:
                record.completion = build_body(status)
        if record is not None:
            record.finish()

    handed_to_stream = False
    try:
        first_status = await runtime.unless_stopping(waiter.first_read(), request_id)
        if request.is_stream:
            events: AsyncIterator[bytes]
            stream_failed = record.stream_failed if record is not None else None
            if relay and isinstance(request, ChatCompletionRequest):
                events = relayed_stream(request, waiter, first_status, created, finish, runtime, on_error=stream_failed)
            else:
                events = buffered_stream(
                    request,
                    waiter,
                    first_status,
                    created,
                    on_end=finish,
                    build_chunks=build_chunks,
                    on_error=stream_failed,
                )
            served: AsyncIterator[bytes] = events if wrap_events is None else wrap_events(events, request_id, created)
            response = ChatEventStream(served, on_end=finish, loop=asyncio.get_running_loop())
            for name, value in {**SSE_HEADERS, **CORS_HEADERS}.items():
                response[name] = value
            handed_to_stream = True
            return response
        status = await runtime.unless_stopping(waiter.wait_done(first_status), request_id)
        body = build_body(status)
        if record is not None:
            record.completion = body
            record.completed_at = time.time()
        return json_response(body if render is None else render(body))
    except OpenAIError as error:
        if record is not None:
            record.failed(error)
        return (on_error(error) if on_error is not None else error).to_response()
    finally:
        if not handed_to_stream:
            finish()


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """Serve one response, streamed or not (OpenAI's ``POST /v1/responses``, stateless; chat.responses).

    The body becomes a chat completions request (same screening rules, Horde path choice, payload, waiter, cancels and
    availability errors); the completion becomes a ``response`` object and the chunk stream OpenAI's typed Responses
    events. Every error's ``param`` names the Responses request's path.
    """
    if request.method != "POST":
        return method_not_allowed("POST")
    started = time.monotonic()
    body = request.body
    front_metrics().body_size.record(len(body))
    try:
        apikey = bearer_key(request)
        responses_request, chat_request, sources = read_responses_request(body)
    except OpenAIError as error:
        record_refusal(error)
        return error.to_response()

    def render(completion: dict[str, Any], request_id: str, created: int) -> dict[str, Any]:
        return build_response(responses_request, completion, request_id, created, int(time.time()))

    def wrap_events(events: AsyncIterator[bytes], request_id: str, created: int) -> AsyncIterator[bytes]:
        writer = ResponseEventWriter(responses_request, request_id, created, responses_request.model)
        return response_events(writer, events, sources, time.time)

    return await serve_chat(
        chat_request,
        apikey,
        started=started,
        render=render,
        wrap_events=wrap_events,
        on_error=lambda error: as_responses_error(error, sources),
    )
