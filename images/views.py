"""``POST /v1/images/generations``: read (images.reading), serve (images.service), answer in OpenAI's shapes."""

from __future__ import annotations

import asyncio

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.errors import OpenAIError, json_response
from chat.metrics import CLIENT_DISCONNECTED
from chat.serving.runtime import get_runtime
from chat.views.prelude import arrive
from images.reading import ImagePlan, read_image_request
from images.service import ImageOutcome, ImageService, image_runtime, record_image_request


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
