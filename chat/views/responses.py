"""``POST /v1/responses``: OpenAI's Responses API (stateless), read as a chat request and served on its path.

The body becomes a chat completions request (chat.reading.responses: same screening rules, Horde path choice,
payload, waiter, cancels and availability errors); the completion becomes a ``response`` object and the chunk
stream OpenAI's typed Responses events (chat.rendering.responses_events). Every error's ``param`` names the Responses
request's path.
"""

from __future__ import annotations

import time

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.errors import json_response
from chat.reading.responses import as_responses_error, read_responses_request
from chat.rendering.responses_events import ResponseEventWriter, build_response, response_events
from chat.serving.service import Answered, Refused, serve_chat
from chat.views.prelude import arrive, event_stream_response, with_progress


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """Serve one response, streamed or not (OpenAI's ``POST /v1/responses``, stateless)."""
    arrival = arrive(request, read_responses_request)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    responses_request, chat_request, sources = arrival.request
    outcome = await serve_chat(chat_request, arrival.apikey, started=arrival.started)
    if isinstance(outcome, Refused):
        return with_progress(as_responses_error(outcome.error, sources).to_response(), outcome.progress)
    if isinstance(outcome, Answered):
        return with_progress(
            json_response(
                build_response(responses_request, outcome.body, outcome.request_id, outcome.created, int(time.time()))
            ),
            outcome.progress,
        )
    writer = ResponseEventWriter(responses_request, outcome.request_id, outcome.created, responses_request.model)
    return event_stream_response(
        response_events(writer, outcome.events, sources, time.time), outcome.finish, outcome.progress
    )
