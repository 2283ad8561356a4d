"""The documentation pages: ``/openapi.json`` (:class:`FrontSchemaView`), Swagger UI at ``/docs``, ReDoc at
``/redoc`` (both loading nothing from outside this process, under :data:`DOCS_CONTENT_SECURITY_POLICY`). The guides
``/docs/behaviour`` and ``/docs/clients`` are front_operations.openapi.guides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from asgiref.sync import async_to_sync
from django.template import engines
from django.urls import reverse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.settings import patched_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.renderers import TemplateHTMLRenderer

from chat.errors import OpenAIError
from front_operations.openapi.page_settings import TITLE, docs_settings
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


@contextmanager
def front_docs_settings() -> Iterator[None]:
    """drf-spectacular's settings patched to the pages' own
    (:func:`front_operations.openapi.page_settings.docs_settings`) while a page is built, whatever the project's
    ``SPECTACULAR_SETTINGS``.
    """
    with patched_settings(docs_settings()):
        yield


class OwnSettings:
    """What makes a page independent of the project's ``REST_FRAMEWORK``: its own schema class (a host's
    ``DEFAULT_SCHEMA_CLASS`` may be DRF's, which drf-spectacular refuses), no authentication and no permission check
    (a host's defaults may require a login), and its own title.
    """

    schema: Any = AutoSchema()
    authentication_classes: Any = ()
    permission_classes: Any = (AllowAny,)
    title: Any = TITLE


class FrontSchemaView(OwnSettings, SpectacularJSONAPIView):
    """``/openapi.json``, with the request example's model set to a model the Horde serves right now.

    "Try it out" in ``/docs`` then reaches a worker with the default example. The id is the first card of the live
    model list (``GET /v1/models``, its cache included), looked up for at most :data:`EXAMPLE_MODEL_LOOKUP_SECONDS`;
    without a list (Horde unreachable, nothing served) the example keeps :data:`EXAMPLE_MODEL`.

    The document walks no URL pattern (``patterns`` is empty): every path comes from the postprocessing hook
    :func:`front_operations.openapi.document.add_front_paths`, so a host project's own DRF views are neither described
    nor inspected.
    """

    patterns: Any = ()
    custom_settings = docs_settings()

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


class OfflineSwaggerView(OwnSettings, SpectacularSwaggerView):
    """Swagger UI at ``/docs``, loading nothing from outside this process."""

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the page with :data:`DOCS_CONTENT_SECURITY_POLICY`."""
        with front_docs_settings():
            response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


class _OfflineRedocRenderer(TemplateHTMLRenderer):
    def resolve_template(self, template_names: Any) -> Any:
        return engines["django"].from_string(_REDOC_PAGE)


class OfflineRedocView(OwnSettings, SpectacularRedocView):
    """ReDoc at ``/redoc``, loading nothing from outside this process (the sidecar's bundle without its CDN logo,
    system fonts).
    """

    renderer_classes = [_OfflineRedocRenderer]  # noqa: RUF012 - DRF's API: a view's renderers are a class-level list

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """Serve the page with :data:`DOCS_CONTENT_SECURITY_POLICY` and the ReDoc bundle of :func:`redoc_bundle`."""
        with front_docs_settings():
            response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]  # unannotated upstream
        response.data["redoc_standalone"] = reverse("redoc-bundle")
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


EXAMPLE_MODEL_LOOKUP_SECONDS: Final = 2.0
"""How long ``/openapi.json`` waits for the model list to fill the example's model before keeping the placeholder."""
