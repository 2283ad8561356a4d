"""Image model cards for ``GET /v1/models``: each image model an online worker serves
(``GET /v2/status/models?type=image``), and each alias of ``HORDE_OAI_IMAGE_MODEL_ALIASES`` whose model is served
(docs/images.md), built by the one card builder (models_list.cards.card): ``architecture`` says ``text->image``,
``x_horde.api`` is ``image`` (served by ``POST /v1/images/generations``) and ``x_horde.image`` gives the model's
baseline and max steps from the image model reference the Horde reads (``HORDE_OAI_IMAGE_MODEL_REFERENCE_URL``; the
Horde's API does not serve them) and its max size from the online image workers' ``max_pixels``
(``GET /v2/workers?type=image``).
"""

from __future__ import annotations

import math
from typing import Any, Final

import httpx
from loguru import logger

from chat.horde.budget import shared_read
from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.serving.runtime import FrontRuntime
from chat.settings import image_model_aliases
from images.horde import ImageHorde, read_model_reference
from images.protocol import HORDE_MAX_SIDE, HORDE_SIZE_STEP
from models_list.cards import card

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


IMAGE_WORKERS_CACHE_KEY: Final[str] = "horde-oai:image-workers:{horde_url}"
"""The key of the Horde's image worker list (reduced to each model's largest ``max_pixels``) in the cache."""

IMAGE_REFERENCE_CACHE_KEY: Final[str] = "horde-oai:image-reference:{url}"
"""The key of the image model reference (reduced to each model's baseline and max steps) in the cache."""

HORDE_DEFAULT_MAX_STEPS: Final[int] = 40
"""The most steps the Horde gives without kudos upfront when a model's reference entry names none
(``model_reference.get_model_requirements(name).get("max_steps", 40)``, ``horde/classes/stable/waiting_prompt.py``)."""


def max_pixels_by_model(workers: list[dict[str, Any]]) -> dict[str, int]:
    """The largest ``max_pixels`` an online image worker (``online`` true, not in ``maintenance_mode``) declares for
    each model it serves (``GET /v2/workers?type=image``).
    """
    largest: dict[str, int] = {}
    for worker in workers:
        pixels = worker.get("max_pixels")
        if worker.get("online") is not True or worker.get("maintenance_mode") is True:
            continue
        if not isinstance(pixels, int) or isinstance(pixels, bool) or pixels <= 0:
            continue
        for model in worker.get("models") or []:
            if isinstance(model, str):
                largest[model] = max(largest.get(model, 0), pixels)
    return largest


def reference_limits(reference: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each reference entry's ``{"baseline", "max_steps"}``: its ``baseline``, and its ``requirements.max_steps``
    (:data:`HORDE_DEFAULT_MAX_STEPS` without one, as the Horde reads it).
    """
    limits: dict[str, dict[str, Any]] = {}
    for model, entry in reference.items():
        baseline = entry.get("baseline")
        requirements = entry.get("requirements")
        steps = requirements.get("max_steps") if isinstance(requirements, dict) else None
        limits[model] = {
            "baseline": baseline if isinstance(baseline, str) else None,
            "max_steps": steps if isinstance(steps, int) and not isinstance(steps, bool) else HORDE_DEFAULT_MAX_STEPS,
        }
    return limits


def max_size(pixels: int | None) -> str | None:
    """The largest square ``WIDTHxHEIGHT`` in the Horde's steps of 64 within ``pixels`` (``1024x1024`` for 1048576)."""
    if pixels is None:
        return None
    side = min(math.isqrt(pixels) // HORDE_SIZE_STEP * HORDE_SIZE_STEP, HORDE_MAX_SIDE)
    return f"{side}x{side}" if side >= HORDE_SIZE_STEP else None


def image_limits(model: str, max_pixels: dict[str, int], reference: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """``x_horde.image`` of ``model``: ``baseline`` and ``max_steps`` from the reference (null without one),
    ``max_pixels`` and ``max_size`` from the worker list (null when no online worker declares them).
    """
    limits = (reference or {}).get(model, {})
    pixels = max_pixels.get(model)
    return {
        "baseline": limits.get("baseline"),
        "max_pixels": pixels,
        "max_size": max_size(pixels),
        "max_steps": limits.get("max_steps"),
    }


def image_model_card(
    entry: dict[str, Any],
    *,
    card_id: str | None = None,
    max_pixels: dict[str, int] | None = None,
    reference: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The card of an image model entry (models_list.cards.card); ``card_id`` (an alias) lists the entry under another
    id, named ``<alias> (alias of <model>)`` with the model as ``canonical_slug``; ``x_horde.image`` from the worker
    list's ``max_pixels`` and the model reference's limits (:func:`image_limits`).
    """
    return card(
        entry,
        api=IMAGE_API,
        routes=IMAGE_ROUTES,
        supported=list(IMAGE_SUPPORTED_PARAMETERS),
        workers=entry.get("count"),
        card_id=card_id,
        output="image",
        is_moderated=True,
        image=image_limits(entry["name"], max_pixels or {}, reference),
    )


def image_cards(
    entries: list[dict[str, Any]],
    aliases: dict[str, str],
    max_pixels: dict[str, int] | None = None,
    reference: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The cards of the served image models (a ``count`` above 0) and of each alias whose model is among them."""
    served = {
        entry["name"]: entry
        for entry in entries
        if isinstance(entry.get("name"), str) and isinstance(entry.get("count"), int) and entry["count"] > 0
    }
    cards = [image_model_card(entry, max_pixels=max_pixels, reference=reference) for entry in served.values()]
    cards += [
        image_model_card(served[model], card_id=alias, max_pixels=max_pixels, reference=reference)
        for alias, model in aliases.items()
        if model in served and alias not in served
    ]
    return cards


async def served_image_cards(
    runtime: FrontRuntime, reference_transport: httpx.AsyncBaseTransport | None = None
) -> list[dict[str, Any]]:
    """:func:`image_cards` of the Horde's image model list, with the image worker list's ``max_pixels`` and the image
    model reference (``HORDE_OAI_IMAGE_MODEL_REFERENCE_URL``, read through ``reference_transport`` when given), each
    kept ``HORDE_OAI_MODELS_CACHE_SECONDS`` in the cache. A Horde that refuses or cannot be reached gives no image card
    (logged): the text models are still listed; a worker list or reference that cannot be read leaves its limits null.
    """
    horde = ImageHorde(runtime.horde)
    settings = runtime.settings
    seconds = settings.models_cache_seconds
    try:
        entries = await shared_read(
            IMAGE_MODELS_CACHE_KEY.format(horde_url=settings.horde_url), seconds, horde.image_models
        )
    except (HordeRefusal, HordeUnreachable) as exc:
        logger.warning("The image model list could not be read: {}", exc)
        return []

    async def read_max_pixels() -> dict[str, int]:
        return max_pixels_by_model(await horde.image_workers())

    try:
        max_pixels = await shared_read(
            IMAGE_WORKERS_CACHE_KEY.format(horde_url=settings.horde_url), seconds, read_max_pixels
        )
    except (HordeRefusal, HordeUnreachable) as exc:
        logger.warning("The image worker list could not be read: {}", exc)
        max_pixels = {}
    reference: dict[str, dict[str, Any]] | None = None
    if url := settings.image_model_reference_url:

        async def read_reference() -> dict[str, dict[str, Any]]:
            return reference_limits(
                await read_model_reference(url, settings.horde_timeout_seconds, reference_transport)
            )

        try:
            reference = await shared_read(IMAGE_REFERENCE_CACHE_KEY.format(url=url), seconds, read_reference)
        except HordeUnreachable as exc:
            logger.warning("The image model reference could not be read: {}", exc)
    return image_cards(entries, image_model_aliases(settings.image_model_aliases), max_pixels, reference)
