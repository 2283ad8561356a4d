"""``POST /v1/responses``: OpenAI's Responses API, read as a chat request and served on its path; ``GET`` and
``DELETE /v1/responses/{id}`` for the responses it stored.

The body is screened, then its ``previous_response_id`` and ``item_reference`` items are resolved from the stored
responses (chat.serving.stored_responses), then it becomes a chat completions request (chat.reading.responses: same
screening rules, Horde path choice, payload, waiter, cancels and availability errors); the completion becomes a
``response`` object and the chunk stream OpenAI's typed Responses events (chat.rendering.responses_events). A response
is stored unless ``store`` is false: a streamed one when it completes, before its terminal event goes out. Every
error's ``param`` names the Responses request's path.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Final

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.errors import OpenAIError, json_response, method_not_allowed
from chat.reading.api_key import bearer_key
from chat.reading.responses import as_responses_error, read_responses_body, screen_responses_body
from chat.rendering.responses_events import ResponseEventWriter, build_response, response_events
from chat.serving.request_record import record_refusal
from chat.serving.service import Answered, Refused, serve_chat
from chat.serving.stored_responses import STORED, resolve_stored_input, response_not_found, response_store
from chat.views.prelude import arrive, event_stream_response, with_progress

PUBLIC_ID_BYTES: Final[int] = 24
"""Random bytes of a response's own id (``resp_`` + 48 hex digits, the ids of its output items alike)."""


def public_response_id() -> str:
    """A new response's id without its ``resp_`` prefix: random, unrelated to the native request id the log lines and
    spans carry, since a stored response's id is the only key to it for the anonymous key (and so a capability).
    """
    return secrets.token_hex(PUBLIC_ID_BYTES)


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """Serve one response, streamed or not (OpenAI's ``POST /v1/responses``), and store it unless ``store`` is false."""
    arrival = arrive(request, screen_responses_body)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    body, apikey = arrival.request, arrival.apikey
    store = response_store()
    try:
        resolved, input_items, parent = await resolve_stored_input(store, body, apikey)
        if isinstance(body.get("previous_response_id"), str):
            resolved = {**resolved, "previous_response_id": body["previous_response_id"]}  # echoed on the response
        responses_request, chat_request, sources = read_responses_body(resolved)
    except OpenAIError as error:
        record_refusal(error, arrival.started, streamed=body.get("stream") is True)
        return error.to_response()

    async def keep(response: dict[str, Any]) -> None:
        if responses_request.store is not False:
            outcome = await store.save(apikey, response, input_items, parent)
            if outcome != STORED:  # the response says so: store false, and why in x_horde.store
                response["store"] = False
                response["x_horde"] = {**(response.get("x_horde") or {}), "store": outcome}

    outcome = await serve_chat(chat_request, apikey, started=arrival.started)
    if isinstance(outcome, Refused):
        return with_progress(as_responses_error(outcome.error, sources).to_response(), outcome.progress)
    if isinstance(outcome, Answered):
        response = build_response(
            responses_request, outcome.body, public_response_id(), outcome.created, int(time.time())
        )
        await keep(response)
        return with_progress(json_response(response), outcome.progress)
    writer = ResponseEventWriter(responses_request, public_response_id(), outcome.created, responses_request.model)
    events = response_events(writer, outcome.events, sources, time.time, on_complete=keep)
    return event_stream_response(events, outcome.finish, outcome.progress)


@csrf_exempt
async def stored_response(request: HttpRequest, response_id: str) -> HttpResponseBase:
    """``GET /v1/responses/{id}``: the stored response object; ``DELETE``: ``{"id", "object": "response",
    "deleted": true}``. Both 404 ``response_not_found`` for a response this API key did not store (or that expired).
    """
    if request.method not in {"GET", "DELETE"}:
        return method_not_allowed("GET, DELETE")
    store = response_store()
    try:
        apikey = bearer_key(request)
        if request.method == "GET":
            stored = await store.get(apikey, response_id)
            if stored is None:
                raise response_not_found(response_id)
            return json_response(stored.response)
        if not await store.delete(apikey, response_id):
            raise response_not_found(response_id)
    except OpenAIError as error:
        return error.to_response()
    return json_response({"id": response_id, "object": "response", "deleted": True})
