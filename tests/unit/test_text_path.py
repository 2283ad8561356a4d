"""chat.serving.text_route without processes: detection per Horde and per model, the request sent, the status read back,
the text API cards of ``GET /v1/models``."""

from __future__ import annotations

from typing import Any

import pytest

from chat.errors import OpenAIError
from chat.horde.text import PreparedTextRequest, native_status
from chat.protocol.chat_request import ChatCompletionRequest
from chat.serving.text_route import merged_stops, prepare_chat_request, text_api_enabled, text_path_models
from models_list.cards import model_list
from models_list.schema import ModelList

CHAT_ENTRY = {
    "name": "org/chat-8b",
    "count": 2,
    "chat": {"workers": 1, "threads": 1, "max_length": 512, "max_context_length": 4096, "features": []},
}
TEXT_ENTRY = {"name": "koboldcpp/Meta-Llama-3-8B-Instruct", "count": 3, "queued": 10, "jobs": 1, "eta": 4}
OFFLINE_ENTRY = {"name": "koboldcpp/gone", "count": 0}
CHAT_GONE = {"name": "org/text-now", "count": 1, "chat": {"workers": 0}}


@pytest.mark.parametrize(
    ("entries", "mode", "expected"),
    [
        ([TEXT_ENTRY, OFFLINE_ENTRY], "auto", ["koboldcpp/Meta-Llama-3-8B-Instruct"]),
        ([TEXT_ENTRY, CHAT_ENTRY], "auto", []),
        ([TEXT_ENTRY, CHAT_GONE], "auto", []),
        ([TEXT_ENTRY, CHAT_ENTRY, CHAT_GONE], "on", ["koboldcpp/Meta-Llama-3-8B-Instruct", "org/text-now"]),
        ([TEXT_ENTRY], "off", []),
    ],
)
def test_text_path_models_per_horde_and_per_model(
    entries: list[dict[str, Any]], mode: Any, expected: list[str]
) -> None:
    """``auto`` is on only for a model list with no ``chat`` object at all; ``on`` serves every model with online
    workers and no online chat worker; a model without online workers is never served."""
    assert sorted(text_path_models(entries, mode)) == expected
    assert text_api_enabled(entries, mode) == (mode == "on" or (mode == "auto" and expected != []))


def test_text_cards_state_the_mode_and_only_its_parameters() -> None:
    listed = model_list([TEXT_ENTRY, OFFLINE_ENTRY], "auto")
    assert ModelList.model_validate(listed).model_dump(mode="json") == listed
    [card] = listed["data"]
    assert card["supported_parameters"] == [
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "structured_outputs",
    ]
    assert card["architecture"]["instruct_type"] == "llama-3"
    assert (card["context_length"], card["top_provider"]["max_completion_tokens"]) == (None, None)
    assert card["x_horde"] == {
        "workers": 3,
        "threads": None,
        "queued": 10,
        "jobs": 1,
        "eta": 4,
        "performance": None,
        "features": [],
        "image_transports": [],
        "api": "text",
        "routes": ["/v1/chat/completions", "/v1/responses", "/v1/completions"],
        "tool_calls": "prompted",
        "tool_format": "llama-3",
    }
    native = model_list([CHAT_ENTRY, TEXT_ENTRY], "auto")
    assert [(card["id"], card["x_horde"]["api"]) for card in native["data"]] == [("org/chat-8b", "chat")]


def request(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "koboldcpp/Mistral-7B-Instruct", "messages": [{"role": "user", "content": "Hi"}], **body}
    )


def test_the_payload_is_a_text_generate_async_request_with_only_what_was_set() -> None:
    prepared = prepare_chat_request(
        request(max_tokens=100, top_p=0, stop=["END"], horde={"trusted_workers": True, "max_context_length": 4096})
    )
    assert prepared.payload == {
        "prompt": "[INST] Hi [/INST]",
        "models": ["koboldcpp/Mistral-7B-Instruct"],
        "trusted_workers": True,
        "allow_downgrade": True,
        "params": {
            "max_length": 100,
            "max_context_length": 4096,
            "stop_sequence": ["END", "</s>", "[INST]"],
            "top_p": 0.001,
        },
    }
    assert prepared.x_horde == {"api": "text", "prompt_template": "mistral", "max_context_length": 4096}
    defaults = prepare_chat_request(request())
    assert defaults.payload["params"] == {
        "max_length": 512,
        "max_context_length": 2048,
        "stop_sequence": ["</s>", "[INST]"],
    }


def test_listed_models_of_different_formats_conflict() -> None:
    with pytest.raises(OpenAIError) as conflict:
        prepare_chat_request(
            ChatCompletionRequest.model_validate(
                {
                    "models": ["koboldcpp/Mistral-7B", "koboldcpp/Qwen2-7B"],
                    "messages": [{"role": "user", "content": "x"}],
                }
            )
        )
    assert (conflict.value.status, conflict.value.code, conflict.value.param) == (400, "ChatRequestConflict", "models")
    assert conflict.value.message == (
        "The listed models are served through the Horde's text generation API and use different prompt formats: "
        "koboldcpp/Mistral-7B (mistral), koboldcpp/Qwen2-7B (chatml). List models of one format."
    )


def test_merged_stops_keep_the_clients_first_without_repeats() -> None:
    assert merged_stops("</s>", ("</s>", "[INST]")) == ("</s>", "[INST]")
    assert merged_stops(None, ("a",)) == ("a",)


PREPARED = PreparedTextRequest(
    payload={},
    stop_sequences=("\nUser:",),
    max_length=4,
    estimated_prompt_tokens=9,
    strip_leading_whitespace=True,
    x_horde={"api": "text", "prompt_template": "generic-instruct", "max_context_length": 2048},
)


def test_a_text_status_reads_as_a_native_status() -> None:
    """The text is cut at the first stop sequence and its leading whitespace removed; a stop ends with ``stop``, an
    uncut text of ``max_length`` estimated tokens with ``length``; absent keys stay unknown."""
    body = {
        "done": True,
        "finished": 1,
        "processing": 0,
        "waiting": 0,
        "kudos": 2,
        "is_possible": True,
        "generations": [{"text": " Hello.\nUser: more", "model": "m", "worker_id": "w", "worker_name": "n"}],
    }
    status = native_status(body, PREPARED)
    generation = status.finished_generation
    assert generation is not None
    assert (generation.message, generation.finish_reason, generation.prompt_tokens) == (
        {"content": "Hello."},
        "stop",
        9,
    )
    assert status.eligible_worker_threads is None
    assert status.front_x_horde == PREPARED.x_horde
    long = native_status({**body, "generations": [{"text": "0123456789abcdef"}]}, PREPARED).finished_generation
    assert long is not None and long.finish_reason == "length"


class CountingHorde:
    """A native client stub whose model list reads are counted."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.reads = 0

    async def text_models(self) -> list[dict[str, Any]]:
        self.reads += 1
        return self.entries


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["auto", "on", "off"])
async def test_the_native_path_reads_the_model_list_at_most_once_a_minute_under_auto(mode: str) -> None:
    """On a Horde with chat entries, ``auto`` reads the list once and then leaves the native path alone; ``on``
    reads it (through the cache, 0 s here) for every request; ``off`` never reads it."""
    from types import SimpleNamespace

    from chat.serving.text_route import find_text_route

    horde = CountingHorde([CHAT_ENTRY, TEXT_ENTRY])
    runtime = SimpleNamespace(settings=SimpleNamespace(text_api_fallback=mode, models_cache_seconds=0), horde=horde)
    native = [await find_text_route(runtime, ["org/chat-8b"]) for _ in range(3)]
    text = await find_text_route(runtime, [TEXT_ENTRY["name"]])
    assert native == [False, False, False]
    assert text == (mode == "on")
    assert horde.reads == {"auto": 1, "on": 4, "off": 0}[mode]
    text_only = CountingHorde([TEXT_ENTRY])
    runtime.horde = text_only
    if mode == "auto":
        # A Horde seen with chat entries a moment ago stays a native chat Horde for the verdict's minute.
        assert await find_text_route(runtime, [TEXT_ENTRY["name"]]) is False
        assert text_only.reads == 0
