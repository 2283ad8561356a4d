"""``POST /v1/responses``: OpenAI's Responses API (stateless) over the chat completions path."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.errors import OpenAIError
from chat.metrics import front_metrics
from chat.reading.responses import as_responses_error, read_responses_request
from chat.rendering.responses_events import ResponseEventWriter, build_response, response_events
from chat.serving.request_record import record_refusal
from chat.views.chat_completions import bearer_key, method_not_allowed, serve_chat


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """Serve one response, streamed or not (OpenAI's ``POST /v1/responses``, stateless; chat.reading.responses).

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
