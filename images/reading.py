"""Bytes to a validated image request (:class:`ImagePlan`), in OpenAI's wording at the request path.

The JSON body is read as the chat route reads it (chat.reading.body), validated with
:class:`images.protocol.ImageGenerationRequest` and worded by chat.reading.validation_wording; then the rules across
keys and the refusals of what the Horde cannot serve (docs/images.md, "What is refused").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, cast

from pydantic import ValidationError

from chat import errors
from chat.errors import OpenAIError
from chat.reading.body import parse_json_body, show_value
from chat.reading.parameters import unsupported_chat_parameter
from chat.reading.validation_wording import openai_error_from_validation
from chat.settings import image_model_aliases
from images.protocol import (
    DEFAULT_SIZE,
    HORDE_MAX_SIDE,
    HORDE_MIN_SIDE,
    HORDE_SIZE_STEP,
    OPENAI_MAX_IMAGES,
    STEPS_BY_QUALITY,
    HordeImageOptions,
    ImageGenerationRequest,
    OutputFormat,
    ResponseFormat,
)

SIZE_PATTERN: Final[re.Pattern[str]] = re.compile(r"^(?P<width>[1-9][0-9]{0,4})x(?P<height>[1-9][0-9]{0,4})$")
"""``WIDTHxHEIGHT`` in pixels."""

DEFAULT_ALIAS: Final[str] = "dall-e-2"
"""The alias a request without ``model`` uses (OpenAI's default image model before ``model`` was required)."""

UNSERVED_KEYS: Final[dict[str, str]] = {
    "complexity": "The AI Horde's image workers have no planning step: 'complexity' cannot be served.",
    "frame_count": "The AI Horde's image workers make still images: 'frame_count' (GIF output) cannot be served.",
    "frame_duration_ms": "The AI Horde's image workers make still images: 'frame_duration_ms' cannot be served.",
    "svg": "The AI Horde's image workers make raster images: 'svg' cannot be served.",
}
"""OpenAI keys with no Horde meaning at any value: each refused at its param with this message."""


@dataclass(frozen=True)
class ImagePlan:
    """A validated image request, its OpenAI keys resolved to what the Horde is asked.

    Attributes:
        prompt: The prompt, as sent.
        model: The Horde image model (an alias resolved).
        requested_model: The ``model`` the client sent (an alias or a Horde model), or the default alias.
        n: Images asked (1-10).
        width: Pixels, a multiple of 64.
        height: Pixels, a multiple of 64.
        steps: Sampling steps (``horde.steps``, else from ``quality``).
        response_format: ``b64_json`` (default) or ``url`` (the Horde's own link).
        output_format: The format of ``b64_json`` images (``png`` default); ``webp`` for ``url``.
        output_compression: 0-100, the quality of ``jpeg`` and ``webp`` output (100 default).
        transparent: ``background: transparent`` (the Horde's ``params.transparent``).
        quality: The ``quality`` the answer reports.
        stream: ``stream: true``.
        horde: The ``horde`` options.
    """

    prompt: str
    model: str
    requested_model: str
    n: int
    width: int
    height: int
    steps: int
    response_format: ResponseFormat
    output_format: OutputFormat
    output_compression: int
    transparent: bool
    quality: str
    stream: bool
    horde: HordeImageOptions

    @property
    def size(self) -> str:
        """``WIDTHxHEIGHT``."""
        return f"{self.width}x{self.height}"


def bad_request(param: str, message: str) -> OpenAIError:
    """400 ``BadRequest`` at ``param``."""
    return errors.failure(errors.BAD_REQUEST, message, param=param)


def read_n(body: dict[str, Any]) -> int:
    """``n`` (1 without it), bounded as OpenAI bounds it ("Must be between 1 and 10").

    Raises:
        OpenAIError: 400 ``BadRequest`` at ``n`` in OpenAI's range wording.
    """
    n = body.get("n")
    if n is None:
        return 1
    if not isinstance(n, int) or isinstance(n, bool):
        raise bad_request("n", f"Invalid type for 'n': expected an integer, but got {show_value(n)} instead.")
    if n < 1:
        raise bad_request("n", f"Invalid 'n': integer below minimum value. Expected a value >= 1, but got {n} instead.")
    if n > OPENAI_MAX_IMAGES:
        raise bad_request(
            "n",
            f"Invalid 'n': integer above maximum value. Expected a value <= {OPENAI_MAX_IMAGES}, but got {n} instead.",
        )
    return n


def read_size(size: str | None) -> tuple[int, int]:
    """``(width, height)`` of ``size``: ``auto`` or none is :data:`DEFAULT_SIZE`.

    Raises:
        OpenAIError: 400 ``BadRequest`` at ``size`` when it is not ``WIDTHxHEIGHT`` within the Horde's bounds.
    """
    match = SIZE_PATTERN.match(DEFAULT_SIZE if size in (None, "auto") else str(size))
    if match is None:
        raise bad_request(
            "size",
            f"Invalid value: {show_value(size)}. Supported values are: 'auto' and 'WIDTHxHEIGHT' sizes such as "
            "'1024x1024', '1536x1024' and '512x512'.",
        )
    width, height = int(match["width"]), int(match["height"])
    for side in (width, height):
        if side % HORDE_SIZE_STEP or not HORDE_MIN_SIDE <= side <= HORDE_MAX_SIDE:
            raise bad_request(
                "size",
                f"Invalid 'size': {show_value(size)}. The AI Horde makes images whose width and height are "
                f"multiples of {HORDE_SIZE_STEP} from {HORDE_MIN_SIDE} to {HORDE_MAX_SIDE} pixels.",
            )
    return width, height


def resolve_model(model: str | None, aliases: dict[str, str]) -> tuple[str, str]:
    """``(Horde model, requested model)``: an alias (``HORDE_OAI_IMAGE_MODEL_ALIASES``) resolved, any other name kept
    (the Horde's image model names; one no worker serves is refused at submit, ``no_eligible_worker``).

    Raises:
        OpenAIError: 400 ``BadRequest`` at ``model`` when no ``model`` is sent and :data:`DEFAULT_ALIAS` is not
            configured.
    """
    requested = DEFAULT_ALIAS if model is None else model
    if requested in aliases:
        return aliases[requested], requested
    if model is None:
        raise errors.failure(errors.BAD_REQUEST, "Missing required parameter: 'model'.", param="model")
    return requested, requested


def read_image_request(raw: bytes, aliases_setting: str) -> ImagePlan:
    """Read a ``POST /v1/images/generations`` body into its :class:`ImagePlan`.

    Args:
        raw: The body.
        aliases_setting: ``HORDE_OAI_IMAGE_MODEL_ALIASES``.

    Raises:
        OpenAIError: 400 ``BadRequest`` (not JSON, a wrong type, value or range; OpenAI's wording at the param) or
            ``UnsupportedChatParameter`` (a key or value the Horde cannot serve, at its param).
    """
    body = parse_json_body(raw)
    n = read_n(body)
    try:
        request = ImageGenerationRequest.model_validate({key: value for key, value in body.items() if key != "n"})
    except ValidationError as invalid:
        raise openai_error_from_validation(invalid.errors()[0], body) from None
    for key, message in UNSERVED_KEYS.items():
        if getattr(request, key) is not None:
            raise unsupported_chat_parameter(key, message)
    if request.style == "natural":
        raise unsupported_chat_parameter(
            "style", "The AI Horde's image models have no 'natural' style: describe the style in the prompt instead."
        )
    if request.moderation == "low":
        raise unsupported_chat_parameter(
            "moderation",
            "The AI Horde's moderation is set with 'horde.nsfw' and 'horde.censor_nsfw', not 'moderation': "
            "'low' cannot be served.",
        )
    if request.output_format in ("gif", "svg"):
        raise unsupported_chat_parameter(
            "output_format",
            f"The AI Horde makes raster still images: 'output_format' {show_value(request.output_format)} cannot be "
            "served. Use 'png', 'jpeg' or 'webp'.",
        )
    response_format: ResponseFormat = request.response_format or "b64_json"
    # gif and svg were refused above
    output_format = cast("OutputFormat", request.output_format or ("webp" if response_format == "url" else "png"))
    if response_format == "url" and output_format != "webp":
        raise unsupported_chat_parameter(
            "output_format",
            f"A 'url' image is the Horde's own WebP file: 'output_format' {show_value(output_format)} cannot apply to "
            "it. Ask 'response_format': 'b64_json' for another format.",
        )
    if request.background == "transparent" and output_format == "jpeg":
        raise bad_request(
            "background", "Transparent background requires 'output_format' to be 'png' or 'webp', not 'jpeg'."
        )
    if request.partial_images:
        raise unsupported_chat_parameter(
            "partial_images", "The AI Horde sends no partial images: 'partial_images' must be 0 or absent."
        )
    if request.stream and response_format == "url":
        raise unsupported_chat_parameter(
            "response_format", "A streamed image comes as 'b64_json' in its completed event: 'url' cannot be streamed."
        )
    width, height = read_size(request.size)
    model, requested_model = resolve_model(request.model, image_model_aliases(aliases_setting))
    quality = request.quality or "auto"
    return ImagePlan(
        prompt=request.prompt,
        model=model,
        requested_model=requested_model,
        n=n,
        width=width,
        height=height,
        steps=request.horde.steps if request.horde.steps is not None else STEPS_BY_QUALITY[quality],
        response_format=response_format,
        output_format=output_format,
        output_compression=100 if request.output_compression is None else request.output_compression,
        transparent=request.background == "transparent",
        quality=quality,
        stream=bool(request.stream),
        horde=request.horde,
    )
