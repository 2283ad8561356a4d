"""Submit: every refusal row of the contract's table, the 202 body and the worker_max_length adjustment
(``native-horde-chat.md``, "Submit")."""

from __future__ import annotations

import pytest
from devhorde_helpers import API, chat, scenario, status, submit, submit_ok, worker
from horde_sdk.generation_parameters.text.chat_limits import MAX_CHAT_STOP_SEQUENCES, MIN_CHAT_MAX_TOKENS

from devhorde.limits import DEFAULT_CHAT_MAX_TOKENS, MAX_CHAT_MODEL_COUNT

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def plain() -> object:
    return scenario(worker("w1", max_length=1024), known_models=["m/unserved"])


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"models": ["m/plain"]}, "messages"),
        ({"messages": [], "models": ["m/plain"]}, "messages"),
        ({"messages": [{"role": "user", "content": 5}], "models": ["m/plain"]}, "messages.0.content"),
        ({"messages": [{"role": "robot", "content": "x"}], "models": ["m/plain"]}, "messages.0.role"),
        (chat(params={"max_length": "many"}), "params.max_length"),
        (chat(params={"stop_sequence": "\n"}), "params.stop_sequence"),
        (chat(params={"reasoning_effort": "extreme"}), "params.reasoning_effort"),
        (chat(models=[]), "models"),
        (chat(models=["m/plain", "m/plain"]), "models"),
        (chat(models=[f"m/{i}" for i in range(MAX_CHAT_MODEL_COUNT + 1)]), "models"),
        (chat(stream="yes"), "stream"),
        (chat(conformance="loose"), "conformance"),
        (chat(tool_choice="sometimes", tools=[TOOL]), "tool_choice"),
        (chat(response_format={"type": "xml"}), "response_format.type"),
    ],
)
async def test_payload_validation_failure_has_errors_and_no_rc(make_client, payload, path) -> None:
    client = await make_client(plain())
    response = await submit(client, payload)
    assert response.status_code == 400
    body = response.json()
    assert body["message"] == "Input payload validation failed"
    assert path in body["errors"]
    assert "rc" not in body


@pytest.mark.asyncio
async def test_missing_apikey_header_is_a_validation_failure(make_client) -> None:
    client = await make_client(plain())
    response = await submit(client, chat(), headers={})
    assert response.status_code == 400
    assert "apikey" in response.json()["errors"]


@pytest.mark.asyncio
async def test_body_that_is_not_json_is_refused(make_client) -> None:
    client = await make_client(plain())
    response = await client.post(f"{API}/generate/chat/async", content=b"{nope", headers={"apikey": "k"})
    assert response.status_code == 400
    assert "message" in response.json()


@pytest.mark.asyncio
async def test_unknown_model_message_starts_with_the_quoted_entry_path(make_client) -> None:
    client = await make_client(plain())
    response = await submit(client, chat(models=["m/plain", "m/nowhere"]))
    assert response.status_code == 400
    assert response.json() == {"message": "'models[1]' is not a known text model.", "rc": "UnknownModel"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("payload", "param"),
    [
        (chat(params={"max_length": MIN_CHAT_MAX_TOKENS - 1}), "max_tokens"),
        (chat(params={"stop_sequence": ["x"] * (MAX_CHAT_STOP_SEQUENCES + 1)}), "stop"),
        (chat(params={"temperature": 2.5}), "temperature"),
        (chat(params={"n": 2}), "n"),
        (
            chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "other"}}),
            "tool_choice.function.name",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "call_1", "content": "x"}], "models": ["m/plain"]},
            "messages.[0].role",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                        ],
                    },
                    {"role": "user", "content": "and?"},
                ],
                "models": ["m/plain"],
            },
            "messages.[2].role",
        ),
    ],
)
async def test_unsupported_chat_parameter_names_the_param(make_client, payload, param) -> None:
    client = await make_client(plain())
    response = await submit(client, payload)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["rc"] == "UnsupportedChatParameter"
    assert body["param"] == param
    assert body["message"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("payload", "param"),
    [
        (chat(tool_choice="auto"), "tool_choice"),
        (chat(parallel_tool_calls=False), "parallel_tool_calls"),
        (chat(tools=[], tool_choice="none"), "tool_choice"),
        (chat(response_format={"type": "json_object"}, openai_guards=True), "messages"),
    ],
)
async def test_chat_request_conflict(make_client, payload, param) -> None:
    client = await make_client(plain())
    response = await submit(client, payload)
    assert response.status_code == 400, response.text
    assert response.json()["rc"] == "ChatRequestConflict"
    assert response.json()["param"] == param


@pytest.mark.asyncio
async def test_json_guard_passes_when_the_messages_mention_json(make_client) -> None:
    client = await make_client(scenario(worker("w1", features=["json_object", "prompt_overflow_refused"])))
    payload = chat("Answer in JSON please", response_format={"type": "json_object"}, openai_guards=True)
    assert (await submit(client, payload)).status_code == 202


@pytest.mark.asyncio
async def test_kudos_cap_message_has_the_contract_format(make_client) -> None:
    # The estimate is round(max_length * kudos_per_token, 2): 860 * 0.25 = 215.
    client = await make_client(scenario(worker("w1", max_length=2048), kudos_per_token=0.25))
    response = await submit(client, chat(params={"max_length": 860}, max_kudos=1))
    assert response.status_code == 400
    assert response.json() == {
        "message": "The request's kudos estimate at current pricing is 215, above its horde.max_kudos of 1. "
        "The estimate assumes the full max_tokens is generated.",
        "rc": "ChatKudosCapExceeded",
    }
    assert (await submit(client, chat(params={"max_length": 860}, max_kudos=215))).status_code == 202


@pytest.mark.asyncio
async def test_invalid_api_key(make_client) -> None:
    client = await make_client(scenario(worker("w1"), invalid_api_keys=["bad-key"]))
    response = await submit(client, chat(), headers={"apikey": "bad-key"})
    assert response.status_code == 401
    assert response.json()["rc"] == "InvalidAPIKey"


@pytest.mark.asyncio
async def test_free_output_allowance_refusals(make_client) -> None:
    client = await make_client(
        scenario(worker("w1", max_length=4096), free_output_allowance=512, upfront_kudos_api_keys=["rich"]),
    )
    over = chat(params={"max_length": 1024})
    upfront = await submit(client, over)
    assert upfront.status_code == 403
    assert upfront.json()["rc"] == "KudosUpfront"
    assert (await submit(client, over, headers={"apikey": "rich"})).status_code == 202
    assert (await submit(client, chat(params={"max_length": 512}))).status_code == 202
    unservable = await submit(client, chat(params={"max_length": 1024, "reasoning_effort": "low"}))
    assert unservable.status_code == 403
    assert unservable.json()["rc"] == "NoEligibleWorker"
    assert unservable.json()["impossible_reason"] == {
        "kind": "declaration_gap",
        "missing_declarations": ["reasoning_effort"],
        "exceeded_limits": [],
    }


@pytest.mark.asyncio
async def test_scripted_refusals_429_with_and_without_rc(make_client) -> None:
    client = await make_client(
        scenario(
            worker("w1"),
            submit_refusals=[
                {"status": 429, "rc": "TooManyPrompts", "message": "Slow down.", "retry_after": 7, "times": 1},
                {"status": 429, "message": "Rate limited.", "apikey": "bare"},
            ],
        ),
    )
    first = await submit(client, chat())
    assert first.status_code == 429
    assert first.json() == {"message": "Slow down.", "rc": "TooManyPrompts"}
    assert first.headers["retry-after"] == "7"
    assert (await submit(client, chat())).status_code == 202
    bare = await submit(client, chat(), headers={"apikey": "bare"})
    assert bare.status_code == 429
    assert bare.json() == {"message": "Rate limited."}
    assert "retry-after" not in bare.headers


@pytest.mark.asyncio
async def test_scripted_403_no_eligible_worker_with_auto_impossible_reason(make_client) -> None:
    client = await make_client(
        scenario(
            worker("w1"),
            submit_refusals=[{"status": 403, "rc": "NoEligibleWorker", "impossible_reason": "auto"}],
        ),
    )
    gap = await submit(client, chat(params={"seed": 3}))
    assert gap.status_code == 403
    assert gap.json()["impossible_reason"]["missing_declarations"] == ["seed"]
    no_gap = await submit(client, chat())
    assert no_gap.status_code == 403
    assert "impossible_reason" not in no_gap.json()


@pytest.mark.asyncio
async def test_no_online_worker_for_the_model_is_503(make_client) -> None:
    client = await make_client(plain())
    response = await submit(client, chat(models=["m/unserved"]))
    assert response.status_code == 503
    assert response.json() == {
        "message": "No worker is currently serving the model 'm/unserved'. Retry later.",
        "rc": "NoEligibleWorker",
    }


@pytest.mark.asyncio
async def test_maintenance_mode(make_client) -> None:
    client = await make_client(scenario(worker("w1"), maintenance=True))
    response = await submit(client, chat())
    assert response.status_code == 503
    assert response.json()["rc"] == "MaintenanceMode"


@pytest.mark.asyncio
async def test_accepted_body_and_warnings(make_client) -> None:
    client = await make_client(
        scenario(worker("w1"), kudos_per_token=0.5, submit_warnings=[{"code": "Demo", "message": "A warning."}]),
    )
    response = await submit(client, chat(params={"max_length": 100}))
    assert response.status_code == 202
    body = response.json()
    assert body["kudos"] == 50
    assert body["warnings"] == [{"code": "Demo", "message": "A warning."}]
    assert isinstance(body["id"], str)
    client_plain = await make_client(plain())
    assert "warnings" not in (await submit(client_plain, chat())).json()


@pytest.mark.asyncio
async def test_worker_max_length_adjustment(make_client) -> None:
    client = await make_client(
        scenario(
            worker("small", max_length=300),
            worker("big", max_length=1000),
            worker("off", max_length=9000, online=False),
        ),
    )
    lowered = await submit_ok(client, chat(params={"max_length": 4096}))
    assert (await status(client, lowered))["context_adjustments"] == [
        {"kind": "worker_max_length", "requested": 4096, "applied": 1000},
    ]
    kept = await submit_ok(client, chat(params={"max_length": 1000}))
    assert "context_adjustments" not in await status(client, kept)


@pytest.mark.asyncio
async def test_default_max_length_is_lowered_too(make_client) -> None:
    client = await make_client(scenario(worker("small", max_length=256)))
    request_id = await submit_ok(client, chat())
    assert (await status(client, request_id))["context_adjustments"] == [
        {"kind": "worker_max_length", "requested": DEFAULT_CHAT_MAX_TOKENS, "applied": 256},
    ]
