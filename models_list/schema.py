"""Pydantic models of ``GET /v1/models``: the model list and its cards (reference: Model card fields).

They describe exactly what :func:`models_list.cards.model_list` produces (``tests/unit/test_openapi.py``
validates its output against them), and ``/openapi.json`` documents the route with them in serialization mode.
Field docstrings are public API text: they become the field descriptions of ``/openapi.json``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Card(BaseModel):
    """A part of a card; keys the cards do not produce are refused, so the models stay exact."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ModelArchitecture(_Card):
    """What the model reads and writes (OpenRouter's ``architecture``)."""

    modality: Literal["text->text", "text+image->text", "text->image"]
    """``text+image->text`` when an online worker serving the model declares vision, ``text->image`` for an image
    model, else ``text->text``."""

    input_modalities: list[Literal["text", "image"]]
    """``["text"]``, with ``image`` added for vision."""

    output_modalities: list[Literal["text", "image"]]
    """``["image"]`` for an image model, else ``["text"]``."""

    tokenizer: str
    """Always ``Other``: workers do not report their tokenizer."""

    instruct_type: str | None
    """Null for a model on the native chat route: workers apply their model's own chat template. For a model served
    through the text generation API (``x_horde.api: "text"``), the prompt template the front renders messages with
    (``chatml``, ``llama-3``, ``mistral``, ``alpaca``, ``generic-instruct`` or a guidance profile id)."""


class ModelPricing(_Card):
    """The price per token, request and image in US dollars, as OpenRouter writes it (decimal strings)."""

    prompt: str
    """Always ``0``: the Horde charges kudos, not money."""

    completion: str
    """Always ``0``."""

    request: str
    """Always ``0``."""

    image: str
    """Always ``0``."""


class ModelTopProvider(_Card):
    """The limits of the best-equipped online worker (OpenRouter's ``top_provider``)."""

    context_length: int | None
    """The largest context length, in tokens, any online chat worker for the model declares."""

    max_completion_tokens: int | None
    """The largest completion limit, in tokens, any online chat worker for the model declares. A larger
    ``max_tokens`` is lowered to it at submit."""

    is_moderated: bool
    """True for an image model (the workers' NSFW censor, ``horde.censor_nsfw``), else false."""


class ImageModelLimits(_Card):
    """An image model's limits, where the Horde says them (``x_horde.image``)."""

    baseline: str | None
    """The model's baseline in the image model reference the Horde reads (``stable diffusion 1``,
    ``stable_diffusion_xl``, ``flux_1``, ...); null when ``HORDE_OAI_IMAGE_MODEL_REFERENCE_URL`` is not set or the
    reference lacks the model."""

    max_pixels: int | None
    """The most pixels (width x height) an online worker serving the model takes (the workers' ``max_pixels``)."""

    max_size: str | None
    """The largest square size within ``max_pixels``, in the Horde's steps of 64 (``1024x1024`` for 1048576)."""

    max_steps: int | None
    """The most steps a request may ask without kudos upfront: the reference's ``requirements.max_steps``, 40 (the
    Horde's default) when it names none; null without the reference."""


class ModelHordeExtras(_Card):
    """The Horde's additions to a card: the workers serving the model now and the work queued for it."""

    workers: int | None
    """Online chat workers serving the model."""

    threads: int | None
    """Their jobs at once, summed."""

    queued: int | float | None
    """Work queued for the model, as the Horde's model list reports it."""

    jobs: int | float | None
    """Requests queued for the model."""

    eta: int | float | None
    """The Horde's estimated wait for the model's queue, in seconds."""

    performance: int | float | None
    """The model's recent throughput, as the Horde's model list reports it."""

    features: list[str]
    """The capabilities and guarantees some online chat worker for the model declares (a union), sorted."""

    image_transports: list[str]
    """How the workers accept images (``url``, ``base64``, ``messages_url``)."""

    api: Literal["chat", "text", "image"]
    """How the front reaches the model: ``chat``, the Horde's native chat route (online chat workers); ``text``, the
    Horde's text generation API (text workers, no chat worker; see ``HORDE_OAI_TEXT_API_FALLBACK``), where
    ``workers`` counts the online text workers, ``threads`` is null and only the parameters that mode supports are
    listed; ``image``, an image model (or an alias of one, ``HORDE_OAI_IMAGE_MODEL_ALIASES``) served by
    ``POST /v1/images/generations`` (docs/images.md)."""

    routes: list[str]
    """The front's routes that serve the model: ``/v1/chat/completions``, ``/v1/responses`` and the legacy
    ``/v1/completions``, for a model with an online chat worker (``api`` ``chat``: a legacy prompt is one user
    message) and for a model served through the text generation API (``api`` ``text``: the raw prompt);
    ``/v1/images/generations`` for an image model (``api`` ``image``)."""

    tool_calls: Literal["prompted"] | None
    """``prompted`` for a model served through the text generation API: tools and JSON response formats are written
    into its prompt in its family's format and its reply is parsed and validated (no constrained decoding; an
    invalid reply is asked again, then 502 ``ModelReplyInvalid``); null on the native chat route (the workers'
    declared ``features`` apply)."""

    tool_format: str | None
    """With ``tool_calls``: the family tool format, ``chatml`` (Hermes ``<tool_call>``; also every family without a
    format of its own), ``llama-3`` or ``mistral``."""

    image: ImageModelLimits | None = Field(default=None, exclude_if=lambda value: value is None)
    """An image model's baseline, max size and max steps; only on an image model's card (``api`` ``image``)."""


class ModelCard(_Card):
    """A model card: OpenAI's model object keys and OpenRouter's card shape, plus ``x_horde``."""

    id: str
    """The model id to send as ``model`` (or in ``models``)."""

    object: Literal["model"]
    """Always ``model``."""

    created: int
    """Always 0: the Horde does not record when a model appeared."""

    owned_by: str
    """Always ``aihorde``: the models run on the Horde's volunteer workers."""

    name: str
    """The model id."""

    canonical_slug: str
    """The model id."""

    context_length: int | None
    """The largest context length, in tokens, any online chat worker for the model declares."""

    architecture: ModelArchitecture
    """What the model reads and writes."""

    pricing: ModelPricing
    """All zero."""

    top_provider: ModelTopProvider
    """The largest declared limits."""

    per_request_limits: None
    """Always null."""

    supported_parameters: list[str]
    """``max_tokens``, ``temperature``, ``top_p`` and ``stop``; then ``seed``, ``frequency_penalty``,
    ``presence_penalty`` and ``reasoning_effort`` where an online worker declares the feature of that name;
    ``tools`` and ``parallel_tool_calls`` for tools, with ``tool_choice`` under the ``tool_choice_enforced``
    guarantee; and ``response_format`` for ``json_object`` or ``json_schema``. A model served through the text
    generation API lists ``max_tokens``, ``temperature``, ``top_p``, ``stop``, then ``tools``, ``tool_choice``,
    ``parallel_tool_calls``, ``response_format`` and ``structured_outputs``, prompted (``x_horde.tool_calls``)."""

    x_horde: ModelHordeExtras
    """The workers serving the model now and the work queued for it."""


class ModelList(_Card):
    """The body of ``GET /v1/models``: every text model with at least one online chat worker, and each model served
    through the text generation API (``x_horde.api: "text"``), and each image model with an online worker and each
    alias of one (``x_horde.api: "image"``), sorted by id.
    """

    object: Literal["list"]
    """Always ``list``."""

    data: list[ModelCard]
    """The model cards."""


__all__ = [
    "ImageModelLimits",
    "ModelArchitecture",
    "ModelCard",
    "ModelHordeExtras",
    "ModelList",
    "ModelPricing",
    "ModelTopProvider",
]
