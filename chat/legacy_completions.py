"""``POST /v1/completions``: OpenAI's legacy completions, over the Horde's text generation API.

The raw ``prompt`` goes to ``POST /v2/generate/text/async`` unchanged, for a model the front reaches through the text
API (chat.text_api's detection, ``HORDE_OAI_TEXT_API_FALLBACK``). For any other model the answer is 404
``model_not_found`` at ``model`` with a message that names ``POST /v1/chat/completions``: the native chat route
takes messages, not a raw prompt.

The body takes ``model``, ``prompt`` (a string, or a list of one string), ``max_tokens`` (16 to 16384; absent, the
front's default of 512, where OpenAI's is 16), ``temperature``, ``top_p``, ``stop``, ``stream``, ``stream_options``,
``echo`` (only false) and ``n`` (only 1); any other key is refused like an unknown key (400
``UnsupportedChatParameter``, ``Unrecognized request argument supplied: <key>``). The reply is OpenAI's
``text_completion``: ``id`` ``cmpl-<request id>``, one choice with ``text``, ``index``, ``logprobs`` (null) and
``finish_reason``, ``usage`` (estimated, as ``x_horde.estimated_usage`` says) and ``x_horde.api: "text"``. Streamed,
it is ``text_completion`` chunks: the whole text, then the finish chunk (``text: ""`` with ``finish_reason``), then,
with ``stream_options.include_usage``, a chunk with ``choices: []`` and ``usage``, then ``data: [DONE]``. Waiting,
keepalives, cancels and availability errors are chat completions' own (chat.views.wait_and_respond).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Final, Literal

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
)
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from chat import errors, refusals, text_api, text_limits, worker_limits
from chat.errors import OpenAIError
from chat.horde_client import HordeRefusal, HordeUnreachable, NativeStatus
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.logs import record_refusal
from chat.mapping import build_system_fingerprint, estimate_tokens, reply_text
from chat.metrics import front_metrics
from chat.response_schema import HordeExtras, Usage
from chat.runtime import get_runtime
from chat.schema import Stop, StreamOptions
from chat.screening import openai_error_from_validation, parse_json_body, show_value, unsupported_chat_parameter
from chat.views import bearer_key, method_not_allowed, submit_shielded, wait_and_respond

NO_TEXT_ROUTE_MESSAGE: Final[str] = (
    "The model `{model}` is not served through the Horde's text generation API here, and POST /v1/completions takes "
    "a raw prompt only there. Send the conversation to POST /v1/chat/completions instead."
)
"""The 404 message for a model without a text API path (``{model}`` is the requested id)."""

PROMPT_SHAPE_MESSAGE: Final[str] = (
    "Invalid 'prompt': the AI Horde serves one text prompt per request, a string or an array of one string "
    "(token arrays and batches are not served)."
)
"""The 400 ``BadRequest`` message at ``prompt`` for any other shape."""

ONLY_DEFAULT_KEYS: Final[dict[str, object]] = {"echo": False, "n": 1}
"""Keys accepted only at their default (or null); any other value is 400 ``UnsupportedChatParameter`` at the key."""


class CompletionRequest(BaseModel):
    """The body of ``POST /v1/completions`` (OpenAI's legacy completions, text API models only)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    model: Annotated[str, StringConstraints(min_length=1)]
    """A model served through the Horde's text generation API (``x_horde.api: "text"`` in ``GET /v1/models``)."""

    prompt: (
        Annotated[str, StringConstraints(min_length=1)]
        | Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1, max_length=1)]
    )
    """The prompt, sent to the text API unchanged: a string, or a list of one string (token arrays and batches are
    not served)."""

    max_tokens: int | None = Field(default=None, ge=MIN_CHAT_MAX_TOKENS, le=MAX_CHAT_MAX_TOKENS)
    """The completion limit in tokens, 16 to 16384; absent, 512 (OpenAI's default is 16)."""

    temperature: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["temperature"][0], le=OPENAI_SAMPLING_RANGES["temperature"][1]
    )
    """Sampling temperature, 0 to 2."""

    top_p: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["top_p"][0], le=OPENAI_SAMPLING_RANGES["top_p"][1]
    )
    """Nucleus sampling, 0 to 1 (0 is sent as the text API's smallest, 0.001)."""

    stop: Stop | None = None
    """One stop sequence, or an array of up to 4; the reply is cut at the first one found."""

    stream: bool | None = None
    """Stream the reply as ``text_completion`` chunks."""

    stream_options: StreamOptions | None = None
    """``include_usage`` adds a last chunk with ``choices: []`` and ``usage``."""

    echo: Literal[False] | None = None
    """Only false: the prompt is not repeated in the reply."""

    n: Literal[1] | None = None
    """Only 1."""

    @property
    def prompt_text(self) -> str:
        """The prompt as one string."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def requested_models(self) -> list[str]:
        """``[model]`` (the waiter's gap messages read it)."""
        return [self.model]

    @property
    def models(self) -> None:
        """Always None: one model per request."""
        return None

    @property
    def availability_mode(self) -> str:
        """Always ``wait``."""
        return "wait"

    @property
    def is_stream(self) -> bool:
        """Whether the client asked for a streamed reply."""
        return bool(self.stream)

    @property
    def include_usage(self) -> bool:
        """Whether a streamed reply ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


class TextCompletionChoice(BaseModel):
    """The one choice of a ``text_completion``."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    text: str
    """The generated text (in a stream: the whole text in one chunk, then ``""`` in the finish chunk)."""

    index: int
    """Always 0."""

    logprobs: None
    """Always null."""

    finish_reason: Literal["stop", "length"] | None
    """``stop`` when a stop sequence ended the reply or its estimated tokens are under ``max_tokens``, else
    ``length``; null in a stream's text chunk."""


class TextCompletion(BaseModel):
    """OpenAI's ``text_completion`` object, the body of ``POST /v1/completions`` and, with ``stream: true``, each
    event's chunk (a chunk has no ``usage``, except the last one with ``stream_options.include_usage``, whose
    ``choices`` is empty).
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str
    """``cmpl-`` followed by the Horde's request id."""

    object: Literal["text_completion"]
    """Always ``text_completion``."""

    created: int
    """Unix seconds when the front received the request."""

    model: str
    """The model that served the reply."""

    system_fingerprint: str | None
    """``fp_`` and 10 hex digits of the serving worker and model; null without a worker id."""

    choices: list[TextCompletionChoice]
    """One choice (none in the usage chunk)."""

    usage: Usage | None = None
    """Estimated token counts (about 4 characters per token): the text API reports none."""

    x_horde: HordeExtras | None = None
    """``api: "text"`` and ``estimated_usage: true``."""


def read_completion_request(raw: bytes) -> CompletionRequest:
    """Parse, screen and validate a body.

    Raises:
        OpenAIError: 400 ``BadRequest`` for a body that is not a JSON object; 400 ``UnsupportedChatParameter`` for
            an unknown key or ``echo`` / ``n`` at a value other than their default; the first validation failure
            in OpenAI's words otherwise.
    """
    body = parse_json_body(raw)
    for key in body:
        if key not in CompletionRequest.model_fields:
            raise unsupported_chat_parameter(key, f"Unrecognized request argument supplied: {key}")
    for key, default in ONLY_DEFAULT_KEYS.items():
        value = body.get(key)
        if value is not None and (value != default or isinstance(value, bool) != isinstance(default, bool)):
            raise unsupported_chat_parameter(
                key,
                f"Unsupported value: '{key}' does not support {show_value(value)} on the AI Horde. "
                f"Only the default ({show_value(default)}) value is supported.",
            )
    prompt = body.get("prompt")
    if prompt is not None and not (
        isinstance(prompt, str) or (isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str))
    ):
        raise OpenAIError(status=400, message=PROMPT_SHAPE_MESSAGE, code=errors.BAD_REQUEST, param="prompt")
    try:
        return CompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise openai_error_from_validation(exc.errors(include_url=False)[0], body) from None


def prepare_completion_request(
    request: CompletionRequest, bounds: text_limits.TextBounds | None = None
) -> text_api.PreparedTextRequest:
    """The text API request of a legacy completion: the prompt unchanged, the client's stops, ``max_length`` from
    ``max_tokens`` (default 512; ``bounds.max_length`` when given, chat.text_limits, whose adjustments the statuses
    carry) and no context length (the text API's default applies).
    """
    max_length = request.max_tokens if request.max_tokens is not None else DEFAULT_CHAT_MAX_TOKENS
    if bounds is not None:
        max_length = bounds.max_length
    stops = text_api.merged_stops(request.stop, ())
    payload = text_api.text_payload(
        request.prompt_text,
        [request.model],
        max_length=max_length,
        max_context_length=None,
        stop_sequences=stops,
        temperature=request.temperature,
        top_p=request.top_p,
        horde_options={},
    )
    return text_api.PreparedTextRequest(
        payload=payload,
        stop_sequences=stops,
        max_length=max_length,
        estimated_prompt_tokens=estimate_tokens(request.prompt_text),
        strip_leading_whitespace=False,
        x_horde={"api": text_api.TEXT_API},
        context_adjustments=bounds.adjustments if bounds is not None else (),
    )


def build_text_completion(
    request: CompletionRequest,
    prepared: text_api.PreparedTextRequest,
    status: NativeStatus,
    request_id: str,
    created: int,
) -> dict[str, Any]:
    """OpenAI's ``text_completion`` of a finished text status (see the module docstring).

    Raises:
        ValueError: The status has no finished generation.
    """
    generation = status.finished_generation
    if generation is None:
        raise ValueError("A completion needs a finished generation.")
    text = reply_text(generation)
    completion_tokens = min(prepared.max_length, estimate_tokens(text))
    model = generation.model or request.model
    return {
        "id": f"cmpl-{request_id}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": build_system_fingerprint(generation.worker_id, model),
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": generation.finish_reason or "stop"}],
        "usage": {
            "prompt_tokens": prepared.estimated_prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prepared.estimated_prompt_tokens + completion_tokens,
        },
        "x_horde": {
            **status.front_x_horde,
            **({"context_adjustments": status.context_adjustments} if status.context_adjustments else {}),
            "estimated_usage": True,
        },
    }


def completion_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``text_completion`` chunks of a reply delivered whole: the text (when not empty), the finish chunk, and
    the usage chunk when asked for (the caller adds ``data: [DONE]``).
    """
    head = {key: completion[key] for key in ("id", "object", "created", "model", "system_fingerprint")}
    choice = completion["choices"][0]
    chunks = []
    if choice["text"]:
        chunks.append({**head, "choices": [{**choice, "finish_reason": None}]})
    chunks.append({**head, "choices": [{**choice, "text": ""}], "x_horde": completion["x_horde"]})
    return chunks


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponseBase:
    """Serve one legacy completion, streamed or not (OpenAI's ``POST /v1/completions``), through the text API.

    The body's size is recorded and a refused body, model or prompt is counted like chat completions' refusals
    (chat.logs.record_refusal); the finished-request line and its metrics are chat requests' only.
    """
    if request.method != "POST":
        return method_not_allowed("POST")
    raw = request.body
    front_metrics().body_size.record(len(raw))
    try:
        apikey = bearer_key(request)
        legacy = read_completion_request(raw)
    except OpenAIError as error:
        record_refusal(error)
        return error.to_response()
    runtime = get_runtime()
    if runtime.stopping.is_set():
        return errors.front_shutting_down(None).to_response()  # stopping: nothing is submitted any more
    if not await text_api.find_text_route(runtime, legacy.requested_models):
        not_found = OpenAIError(
            status=404,
            message=NO_TEXT_ROUTE_MESSAGE.format(model=legacy.model),
            code=errors.MODEL_NOT_FOUND,
            param="model",
            type="not_found_error",
        )
        record_refusal(not_found)
        return not_found.to_response()
    try:
        bounds = await text_limits.text_bounds(
            runtime.text_horde,
            legacy.requested_models,
            max_length=legacy.max_tokens if legacy.max_tokens is not None else DEFAULT_CHAT_MAX_TOKENS,
            max_context_length=text_api.DEFAULT_TEXT_MAX_CONTEXT_LENGTH,
            context_requested=False,
            apikey=apikey,
            smallest_max_length=text_api.MIN_TEXT_MAX_LENGTH,
        )
        prepared = prepare_completion_request(legacy, bounds)
    except OpenAIError as error:
        record_refusal(error)
        return error.to_response()
    routes = text_api.TextRoutes(runtime.text_horde, prepared, worker_limits.directory_for(runtime.text_horde))
    created = int(time.time())
    try:
        submitted = await submit_shielded(runtime, prepared.payload, apikey, horde=routes, cancels=runtime.text_cancels)
    except HordeRefusal as refusal:
        return refusals.error_from_refusal(refusal).to_response()
    except HordeUnreachable as exc:
        return exc.to_error().to_response()

    def body(status: NativeStatus) -> dict[str, Any]:
        return build_text_completion(legacy, prepared, status, submitted.id, created)

    def chunks(status: NativeStatus) -> list[dict[str, Any]]:
        completion = body(status)
        listed = completion_chunks(completion)
        if legacy.include_usage:
            head = {key: completion[key] for key in ("id", "object", "created", "model", "system_fingerprint")}
            listed.append({**head, "choices": [], "usage": completion["usage"]})
        return listed

    return await wait_and_respond(
        runtime,
        legacy,
        submitted.id,
        apikey,
        horde=routes,
        cancels=runtime.text_cancels,
        build_body=body,
        build_chunks=chunks,
        created=created,
    )
