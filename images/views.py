"""``POST /v1/images/generations``: read (images.reading), serve (images.service), answer in OpenAI's shapes."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.errors import OpenAIError, json_response
from chat.metrics import CLIENT_DISCONNECTED
from chat.serving.runtime import get_runtime
from chat.views.prelude import arrive, event_stream_response
from images.reading import ImagePlan, read_image_request
from images.service import ImageOutcome, ImageService, image_events, image_runtime, record_image_request


@csrf_exempt
async def image_generations(request: HttpRequest) -> HttpResponseBase:
    """Serve one image request (OpenAI's ``POST /v1/images/generations``), never streamed yet.

    A refusal is OpenAI's JSON error with the failure catalogue's status and retry headers; a request abandoned after
    its submit (a refusal, the timeout, the client leaving, the process stopping) is cancelled at the Horde.
    """
    runtime = get_runtime()
    arrival = arrive(request, lambda raw: read_image_request(raw, runtime.settings.image_model_aliases))
    if isinstance(arrival, HttpResponseBase):
        return arrival
    plan: ImagePlan = arrival.request
    outcome = ImageOutcome()
    service = ImageService(runtime, image_runtime(runtime))
    if plan.stream:
        return streamed(plan, service.generate(plan, arrival.apikey, outcome), outcome, arrival.started)
    try:
        body = await runtime.unless_stopping(service.generate(plan, arrival.apikey, outcome), None)
    except OpenAIError as error:
        outcome.status, outcome.code = error.status, error.code or ""
        record_image_request(plan, outcome, arrival.started)
        return error.to_response()
    except asyncio.CancelledError:
        outcome.status, outcome.code = 499, CLIENT_DISCONNECTED
        record_image_request(plan, outcome, arrival.started)
        raise
    record_image_request(plan, outcome, arrival.started)
    return json_response(body)


def streamed(
    plan: ImagePlan, generation: Coroutine[Any, Any, dict[str, Any]], outcome: ImageOutcome, started: float
) -> HttpResponseBase:
    """``stream: true``: the image events (images.service.image_events) as server-sent events; the request is
    recorded when the stream ends, and cancelled at the Horde when the client leaves first.
    """
    runtime = get_runtime()
    task = asyncio.ensure_future(runtime.unless_stopping(generation, None))
    recorded = False

    def record(error: OpenAIError | None) -> None:
        nonlocal recorded
        if recorded:
            return
        recorded = True
        if error is not None:
            outcome.status, outcome.code = error.status, error.code or ""
        record_image_request(plan, outcome, started)

    def finish() -> None:
        if not task.done():
            task.cancel()
            outcome.status, outcome.code = 499, CLIENT_DISCONNECTED
            record(None)

    events = image_events(task, plan, runtime.settings.keepalive_seconds, record, lambda: outcome.progress)
    return event_stream_response(events, finish)
