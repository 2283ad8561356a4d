"""The operations routes as one include (``front_operations.urls``), whatever the project's REST framework
settings: a host's ``DEFAULT_SCHEMA_CLASS`` may be DRF's own (drf-spectacular refused it: ``AssertionError:
Incompatible AutoSchema``) and its default permission may require a login; the pages bring their own.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from django.test import Client

from tests.conftest import ROOT

HOST_REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,  # a host has django.contrib.auth (AnonymousUser); the front's project has not
}
"""A host project's REST framework settings: DRF's schema class, a login required everywhere."""


@pytest.fixture
def host_rest_framework(settings: Any) -> None:
    settings.REST_FRAMEWORK = HOST_REST_FRAMEWORK


@pytest.mark.usefixtures("host_rest_framework")
@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/openapi.json", "application/vnd.oai.openapi+json"),
        ("/docs", "text/html; charset=utf-8"),
        ("/redoc", "text/html; charset=utf-8"),
        ("/docs/behaviour", "text/html; charset=utf-8"),
        ("/healthz", "application/json"),
    ],
)
def test_the_pages_answer_under_a_hosts_rest_framework_settings(path: str, content_type: str) -> None:
    response = Client().get(path)
    assert (response.status_code, response["Content-Type"]) == (200, content_type)


@pytest.mark.usefixtures("host_rest_framework")
def test_the_document_describes_the_front_only_with_the_packages_version() -> None:
    document = Client().get("/openapi.json").json()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert document["info"]["version"] == version
    assert document["info"]["title"] == "AI Horde OpenAI-compatible chat front"
    assert sorted(document["paths"]) == [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/images/generations",
        "/v1/models",
        "/v1/models/{model}",
        "/v1/responses",
        "/v1/responses/{response_id}",
    ]


def test_one_include_holds_every_operations_route() -> None:
    from django.urls import URLPattern

    from front_operations import urls as operations_urls

    routes = [str(pattern.pattern) for pattern in operations_urls.urlpatterns if isinstance(pattern, URLPattern)]
    assert {"healthz", "readyz", "metrics", "openapi.json", "docs", "redoc", "docs/behaviour", "docs/clients"} <= set(
        routes
    )
