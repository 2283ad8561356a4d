"""The wire models of ``POST /v1/images/generations``: OpenAI's request (the openai SDK's ``ImageGenerateParams``)
with the Horde's own options under ``horde``, bounded as the real AI Horde bounds them. No I/O.

OpenAI's keys the Horde cannot serve are refused at their param (``UnsupportedChatParameter``), as the chat route
refuses; keys with no Horde meaning are accepted at their default (docs/images.md, "What is refused").
"""

from __future__ import annotations

from typing import Any, Final, Literal

from horde_sdk.ai_horde_api.apimodels.base import LorasPayloadEntry, TIPayloadEntry
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

OPENAI_MAX_PROMPT_CHARACTERS: Final[int] = 32000
"""OpenAI's longest ``prompt`` (the SDK's ``ImageGenerateParams.prompt``: "The maximum length is 32000 characters")."""

OPENAI_MAX_IMAGES: Final[int] = 10
"""OpenAI's largest ``n`` ("Must be between 1 and 10")."""

HORDE_SIZE_STEP: Final[int] = 64
"""Width and height are multiples of 64 at the Horde (``horde/apis/models/stable_v2.py:333-348``)."""

HORDE_MIN_SIDE: Final[int] = 64
HORDE_MAX_SIDE: Final[int] = 3072
"""The Horde's bounds of ``width`` and ``height`` (the same lines; horde-sdk agrees)."""

HORDE_MAX_STEPS: Final[int] = 500
"""The real Horde's largest ``steps`` (``stable_v2.py:462``; horde-sdk leaves it unbounded)."""

HORDE_MAX_CFG_SCALE: Final[float] = 100.0
"""The real Horde's largest ``cfg_scale`` (``stable_v2.py:330``; horde-sdk leaves it unbounded)."""

REAL_HORDE_SAMPLERS: Final[tuple[str, ...]] = (
    "k_lms",
    "k_heun",
    "k_euler",
    "k_euler_a",
    "k_dpm_2",
    "k_dpm_2_a",
    "k_dpm_fast",
    "k_dpm_adaptive",
    "k_dpmpp_2s_a",
    "k_dpmpp_2m",
    "dpmsolver",
    "k_dpmpp_sde",
    "DDIM",
    "lcm",
)
"""The samplers the real Horde's parser accepts (``horde/consts.py:76-91``, its ``sampler_name`` enum); horde-sdk's
``KNOWN_IMAGE_SAMPLERS`` lists newer ones the server refuses, and the real server wins."""

DEFAULT_SIZE: Final[str] = "1024x1024"
"""What ``size`` ``auto`` (and no ``size``) asks: OpenAI's default size."""

STEPS_BY_QUALITY: Final[dict[str, int]] = {
    "low": 20,
    "auto": 30,
    "standard": 30,
    "medium": 30,
    "high": 40,
    "hd": 40,
    "xhigh": 50,
    "max": 60,
}
"""The Horde ``steps`` each OpenAI ``quality`` asks (``horde.steps`` overrides). 30 is the Horde's default; 40 is the
most a request may ask without kudos upfront (real-horde.md, Images), so ``xhigh`` and ``max`` need them."""

ResponseFormat = Literal["url", "b64_json"]
OutputFormat = Literal["png", "jpeg", "webp"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class LoraEntry(LorasPayloadEntry):
    """horde-sdk's ``LorasPayloadEntry`` read strictly, as the request schema documents it (``true`` is no number)."""

    model_config = ConfigDict(strict=True)


class TextualInversionEntry(TIPayloadEntry):
    """horde-sdk's ``TIPayloadEntry`` read strictly, as the request schema documents it (``false`` is no number)."""

    model_config = ConfigDict(strict=True)


class HordeImageOptions(_Strict):
    """The Horde's own options of an image request (``horde``): the generation's ``params`` and the request's worker
    options, each bounded as the real AI Horde bounds it (``horde/apis/models/stable_v2.py``).
    """

    steps: int | None = Field(default=None, ge=1, le=HORDE_MAX_STEPS)
    """Sampling steps (1-500); default from ``quality`` (:data:`STEPS_BY_QUALITY`)."""
    cfg_scale: float | None = Field(default=None, ge=0, le=HORDE_MAX_CFG_SCALE)
    """Classifier-free guidance (0-100; the Horde's default 7.5)."""
    sampler_name: str | None = None
    """One of :data:`REAL_HORDE_SAMPLERS` (the Horde's default ``k_euler_a``)."""
    seed: str | None = Field(default=None, max_length=256)
    """The seed, as the Horde takes it: a string."""
    seed_variation: int | None = Field(default=None, ge=1, le=1000)
    karras: bool | None = None
    clip_skip: int | None = Field(default=None, ge=1, le=12)
    hires_fix: bool | None = None
    tiling: bool | None = None
    post_processing: list[str] | None = None
    """Post-processors by the Horde's names (``RealESRGAN_x4plus``, ``GFPGAN``, ...), checked by the Horde."""
    facefixer_strength: float | None = Field(default=None, ge=0, le=1)
    loras: list[LoraEntry] | None = Field(default=None, max_length=5)
    """LoRAs (at most 5, the Horde's bound): ``{"name", "model", "clip", "inject_trigger", "is_version"}``."""
    tis: list[TextualInversionEntry] | None = Field(default=None, max_length=20)
    """Textual inversions: ``{"name", "inject_ti", "strength"}``."""
    nsfw: bool = False
    """Whether NSFW workers may serve it. False by default here, sent explicitly: the Horde's parser defaults it to
    true (real-horde.md), which would keep ``nsfw: false`` workers from the request."""
    censor_nsfw: bool = True
    """Whether a worker blanks an NSFW image (the answer is then ``content_policy_violation``)."""
    trusted_workers: bool | None = None
    slow_workers: bool | None = None
    """``false`` keeps slow workers away, and needs kudos upfront at the Horde."""
    extra_slow_workers: bool | None = None
    workers: list[str] | None = Field(default=None, max_length=5)
    """Worker ids that alone may serve it (or may not, with ``worker_blacklist``)."""
    worker_blacklist: bool | None = None
    allow_downgrade: bool | None = None
    """Let the Horde shrink a request over the free size to 1024x1024 (and 30 steps) instead of asking kudos upfront."""
    max_kudos: float | None = Field(default=None, ge=0)
    """The most kudos one image may cost: checked with a dry run before the submit (``max_kudos_exceeded``)."""
    shared: bool | None = None
    replacement_filter: bool | None = None

    @field_validator("sampler_name")
    @classmethod
    def _known_sampler(cls, value: str | None) -> str | None:
        if value is not None and value not in REAL_HORDE_SAMPLERS:
            expected = ", ".join(f"'{name}'" for name in REAL_HORDE_SAMPLERS)
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value


class ImageGenerationRequest(_Strict):
    """``POST /v1/images/generations`` as the front serves it (the openai SDK's ``ImageGenerateParams``)."""

    prompt: str = Field(min_length=1, max_length=OPENAI_MAX_PROMPT_CHARACTERS)
    model: str | None = None
    """An image model the Horde serves (``GET /v1/models``), or an alias (``HORDE_OAI_IMAGE_MODEL_ALIASES``); none:
    the ``dall-e-2`` alias's model."""
    n: int | None = Field(default=None, ge=1, le=OPENAI_MAX_IMAGES)
    """How many images, 1-10 (OpenAI's bound); the Horde's ``params.n``."""
    size: str | None = None
    """``auto`` (1024x1024) or ``WIDTHxHEIGHT``, each a multiple of 64 from 64 to 3072."""
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto", "standard", "hd"] | None = None
    """The Horde's ``steps``: ``low`` 20, ``auto``, ``standard`` and ``medium`` 30, ``high`` and ``hd`` 40, ``xhigh``
    50, ``max`` 60 (over 40 the Horde asks kudos upfront); ``horde.steps`` overrides."""
    style: Literal["vivid", "natural"] | None = None
    """``vivid`` only (no effect); ``natural`` is refused."""
    response_format: ResponseFormat | None = None
    """``b64_json`` (the default here) or ``url``, the Horde's own link, valid 30 minutes."""
    output_format: Literal["png", "jpeg", "webp", "gif", "svg"] | None = None
    """``png`` (default), ``jpeg`` or ``webp`` for ``b64_json``; ``webp`` only for ``url``; ``gif`` and ``svg`` are
    refused."""
    output_compression: int | None = Field(default=None, ge=0, le=100)
    """0-100, the quality of ``jpeg`` and ``webp`` output (100: lossless WebP)."""
    background: Literal["transparent", "opaque", "auto"] | None = None
    """``transparent`` asks the Horde's ``params.transparent`` (with ``png`` or ``webp``)."""
    moderation: Literal["low", "auto"] | None = None
    """``auto`` only: the Horde's moderation is ``horde.nsfw`` and ``horde.censor_nsfw``."""
    partial_images: int | None = Field(default=None, ge=0, le=3)
    """0 only: the Horde sends no partial images."""
    stream: bool | None = None
    """``true``: server-sent ``image_generation.completed`` events (``b64_json`` only)."""
    user: str | None = None
    safety_identifier: str | None = None
    complexity: Literal["low", "medium", "high"] | None = None
    frame_count: int | None = None
    frame_duration_ms: int | None = None
    svg: dict[str, Any] | None = None
    horde: HordeImageOptions = Field(default_factory=HordeImageOptions)


class _Answer(BaseModel):
    """A part of an answer; keys the front does not send are refused, so the models stay exact."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ImageData(_Answer):
    """One image of an ``ImagesResponse``: ``b64_json`` or ``url``, as ``response_format`` asked."""

    b64_json: str | None = None
    """The image, base64, in ``output_format`` (PNG by default), converted from the Horde's WebP."""
    url: str | None = None
    """The Horde's own link to its WebP (``response_format: url``): a presigned URL of its image store, valid 30
    minutes."""


class ImagesResponse(_Answer):
    """OpenAI's ``ImagesResponse``: every image asked, uncensored (no ``usage``: the Horde counts kudos, not tokens)."""

    created: int
    """Unix seconds when the answer was made."""
    data: list[ImageData]
    """One entry per image, ``n`` of them."""
    background: Literal["transparent", "opaque"]
    """``transparent`` for ``background: transparent``, else ``opaque``."""
    output_format: OutputFormat
    """The images' format: ``png``, ``jpeg`` or ``webp`` (``webp`` for ``url``)."""
    size: str
    """``WIDTHxHEIGHT`` of the images."""
    quality: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    """The ``quality`` asked, when it is one OpenAI reports (absent for ``auto``, ``standard`` and ``hd``)."""
