"""Chat completions over the Horde's text generation API, for models with text workers but no chat worker.

The public AI Horde today answers ``POST /v2/generate/text/async`` and lists text models without a ``chat`` entry.
For such a model the front renders the messages into one prompt (chat.prompt_templates) and sends it to the text
API; the reply comes back as an ordinary chat completion, with ``x_horde.api: "text"``. The native chat route stays
the path of every model that has an online chat worker.

Detection (:func:`text_path_models`), per Horde and per model, under ``HORDE_OAI_TEXT_API_FALLBACK``:

- ``auto`` (default): on when the Horde's model list (``GET /v2/status/models?type=text``) has no entry with a
  ``chat`` object at all, that is a Horde without the native chat routes; off otherwise.
- ``on``: every listed model with online workers (``count`` > 0) and no online chat worker uses the text API.
- ``off``: never; every request takes the native chat route.

A request takes the text path when every model it names is such a model (:func:`find_text_route`); otherwise the
native route, which refuses what it cannot serve as before. The model list is read through the front's model list
cache (``HORDE_OAI_MODELS_CACHE_SECONDS``); when it cannot be read, the request takes the native route. Under
``auto``, a Horde whose list had a ``chat`` entry is taken as a native chat Horde for
:data:`NATIVE_HORDE_VERDICT_SECONDS` (60 s) without reading the list again, so the native path pays no extra read.

What the text API cannot honour is refused before submit with the status, type and code of a native declaration
gap (:func:`text_api_refusal`): 404 ``not_found_error`` ``no_worker_supports_features`` at the parameter for
``tools``, a ``response_format`` other than ``text``, image parts, tool calls or tool messages in the conversation,
``seed``, ``frequency_penalty``, ``presence_penalty``, ``reasoning_effort`` and ``horde.conformance: "strict"`` (the
text API gives no worker guarantees); 400 ``invalid_request_error`` ``no_worker_supports_limit`` at ``max_tokens``
for a completion limit outside the text API's range (horde_sdk's ``ModelPayloadRootKobold.max_length`` bounds).

The request sent (:func:`prepare_chat_request`): ``prompt`` rendered with the model's template, ``params.max_length``
(the client's limit, else the front's default of 512), ``params.max_context_length`` (``horde.max_context_length``,
else horde_sdk's default of 2048), ``params.stop_sequence`` (the client's ``stop``, then the template's turn
markers), ``temperature`` and ``top_p`` (a ``top_p`` of 0 is sent as the text API's smallest, 0.001), and the worker
options ``trusted_workers``, ``slow_workers``, ``workers`` and ``worker_blacklist``, and ``allow_downgrade: true`` (a
user short of the upfront kudos is lowered by the Horde rather than refused). Both limits are first bounded by what
the Horde publishes (chat.text_limits: the workers' declared limits, the upfront kudos ceiling), each lowering a
``context_adjustments`` entry of every status. When the prompt does not fit
``max_context_length - max_length`` estimated tokens, the oldest non-system messages are dropped; when it cannot fit
at all, 400 ``context_length_exceeded`` at ``messages`` in OpenAI's wording. ``horde.max_kudos`` is checked with
the text API's dry run before submit (400 ``max_kudos_exceeded`` as on the native path).

The text status becomes a native status (:class:`TextRoutes`) so the waiter, the buffered stream, the cancels and
every availability rule are the native path's own: the generation's ``text`` is cut at the first stop sequence and,
for chat, stripped of leading whitespace; ``finish_reason`` is ``stop`` when a stop sequence ended it or its
estimated tokens are under ``max_length``, else ``length``; ``prompt_tokens`` is the rendered prompt's estimate. With
the worker list (chat.worker_limits), each status also carries the live workers' threads as
``eligible_worker_threads`` and reads as impossible when every worker of the models has stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, Literal

from annotated_types import Ge, Le
from django.core.cache import cache
from horde_sdk.ai_horde_api.apimodels.generate.text.async_ import ModelPayloadRootKobold, TextGenerateAsyncRequest
from horde_sdk.ai_horde_api.endpoints import AI_HORDE_API_ENDPOINT_SUBPATH
from horde_sdk.generation_parameters.text.chat_policy import ChatConformance
from pydantic import ValidationError

from chat import errors, refusals
from chat.errors import OpenAIError
from chat.horde_client import HordeClient, HordeRefusal, HordeUnreachable, NativeGeneration, NativeStatus, SubmitResult
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.mapping import completion_limit, estimate_tokens
from chat.prompt_templates import PromptTooLong, render_within_context, template_for_model
from chat.schema import ChatCompletionRequest
from chat.worker_limits import WorkerDirectory, apply_liveness

if TYPE_CHECKING:
    from chat.text_limits import TextBounds

TextApiFallback = Literal["auto", "on", "off"]
"""The values of ``HORDE_OAI_TEXT_API_FALLBACK``."""

TEXT_API: Final[str] = "text"
"""``x_horde.api`` of a reply served through the text generation API, and of its model card."""


def _bound(name: str, kind: type[Ge] | type[Le]) -> float:
    """horde_sdk's ``ge`` or ``le`` bound of a ``ModelPayloadRootKobold`` field."""
    for item in ModelPayloadRootKobold.model_fields[name].metadata:
        if isinstance(item, Ge) and kind is Ge:
            return float(str(item.ge))
        if isinstance(item, Le) and kind is Le:
            return float(str(item.le))
    raise LookupError(f"ModelPayloadRootKobold.{name} has no {kind.__name__} bound")


def _bounds(name: str) -> tuple[int, int]:
    return int(_bound(name, Ge)), int(_bound(name, Le))


MIN_TEXT_MAX_LENGTH, MAX_TEXT_MAX_LENGTH = _bounds("max_length")
"""The text API's ``params.max_length`` range (horde_sdk's ``ModelPayloadRootKobold``: 16 to 16384)."""

MIN_TEXT_CONTEXT_LENGTH, MAX_TEXT_CONTEXT_LENGTH = _bounds("max_context_length")
"""The text API's ``params.max_context_length`` range (horde_sdk: 80 to 1048576)."""

DEFAULT_TEXT_MAX_CONTEXT_LENGTH: Final[int] = int(ModelPayloadRootKobold.model_fields["max_context_length"].default)
"""``params.max_context_length`` when the client sets no ``horde.max_context_length`` (horde_sdk's default, 2048)."""

SMALLEST_TEXT_TOP_P: Final[float] = _bound("top_p", Ge)
"""The text API's smallest ``top_p`` (horde_sdk: 0.001); OpenAI's ``top_p: 0`` is sent as it."""

WORKER_OPTION_KEYS: Final[tuple[str, ...]] = ("trusted_workers", "slow_workers", "workers", "worker_blacklist")
"""``horde`` options the text API takes as they are."""

REFUSED_SAMPLING_KEYS: Final[tuple[str, ...]] = ("seed", "frequency_penalty", "presence_penalty", "reasoning_effort")
"""Parameters the text API has no equivalent for; a request that sets one is refused on the text path."""

TEXT_ASYNC_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_text_async.value
TEXT_STATUS_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_text_status.value

CONTEXT_LENGTH_EXCEEDED: Final[str] = "context_length_exceeded"
"""OpenAI's code for a prompt that does not fit the model's context."""

STATUS_KEYS: Final[tuple[str, ...]] = (
    "done",
    "faulted",
    "waiting",
    "processing",
    "finished",
    "restarted",
    "queue_position",
    "wait_time",
    "kudos",
    "is_possible",
    "eligible_workers",
    "eligible_worker_threads",
    "might_stall",
)
"""The keys a text status shares with a native one; others are dropped (an absent key stays unknown)."""


# --- detection ---------------------------------------------------------------------------------------------------

MODELS_CACHE_KEY: Final[str] = "native-text-models:{horde_url}"
"""The key of the native model list in Django's ``default`` cache (``KEY_PREFIX`` ``horde-oai``), per ``HORDE_URL``
so fronts of different Hordes sharing one Redis keep their own lists."""

NATIVE_HORDE_VERDICT_SECONDS: Final[float] = 60.0
"""Under ``auto``, how long a Horde whose model list had a ``chat`` entry is taken as a native chat Horde without
reading the list again: the native path then pays no model list read per request, whatever
``HORDE_OAI_MODELS_CACHE_SECONDS`` is (a Horde gains or loses its chat routes with a deploy, not per request)."""

_native_verdicts: dict[asyncio.AbstractEventLoop, float] = {}
"""When each event loop's front last saw a ``chat`` entry in the model list (``time.monotonic()``)."""


async def cached_text_models(runtime: Any) -> list[dict[str, Any]]:
    """The native text model list (``runtime.horde.text_models()``), reused for ``HORDE_OAI_MODELS_CACHE_SECONDS``
    through Django's ``default`` cache: django-redis on ``HORDE_OAI_REDIS_URL``, shared by every worker process, or
    local memory (one per process) without Redis (oaifront.settings ``CACHES``). 0 reads the Horde every time. A
    cache that cannot be reached is skipped (django-redis ``IGNORE_EXCEPTIONS``): the list then comes from the Horde.
    ``GET /v1/models`` and the text API detection share it. Raises what ``text_models`` raises.
    """
    seconds = runtime.settings.models_cache_seconds
    if seconds <= 0:
        fresh: list[dict[str, Any]] = await runtime.horde.text_models()
        return fresh
    key = MODELS_CACHE_KEY.format(horde_url=runtime.horde.base_url)
    cached = await cache.aget(key)
    if isinstance(cached, list):
        return cached
    entries: list[dict[str, Any]] = await runtime.horde.text_models()
    await cache.aset(key, entries, timeout=seconds)
    return entries


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def has_chat_worker(entry: Mapping[str, Any]) -> bool:
    """Whether a model list entry has an online chat worker (a ``chat`` object with ``workers`` > 0)."""
    chat = entry.get("chat")
    return isinstance(chat, Mapping) and _count(chat.get("workers")) > 0


def text_api_enabled(entries: Sequence[Mapping[str, Any]], mode: TextApiFallback) -> bool:
    """Whether the text path is on for this Horde: ``on``; or ``auto`` and no entry has a ``chat`` object."""
    if mode == "on":
        return True
    return mode == "auto" and not any(isinstance(entry.get("chat"), Mapping) for entry in entries)


def text_path_models(entries: Sequence[Mapping[str, Any]], mode: TextApiFallback) -> dict[str, Mapping[str, Any]]:
    """The entries served through the text API, by model name: online workers (``count`` > 0) and no online chat
    worker, when :func:`text_api_enabled`.
    """
    if not text_api_enabled(entries, mode):
        return {}
    return {
        entry["name"]: entry
        for entry in entries
        if isinstance(entry.get("name"), str) and _count(entry.get("count")) > 0 and not has_chat_worker(entry)
    }


async def find_text_route(runtime: Any, models: Sequence[str]) -> bool:
    """Whether a request naming ``models`` takes the text path (every model is a :func:`text_path_models` entry).
    False without reading the model list under ``off``, and under ``auto`` within
    :data:`NATIVE_HORDE_VERDICT_SECONDS` of a list with a ``chat`` entry; False when the list cannot be read.
    """
    mode: TextApiFallback = runtime.settings.text_api_fallback
    if mode == "off" or not models:
        return False
    loop = asyncio.get_running_loop()
    seen_chat_at = _native_verdicts.get(loop)
    if mode == "auto" and seen_chat_at is not None and time.monotonic() - seen_chat_at < NATIVE_HORDE_VERDICT_SECONDS:
        return False
    try:
        entries = await cached_text_models(runtime)
    except (HordeRefusal, HordeUnreachable):
        return False
    if any(isinstance(entry.get("chat"), Mapping) for entry in entries):
        _native_verdicts[loop] = time.monotonic()
    served = text_path_models(entries, mode)
    return all(model in served for model in models)


# --- refusals ----------------------------------------------------------------------------------------------------


def _subject(request: ChatCompletionRequest) -> str:
    return "the listed models are" if request.models is not None else "the model is"


def _gap(request: ChatCompletionRequest, param: str, what: str) -> OpenAIError:
    return OpenAIError(
        status=404,
        message=(
            f"No worker can serve this request: {_subject(request)} served through the Horde's text generation API, "
            f"which cannot honour {what}. Leave it out, or use a model with a chat worker (GET /v1/models: "
            'x_horde.api is "text" for these models).'
        ),
        code=errors.NO_WORKER_SUPPORTS_FEATURES,
        param=param,
        type="not_found_error",
    )


def text_api_refusal(request: ChatCompletionRequest) -> OpenAIError | None:
    """The first part of a validated request the text API cannot honour, as a 404 ``no_worker_supports_features``
    at its parameter (see the module docstring), or a completion limit outside the text API's range as 400
    ``no_worker_supports_limit``; None when the text path can serve it.
    """
    if request.tools:
        return _gap(request, "tools", "tools")
    if request.response_format is not None and request.response_format.type != "text":
        return _gap(request, "response_format", f"response_format {request.response_format.type}")
    for index, message in enumerate(request.messages):
        if message.role == "tool" or getattr(message, "tool_calls", None):
            return _gap(request, f"messages.[{index}]", "tool calls in the conversation")
        content = message.content
        if isinstance(content, list):
            for part_index, part in enumerate(content):
                if getattr(part, "type", "text") != "text":
                    return _gap(request, f"messages.[{index}].content.[{part_index}]", "image input")
    for key in REFUSED_SAMPLING_KEYS:
        if getattr(request, key, None) is not None:
            return _gap(request, key, key)
    horde = request.horde
    if horde is not None and horde.conformance is not None and horde.conformance == ChatConformance.STRICT:
        return _gap(request, "horde.conformance", 'horde.conformance "strict" (it gives no worker guarantees)')
    limit = completion_limit(request)
    if limit is not None and not MIN_TEXT_MAX_LENGTH <= limit <= MAX_TEXT_MAX_LENGTH:
        param = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
        return OpenAIError(
            status=400,
            message=(
                f"No worker eligible for this request accepts a completion limit of {limit} tokens: the Horde's text "
                f"generation API generates between {MIN_TEXT_MAX_LENGTH} and {MAX_TEXT_MAX_LENGTH} tokens."
            ),
            code=errors.NO_WORKER_SUPPORTS_LIMIT,
            param=param,
            type="invalid_request_error",
        )
    return None


def context_length_error(max_context_length: int, prompt_tokens: int, max_length: int) -> OpenAIError:
    """400 ``context_length_exceeded`` at ``messages``, in OpenAI's wording, for a prompt that cannot fit even with
    every droppable message dropped (token counts are the front's estimates).
    """
    return OpenAIError(
        status=400,
        message=(
            f"This model's maximum context length is {max_context_length} tokens. However, your messages resulted in "
            f"{prompt_tokens + max_length} tokens ({prompt_tokens} in the messages, {max_length} in the completion). "
            "Please reduce the length of the messages or completion."
        ),
        code=CONTEXT_LENGTH_EXCEEDED,
        param="messages",
        type="invalid_request_error",
    )


# --- the request -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedTextRequest:
    """A request ready for ``POST /v2/generate/text/async``.

    Attributes:
        payload: The text API body (``TextGenerateAsyncRequest`` fields, only those set).
        stop_sequences: Every stop sequence sent; the reply is cut at the first one found.
        max_length: The completion limit sent.
        estimated_prompt_tokens: The prompt's estimated tokens (the completion's ``prompt_tokens``).
        strip_leading_whitespace: Whether the reply's leading whitespace is removed (chat: the template's generation
            prompt ends where the worker's reply starts, often before a space).
        x_horde: The keys added to the reply's ``x_horde``.
        context_adjustments: The front's changes to the client's limits (chat.text_limits), which every status of
            the request carries as ``context_adjustments``.
    """

    payload: dict[str, Any]
    stop_sequences: tuple[str, ...]
    max_length: int
    estimated_prompt_tokens: int
    strip_leading_whitespace: bool
    x_horde: dict[str, Any] = field(default_factory=dict)
    context_adjustments: tuple[dict[str, Any], ...] = ()


def text_payload(
    prompt: str,
    models: Sequence[str],
    *,
    max_length: int,
    max_context_length: int | None,
    stop_sequences: Sequence[str],
    temperature: float | None,
    top_p: float | None,
    horde_options: Mapping[str, Any],
) -> dict[str, Any]:
    """The text API body, validated as horde_sdk's ``TextGenerateAsyncRequest`` and dumped with only the keys set.

    Raises:
        OpenAIError: 400 at ``horde.max_context_length`` for a context length outside the text API's range.
    """
    params: dict[str, Any] = {"max_length": max_length}
    if max_context_length is not None:
        if not MIN_TEXT_CONTEXT_LENGTH <= max_context_length <= MAX_TEXT_CONTEXT_LENGTH:
            raise OpenAIError(
                status=400,
                message=(
                    f"The Horde's text generation API takes a max_context_length between {MIN_TEXT_CONTEXT_LENGTH} "
                    f"and {MAX_TEXT_CONTEXT_LENGTH} tokens; this request asked for {max_context_length}."
                ),
                code=errors.NO_WORKER_SUPPORTS_LIMIT,
                param="horde.max_context_length",
                type="invalid_request_error",
            )
        params["max_context_length"] = max_context_length
    if stop_sequences:
        params["stop_sequence"] = list(stop_sequences)
    if temperature is not None:
        params["temperature"] = temperature
    if top_p is not None:
        params["top_p"] = max(top_p, SMALLEST_TEXT_TOP_P)
    # allow_downgrade: a user short of the upfront kudos gets max_length lowered to the Horde's ceiling instead of
    # 403 KudosUpfront (chat.upfront_kudos; the front lowers and reports it first when it can foresee it).
    body: dict[str, Any] = {"prompt": prompt, "models": list(models), "params": params, "allow_downgrade": True}
    for key in WORKER_OPTION_KEYS:
        if horde_options.get(key) is not None:
            body[key] = horde_options[key]
    request = TextGenerateAsyncRequest.model_validate(body)
    dumped: dict[str, Any] = request.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return dumped


def merged_stops(client_stop: str | Sequence[str] | None, template_stops: Sequence[str]) -> tuple[str, ...]:
    """The client's ``stop`` sequences, then the template's turn markers, without repeats."""
    client = [client_stop] if isinstance(client_stop, str) else list(client_stop or [])
    merged: list[str] = []
    for stop in [*client, *template_stops]:
        if stop and stop not in merged:
            merged.append(stop)
    return tuple(merged)


def prepare_chat_request(request: ChatCompletionRequest, bounds: TextBounds | None = None) -> PreparedTextRequest:
    """Render a validated chat request for the text API (see the module docstring), with ``max_length`` and
    ``max_context_length`` from ``bounds`` when given (chat.text_limits, whose adjustments the statuses carry).

    Raises:
        OpenAIError: :func:`text_api_refusal`'s refusal; 400 ``ChatRequestConflict`` at ``models`` when the listed
            models use different prompt formats; 400 ``context_length_exceeded`` when the prompt cannot fit.
    """
    refusal = text_api_refusal(request)
    if refusal is not None:
        raise refusal
    models = request.requested_models
    templates = [template_for_model(model) for model in models]
    if len({template.profile_id for template in templates}) > 1:
        names = ", ".join(f"{model} ({template.profile_id})" for model, template in zip(models, templates, strict=True))
        raise OpenAIError(
            status=400,
            message=(
                "The listed models are served through the Horde's text generation API and use different prompt "
                f"formats: {names}. List models of one format."
            ),
            code=errors.CHAT_REQUEST_CONFLICT,
            param="models",
        )
    template = templates[0]
    limit = completion_limit(request)
    max_length = limit if limit is not None else DEFAULT_CHAT_MAX_TOKENS
    horde = request.horde.model_dump(exclude_none=True) if request.horde is not None else {}
    max_context_length = int(horde.get("max_context_length") or DEFAULT_TEXT_MAX_CONTEXT_LENGTH)
    if bounds is not None:
        max_length, max_context_length = bounds.max_length, bounds.max_context_length
    messages = [message.model_dump(exclude_none=True) for message in request.messages]
    budget = max_context_length - max_length
    try:
        rendered = render_within_context(template, messages, budget_tokens=budget)
    except PromptTooLong as too_long:
        raise context_length_error(max_context_length, too_long.estimated, max_length) from None
    except ValueError as failure:
        raise OpenAIError(status=500, message=str(failure), code="PromptTemplateFailed") from failure
    stops = merged_stops(request.stop, rendered.stop_sequences)
    payload = text_payload(
        rendered.prompt,
        models,
        max_length=max_length,
        max_context_length=max_context_length,
        stop_sequences=stops,
        temperature=request.temperature,
        top_p=request.top_p,
        horde_options=horde,
    )
    x_horde: dict[str, Any] = {
        "api": TEXT_API,
        "prompt_template": rendered.template,
        "max_context_length": max_context_length,
    }
    if rendered.dropped_messages:
        x_horde["dropped_messages"] = rendered.dropped_messages
    return PreparedTextRequest(
        payload=payload,
        stop_sequences=stops,
        max_length=max_length,
        estimated_prompt_tokens=rendered.estimated_prompt_tokens,
        strip_leading_whitespace=True,
        x_horde=x_horde,
        context_adjustments=bounds.adjustments if bounds is not None else (),
    )


# --- the routes --------------------------------------------------------------------------------------------------


def format_kudos(value: float) -> str:
    """A kudos amount as the Horde's messages write it: the shortest exact decimal, no exponent (``215``, ``1.5``)."""
    return format(Decimal(repr(float(value))).normalize(), "f")


class TextHordeClient(HordeClient):
    """The text generation routes, over their own pooled client (same base URL, agent and timeout)."""

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """``POST /v2/generate/text/async``; 202 ``{"id", "kudos"}``. Raises HordeRefusal or HordeUnreachable."""
        body = await self._call("POST", TEXT_ASYNC_PATH, apikey, payload=payload)
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise HordeUnreachable("the text submit without a request id", reached=True)
        return SubmitResult(id=body["id"], kudos=body.get("kudos"), warnings=list(body.get("warnings") or []))

    async def dry_run_kudos(self, payload: dict[str, Any], apikey: str | None) -> float:
        """The kudos estimate of ``payload`` from the text API's dry run (``dry_run: true``, 200 ``{"kudos"}``)."""
        body = await self._call("POST", TEXT_ASYNC_PATH, apikey, payload={**payload, "dry_run": True})
        kudos = body.get("kudos") if isinstance(body, dict) else None
        if not isinstance(kudos, int | float) or isinstance(kudos, bool):
            raise HordeUnreachable("the text dry run without kudos", reached=True)
        return float(kudos)

    async def status_body(self, request_id: str, apikey: str | None) -> dict[str, Any]:
        """``GET /v2/generate/text/status/{id}`` as JSON."""
        body = await self._call("GET", TEXT_STATUS_PATH.format(id=request_id), apikey)
        if not isinstance(body, dict):
            raise HordeUnreachable("a text status that is not an object", reached=True)
        return body

    async def cancel(self, request_id: str, apikey: str | None) -> Any:
        """``DELETE /v2/generate/text/status/{id}``; the answer is not read (the cancel queue needs no status)."""
        return await self._call("DELETE", TEXT_STATUS_PATH.format(id=request_id), apikey)


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first stop sequence it contains, and whether one was found."""
    cuts = [text.find(stop) for stop in stops if stop and stop in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


def native_status(body: Mapping[str, Any], prepared: PreparedTextRequest) -> NativeStatus:
    """A text status read as a native one: its progress keys, and each ``GenerationKobold`` as a generation whose
    message content is the cleaned text (see the module docstring).

    Raises:
        HordeUnreachable: The answer does not match the text status shape.
    """
    generations = []
    for item in body.get("generations") or []:
        if not isinstance(item, Mapping):
            continue
        text, stopped = cut_at_stop(str(item.get("text") or ""), prepared.stop_sequences)
        if prepared.strip_leading_whitespace:
            text = text.lstrip()
        finish = "stop" if stopped or estimate_tokens(text) < prepared.max_length else "length"
        generations.append(
            {
                "id": item.get("id"),
                "worker_id": item.get("worker_id"),
                "worker_name": item.get("worker_name"),
                "model": item.get("model"),
                "message": {"content": text},
                "finish_reason": finish,
                "prompt_tokens": prepared.estimated_prompt_tokens,
            }
        )
    fields = {key: body[key] for key in STATUS_KEYS if key in body}
    if prepared.context_adjustments:
        fields["context_adjustments"] = [dict(adjustment) for adjustment in prepared.context_adjustments]
    try:
        status = NativeStatus.model_validate(
            {**fields, "generations": [NativeGeneration.model_validate(g) for g in generations]}
        )
    except ValidationError as exc:
        raise HordeUnreachable(
            f"a text status that does not match the text contract ({exc.error_count()} errors)", reached=True
        ) from exc
    status.front_x_horde.update(prepared.x_horde)
    return status


class TextRoutes:
    """One text request's view of the Horde with the native client's methods (``submit``, ``status``, ``cancel``,
    ``text_models``), so chat.views and chat.waiter serve it as a native request. With ``workers`` (the worker
    list, chat.worker_limits), each status also says whether the models' workers still run
    (chat.worker_limits.apply_liveness).
    """

    def __init__(
        self, client: TextHordeClient, prepared: PreparedTextRequest, workers: WorkerDirectory | None = None
    ) -> None:
        self.client = client
        self.prepared = prepared
        self.workers = workers

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """Submit to the text API."""
        return await self.client.submit(payload, apikey)

    async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
        """The text status as a native status (:func:`native_status`), with the workers' liveness."""
        status = native_status(await self.client.status_body(request_id, apikey), self.prepared)
        snapshot = await self.workers.snapshot() if self.workers is not None else None
        if snapshot is not None:
            apply_liveness(status, snapshot.for_models(self.prepared.payload.get("models") or []))
        return status

    async def cancel(self, request_id: str, apikey: str | None) -> Any:
        """Cancel at the text API."""
        return await self.client.cancel(request_id, apikey)

    async def text_models(self) -> list[dict[str, Any]]:
        """The native model list."""
        return await self.client.text_models()


async def check_max_kudos(client: TextHordeClient, payload: dict[str, Any], apikey: str | None, cap: float) -> None:
    """Refuse a request whose dry-run kudos estimate exceeds ``horde.max_kudos`` (400 ``max_kudos_exceeded``, the
    native path's error and wording). A dry run the Horde refuses is that refusal, mapped as at submit.

    Raises:
        OpenAIError: The refusal.
        HordeUnreachable: The dry run could not be made.
    """
    try:
        estimate = await client.dry_run_kudos(payload, apikey)
    except HordeRefusal as refusal:
        raise refusals.error_from_refusal(refusal) from None
    if estimate > cap:
        raise errors.kudos_cap_error(
            f"The request's kudos estimate at current pricing is {format_kudos(estimate)}, above its horde.max_kudos "
            f"of {format_kudos(cap)}. The estimate assumes the full max_tokens is generated."
        )
