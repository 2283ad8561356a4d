"""The documentation pages' own drf-spectacular settings, so ``/openapi.json``, ``/docs`` and ``/redoc`` serve the
same in the front's project and in a host project whatever its ``REST_FRAMEWORK`` and ``SPECTACULAR_SETTINGS`` say
(:mod:`front_operations.openapi.pages` applies :data:`DOCS_SETTINGS` around each page). Nothing here imports Django REST
framework, so the project's settings module may read it.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final

DISTRIBUTION: Final = "horde-oai"
"""The distribution's name (``pyproject.toml``'s ``[project] name``)."""

TITLE: Final = "AI Horde OpenAI-compatible chat front"
"""The document's ``info.title`` and the pages' title."""

SWAGGER_UI_SETTINGS: Final = """{
  "deepLinking": true,
  "validatorUrl": null,
  "requestInterceptor": (request) => request
}"""
"""Swagger UI's settings, a JavaScript object literal (drf-spectacular inserts a string as is): deep links, no
validator badge (no request to validator.swagger.io), and a request interceptor that sends "Try it out" requests as
they are. It replaces drf-spectacular's, which adds an ``X-CSRFTOKEN`` header to every POST: the front has no CSRF
protection (no sessions, no cookies), so the header meant nothing and showed up in the copied curl."""


@cache
def front_version() -> str:
    """The installed distribution's version (its metadata); in a checkout that is not installed, ``pyproject.toml``'s
    ``[project] version``.
    """
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        project = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return str(tomllib.loads(project.read_text(encoding="utf-8"))["project"]["version"])


def docs_settings() -> dict[str, Any]:
    """drf-spectacular's settings for the pages (its ``custom_settings``; the ``SERVE_*`` ones are view attributes)."""
    return {
        "TITLE": TITLE,
        "VERSION": front_version(),
        "OAS_VERSION": "3.1.0",
        "POSTPROCESSING_HOOKS": ["front_operations.openapi.document.add_front_paths"],
        "SWAGGER_UI_DIST": "SIDECAR",
        "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
        "REDOC_DIST": "SIDECAR",
        "SWAGGER_UI_SETTINGS": SWAGGER_UI_SETTINGS,
    }
