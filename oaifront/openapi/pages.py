"""The documentation pages: ``/openapi.json`` (:class:`FrontSchemaView`), Swagger UI at ``/docs``, ReDoc at
``/redoc`` (both loading nothing from outside this process, under :data:`DOCS_CONTENT_SECURITY_POLICY`), and the
behaviour guide and guide per client served as Markdown text.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Final

from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.renderers import TemplateHTMLRenderer

from chat.errors import OpenAIError
from models_list.views import served_model_list

_REDOC_PAGE: Final = """{% extends "drf_spectacular/redoc.html" %}{% block head %}
    <title>{{ title|default:"Redoc" }}</title>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <style>body { margin: 0; padding: 0; }</style>
{% endblock head %}"""
"""drf-spectacular's ReDoc page without its Google Fonts links: every asset comes from this process."""


DOCS_CONTENT_SECURITY_POLICY: Final = "default-src 'self' 'unsafe-inline' 'unsafe-eval' blob: data:"
"""The ``Content-Security-Policy`` of ``/docs`` and ``/redoc``: the pages may load only from this process (plus
inline, ``blob:`` and ``data:`` content, which Swagger UI and ReDoc build), so reading the documentation tells no
third party about it and works with no internet. The one remote asset the ReDoc bundle names (its sidebar logo on
cdn.redoc.ly) is replaced in the bundle served at ``/docs/assets/redoc.standalone.js`` (:func:`redoc_bundle`), so the
policy refuses nothing and the console shows no error."""


class FrontSchemaView(SpectacularJSONAPIView):
    """``/openapi.json``, with the request example's model set to a model the Horde serves right now.

    "Try it out" in ``/docs`` then reaches a worker with the default example. The id is the first card of the live
    model list (``GET /v1/models``, its cache included), looked up for at most :data:`EXAMPLE_MODEL_LOOKUP_SECONDS`;
    without a list (Horde unreachable, nothing served) the example keeps :data:`EXAMPLE_MODEL`.
    """

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the document with the live example model."""
        response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        model = async_to_sync(served_example_model)()
        if model is not None:
            content = response.data["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]
            content["application/json"]["example"]["model"] = model
        return response


async def served_example_model() -> str | None:
    """The id of the first model the live model list serves, or None (no list within the lookup time, or empty)."""
    try:
        served = await asyncio.wait_for(served_model_list(), EXAMPLE_MODEL_LOOKUP_SECONDS)
    except (OpenAIError, TimeoutError):
        return None
    return next((str(card["id"]) for card in served["data"]), None)


class OfflineSwaggerView(SpectacularSwaggerView):
    """Swagger UI at ``/docs``, loading nothing from outside this process."""

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the page with :data:`DOCS_CONTENT_SECURITY_POLICY`."""
        response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


class _OfflineRedocRenderer(TemplateHTMLRenderer):
    def resolve_template(self, template_names: Any) -> Any:
        return engines["django"].from_string(_REDOC_PAGE)


class OfflineRedocView(SpectacularRedocView):
    """ReDoc at ``/redoc``, loading nothing from outside this process (the sidecar's bundle without its CDN logo,
    system fonts).
    """

    renderer_classes = [_OfflineRedocRenderer]  # noqa: RUF012 - DRF's API: a view's renderers are a class-level list

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the page with :data:`DOCS_CONTENT_SECURITY_POLICY` and the ReDoc bundle of :func:`redoc_bundle`."""
        response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        response.data["redoc_standalone"] = reverse("redoc-bundle")
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


BEHAVIOUR_GUIDE: Final = Path(__file__).resolve().parents[2] / "docs" / "behaviour.md"
"""The guide's Markdown source in the repository."""

CLIENTS_GUIDE: Final = BEHAVIOUR_GUIDE.parent / "clients.md"
"""The guide per client's Markdown source in the repository."""


EXAMPLE_MODEL_LOOKUP_SECONDS: Final = 2.0
"""How long ``/openapi.json`` waits for the model list to fill the example's model before keeping the placeholder."""


async def behaviour_guide(request: HttpRequest) -> HttpResponse:
    """``/docs/behaviour``: the front's behaviour guide (``docs/behaviour.md``), as Markdown text a browser shows."""
    text = await asyncio.to_thread(BEHAVIOUR_GUIDE.read_bytes)
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


async def clients_guide(request: HttpRequest) -> HttpResponse:
    """``/docs/clients``: the guide per client (``docs/clients.md``), as Markdown text a browser shows."""
    text = await asyncio.to_thread(CLIENTS_GUIDE.read_bytes)
    return HttpResponse(text, content_type="text/plain; charset=utf-8")
