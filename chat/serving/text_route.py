"""Chat completions over the Horde's text generation API, for models with text workers but no chat worker.

The public AI Horde today answers ``POST /v2/generate/text/async`` and lists text models without a ``chat`` entry.
For such a model the front renders the messages into one prompt (chat.serving.prompt_templates) and sends it to the text
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

Tools, tool history and a JSON ``response_format`` are prompted in the model family's own format and the reply read
back into OpenAI's shape (chat.serving.tool_formats, chat.serving.text_replies; docs/text-tools.md). What the text
API cannot honour is refused before submit with the status, type and code of a native declaration gap
(:func:`text_api_refusal`): 404 ``not_found_error`` ``no_worker_supports_features`` at the parameter for image parts,
``seed``, ``frequency_penalty``, ``presence_penalty``, ``reasoning_effort`` and ``horde.conformance: "strict"`` (the
text API gives no worker guarantees); 400 ``invalid_request_error`` ``no_worker_supports_limit`` at ``max_tokens``
for a completion limit outside the text API's range (horde_sdk's ``ModelPayloadRootKobold.max_length`` bounds, and
the real server's 4096: chat.horde.real_horde_answers.text_length_refusal), on chat and legacy completions alike.

The request sent (:func:`prepare_chat_request`): ``prompt`` rendered with the model's template, ``params.max_length``
(the client's limit, else the front's default of 512), ``params.max_context_length`` (``horde.max_context_length``,
else horde_sdk's default of 2048), ``params.stop_sequence`` (the client's ``stop``, then the template's turn
markers), ``temperature`` and ``top_p`` (a ``top_p`` of 0 is sent as the text API's smallest, 0.001), and the worker
options ``trusted_workers``, ``slow_workers``, ``workers`` and ``worker_blacklist``, and ``allow_downgrade``: false for
a ``max_length`` the Horde could lower to its upfront kudos ceiling (over 256 with slow workers allowed), so that it
names the ceiling in a 403 ``KudosUpfront`` and the front submits again at it, reporting it
(chat.serving.text_limits.resubmit_after_downgrade_refusal); true otherwise. Both limits are first bounded by what
the Horde publishes (chat.serving.text_limits: the workers' declared limits, the upfront kudos ceiling), each
lowering a ``context_adjustments`` entry of every status. When the prompt does not fit
``max_context_length - max_length`` estimated tokens, the oldest non-system messages are dropped; when it cannot fit
at all, 400 ``context_length_exceeded`` at ``messages`` in OpenAI's wording. ``horde.max_kudos`` is checked with
the text API's dry run before submit (chat.horde.text.check_max_kudos).

The text status becomes a native status (chat.horde.text.TextRoutes), so the waiter, the buffered stream, the
cancels and every availability rule are the native path's own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from annotated_types import Ge, Le
from horde_sdk.ai_horde_api.apimodels.generate.text.async_ import ModelPayloadRootKobold, TextGenerateAsyncRequest
from horde_sdk.generation_parameters.text.chat_policy import ChatConformance

from chat import errors
from chat.errors import OpenAIError
from chat.horde import real_horde_answers
from chat.horde.budget import shared_read
from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.horde.text import PreparedTextRequest, TextBounds
from chat.horde.tokens import completion_limit, estimate_tokens
from chat.horde.upfront_kudos import asks_free_ceiling
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.protocol.capabilities import TEXT_API_REFUSED
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.legacy_completion import CompletionRequest
from chat.serving.prompt_templates import PromptTooLong, render_within_context, template_for_model
from chat.serving.text_replies import ReplyRules, conversation, reply_rules
from chat.serving.tool_formats import tool_format_for

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

REFUSED_SAMPLING_KEYS: Final[tuple[str, ...]] = TEXT_API_REFUSED
"""Parameters the text API has no equivalent for (``text_api`` ``refused`` in chat.protocol.capabilities); a request
that sets one is refused on the text path."""

CONTEXT_LENGTH_EXCEEDED: Final[str] = errors.CONTEXT_LENGTH_EXCEEDED
"""OpenAI's code for a prompt that does not fit the model's context."""

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
    ``GET /v1/models`` and the text API detection share it. Requests that find the cache empty at the same time
    share one read of the Horde (chat.horde.budget.shared_read): 256 requests admitted together read it once, not 256
    times, against the public Horde's 90 reads a minute per address. Raises what ``text_models`` raises.
    """

    async def read() -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = await runtime.horde.text_models()
        return entries

    seconds = runtime.settings.models_cache_seconds
    if seconds <= 0:
        return await read()
    return await shared_read(MODELS_CACHE_KEY.format(horde_url=runtime.horde.base_url), seconds, read)


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


def native_verdict_fresh() -> bool:
    """Whether this event loop's front saw a ``chat`` entry in the model list within
    :data:`NATIVE_HORDE_VERDICT_SECONDS`.
    """
    seen_chat_at = _native_verdicts.get(asyncio.get_running_loop())
    return seen_chat_at is not None and time.monotonic() - seen_chat_at < NATIVE_HORDE_VERDICT_SECONDS


def note_model_list(entries: Sequence[Mapping[str, Any]]) -> None:
    """Remember now as when this event loop's front saw a ``chat`` entry, when ``entries`` hold one."""
    if any(isinstance(entry.get("chat"), Mapping) for entry in entries):
        _native_verdicts[asyncio.get_running_loop()] = time.monotonic()


async def find_text_route(runtime: Any, models: Sequence[str]) -> bool:
    """Whether a request naming ``models`` takes the text path (every model is a :func:`text_path_models` entry).
    False without reading the model list under ``off``, and under ``auto`` within
    :data:`NATIVE_HORDE_VERDICT_SECONDS` of a list with a ``chat`` entry; False when the list cannot be read.
    """
    mode: TextApiFallback = runtime.settings.text_api_fallback
    if mode == "off" or not models:
        return False
    if mode == "auto" and native_verdict_fresh():
        return False
    try:
        entries = await cached_text_models(runtime)
    except (HordeRefusal, HordeUnreachable):
        return False
    note_model_list(entries)
    served = text_path_models(entries, mode)
    return all(model in served for model in models)


# --- refusals ----------------------------------------------------------------------------------------------------


def _subject(request: ChatCompletionRequest) -> str:
    return "the listed models are" if request.models is not None else "the model is"


def _gap(request: ChatCompletionRequest, param: str, what: str) -> OpenAIError:
    return errors.failure(
        errors.NO_WORKER_SUPPORTS_FEATURES,
        f"No worker can serve this request: {_subject(request)} served through the Horde's text generation API, "
        f"which cannot honour {what}. Leave it out, or use a model with a chat worker (GET /v1/models: "
        'x_horde.api is "text" for these models).',
        param=param,
    )


def text_api_refusal(request: ChatCompletionRequest) -> OpenAIError | None:
    """The first part of a validated request the text API cannot honour, as a 404 ``no_worker_supports_features``
    at its parameter (see the module docstring), or a completion limit outside the text API's range as 400
    ``no_worker_supports_limit``; None when the text path can serve it.
    """
    return limited_text_api_refusal(request, completion_limit(request))


def limited_text_api_refusal(request: ChatCompletionRequest, limit: int | None) -> OpenAIError | None:
    """:func:`text_api_refusal` of a request whose completion limit (chat.horde.tokens.completion_limit) is ``limit``,
    for a caller that has it already.
    """
    for index, message in enumerate(request.messages):
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
    if limit is not None:
        param = real_horde_answers.completion_limit_key(request)
        return real_horde_answers.text_length_refusal(limit, param, (MIN_TEXT_MAX_LENGTH, MAX_TEXT_MAX_LENGTH))
    return None


def context_length_error(max_context_length: int, prompt_tokens: int, max_length: int) -> OpenAIError:
    """400 ``context_length_exceeded`` at ``messages``, in OpenAI's wording, for a prompt that cannot fit even with
    every droppable message dropped (token counts are the front's estimates).
    """
    return errors.failure(
        CONTEXT_LENGTH_EXCEEDED,
        f"This model's maximum context length is {max_context_length} tokens. However, your messages resulted in "
        f"{prompt_tokens + max_length} tokens ({prompt_tokens} in the messages, {max_length} in the completion). "
        "Please reduce the length of the messages or completion.",
        param="messages",
    )


# --- the request -------------------------------------------------------------------------------------------------


def text_payload(  # noqa: PLR0913 - keyword-only, one per text API field, so each caller names what it sends
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
            raise errors.failure(
                errors.NO_WORKER_SUPPORTS_LIMIT,
                f"The Horde's text generation API takes a max_context_length between {MIN_TEXT_CONTEXT_LENGTH} "
                f"and {MAX_TEXT_CONTEXT_LENGTH} tokens; this request asked for {max_context_length}.",
                param="horde.max_context_length",
            )
        params["max_context_length"] = max_context_length
    if stop_sequences:
        params["stop_sequence"] = list(stop_sequences)
    if temperature is not None:
        params["temperature"] = temperature
    if top_p is not None:
        params["top_p"] = max(top_p, SMALLEST_TEXT_TOP_P)
    # allow_downgrade: false where the Horde could lower max_length to its upfront kudos ceiling, so that it names the
    # ceiling in a 403 rather than lowering unreported, and the front submits again at it, reporting it
    # (chat.horde.upfront_kudos.asks_free_ceiling, chat.serving.text_limits); true elsewhere.
    slow_workers = horde_options.get("slow_workers") is not False
    allow_downgrade = not asks_free_ceiling(max_length, slow_workers=slow_workers)
    body: dict[str, Any] = {
        "prompt": prompt,
        "models": list(models),
        "params": params,
        "allow_downgrade": allow_downgrade,
    }
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


def prepare_chat_request(
    request: ChatCompletionRequest, bounds: TextBounds | None = None, *, repair_attempts: int = 0
) -> PreparedTextRequest:
    """Render a validated chat request for the text API (see the module docstring), with ``max_length`` and
    ``max_context_length`` from ``bounds`` when given (chat.serving.text_limits, whose adjustments the statuses carry).
    Tools and a JSON ``response_format`` are written into the prompt in the family's format and the reply is read
    back (chat.serving.text_replies), asked again at most ``repair_attempts`` times
    (``HORDE_OAI_TEXT_REPAIR_ATTEMPTS``).

    Raises:
        OpenAIError: :func:`text_api_refusal`'s refusal; 400 ``ChatRequestConflict`` at ``models`` when the listed
            models use different prompt formats; 400 ``context_length_exceeded`` when the prompt cannot fit.
    """
    limit = completion_limit(request)
    refusal = limited_text_api_refusal(request, limit)
    if refusal is not None:
        raise refusal
    models = request.requested_models
    templates = [template_for_model(model) for model in models]
    if len({template.profile_id for template in templates}) > 1:
        names = ", ".join(f"{model} ({template.profile_id})" for model, template in zip(models, templates, strict=True))
        raise errors.failure(
            errors.CHAT_REQUEST_CONFLICT,
            "The listed models are served through the Horde's text generation API and use different prompt "
            f"formats: {names}. List models of one format.",
            param="models",
        )
    template = templates[0]
    tool_format = tool_format_for(template.profile_id)
    max_length = limit if limit is not None else DEFAULT_CHAT_MAX_TOKENS
    horde = request.horde.model_dump(exclude_none=True) if request.horde is not None else {}
    max_context_length = int(horde.get("max_context_length") or DEFAULT_TEXT_MAX_CONTEXT_LENGTH)
    if bounds is not None:
        max_length, max_context_length = bounds.max_length, bounds.max_context_length
    messages = [message.model_dump(exclude_none=True) for message in request.messages]
    budget = max_context_length - max_length
    rules = reply_rules(request, tool_format)
    turns, placed_block = conversation(messages, rules)
    try:
        rendered = render_within_context(template, turns, budget_tokens=budget, tools_block=placed_block)
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
    reader: ReplyRules | None = None
    if rules.checks_reply:
        x_horde["prompted_output"] = "tools" if rules.offers_tools else "json"

        def render_repair(repair_turns: Sequence[Mapping[str, str]]) -> str | None:
            try:
                return render_within_context(
                    template, repair_turns, budget_tokens=budget, tools_block=placed_block
                ).prompt
            except (PromptTooLong, ValueError):
                return None

        reader = dataclasses.replace(rules, messages=tuple(turns), render=render_repair)
    return PreparedTextRequest(
        payload=payload,
        stop_sequences=stops,
        max_length=max_length,
        estimated_prompt_tokens=rendered.estimated_prompt_tokens,
        strip_leading_whitespace=True,
        x_horde=x_horde,
        context_adjustments=bounds.adjustments if bounds is not None else (),
        reply_reader=reader,
        repair_attempts=repair_attempts,
        max_kudos=horde.get("max_kudos"),
    )


# --- the routes --------------------------------------------------------------------------------------------------


def prepare_completion_request(request: CompletionRequest, bounds: TextBounds | None = None) -> PreparedTextRequest:
    """The text API request of a legacy completion: the prompt unchanged, the client's stops, ``max_length`` from
    ``max_tokens`` (default 512; ``bounds.max_length`` when given, chat.serving.text_limits, whose adjustments the
    statuses carry) and no context length (the text API's default applies).

    Raises:
        OpenAIError: 400 ``no_worker_supports_limit`` at ``max_tokens`` above the real server's 4096
            (chat.horde.real_horde_answers.text_length_refusal).
    """
    max_length = request.max_tokens if request.max_tokens is not None else DEFAULT_CHAT_MAX_TOKENS
    refusal = real_horde_answers.text_length_refusal(
        max_length, "max_tokens", (MIN_TEXT_MAX_LENGTH, MAX_TEXT_MAX_LENGTH)
    )
    if refusal is not None:
        raise refusal
    if bounds is not None:
        max_length = bounds.max_length
    stops = merged_stops(request.stop, ())
    payload = text_payload(
        request.prompt_text,
        [request.model],
        max_length=max_length,
        max_context_length=None,
        stop_sequences=stops,
        temperature=request.temperature,
        top_p=request.top_p,
        horde_options={},
    )
    return PreparedTextRequest(
        payload=payload,
        stop_sequences=stops,
        max_length=max_length,
        estimated_prompt_tokens=estimate_tokens(request.prompt_text),
        strip_leading_whitespace=False,
        x_horde={"api": TEXT_API},
        context_adjustments=bounds.adjustments if bounds is not None else (),
    )
