"""``POST /v1/chat/completions``: read -> screen -> validate -> submit -> wait or stream -> respond.

The view is thin; each step lives in its module (screening, mapping, waiter, streaming, cancels). A request the front
abandons after submit (client disconnect, timeout, refusal) is cancelled at the Horde.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat import errors
from chat.errors import CORS_HEADERS, OpenAIError, json_response
from chat.horde_client import HordeRefusal, HordeUnreachable, SubmitResult
from chat.logs import RequestRecord, record_refusal
from chat.mapping import build_completion, build_native_payload, relays_deltas
from chat.metrics import STAGE_SUBMIT, front_metrics
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

    runtime = get_runtime()
    if runtime.stopping.is_set():
        return errors.front_shutting_down(None).to_response()  # stopping: nothing is submitted any more
    record = RequestRecord(chat_request, started=started)
    stream_progress = relays_deltas(chat_request) and runtime.has_redis
    record.relayed = stream_progress
    payload = build_native_payload(chat_request, stream_progress=stream_progress)
    created = int(time.time())
    record.submitted_at = time.time()
    try:
        submitted = await submit_shielded(runtime, payload, apikey)
    except HordeRefusal as refusal:
        refused: OpenAIError = await submit_refusal_error(runtime.horde, refusal, chat_request)
        record.failed(refused, stage=STAGE_SUBMIT)
        record.finish()
        return refused.to_response()
    except HordeUnreachable as exc:
        unavailable = errors.horde_unavailable(exc.detail, reached=exc.reached)
        record.failed(unavailable)
        record.finish()
        return unavailable.to_response()
    except asyncio.CancelledError:
        record.disconnected = True
        record.finish()
        raise
    submitted_at = time.time()
    record.request_id = submitted.id
    record.submitted_at = submitted_at

    settings = runtime.settings
    timeout = settings.stream_timeout_seconds if chat_request.is_stream else settings.nonstream_timeout_seconds
    waiter = ChatWaiter(runtime, submitted.id, apikey, timeout_seconds=timeout, request=chat_request)
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
            runtime.cancels.cancel_soon(submitted.id, apikey, submitted_at)
            if record.error is None:
                record.disconnected = True
        elif record.completion is None and record.error is None:
            status = waiter.last_status
            if status is not None and status.finished_generation is not None:
                record.completion = build_completion(chat_request, status, submitted.id, created)
        record.finish()

    handed_to_stream = False
    try:
        first_status = await runtime.unless_stopping(waiter.first_read(), submitted.id)
        if chat_request.is_stream:
            if stream_progress:
                events = relayed_stream(
                    chat_request, waiter, first_status, created, finish, runtime, on_error=record.stream_failed
                )
            else:
                events = buffered_stream(
                    chat_request, waiter, first_status, created, on_end=finish, on_error=record.stream_failed
                )
            response = ChatEventStream(events, on_end=finish, loop=asyncio.get_running_loop())
            for name, value in {**SSE_HEADERS, **CORS_HEADERS}.items():
                response[name] = value
            handed_to_stream = True
            return response
        status = await runtime.unless_stopping(waiter.wait_done(first_status), submitted.id)
        record.completion = build_completion(chat_request, status, submitted.id, created)
        record.completed_at = time.time()
        return json_response(record.completion)
    except OpenAIError as error:
        record.failed(error)
        return error.to_response()
    finally:
        if not handed_to_stream:
            finish()
