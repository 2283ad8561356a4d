"""Native model entries -> model cards (reference: Model card fields).

A card has OpenAI's model object keys (``id``, ``object``, ``created``, ``owned_by``) and OpenRouter's card shape
(``name``, ``context_length``, ``architecture``, ``pricing``, ``top_provider``, ``supported_parameters``), plus
``x_horde`` with the worker count and the queued work. Every card, text, chat and image (models_list.image_cards),
is built by one function, :func:`card`.
"""

from __future__ import annotations

from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import ChatFeature

from chat.horde.worker_limits import ModelWorkers, WorkerSnapshot
from chat.protocol.capabilities import CAPABILITIES, EVERY_WORKER, card_parameters
from chat.serving.prompt_templates import template_for_model
from chat.serving.text_route import MAX_TEXT_MAX_LENGTH, TEXT_API, TextApiFallback, text_path_models
from chat.serving.tool_formats import tool_format_for

BASE_SUPPORTED_PARAMETERS: Final[tuple[str, ...]] = tuple(
    capability.field for capability in CAPABILITIES if capability.card == EVERY_WORKER
)
"""Parameters every chat worker applies (chat.protocol.capabilities): ``max_tokens``, ``temperature``, ``top_p``,
``stop``."""

CHAT_API: Final[str] = "chat"
"""``x_horde.api`` of a model on the native chat route."""

CHAT_API_ROUTES: Final[tuple[str, ...]] = ("/v1/chat/completions", "/v1/responses", "/v1/completions")
"""``x_horde.routes`` of a model with an online chat worker: chat completions, the Responses API and the legacy
completions (the prompt as one user message), all over the native chat routes."""

TEXT_API_ROUTES: Final[tuple[str, ...]] = ("/v1/chat/completions", "/v1/responses", "/v1/completions")
"""``x_horde.routes`` of a model served through the Horde's text generation API (chat.serving.text_route): chat
completions and the Responses API (within the text API's features), and the legacy completions route."""

OWNED_BY: Final[str] = "aihorde"
"""``owned_by`` of every card: the models run on the Horde's volunteer workers."""


def card(  # noqa: PLR0913 - one keyword per part of a card that differs between the text and image cards
    entry: dict[str, Any],
    *,
    api: str,
    routes: tuple[str, ...],
    supported: list[str],
    workers: object,
    card_id: str | None = None,
    context_length: int | None = None,
    max_completion_tokens: int | None = None,
    vision: bool = False,
    output: str = "text",
    instruct_type: str | None = None,
    is_moderated: bool = False,
    threads: int | None = None,
    features: list[str] | None = None,
    image_transports: list[str] | None = None,
    tool_calls: str | None = None,
    tool_format: str | None = None,
    image: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one card builder every card goes through (text, chat and image, models_list.schema.ModelCard), from a
    model list ``entry`` (``name``, ``queued``, ``jobs``, ``eta``, ``performance``).

    ``card_id`` lists the entry under another id (an image alias): named ``<alias> (alias of <model>)``, with the model
    as ``canonical_slug``. ``vision`` adds the image input; ``output`` is ``text`` or ``image``. ``image`` (an image
    model's baseline, max size and max steps) is ``x_horde.image``, left out when None.
    """
    model = entry["name"]
    shown = card_id or model
    inputs = ["text", "image"] if vision else ["text"]
    x_horde: dict[str, Any] = {
        "workers": workers,
        "threads": threads,
        "queued": entry.get("queued"),
        "jobs": entry.get("jobs"),
        "eta": entry.get("eta"),
        "performance": entry.get("performance"),
        "features": features or [],
        "image_transports": image_transports or [],
        "api": api,
        "routes": list(routes),
        "tool_calls": tool_calls,
        "tool_format": tool_format,
    }
    if image is not None:
        x_horde["image"] = image
    return {
        "id": shown,
        "object": "model",
        "created": 0,
        "owned_by": OWNED_BY,
        "name": f"{shown} (alias of {model})" if card_id else model,
        "canonical_slug": model,
        "context_length": context_length,
        "architecture": {
            "modality": f"{'+'.join(inputs)}->{output}",
            "input_modalities": inputs,
            "output_modalities": [output],
            "tokenizer": "Other",
            "instruct_type": instruct_type,
        },
        "pricing": {"prompt": "0", "completion": "0", "request": "0", "image": "0"},
        "top_provider": {
            "context_length": context_length,
            "max_completion_tokens": max_completion_tokens,
            "is_moderated": is_moderated,
        },
        "per_request_limits": None,
        "supported_parameters": supported,
        "x_horde": x_horde,
    }


def supported_parameters(features: list[str]) -> list[str]:
    """``max_tokens, temperature, top_p, stop``, then ``seed, frequency_penalty, presence_penalty,
    reasoning_effort`` for the features with the same values, ``tools, parallel_tool_calls`` for tools (with
    ``tool_choice`` under the ``tool_choice_enforced`` guarantee), and ``response_format`` for json_object or
    json_schema (chat.protocol.capabilities: each parameter's card feature).
    """
    return card_parameters(set(features))


def model_card(entry: dict[str, Any]) -> dict[str, Any]:
    """The card of a native entry that has a ``chat`` object."""
    chat = entry["chat"]
    features = [feature for feature in _as_list(chat.get("features")) if isinstance(feature, str)]
    return card(
        entry,
        api=CHAT_API,
        routes=CHAT_API_ROUTES,
        supported=supported_parameters(features),
        workers=chat.get("workers"),
        context_length=chat.get("max_context_length"),
        max_completion_tokens=chat.get("max_length"),
        vision=ChatFeature.VISION.value in features,
        threads=chat.get("threads"),
        features=sorted(features),
        image_transports=[item for item in _as_list(chat.get("image_transports")) if isinstance(item, str)],
    )


TEXT_API_SUPPORTED_PARAMETERS: Final[tuple[str, ...]] = (
    *BASE_SUPPORTED_PARAMETERS,
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "structured_outputs",
)
"""Parameters of a model served through the text generation API: ``max_tokens``, ``temperature``, ``top_p`` and
``stop``, and the prompted ``tools``, ``tool_choice``, ``parallel_tool_calls``, ``response_format`` and
``structured_outputs`` (chat.serving.text_replies; chat.serving.text_route refuses the rest)."""

PROMPTED_TOOL_CALLS: Final[str] = "prompted"
"""``x_horde.tool_calls`` of a text API model: calls and JSON are asked for in the prompt and parsed from the reply."""


def text_model_card(entry: dict[str, Any], workers: ModelWorkers | None = None) -> dict[str, Any]:
    """The card of a model served through the text generation API (chat.serving.text_route): the text API's list entry
    has no declared limits or features, so ``context_length`` and ``top_provider``'s limits come from the worker list
    (``workers``, chat.horde.worker_limits: the largest ``max_context_length`` and ``max_length``, the latter at most
    the text API's bound, an online worker declares; ``x_horde.threads`` their threads), null without it;
    ``features`` and ``image_transports`` are empty; ``architecture.instruct_type`` names the prompt template;
    ``x_horde.api`` is ``text`` and ``x_horde.workers`` the online text workers (``count``); ``x_horde.tool_calls``
    is ``prompted`` and ``x_horde.tool_format`` the family's tool format (chat.serving.tool_formats).
    """
    template = template_for_model(entry["name"]).profile_id
    declared = workers if workers is not None and workers.workers > 0 else None
    max_length = declared.max_length if declared is not None else None
    return card(
        entry,
        api=TEXT_API,
        routes=TEXT_API_ROUTES,
        supported=list(TEXT_API_SUPPORTED_PARAMETERS),
        workers=entry.get("count"),
        context_length=declared.max_context_length if declared is not None else None,
        max_completion_tokens=min(max_length, MAX_TEXT_MAX_LENGTH) if max_length is not None else None,
        instruct_type=template,
        threads=declared.threads if declared is not None else None,
        tool_calls=PROMPTED_TOOL_CALLS,
        tool_format=tool_format_for(template).profile,
    )


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _online_workers(chat: dict[str, Any]) -> int:
    """The entry's online chat worker count; 0 for a missing or non-integer value."""
    workers = chat.get("workers")
    return workers if isinstance(workers, int) and not isinstance(workers, bool) else 0


def model_list(
    entries: list[dict[str, Any]], text_api_fallback: TextApiFallback = "off", workers: WorkerSnapshot | None = None
) -> dict[str, Any]:
    """``{"object": "list", "data": [card, ...]}`` for every text entry with at least one online chat worker, and
    every entry chat.serving.text_route serves through the text generation API under ``text_api_fallback``
    (:func:`text_model_card`, its limits from the worker list ``workers`` when given).
    """
    cards = [
        model_card(entry)
        for entry in entries
        if isinstance(entry.get("chat"), dict)
        and _online_workers(entry["chat"]) > 0
        and isinstance(entry.get("name"), str)
    ]
    cards += [
        text_model_card(dict(entry), workers.for_models([name]) if workers is not None else None)
        for name, entry in text_path_models(entries, text_api_fallback).items()
    ]
    cards.sort(key=lambda card: card["id"])
    return {"object": "list", "data": cards}
