"""``POST /v1/chat/completions``: read -> screen -> validate -> submit -> wait or stream -> respond.

The view is thin; each step lives in its module (screening, mapping, waiter, streaming, cancels). A request the front
abandons after submit (client disconnect, timeout, refusal) is cancelled at the Horde.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat import errors, refusals, text_api
from chat.cancels import CancelQueue
from chat.errors import CORS_HEADERS, OpenAIError, json_response
from chat.horde_client import HordeRefusal, HordeUnreachable, NativeStatus, SubmitResult
from chat.mapping import build_completion, build_native_payload, relays_deltas
from chat.relayed_stream import relayed_stream
from chat.runtime import FrontRuntime, get_runtime
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


async def submit_shielded(
    runtime: FrontRuntime,
    payload: dict[str, Any],
    apikey: str | None,
    *,
    horde: Any = None,
    cancels: CancelQueue | None = None,
) -> SubmitResult:
    """Submit, so that a client disconnecting meanwhile still gets the request cancelled once the Horde answers.

    The submit runs as its own task; when the view is cancelled while it runs, the request it creates is handed to
    the cancel queue (reference: Cancel outcomes). ``horde`` and ``cancels`` default to the native route's
    (``runtime.horde``, ``runtime.cancels``); the text API path passes its own. Raises what ``horde.submit`` raises.
    """
    routes = runtime.horde if horde is None else horde
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

    runtime = get_runtime()
    if runtime.stopping.is_set():
        return errors.front_shutting_down(None).to_response()  # stopping: nothing is submitted any more
    horde: Any = runtime.horde
    cancels = runtime.cancels
    text_route = await text_api.find_text_route(runtime, chat_request.requested_models)
    if text_route:
        # The model has text workers but no chat worker: the text generation API (chat.text_api).
        try:
            prepared = text_api.prepare_chat_request(chat_request)
            max_kudos = chat_request.horde.max_kudos if chat_request.horde is not None else None
            if max_kudos is not None:
                await text_api.check_max_kudos(runtime.text_horde, prepared.payload, apikey, max_kudos)
        except OpenAIError as error:
            return error.to_response()
        except HordeUnreachable as exc:
            return errors.horde_unavailable(exc.detail, reached=exc.reached).to_response()
        horde = text_api.TextRoutes(runtime.text_horde, prepared)
        cancels = runtime.text_cancels
        stream_progress = False
        payload = prepared.payload
    else:
        stream_progress = relays_deltas(chat_request) and runtime.has_redis
        payload = build_native_payload(chat_request, stream_progress=stream_progress)
    created = int(time.time())
    try:
        submitted = await submit_shielded(runtime, payload, apikey, horde=horde, cancels=cancels)
    except HordeRefusal as refusal:
        if text_route:
            return refusals.error_from_refusal(refusal, request=chat_request).to_response()
        return (await submit_refusal_error(runtime.horde, refusal, chat_request)).to_response()
    except HordeUnreachable as exc:
        return errors.horde_unavailable(exc.detail, reached=exc.reached).to_response()
    return await wait_and_respond(
        runtime,
        chat_request,
        submitted.id,
        apikey,
        horde=horde,
        cancels=cancels,
        created=created,
        build_body=lambda status: build_completion(chat_request, status, submitted.id, created),
        relay=stream_progress,
    )


async def wait_and_respond(
    runtime: FrontRuntime,
    request: Any,
    request_id: str,
    apikey: str | None,
    *,
    horde: Any,
    cancels: CancelQueue,
    created: int,
    build_body: Callable[[NativeStatus], dict[str, Any]],
    build_chunks: Callable[[NativeStatus], list[dict[str, Any]]] | None = None,
    relay: bool = False,
) -> HttpResponseBase:
    """Wait for a submitted request and answer it: the body ``build_body`` makes from the finished status, or an
    event stream (the relayed stream when ``relay``, else the buffered stream of ``build_chunks``, by default the
    chat chunks). Shared by chat completions on both Horde paths and the legacy completions route.

    ``request`` is the validated request (``is_stream``, and what chat.waiter.ChatWaiter reads); ``horde`` and
    ``cancels`` are the routes the request was submitted to. A request left before it is terminal (refusal,
    timeout, client disconnect, the process stopping) is cancelled there.
    """
    submitted_at = time.time()
    settings = runtime.settings
    timeout = settings.stream_timeout_seconds if request.is_stream else settings.nonstream_timeout_seconds
    waiter = ChatWaiter(runtime, request_id, apikey, timeout_seconds=timeout, request=request, horde=horde)

    finished = False

    def finish() -> None:
        """Once: stop listening for signals and cancel the native request unless it is terminal."""
        nonlocal finished
        if finished:
            return
        finished = True
        waiter.close()
        if not waiter.terminal:
            cancels.cancel_soon(request_id, apikey, submitted_at)

    handed_to_stream = False
    try:
        first_status = await runtime.unless_stopping(waiter.first_read(), request_id)
        if request.is_stream:
            if relay:
                events = relayed_stream(request, waiter, first_status, created, finish, runtime)
            else:
                events = buffered_stream(
                    request, waiter, first_status, created, on_end=finish, build_chunks=build_chunks
                )
            response = ChatEventStream(events, on_end=finish, loop=asyncio.get_running_loop())
            for name, value in {**SSE_HEADERS, **CORS_HEADERS}.items():
                response[name] = value
            handed_to_stream = True
            return response
        status = await runtime.unless_stopping(waiter.wait_done(first_status), request_id)
        return json_response(build_body(status))
    except OpenAIError as error:
        return error.to_response()
    finally:
        if not handed_to_stream:
            finish()
