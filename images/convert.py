"""The Horde's images (WebP, base64) to the format the client asked, with Pillow."""

from __future__ import annotations

import base64
import binascii
import io
from typing import Final

from PIL import Image, UnidentifiedImageError

PILLOW_FORMAT: Final[dict[str, str]] = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
"""Pillow's format name of each ``output_format``."""


class NotAnImage(ValueError):
    """The Horde's ``img`` is not base64 of an image Pillow reads."""


def convert_image(encoded: str, output_format: str, compression: int) -> bytes:
    """Decode the Horde's base64 image and encode it as ``output_format`` (``png``, ``jpeg`` or ``webp``).

    ``compression`` (0-100, OpenAI's ``output_compression``) is the ``quality`` of ``jpeg`` and ``webp`` (100:
    lossless WebP); PNG is lossless and ignores it. A JPEG loses any transparency (flattened on black, as Pillow's RGB
    conversion does).

    Raises:
        NotAnImage: ``encoded`` is not base64 of an image.
    """
    try:
        raw = base64.b64decode(encoded, validate=True)
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            picture = image.convert("RGB") if output_format == "jpeg" else image.copy()
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError) as exc:
        raise NotAnImage(str(exc)) from exc
    out = io.BytesIO()
    if output_format == "jpeg":
        picture.save(out, PILLOW_FORMAT["jpeg"], quality=max(1, compression))
    elif output_format == "webp":
        picture.save(out, PILLOW_FORMAT["webp"], quality=compression, lossless=compression == 100)
    else:
        picture.save(out, PILLOW_FORMAT["png"])
    return out.getvalue()
