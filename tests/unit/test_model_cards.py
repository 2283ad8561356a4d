"""Model cards of GET /v1/models (reference: Model card fields)."""

from __future__ import annotations

import pytest

from models_list.cards import model_card, model_list, supported_parameters


def native_entry(name: str, features: list[str], **chat: object) -> dict:
    return {
        "name": name,
        "count": 2,
        "performance": 20.0,
        "queued": 4096,
        "jobs": 3,
        "eta": 12,
        "type": "text",
        "chat": {
            "workers": 2,
            "threads": 3,
            "max_length": 1024,
            "max_context_length": 8192,
            "features": features,
            "image_transports": [],
            **chat,
        },
    }


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        ([], ["max_tokens", "temperature", "top_p", "stop"]),
        (
            ["reasoning_effort", "presence_penalty", "seed", "frequency_penalty"],
            [
                "max_tokens",
                "temperature",
                "top_p",
                "stop",
                "seed",
                "frequency_penalty",
                "presence_penalty",
                "reasoning_effort",
            ],
        ),
        (["tools"], ["max_tokens", "temperature", "top_p", "stop", "tools", "parallel_tool_calls"]),
        (
            ["tools", "tool_choice_enforced"],
            ["max_tokens", "temperature", "top_p", "stop", "tools", "parallel_tool_calls", "tool_choice"],
        ),
        (["tool_choice_enforced"], ["max_tokens", "temperature", "top_p", "stop"]),
        (["json_object"], ["max_tokens", "temperature", "top_p", "stop", "response_format"]),
        (["json_schema", "json_object"], ["max_tokens", "temperature", "top_p", "stop", "response_format"]),
        (["vision", "prompt_overflow_refused"], ["max_tokens", "temperature", "top_p", "stop"]),
    ],
)
def test_supported_parameters_follow_the_declared_features(features: list[str], expected: list[str]) -> None:
    """ref: model-card-fields.2"""
    assert supported_parameters(features) == expected


def test_card_limits_modalities_and_x_horde() -> None:
    """ref: model-card-fields.2"""
    card = model_card(native_entry("org/vision-7b", ["vision"], max_length=512, max_context_length=4096))
    assert card["id"] == "org/vision-7b"
    assert card["object"] == "model"
    assert card["context_length"] == 4096
    assert card["top_provider"] == {"context_length": 4096, "max_completion_tokens": 512, "is_moderated": False}
    assert card["architecture"]["input_modalities"] == ["text", "image"]
    assert card["architecture"]["output_modalities"] == ["text"]
    assert card["x_horde"]["workers"] == 2
    assert card["x_horde"]["queued"] == 4096
    assert card["x_horde"]["routes"] == ["/v1/chat/completions", "/v1/responses", "/v1/completions"]
    text_card = model_card(native_entry("org/text-7b", ["seed"]))
    assert text_card["architecture"]["input_modalities"] == ["text"]
    assert text_card["architecture"]["modality"] == "text->text"


def test_list_keeps_only_models_with_an_online_chat_worker() -> None:
    """ref: model-card-fields.2"""
    entries = [
        native_entry("b/served", []),
        {"name": "a/text-only", "count": 1, "type": "text"},
        native_entry("c/offline", [], workers=0),
    ]
    listed = model_list(entries)
    assert listed["object"] == "list"
    assert [card["id"] for card in listed["data"]] == ["b/served"]


def test_listed_routes_are_served() -> None:
    """Every route a card lists resolves to a view of the front (a POST route, not the 404 handler)."""
    from django.urls import resolve

    from models_list.cards import CHAT_API_ROUTES, TEXT_API_ROUTES

    assert [resolve(route).url_name for route in CHAT_API_ROUTES] == ["chat-completions", "responses", "completions"]
    assert [resolve(route).url_name for route in TEXT_API_ROUTES] == ["chat-completions", "responses", "completions"]
