"""``GET /v1/models/{model}``: OpenAI's model retrieve, answering the card ``GET /v1/models`` lists for the id.

The runtime's Horde client is replaced by a stub whose ``text_models`` returns native entries or raises, so the
views run as served (Django's async test client, the real URLconf and error mapping). ref: model-card-fields.2
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import AsyncClient

from chat.horde.native import HordeRefusal, HordeUnreachable
from models_list import views

REASONER = "devhorde/reasoner-8b"


def native_entry(name: str, workers: int) -> dict[str, Any]:
    return {
        "name": name,
        "count": workers,
        "performance": 20.0,
        "queued": 4096,
        "jobs": 3,
        "eta": 12,
        "type": "text",
        "chat": {
            "workers": workers,
            "threads": 3,
            "max_length": 1024,
            "max_context_length": 8192,
            "features": ["tools", "vision"],
            "image_transports": [],
        },
    }


ENTRIES = [
    native_entry(REASONER, 2),
    native_entry("devhorde/plain-3b", 1),
    native_entry("devhorde/offline-7b", 0),
    {"name": "devhorde/legacy-13b", "count": 1, "type": "text"},
]


class StubHorde:
    def __init__(self, answer: list[dict[str, Any]] | Exception) -> None:
        self.answer = answer
        self.calls = 0

    async def text_models(self) -> list[dict[str, Any]]:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def no_image_cards(runtime: object) -> list[dict[str, object]]:
    """The image cards of a Horde without image workers (models_list.image_cards, tested in test_image_cards.py)."""
    return []


@pytest.fixture
def horde(monkeypatch: pytest.MonkeyPatch) -> StubHorde:
    stub = StubHorde(ENTRIES)
    runtime = SimpleNamespace(settings=SimpleNamespace(models_cache_seconds=0, text_api_fallback="auto"), horde=stub)
    monkeypatch.setattr(views, "get_runtime", lambda: runtime)
    monkeypatch.setattr(views, "served_image_cards", no_image_cards)
    return stub


def not_found(model: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"The model `{model}` does not exist or you do not have access to it.",
            "type": "not_found_error",
            "param": None,
            "code": "model_not_found",
        }
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("path", [f"/v1/models/{REASONER}", "/v1/models/devhorde%2Freasoner-8b"])
async def test_retrieve_answers_the_listed_card(horde: StubHorde, path: str) -> None:
    """The id keeps its slash, sent as is or percent-encoded (as the official SDK sends it).

    ref: model-card-fields.2"""
    client = AsyncClient()
    listed = json.loads((await client.get("/v1/models")).content)["data"]
    response = await client.get(path)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Access-Control-Allow-Origin"] == "*"
    card = json.loads(response.content)
    assert card == next(entry for entry in listed if entry["id"] == REASONER)
    assert (card["id"], card["object"], card["owned_by"]) == (REASONER, "model", "aihorde")
    assert card["supported_parameters"] == [
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "parallel_tool_calls",
    ]
    assert card["architecture"]["input_modalities"] == ["text", "image"]
    assert card["x_horde"]["workers"] == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "model",
    [
        "nobody/serves-this",
        "devhorde/offline-7b",  # known to the Horde, no online chat worker
        "devhorde/legacy-13b",  # known to the Horde, no chat object
        "devhorde",  # a prefix of listed ids
        f"{REASONER}/extra",
    ],
)
async def test_a_model_the_list_does_not_hold_is_404_model_not_found(horde: StubHorde, model: str) -> None:
    """OpenAI's 404 wording for every id ``GET /v1/models`` does not list, including a model the Horde knows without
    an online chat worker.

    ref: model-card-fields.2"""
    response = await AsyncClient().get(f"/v1/models/{model}")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == not_found(model)
    assert horde.calls == 1


@pytest.mark.asyncio
async def test_trailing_slash_is_part_of_the_id(horde: StubHorde) -> None:
    """The path converter keeps everything after ``/v1/models/``, so a trailing slash names another (unknown) id."""
    response = await AsyncClient().get(f"/v1/models/{REASONER}/")
    assert response.status_code == 404
    assert json.loads(response.content) == not_found(f"{REASONER}/")


@pytest.mark.asyncio
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
async def test_other_methods_are_405_like_the_list(horde: StubHorde, method: str) -> None:
    """The same 405 envelope and ``Allow`` header as ``/v1/models``, without asking the Horde."""
    client = AsyncClient()
    response = await getattr(client, method)(f"/v1/models/{REASONER}")
    listed = await getattr(client, method)("/v1/models")
    assert response.status_code == listed.status_code == 405
    assert response["Allow"] == "GET"
    assert (
        json.loads(response.content)
        == json.loads(listed.content)
        == {
            "error": {
                "message": "Method not allowed. Use GET.",
                "type": "invalid_request_error",
                "param": None,
                "code": "method_not_allowed",
            }
        }
    )
    assert horde.calls == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("failure", "status", "envelope", "retry_after"),
    [
        (
            HordeRefusal(503, "The Horde is in maintenance mode.", "MaintenanceMode"),
            503,
            {
                "message": "The Horde is in maintenance mode.",
                "type": "api_error",
                "param": None,
                "code": "MaintenanceMode",
            },
            None,
        ),
        (
            HordeRefusal(429, "Slow down.", None, headers={"Retry-After": "7"}),
            429,
            {"message": "Slow down.", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"},
            "7",
        ),
        (
            HordeUnreachable("a model list that is not a list", reached=True),
            502,
            {
                "message": "The Horde answered a model list that is not a list.",
                "type": "api_error",
                "param": None,
                "code": "HordeUnavailable",
            },
            None,
        ),
    ],
)
async def test_horde_failures_map_as_for_the_list(
    horde: StubHorde, failure: Exception, status: int, envelope: dict[str, Any], retry_after: str | None
) -> None:
    """A Horde refusal or an unreachable Horde answers exactly what ``GET /v1/models`` answers."""
    horde.answer = failure
    client = AsyncClient()
    for path in (f"/v1/models/{REASONER}", "/v1/models"):
        response = await client.get(path)
        assert response.status_code == status, path
        assert json.loads(response.content) == {"error": envelope}, path
        assert response.get("Retry-After") == retry_after, path
