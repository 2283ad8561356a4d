"""Status: routing fields recomputed at each read, queue fields, generations and worker behaviours
(``native-horde-chat.md``, "Status")."""

from __future__ import annotations

import asyncio
import json

import pytest
from devhorde_helpers import API, chat, scenario, status, submit_ok, wait_done, worker

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
TOOL_FEATURES = ["tools", "tool_choice_enforced", "prompt_overflow_refused"]
SLOW = {"time_to_first_token_seconds": 30.0}


@pytest.mark.asyncio
async def test_unknown_id_is_404(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"{API}/generate/chat/status/nope")
        assert response.status_code == 404
        assert response.json()["rc"] == "RequestNotFound"


@pytest.mark.asyncio
async def test_completed_generation_fields(make_client) -> None:
    client = await make_client(scenario(worker("w1", reply_style="echo")))
    request_id = await submit_ok(client, chat("What is the capital of France?"))
    body = await wait_done(client, request_id)
    assert body["finished"] == 1 and not body["faulted"] and body["fault_reason"] is None
    assert body["waiting"] == 0 and body["processing"] == 0 and body["restarted"] == 0
    generation = body["generations"][0]
    assert generation["message"] == {"role": "assistant", "content": "You said: What is the capital of France?"}
    assert generation["worker_name"] == "w1" and generation["model"] == "m/plain"
    assert generation["finish_reason"] == "stop" and generation["native_finish_reason"] == "eos_token"
    assert generation["completion_tokens"] == 8 and generation["prompt_tokens"] > 0
    assert "reasoning_tokens" not in generation
    assert body["is_possible"] is True and body["stream_progress"] is False


@pytest.mark.asyncio
async def test_topic_reply_is_readable_and_deterministic(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    payload = chat("Explain how tides relate to the moon")
    first = (await wait_done(client, await submit_ok(client, payload)))["generations"][0]["message"]["content"]
    second = (await wait_done(client, await submit_ok(client, payload)))["generations"][0]["message"]["content"]
    assert first == second
    assert "how tides relate to the moon" in first
    assert first.endswith(".")


@pytest.mark.asyncio
async def test_reply_cut_at_max_length_finishes_with_length_and_counts_can_be_absent(make_client) -> None:
    client = await make_client(scenario(worker("w1", reply_words=500, report_usage=[])))
    body = await wait_done(client, await submit_ok(client, chat(params={"max_length": 20})))
    generation = body["generations"][0]
    assert generation["finish_reason"] == "length"
    assert len(generation["message"]["content"].split()) == 20
    assert not {"prompt_tokens", "completion_tokens", "reasoning_tokens"} & set(generation)


@pytest.mark.asyncio
async def test_stop_sequence_cuts_the_reply(make_client) -> None:
    client = await make_client(scenario(worker("w1", reply_style="fixed", fixed_reply="One. Two. Three.")))
    body = await wait_done(client, await submit_ok(client, chat(params={"stop_sequence": [" Two"]})))
    generation = body["generations"][0]
    assert generation["message"]["content"] == "One."
    assert generation["native_finish_reason"] == "stop_sequence"


@pytest.mark.asyncio
async def test_reasoning_follows_the_effort(make_client) -> None:
    client = await make_client(scenario(worker("r1", features=["reasoning_effort", "prompt_overflow_refused"])))
    high = await wait_done(client, await submit_ok(client, chat(params={"reasoning_effort": "high"})))
    message = high["generations"][0]["message"]
    assert message["reasoning_content"].count(".") == 5
    assert high["generations"][0]["reasoning_tokens"] > 0
    off = await wait_done(client, await submit_ok(client, chat(params={"reasoning_effort": "none"})))
    assert "reasoning_content" not in off["generations"][0]["message"]


@pytest.mark.asyncio
async def test_reasoning_only_and_empty_replies(make_client) -> None:
    client = await make_client(
        scenario(
            worker("thinker", "m/think", reasoning="always", reasoning_only=True),
            worker("mute", "m/mute", empty_reply=True),
        ),
    )
    thinking = await wait_done(client, await submit_ok(client, chat(models=["m/think"])))
    message = thinking["generations"][0]["message"]
    assert message["content"] == "" and message["reasoning_content"]
    empty = await wait_done(client, await submit_ok(client, chat(models=["m/mute"])))
    assert empty["generations"][0]["message"] == {"role": "assistant", "content": ""}


@pytest.mark.asyncio
async def test_reasoning_uses_the_whole_budget(make_client) -> None:
    client = await make_client(scenario(worker("r", reasoning="always")))
    body = await wait_done(client, await submit_ok(client, chat(params={"max_length": 16})))
    generation = body["generations"][0]
    assert generation["finish_reason"] == "length"
    assert generation["message"]["content"] == ""
    assert generation["reasoning_tokens"] == 16


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("text", "tool_choice", "parallel", "expected"),
    [
        ("What is the weather in Paris? Also search the web.", "auto", None, ["get_weather", "search_web"]),
        ("What is the weather in Paris? Also search the web.", "auto", False, ["get_weather"]),
        ("Tell me a story", "auto", None, []),
        ("Tell me a story", "required", None, ["get_weather"]),
        ("Tell me a story", {"type": "function", "function": {"name": "search_web"}}, None, ["search_web"]),
        ("What is the weather in Paris?", "none", None, []),
    ],
)
async def test_tool_calls_follow_tools_and_tool_choice(make_client, text, tool_choice, parallel, expected) -> None:
    client = await make_client(scenario(worker("t", features=TOOL_FEATURES)))
    payload = chat(text, tools=TOOLS, tool_choice=tool_choice)
    if parallel is not None:
        payload["parallel_tool_calls"] = parallel
    body = await wait_done(client, await submit_ok(client, payload))
    message = body["generations"][0]["message"]
    calls = message.get("tool_calls", [])
    assert [call["function"]["name"] for call in calls] == expected
    if expected:
        assert message["content"] is None and body["generations"][0]["finish_reason"] == "tool_calls"
        for call in calls:
            assert call["id"].startswith("call_") and call["type"] == "function"
            arguments = json.loads(call["function"]["arguments"])
            if call["function"]["name"] == "get_weather":
                assert arguments["unit"] == "c" and arguments["city"]
    else:
        assert message["content"]


@pytest.mark.asyncio
async def test_tool_result_turn_gets_a_text_answer(make_client) -> None:
    client = await make_client(scenario(worker("t", features=TOOL_FEATURES)))
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
    ]
    body = await wait_done(
        client, await submit_ok(client, {"messages": messages, "models": ["m/plain"], "tools": TOOLS})
    )
    assert "get_weather tool returned: 18 C and sunny" in body["generations"][0]["message"]["content"]


@pytest.mark.asyncio
async def test_json_replies(make_client) -> None:
    features = ["json_object", "json_schema", "structured_output_enforced", "prompt_overflow_refused"]
    client = await make_client(scenario(worker("j", features=features)))
    as_object = await wait_done(client, await submit_ok(client, chat(response_format={"type": "json_object"})))
    assert isinstance(json.loads(as_object["generations"][0]["message"]["content"]), dict)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 3}},
        "required": ["name", "age"],
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}
    as_schema = await wait_done(client, await submit_ok(client, chat(response_format=response_format)))
    value = json.loads(as_schema["generations"][0]["message"]["content"])
    assert set(value) == {"name", "age"} and value["age"] == 3


@pytest.mark.asyncio
async def test_strict_reply_verification_refuses_bad_tool_calls_best_effort_passes(make_client) -> None:
    client = await make_client(scenario(worker("t", features=TOOL_FEATURES, tool_calls="invalid")))
    strict = await wait_done(client, await submit_ok(client, chat(tools=TOOLS)))
    assert strict["faulted"] and strict["fault_reason"] == "reply_refused" and strict["generations"] == []
    loose = await wait_done(client, await submit_ok(client, chat(tools=TOOLS, conformance="best_effort")))
    assert loose["generations"][0]["message"]["tool_calls"][0]["function"]["name"] == "undefined_function"


@pytest.mark.asyncio
async def test_declaration_gap_is_reported_and_recomputed(make_client) -> None:
    client = await make_client(scenario(worker("w1"), worker("w2", features=[])))
    request_id = await submit_ok(client, chat(params={"reasoning_effort": "low"}))
    body = await status(client, request_id)
    assert body["is_possible"] is False and body["waiting"] == 1
    assert body["eligible_workers"] == 0 and body["eligible_worker_threads"] == 0
    assert body["impossible_reason"] == {
        "kind": "declaration_gap",
        "missing_declarations": ["reasoning_effort"],
        "exceeded_limits": [],
    }
    patched = await client.post(
        "/_devhorde/workers/w1", json={"features": ["reasoning_effort", "prompt_overflow_refused"]}
    )
    assert patched.status_code == 200
    done = await wait_done(client, request_id)
    assert done["is_possible"] is True and "impossible_reason" not in done
    assert done["generations"][0]["worker_name"] == "w1"


@pytest.mark.asyncio
async def test_strict_needs_prompt_overflow_refused_best_effort_does_not(make_client) -> None:
    client = await make_client(scenario(worker("w1", features=[])))
    strict = await status(client, await submit_ok(client, chat()))
    assert strict["impossible_reason"]["missing_declarations"] == ["prompt_overflow_refused"]
    loose = await wait_done(client, await submit_ok(client, chat(conformance="best_effort")))
    assert loose["finished"] == 1


@pytest.mark.asyncio
async def test_max_context_length_gap(make_client) -> None:
    client = await make_client(scenario(worker("w1", max_context_length=4096)))
    body = await status(client, await submit_ok(client, chat(params={"max_context_length": 8192})))
    assert body["is_possible"] is False
    assert body["impossible_reason"] == {
        "kind": "declaration_gap",
        "missing_declarations": [],
        "exceeded_limits": ["max_context_length"],
    }


@pytest.mark.asyncio
async def test_max_length_gap_after_the_workers_change(make_client) -> None:
    client = await make_client(
        scenario(worker("w1", max_length=1024, **SLOW), worker("w2", max_length=1024, online=False))
    )
    busy = await submit_ok(client, chat())
    request_id = await submit_ok(client, chat(params={"max_length": 1000}))
    assert (await status(client, request_id))["is_possible"] is True
    await client.post("/_devhorde/workers/w1", json={"max_length": 512})
    body = await status(client, request_id)
    assert body["impossible_reason"]["exceeded_limits"] == ["max_length"]
    assert (await status(client, busy))["is_possible"] is True  # restarted onto w1 again, within its limit


@pytest.mark.asyncio
async def test_tools_max_temperature_gap(make_client) -> None:
    client = await make_client(scenario(worker("t", features=TOOL_FEATURES, tools_max_temperature=1.0)))
    body = await status(client, await submit_ok(client, chat(tools=TOOLS, params={"temperature": 1.5})))
    assert body["impossible_reason"]["exceeded_limits"] == ["tools_max_temperature"]


@pytest.mark.asyncio
async def test_worker_options_filter_without_a_known_cause(make_client) -> None:
    client = await make_client(scenario(worker("w1", trusted=False)))
    body = await status(client, await submit_ok(client, chat(trusted_workers=True)))
    assert body["is_possible"] is False and "impossible_reason" not in body
    listed = await wait_done(client, await submit_ok(client, chat(workers=["w1"])))
    assert listed["finished"] == 1
    blacklisted = await status(client, await submit_ok(client, chat(workers=["w1"], worker_blacklist=True)))
    assert blacklisted["is_possible"] is False


@pytest.mark.asyncio
async def test_queue_fields_and_eligible_threads(make_client) -> None:
    client = await make_client(
        scenario(
            worker("a", threads=2, tokens_per_second=10, **SLOW),
            worker("b", threads=1, tokens_per_second=10, **SLOW),
            worker("other", "m/other", **SLOW),
        ),
    )
    running = [await submit_ok(client, chat()) for _ in range(3)]
    queued = [await submit_ok(client, chat()) for _ in range(2)]
    for request_id in running:
        body = await status(client, request_id)
        assert body["processing"] == 1 and body["queue_position"] == 0
    first, second = [await status(client, request_id) for request_id in queued]
    assert first["waiting"] == 1 and first["queue_position"] == 1
    assert second["queue_position"] == 2 and second["wait_time"] > first["wait_time"] > 0
    assert first["wait_time"] == 18 and second["wait_time"] == 35  # 512 and 1024 tokens at 30 tokens/s
    assert first["eligible_workers"] == 2 and first["eligible_worker_threads"] == 3
    assert first["might_stall"] is False and first["is_possible"] is True


@pytest.mark.asyncio
async def test_queue_positions_across_models_and_after_a_cancel(make_client) -> None:
    """A request's queue is the waiting requests submitted before it that share a model and an eligible worker; the
    positions the devhorde keeps between changes follow a cancel at once."""
    client = await make_client(
        scenario(
            worker("a", threads=1, tokens_per_second=10, **SLOW),
            worker("b", "m/other", threads=1, tokens_per_second=10, **SLOW),
        ),
    )
    await submit_ok(client, chat())
    await submit_ok(client, chat(models=["m/other"]))
    plain = await submit_ok(client, chat())
    other = await submit_ok(client, chat(models=["m/other"]))
    both = await submit_ok(client, chat(models=["m/plain", "m/other"]))
    last = await submit_ok(client, chat())

    async def queue(request_id: str) -> tuple[int, int]:
        body = await status(client, request_id)
        return body["queue_position"], body["wait_time"]

    assert await queue(plain) == (1, 52)  # 512 tokens at 10 tokens/s
    assert await queue(other) == (1, 52)
    assert await queue(both) == (3, 77)  # plain and other ahead; 3 x 512 tokens at 20 tokens/s
    assert await queue(last) == (3, 154)  # plain and both ahead (other shares no model); 3 x 512 at 10
    assert (await client.delete(f"{API}/generate/chat/status/{plain}")).status_code == 200
    assert await queue(both) == (2, 52)
    assert await queue(last) == (2, 103)
    assert await queue(other) == (1, 52)


@pytest.mark.asyncio
async def test_queue_positions_stay_zero_until_the_refresh(make_client) -> None:
    client = await make_client(scenario(worker("a", **SLOW), queue_position_delay_seconds=0.3))
    await submit_ok(client, chat())
    queued = await submit_ok(client, chat())
    early = await status(client, queued)
    assert early["queue_position"] == 0 and early["wait_time"] == 0
    await asyncio.sleep(0.35)
    assert (await status(client, queued))["queue_position"] == 1


@pytest.mark.asyncio
async def test_older_horde_omits_the_routing_keys(make_client) -> None:
    client = await make_client(scenario(worker("w1", features=[]), older_horde=True))
    body = await status(client, await submit_ok(client, chat()))
    assert body["is_possible"] is False
    assert not {"eligible_workers", "eligible_worker_threads", "might_stall", "impossible_reason"} & set(body)


@pytest.mark.asyncio
async def test_faults(make_client) -> None:
    client = await make_client(
        scenario(
            worker("f", "m/fault", fault_reason="generation_error", fault_after_posts=1),
            worker("small", "m/small", max_context_length=20),
        ),
    )
    faulted = await wait_done(client, await submit_ok(client, chat(models=["m/fault"])))
    assert faulted["faulted"] is True and faulted["fault_reason"] == "generation_error"
    assert faulted["finished"] == 0 and faulted["generations"] == []
    overflow = await wait_done(
        client, await submit_ok(client, chat("word " * 40, models=["m/small"], params={"max_length": 16}))
    )
    assert overflow["fault_reason"] == "prompt_overflow"


@pytest.mark.asyncio
async def test_done_without_generation_and_transient_done(make_client) -> None:
    client = await make_client(
        scenario(
            worker("none", "m/none", done_without_generation=True),
            worker("transient", "m/transient", done_while_processing=True, time_to_first_token_seconds=0.3),
        ),
    )
    empty = await wait_done(client, await submit_ok(client, chat(models=["m/none"])))
    assert empty["done"] and not empty["faulted"] and empty["finished"] == 0 and empty["generations"] == []
    transient_id = await submit_ok(client, chat(models=["m/transient"]))
    transient = await status(client, transient_id)
    assert transient["done"] is True and transient["processing"] == 1 and transient["finished"] == 0
    final = await wait_done(client, transient_id)
    assert final["finished"] == 1


@pytest.mark.asyncio
async def test_any_listed_model_may_serve(make_client) -> None:
    client = await make_client(scenario(worker("w1", "m/b"), known_models=["m/a"]))
    body = await wait_done(client, await submit_ok(client, chat(models=["m/a", "m/b"])))
    assert body["generations"][0]["model"] == "m/b"


@pytest.mark.asyncio
async def test_vision_routing(make_client) -> None:
    client = await make_client(
        scenario(
            worker("blind", "m/v"),
            worker("eyes", "m/v", features=["vision", "prompt_overflow_refused"], image_transports=["url"]),
        ),
    )
    image_message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ],
    }
    request_id = await submit_ok(client, {"messages": [image_message], "models": ["m/v"]})
    assert (await status(client, request_id))["eligible_workers"] == 1
    generation = (await wait_done(client, request_id))["generations"][0]
    assert generation["worker_name"] == "eyes"
    assert "image" in generation["message"]["content"]
