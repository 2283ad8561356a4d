"""The one path every API shares: submit a validated request, wait or stream, and return the outcome.

The service never builds an HTTP response. :func:`serve_chat` (chat completions and the Responses API, on the native
chat route or the text generation API) and :func:`serve_text_completion` (legacy completions: the text API, else the
native chat route) return an :data:`Outcome`:

- :class:`Answered`: the finished request's body (a ``chat.completion``, or a ``text_completion``);
- :class:`Streaming`: the request's event stream (chat chunk frames, or ``text_completion`` chunk frames), with the
  callback that ends the request once (cancel unless terminal, log and count), which the HTTP response runs when it
  closes;
- :class:`Refused`: the error to answer before any header (chat.errors.OpenAIError).

Each view (chat.views) maps the outcome to HTTP with its own renderers, so a wire format never bends this path. A
request left before it is terminal (refusal, timeout, client disconnect, the process stopping) is cancelled at the
Horde (chat.horde.cancels).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from chat import errors
from chat.errors import OpenAIError
from chat.horde import refusals
from chat.horde.budget import outliving_request
from chat.horde.cancels import CancelQueue
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus, SubmitResult
from chat.horde.native_payload import build_native_payload, relays_deltas
from chat.horde.ports import HordeApi, WaitedRequest
from chat.horde.text import PreparedTextRequest, TextRoutes, check_max_kudos
from chat.horde.worker_limits import directory_for
from chat.metrics import STAGE_SUBMIT
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.legacy_completion import CompletionRequest
from chat.reading.screening import validate_chat_request
from chat.rendering.completion import build_completion
from chat.rendering.progress import QueueProgress
from chat.rendering.text_completion import (
    build_text_completion,
    text_completion_chunks,
    text_completion_of_chat,
    text_events_of_chat,
)
from chat.serving import route_choice, text_limits, text_route
from chat.serving.request_record import RequestRecord, record_refusal, record_refused_duration
from chat.serving.runtime import FrontRuntime, get_runtime
from chat.streaming.buffered import buffered_stream
from chat.streaming.relayed import relayed_stream
from chat.waiting.availability import submit_refusal_error
from chat.waiting.waiter import ChatWaiter


@dataclass(frozen=True)
class Answered:
    """A request answered whole: ``body`` is what the finished status became (chat.rendering)."""

    body: dict[str, Any]
    request_id: str
    created: int
    progress: QueueProgress | None = None
    """The place the last read before a worker took it reported (the ``x-horde-*`` headers), None without a read."""


@dataclass(frozen=True)
class Streaming:
    """A streamed request whose headers may go out: ``events`` are its SSE frames; ``finish`` ends it, once."""

    events: AsyncIterator[bytes]
    request_id: str
    created: int
    finish: Callable[[], None]
    progress: QueueProgress | None = None
    """The place the first read reported (the ``x-horde-*`` headers)."""


@dataclass(frozen=True)
class Refused:
    """A request answered with an error before any header."""

    error: OpenAIError
    progress: QueueProgress | None = None
    """For a request refused after it waited (a timeout), the place its last read before a worker took it reported."""


Outcome = Answered | Streaming | Refused
"""What the service returns for one request; never an HTTP response."""


@dataclass(frozen=True)
class Submitted:
    """A request the Horde accepted, and how its reply is built: the parameter object of :func:`wait_for_outcome`.

    ``request`` is the validated request (``is_stream``, and what chat.waiting.waiter.ChatWaiter reads); ``horde``
    and ``cancels`` are the routes it was submitted to; ``build_body`` makes the body of the finished status and
    ``build_chunks`` the chunks of a buffered stream (by default the chat chunks); ``relay`` streams the Redis deltas
    instead (chat.streaming.relayed); ``record`` (chat.serving.request_record), when given, gets the waiter, the
    outcome and the delivered body, and is logged and counted when the request ends.
    """

    request: WaitedRequest
    request_id: str
    apikey: str | None
    horde: HordeApi
    cancels: CancelQueue
    created: int
    build_body: Callable[[NativeStatus], dict[str, Any]]
    build_chunks: Callable[[NativeStatus], list[dict[str, Any]]] | None = None
    relay: bool = False
    record: RequestRecord | None = None


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
    task = asyncio.ensure_future(outliving_request(routes.submit(payload, apikey)))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        submitted_at = time.time()
        if isinstance(routes, TextRoutes):
            routes.abandon()  # a refusal is not submitted again for a client that left

        def cancel_created(done: asyncio.Future[SubmitResult]) -> None:
            if not done.cancelled() and done.exception() is None:
                queue.cancel_soon(done.result().id, apikey, submitted_at)

        task.add_done_callback(cancel_created)
        raise


def _text_routes(runtime: FrontRuntime, prepared: PreparedTextRequest) -> TextRoutes:
    """The text API routes of one prepared request: the worker list for liveness, and a submit refused where
    ``allow_downgrade`` would have served it is submitted again
    (chat.serving.text_limits.resubmit_after_downgrade_refusal).
    """
    return TextRoutes(
        runtime.text_horde,
        prepared,
        directory_for(runtime.text_horde),
        resubmit=functools.partial(text_limits.resubmit_after_downgrade_refusal, runtime.text_horde),
        cancels=runtime.text_cancels,
    )


def _shutting_down(started: float, *, streamed: bool) -> Refused:
    """503 ``FrontShuttingDown`` for a request that arrived while the process stops (nothing submitted), timed on
    ``horde.oai.request.duration`` as ``front_shutdown`` (chat.serving.request_record.record_refused_duration).
    """
    error = errors.front_shutting_down(None)
    record_refused_duration(error.status, error.code or "", started, streamed=streamed)
    return Refused(error)


def _refused(error: OpenAIError, record: RequestRecord, *, stage: str = "") -> Refused:
    """A chat request refused before it was submitted (or at submit): recorded, logged and counted now."""
    record.failed(error, stage=stage)
    record.finish()
    return Refused(error)


async def serve_chat(chat_request: ChatCompletionRequest, apikey: str | None, *, started: float) -> Outcome:
    """Submit a validated chat request, wait or stream: the one path chat completions and Responses share.

    The Horde path is the native chat route, or the text generation API when every requested model has text workers
    but no chat worker (chat.serving.text_route, ``HORDE_OAI_TEXT_API_FALLBACK``); on a Horde without chat routes, a
    request no online worker serves is refused at once, and a native submit answered 404 beside a live heartbeat is
    chosen again (chat.serving.route_choice). Every request is logged and counted
    (chat.serving.request_record.RequestRecord) from ``started`` (``time.monotonic()`` when the view began), whatever
    its wire format and Horde path; the record keeps the chat completions error, before a view rewrites it.
    """
    runtime = get_runtime()
    if runtime.stopping.is_set():
        return _shutting_down(started, streamed=chat_request.is_stream)  # stopping: nothing is submitted any more
    record = RequestRecord(chat_request, started=started)
    horde: HordeApi = runtime.horde
    cancels = runtime.cancels
    try:
        on_text_route = await route_choice.find_route(
            runtime, chat_request.requested_models, listed=chat_request.models is not None
        )
    except OpenAIError as error:  # no online worker serves the model on a Horde without chat routes
        return _refused(error, record, stage=STAGE_SUBMIT)
    if on_text_route:
        # The model has text workers but no chat worker: the text generation API (chat.serving.text_route).
        try:
            bounds = await text_limits.chat_text_bounds(runtime.text_horde, chat_request, apikey)
            prepared = text_route.prepare_chat_request(
                chat_request, bounds, repair_attempts=runtime.settings.text_repair_attempts
            )
            kudos_estimate = 0.0
            if prepared.max_kudos is not None:
                kudos_estimate = await check_max_kudos(runtime.text_horde, prepared.payload, apikey, prepared.max_kudos)
        except OpenAIError as error:
            return _refused(error, record)
        except HordeUnreachable as exc:
            return _refused(exc.to_error(), record)
        horde = _text_routes(runtime, prepared)
        horde.kudos_estimate = kudos_estimate
        cancels = runtime.text_cancels
        stream_progress = False
        payload = prepared.payload
    else:
        stream_progress = relays_deltas(chat_request) and runtime.has_redis
        payload = build_native_payload(chat_request, stream_progress=stream_progress)
    created = int(time.time())
    record.submitted_at = time.time()
    try:
        submitted = await submit_shielded(runtime, payload, apikey, horde=horde, cancels=cancels)
    except HordeRefusal as refusal:
        refused: OpenAIError = (
            refusals.error_from_refusal(refusal, request=chat_request)
            if on_text_route
            else await submit_refusal_error(runtime.horde, refusal, chat_request)
        )
        return _refused(refused, record, stage=STAGE_SUBMIT)
    except HordeUnreachable as exc:
        failure = exc.to_error() if on_text_route else await route_choice.native_route_failure(runtime, exc)
        if failure is None:  # the Horde has no chat routes (remembered): choose the path again
            return await serve_chat(chat_request, apikey, started=started)
        return _refused(failure, record)
    except asyncio.CancelledError:
        record.disconnected = True
        record.finish()
        raise
    record.request_id = submitted.id

    def completion_of(status: NativeStatus) -> dict[str, Any]:
        return build_completion(chat_request, status, submitted.id, created)

    return await wait_for_outcome(
        runtime,
        Submitted(
            request=chat_request,
            request_id=submitted.id,
            apikey=apikey,
            horde=horde,
            cancels=cancels,
            created=created,
            build_body=completion_of,
            relay=stream_progress,
            record=record,
        ),
    )


async def serve_text_completion(legacy: CompletionRequest, apikey: str | None, *, started: float) -> Outcome:
    """Submit a validated legacy completion to the text API, wait or stream (``POST /v1/completions``).

    A model no online worker serves on a Horde without chat routes is 503 ``no_eligible_worker``
    (chat.serving.route_choice); any other model without a text API path is served on the native chat route, the
    prompt as one user message (:func:`serve_completion_on_chat`); those refusals and a prompt that cannot be sent are
    counted like chat completions' refusals (chat.serving.request_record.record_refusal, timed from ``started``); the
    finished-request line and its metrics are chat requests' only.
    """
    runtime = get_runtime()
    if runtime.stopping.is_set():
        return _shutting_down(started, streamed=legacy.is_stream)  # stopping: nothing is submitted any more
    try:
        on_text_route = await route_choice.find_route(runtime, legacy.requested_models)
    except OpenAIError as error:
        record_refusal(error, started, streamed=legacy.is_stream)
        return Refused(error)
    if not on_text_route:
        return await serve_completion_on_chat(legacy, apikey, started=started)
    try:
        bounds = await text_limits.completion_text_bounds(runtime.text_horde, legacy, apikey)
        prepared = text_route.prepare_completion_request(legacy, bounds)
    except OpenAIError as error:
        record_refusal(error, started, streamed=legacy.is_stream)
        return Refused(error)
    routes = _text_routes(runtime, prepared)
    created = int(time.time())
    try:
        submitted = await submit_shielded(runtime, prepared.payload, apikey, horde=routes, cancels=runtime.text_cancels)
    except HordeRefusal as refusal:
        return Refused(refusals.error_from_refusal(refusal))
    except HordeUnreachable as exc:
        return Refused(exc.to_error())

    def body(status: NativeStatus) -> dict[str, Any]:
        # routes.prepared: the request as last submitted (a refusal may have lowered its limit)
        return build_text_completion(legacy, routes.prepared, status, submitted.id, created)

    def chunks(status: NativeStatus) -> list[dict[str, Any]]:
        return text_completion_chunks(body(status), include_usage=legacy.include_usage)

    return await wait_for_outcome(
        runtime,
        Submitted(
            request=legacy,
            request_id=submitted.id,
            apikey=apikey,
            horde=routes,
            cancels=runtime.text_cancels,
            created=created,
            build_body=body,
            build_chunks=chunks,
        ),
    )


async def serve_completion_on_chat(legacy: CompletionRequest, apikey: str | None, *, started: float) -> Outcome:
    """A legacy completion of a model without a text API path, on the native chat route: the prompt as one ``user``
    message (``max_tokens``, ``temperature``, ``top_p``, ``stop``, ``stream`` and ``stream_options`` kept), served by
    :func:`serve_chat` (logged and counted as a chat request), its reply in the ``text_completion`` shapes
    (chat.rendering.text_completion.text_completion_of_chat, text_events_of_chat). ``started`` is
    ``time.monotonic()`` when the view began.
    """
    body: dict[str, Any] = {"model": legacy.model, "messages": [{"role": "user", "content": legacy.prompt_text}]}
    for key in ("max_tokens", "temperature", "top_p", "stop", "stream"):
        value = getattr(legacy, key)
        if value is not None:
            body[key] = value
    if legacy.stream_options is not None:
        body["stream_options"] = legacy.stream_options.model_dump(exclude_none=True)
    try:
        chat_request = validate_chat_request(body)
    except OpenAIError as error:
        record_refusal(error, started, streamed=legacy.is_stream)
        return Refused(error)
    outcome = await serve_chat(chat_request, apikey, started=started)
    if isinstance(outcome, Answered):
        return Answered(text_completion_of_chat(outcome.body, outcome.request_id), outcome.request_id, outcome.created)
    if isinstance(outcome, Streaming):
        events = text_events_of_chat(outcome.events, outcome.request_id)
        return Streaming(events, outcome.request_id, outcome.created, outcome.finish)
    return outcome


async def wait_for_outcome(runtime: FrontRuntime, submitted: Submitted) -> Outcome:
    """Wait for a submitted request: its body (:class:`Answered`), its event stream (:class:`Streaming`: the relayed
    stream when ``submitted.relay``, else the buffered stream of ``build_chunks``), or the error (:class:`Refused`).

    A request left before it is terminal (refusal, timeout, client disconnect, the process stopping) is cancelled at
    the routes it was submitted to. Every outcome but :class:`Streaming` has ended the request when it is returned;
    a stream ends it through its ``finish``, which its HTTP response runs.
    """
    request = submitted.request
    request_id = submitted.request_id
    record = submitted.record
    submitted_at = time.time()
    settings = runtime.settings
    timeout = settings.stream_timeout_seconds if request.is_stream else settings.nonstream_timeout_seconds
    waiter = ChatWaiter(
        runtime, request_id, submitted.apikey, timeout_seconds=timeout, request=request, horde=submitted.horde
    )
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
        if record is not None and isinstance(submitted.horde, TextRoutes):
            record.prompted_output = submitted.horde.prepared.x_horde.get("prompted_output")
            record.repair_attempts = submitted.horde.repairs
        if not waiter.terminal:
            # a text request asked again (a repair) is now answered by the repair's request
            routes = submitted.horde
            current_id = routes.current_id(request_id) if isinstance(routes, TextRoutes) else request_id
            submitted.cancels.cancel_soon(current_id, submitted.apikey, submitted_at)
            if record is not None and record.error is None:
                record.disconnected = True
        elif record is not None and record.completion is None and record.error is None:
            status = waiter.last_status
            if status is not None and status.finished_generation is not None:
                record.completion = submitted.build_body(status)
        if record is not None:
            record.finish()

    handed_to_stream = False
    try:
        first_status = await runtime.unless_stopping(waiter.first_read(), request_id)
        if request.is_stream:
            events: AsyncIterator[bytes]
            stream_failed = record.stream_failed if record is not None else None
            content_sent = record.content_sent if record is not None else None
            if submitted.relay and isinstance(request, ChatCompletionRequest):
                events = relayed_stream(
                    request,
                    waiter,
                    first_status,
                    submitted.created,
                    finish,
                    runtime,
                    on_error=stream_failed,
                    on_content=content_sent,
                )
            else:
                events = buffered_stream(
                    request,
                    waiter,
                    first_status,
                    submitted.created,
                    on_end=finish,
                    build_chunks=submitted.build_chunks,
                    on_error=stream_failed,
                    on_content=content_sent,
                )
            handed_to_stream = True
            return Streaming(events, request_id, submitted.created, finish, progress=waiter.progress)
        status = await runtime.unless_stopping(waiter.wait_done(first_status), request_id)
        body = submitted.build_body(status)
        if record is not None:
            record.completion = body
            record.completed_at = time.time()
        return Answered(body, request_id, submitted.created, progress=waiter.queued_progress)
    except OpenAIError as error:
        if record is not None:
            record.failed(error)
        return Refused(error, progress=waiter.queued_progress)
    finally:
        if not handed_to_stream:
            finish()
