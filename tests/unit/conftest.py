"""Fixtures shared by the unit tests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The front's own ``/openapi.json`` (Django's test client, no server), parsed: 200 with OpenAPI's media type."""
    response = Client().get("/openapi.json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    parsed: dict[str, Any] = json.loads(response.content)
    return parsed
