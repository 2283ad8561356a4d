"""``HORDE_URL``, the native Horde API root, checked before anything reads it.

horde-sdk's model reference (``horde_model_reference``, imported with horde-sdk) reads the same environment variable
into its own settings at import time, and a value it cannot parse ends there in a traceback. :func:`check_environment`
runs first (``chat`` and ``oaifront`` call it when imported, before horde-sdk is), so a bad value gets the front's
one-line error instead. This module imports nothing from horde-sdk, Django's settings or the rest of ``chat``.
"""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

HORDE_URL_VARIABLE: Final = "HORDE_URL"
"""The environment variable naming the Horde's API root."""

HORDE_URL_EXAMPLE: Final = "https://aihorde.net/api"
"""The shape of a good value, quoted in the error."""


def horde_url_problem(value: str) -> str | None:
    """What is wrong with ``value`` as the Horde's API root (an ``http``/``https`` URL with a host), or None."""
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return f"expected the Horde's API root as an http(s) URL, such as {HORDE_URL_EXAMPLE}"
    return None


def invalid_horde_url_message(value: str, problem: str) -> str:
    """The front's one-line error for a bad ``HORDE_URL`` (the prefix of ``chat.settings``'s settings errors)."""
    return f"Invalid front configuration: {HORDE_URL_VARIABLE}={value!r}: {problem}"


def check_environment() -> None:
    """Refuse a ``HORDE_URL`` in the environment that is not an http(s) URL with a host.

    Raises:
        ImproperlyConfigured: ``Invalid front configuration: HORDE_URL='not-a-url': expected ...``.
    """
    value = os.environ.get(HORDE_URL_VARIABLE)
    if value is None:
        return
    problem = horde_url_problem(value)
    if problem is not None:
        raise ImproperlyConfigured(invalid_horde_url_message(value, problem))
