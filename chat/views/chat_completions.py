"""``POST /v1/chat/completions``: read (chat.reading.screening), serve (chat.serving.service), answer.

The outcome becomes HTTP here: the completion as JSON, the chunk stream as SSE, a refusal as OpenAI's JSON error with
its status, ``Retry-After`` and ``x-should-retry`` (reference: No eligible worker, Stream errors).
"""

from __future__ import annotations

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.reading.screening import read_chat_request
from chat.serving.service import serve_chat
from chat.views.prelude import arrive, outcome_response


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    """Serve one chat completion, streamed or not (OpenAI's ``POST /v1/chat/completions``).

    Every refusal before the stream's headers is OpenAI's JSON error; a request abandoned after submit (refusal,
    timeout, client disconnect, the process stopping) is cancelled at the Horde. When the process stops
    (chat.serving.runtime), a request not yet answered gets 503 ``FrontShuttingDown`` with ``Retry-After``.
    """
    arrival = arrive(request, read_chat_request)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    return outcome_response(await serve_chat(arrival.request, arrival.apikey, started=arrival.started))
