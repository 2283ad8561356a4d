"""``POST /v1/completions``: OpenAI's legacy completions, over the Horde's text generation API or the native chat route.

The raw ``prompt`` goes to ``POST /v2/generate/text/async`` unchanged, for a model the front reaches through the text
API (chat.serving.route_choice, ``HORDE_OAI_TEXT_API_FALLBACK``). A model no online worker serves, on a Horde without
the native chat routes, is 503 ``no_eligible_worker`` at once, as on chat completions. Any other model is served on
the native chat route with the prompt as one ``user`` message (chat.serving.service.serve_completion_on_chat), its
reply in the same ``text_completion`` shapes.

The body (chat.reading.completions) takes ``model``, ``prompt``, ``max_tokens`` (16 to 16384, at most 4096 on the AI
Horde's server; absent, the front's default of 512, where OpenAI's is 16), ``temperature``, ``top_p``, ``stop``,
``stream``, ``stream_options``, ``echo`` (only false) and ``n`` (only 1). The reply (chat.rendering.text_completion) is
OpenAI's ``text_completion``: ``id`` ``cmpl-<request id>``, one choice with ``text``, ``index``, ``logprobs`` (null) and
``finish_reason``, ``usage`` (estimated, as ``x_horde.estimated_usage`` says) and ``x_horde.api: "text"``. Streamed, it
is ``text_completion`` chunks: the whole text, then the finish chunk (``text: ""`` with ``finish_reason``), then, with
``stream_options.include_usage``, a chunk with ``choices: []`` and ``usage``, then ``data: [DONE]``. Waiting,
keepalives, cancels and availability errors are chat completions' own (chat.serving.service).
"""

from __future__ import annotations

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chat.reading.completions import read_completion_request
from chat.serving.service import serve_text_completion
from chat.views.prelude import arrive, outcome_response


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponseBase:
    """Serve one legacy completion, streamed or not (OpenAI's ``POST /v1/completions``), through the text API.

    The body's size is recorded and a refused body, model or prompt is counted like chat completions' refusals
    (chat.serving.request_record.record_refusal); the finished-request line and its metrics are chat requests' only.
    """
    arrival = arrive(request, read_completion_request)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    return outcome_response(await serve_text_completion(arrival.request, arrival.apikey, started=arrival.started))
