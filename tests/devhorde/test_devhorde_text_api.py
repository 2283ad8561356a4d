"""The simulated text generation API: submit, dry run, status, cancel, shapes from horde_sdk, the text-only scenario."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from devhorde_helpers import API, KEY, scenario, worker
from horde_sdk.ai_horde_api.apimodels.generate.text.async_ import (
    TextGenerateAsyncDryRunResponse,
    TextGenerateAsyncResponse,
)
from horde_sdk.ai_horde_api.apimodels.generate.text.status import TextGenerateStatusResponse

from devhorde.scenario import load_scenario


def text_payload(prompt: str = "User: Tell me about tides\nAssistant:", **params: Any) -> dict[str, Any]:
    return {"prompt": prompt, "models": ["m/plain"], "params": {"max_length": 64, "max_context_length": 2048, **params}}


async def text_status(client: httpx.AsyncClient, request_id: str) -> dict[str, Any]:
    response = await client.get(f"{API}/generate/text/status/{request_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def wait_text_done(client: httpx.AsyncClient, request_id: str, timeout: float = 5.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        body = await text_status(client, request_id)
        if body["done"]:
            return body
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_submit_status_and_generation_have_horde_sdk_shapes(make_client) -> None:
    client = await make_client(scenario(worker("w1", chat=False, reply_style="fixed", fixed_reply="Tides follow.")))
    response = await client.post(f"{API}/generate/text/async", json=text_payload(), headers=KEY)
    assert response.status_code == 202
    accepted = TextGenerateAsyncResponse.model_validate(response.json())
    assert accepted.kudos == round(64 * 0.025, 2)
    body = await wait_text_done(client, response.json()["id"])
    status = TextGenerateStatusResponse.model_validate(body)
    assert status.done and status.finished == 1 and not status.faulted
    generation = status.generations[0]
    assert (generation.text, generation.model, generation.worker_name) == ("Tides follow.", "m/plain", "w1")


@pytest.mark.asyncio
async def test_stop_sequences_and_max_length_cut_the_text(make_client) -> None:
    client = await make_client(scenario(worker("w1", chat=False, reply_style="fixed", fixed_reply="One two\nUser: x")))
    response = await client.post(
        f"{API}/generate/text/async", json=text_payload(stop_sequence=["\nUser:"]), headers=KEY
    )
    body = await wait_text_done(client, response.json()["id"])
    assert body["generations"][0]["text"] == "One two"
    long_reply = " ".join(["word"] * 40)
    client = await make_client(scenario(worker("w2", chat=False, reply_style="fixed", fixed_reply=long_reply)))
    response = await client.post(f"{API}/generate/text/async", json=text_payload(max_length=16), headers=KEY)
    body = await wait_text_done(client, response.json()["id"])
    assert body["generations"][0]["text"] == " ".join(["word"] * 16)


@pytest.mark.asyncio
async def test_dry_run_answers_the_kudos_estimate_and_creates_nothing(make_client) -> None:
    client = await make_client(scenario(worker("w1", chat=False)))
    response = await client.post(f"{API}/generate/text/async", json={**text_payload(), "dry_run": True}, headers=KEY)
    assert response.status_code == 200
    assert TextGenerateAsyncDryRunResponse.model_validate(response.json()).kudos == 1.6
    assert (await client.get("/_devhorde/requests")).json() == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"models": ["m/plain"]}, "prompt"),
        (text_payload(max_length=5), "params.max_length"),
        (text_payload(max_context_length=10), "params.max_context_length"),
    ],
)
async def test_invalid_payloads_are_400_with_errors(make_client, payload: dict[str, Any], path: str) -> None:
    client = await make_client(scenario(worker("w1", chat=False)))
    response = await client.post(f"{API}/generate/text/async", json=payload, headers=KEY)
    assert response.status_code == 400
    assert response.json()["message"] == "Input payload validation failed"
    assert path in response.json()["errors"]


@pytest.mark.asyncio
async def test_unserved_model_is_accepted_and_impossible(make_client) -> None:
    """A request no online worker can serve is accepted and reads ``is_possible: false`` (a worker too small for the
    requested context does not count)."""
    client = await make_client(scenario(worker("w1", chat=False, max_context_length=1024)))
    response = await client.post(f"{API}/generate/text/async", json=text_payload(), headers=KEY)
    assert response.status_code == 202
    body = await text_status(client, response.json()["id"])
    assert (body["is_possible"], body["waiting"], body["done"]) == (False, 1, False)


@pytest.mark.asyncio
async def test_cancel_ends_a_request_without_a_generation(make_client) -> None:
    client = await make_client(scenario(worker("w1", chat=False, time_to_first_token_seconds=30)))
    response = await client.post(f"{API}/generate/text/async", json=text_payload(), headers=KEY)
    request_id = response.json()["id"]
    cancelled = await client.delete(f"{API}/generate/text/status/{request_id}")
    assert cancelled.status_code == 200
    assert (cancelled.json()["done"], cancelled.json()["generations"]) == (True, [])
    described = (await client.get("/_devhorde/requests")).json()
    assert [(item["api"], item["cancelled"], item["state"]) for item in described] == [("text", True, "cancelled")]
    missing = await client.get(f"{API}/generate/text/status/no-such-id")
    assert (missing.status_code, missing.json()["rc"]) == (404, "RequestNotFound")


@pytest.mark.asyncio
async def test_text_only_scenario_lists_models_without_chat_entries(make_client) -> None:
    client = await make_client(load_scenario("text-only"))
    entries = (await client.get(f"{API}/status/models", params={"type": "text"})).json()
    assert [entry["name"] for entry in entries] == [
        "koboldcpp/Meta-Llama-3-8B-Instruct",
        "koboldcpp/Mistral-7B-Instruct-v0.3",
        "koboldcpp/tiny-story-1b",
    ]
    assert all("chat" not in entry and entry["count"] == 1 for entry in entries)
    refused = await client.post(
        f"{API}/generate/chat/async",
        json={"messages": [{"role": "user", "content": "hi"}], "models": ["koboldcpp/tiny-story-1b"]},
        headers=KEY,
    )
    assert (refused.status_code, refused.json()["rc"]) == (503, "NoEligibleWorker")
