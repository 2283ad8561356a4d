"""Browser access (reference: Browser access) as django-cors-headers settings, for any project serving the chat apps.

A host project installs django-cors-headers, adds ``"corsheaders"`` to ``INSTALLED_APPS`` and
``"corsheaders.middleware.CorsMiddleware"`` to ``MIDDLEWARE`` (before ``CommonMiddleware``), and imports these
settings into its settings module::

    from chat.cors_settings import *  # CORS_ALLOW_ALL_ORIGINS, CORS_ALLOW_HEADERS, ...

Every cross-origin response then carries ``Access-Control-Allow-Origin: *`` and exposes ``Retry-After``,
``x-should-retry`` and the queue-progress headers ``x-horde-queue-position`` and ``x-horde-wait-time`` (the chat views
also set both CORS headers on their own responses, errors and streams included, with or without an ``Origin``),
and preflights allow the headers the official SDKs send (``x-stainless-*``, ``OpenAI-Organization``,
``OpenAI-Project``). The ``chat`` app's system checks (``manage.py check``) warn when a
project misses one of these. The settings apply to the whole project; a host that wants CORS on the front's routes
only sets ``CORS_URLS_REGEX = r"^/v1/"``.
"""

from __future__ import annotations

from typing import Final

from corsheaders.defaults import default_headers

from chat.errors import CORS_HEADERS

__all__ = [
    "CORS_ALLOW_ALL_ORIGINS",
    "CORS_ALLOW_HEADERS",
    "CORS_ALLOW_METHODS",
    "CORS_EXPOSE_HEADERS",
    "CORS_PREFLIGHT_MAX_AGE",
]

SDK_REQUEST_HEADERS: Final[tuple[str, ...]] = (
    "openai-organization",
    "openai-project",
    "x-stainless-arch",
    "x-stainless-async",
    "x-stainless-helper-method",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-poll-helper",
    "x-stainless-read-timeout",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
)
"""The request headers the official OpenAI SDKs (Python, Node in a browser) add to each call, lower-cased."""

CORS_ALLOW_ALL_ORIGINS: Final = True
"""Any origin, answered ``Access-Control-Allow-Origin: *`` (no credentials: the key travels as a bearer header)."""

CORS_ALLOW_HEADERS: Final[tuple[str, ...]] = (*default_headers, *SDK_REQUEST_HEADERS)
"""django-cors-headers' defaults (``authorization``, ``content-type``, ...) and the SDKs' headers."""

CORS_ALLOW_METHODS: Final[tuple[str, ...]] = ("GET", "POST", "DELETE", "OPTIONS")
"""The front's methods (``DELETE`` for a stored response, ``DELETE /v1/responses/{id}``)."""

CORS_EXPOSE_HEADERS: Final[tuple[str, ...]] = tuple(
    name.strip() for name in CORS_HEADERS["Access-Control-Expose-Headers"].split(",")
)
"""``Retry-After`` and ``x-should-retry``, readable by a browser client deciding whether to retry, and
``x-horde-queue-position`` and ``x-horde-wait-time``, the request's place at the Horde."""

CORS_PREFLIGHT_MAX_AGE: Final = 86400
"""Seconds a browser may reuse a preflight answer."""
