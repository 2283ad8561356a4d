"""Image model cards for ``GET /v1/models``: each image model an online worker serves
(``GET /v2/status/models?type=image``), and each alias of ``HORDE_OAI_IMAGE_MODEL_ALIASES`` whose model is served
(docs/images.md). The card has the text cards' keys; ``architecture`` says ``text->image`` and ``x_horde.api`` is
``image``, served by ``POST /v1/images/generations``.
"""

from __future__ import annotations

from typing import Any, Final

from loguru import logger

from chat.horde.budget import shared_read
from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.serving.runtime import FrontRuntime
from chat.settings import image_model_aliases
from images.horde import ImageHorde

IMAGE_API: Final[str] = "image"
"""``x_horde.api`` of an image model."""

IMAGE_ROUTES: Final[tuple[str, ...]] = ("/v1/images/generations",)
"""``x_horde.routes`` of an image model."""

IMAGE_SUPPORTED_PARAMETERS: Final[tuple[str, ...]] = (
    "n",
    "size",
    "quality",
    "response_format",
    "output_format",
    "output_compression",
    "background",
    "user",
)
"""The OpenAI image parameters the front maps onto the Horde (images.reading); the Horde's own go under ``horde``."""

IMAGE_MODELS_CACHE_KEY: Final[str] = "horde-oai:image-models:{horde_url}"
"""The key of the Horde's image model list in Django's ``default`` cache."""


def image_model_card(entry: dict[str, Any], *, card_id: str | None = None) -> dict[str, Any]:
    """The card of an image model entry; ``card_id`` (an alias) lists the entry under another id, named
    ``<alias> (alias of <model>)`` with the model as ``canonical_slug``.
    """
    model = entry["name"]
    shown = card_id or model
    return {
        "id": shown,
        "object": "model",
        "created": 0,
        "owned_by": "aihorde",
        "name": f"{shown} (alias of {model})" if card_id else model,
        "canonical_slug": model,
        "context_length": None,
        "architecture": {
            "modality": "text->image",
            "input_modalities": ["text"],
            "output_modalities": ["image"],
            "tokenizer": "Other",
            "instruct_type": None,
        },
        "pricing": {"prompt": "0", "completion": "0", "request": "0", "image": "0"},
        "top_provider": {"context_length": None, "max_completion_tokens": None, "is_moderated": True},
        "per_request_limits": None,
        "supported_parameters": list(IMAGE_SUPPORTED_PARAMETERS),
        "x_horde": {
            "workers": entry.get("count"),
            "threads": None,
            "queued": entry.get("queued"),
            "jobs": entry.get("jobs"),
            "eta": entry.get("eta"),
            "performance": entry.get("performance"),
            "features": [],
            "image_transports": [],
            "api": IMAGE_API,
            "routes": list(IMAGE_ROUTES),
        },
    }


def image_cards(entries: list[dict[str, Any]], aliases: dict[str, str]) -> list[dict[str, Any]]:
    """The cards of the served image models (a ``count`` above 0) and of each alias whose model is among them."""
    served = {
        entry["name"]: entry
        for entry in entries
        if isinstance(entry.get("name"), str) and isinstance(entry.get("count"), int) and entry["count"] > 0
    }
    cards = [image_model_card(entry) for entry in served.values()]
    cards += [
        image_model_card(served[model], card_id=alias)
        for alias, model in aliases.items()
        if model in served and alias not in served
    ]
    return cards


async def served_image_cards(runtime: FrontRuntime) -> list[dict[str, Any]]:
    """:func:`image_cards` of the Horde's image model list, kept ``HORDE_OAI_MODELS_CACHE_SECONDS`` in the cache. A
    Horde that refuses or cannot be reached gives no image card (logged): the text models are still listed.
    """
    horde = ImageHorde(runtime.horde)
    key = IMAGE_MODELS_CACHE_KEY.format(horde_url=runtime.settings.horde_url)
    try:
        entries = await shared_read(key, runtime.settings.models_cache_seconds, horde.image_models)
    except (HordeRefusal, HordeUnreachable) as exc:
        logger.warning("The image model list could not be read: {}", exc)
        return []
    return image_cards(entries, image_model_aliases(runtime.settings.image_model_aliases))
