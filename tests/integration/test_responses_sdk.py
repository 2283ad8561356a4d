"""``POST /v1/responses`` end to end: the official ``openai`` SDK's ``responses.create`` / ``responses.stream`` /
``responses.parse`` and the OpenAI Agents SDK's default Responses model, against a real uvicorn front, a real
devhorde (the ``fast`` scenario) and the Redis on 127.0.0.1:6379.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import FunctionToolParam
from pydantic import BaseModel

from tests.conftest import LiveStack

pytestmark = pytest.mark.integration

TEXT_MODEL = "devhorde/tiny-1b"
REASONING_MODEL = "devhorde/reasoner-8b"
TOOL_MODEL = "devhorde/toolsmith-7b"
WEATHER_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class CityFacts(BaseModel):
    """The ``text.format`` json_schema of the parse tests (strict, as ``responses.parse`` sends it)."""

    city: str
    population: int


def client(stack: LiveStack, api_key: str = "0000000000") -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key=api_key, max_retries=0, timeout=30)


def native_generation(stack: LiveStack, response_id: str) -> dict[str, Any]:
    """The finished generation of the native request behind a response, from the devhorde's status route."""
    request_id = stack.latest_native_request(response_id)["id"]
    status = httpx.get(f"{stack.horde_url}/v2/generate/chat/status/{request_id}", timeout=5).json()
    generation: dict[str, Any] = status["generations"][0]
    return generation


# ---------------------------------------------------------------------------------------------------------------------
# Text


def test_create_text(stack: LiveStack) -> None:
    response = client(stack, api_key="responses-key-1").responses.create(
        model=TEXT_MODEL, instructions="Be brief.", input="Tell me about lighthouses.", max_output_tokens=48
    )
    generation = native_generation(stack, response.id)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.model == TEXT_MODEL
    assert response.output_text == generation["message"]["content"] and response.output_text.strip()
    assert [item.type for item in response.output] == ["message"]
    assert response.status == ("incomplete" if generation["finish_reason"] == "length" else "completed")
    assert response.usage is not None
    assert response.usage.output_tokens == generation["completion_tokens"]
    assert response.usage.input_tokens == generation["prompt_tokens"]
    assert response.to_dict()["store"] is True  # OpenAI's default: the response is stored
    native = stack.latest_native_request(response.id)
    assert native["apikey"] == "responses-key-1"
    assert native["payload"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me about lighthouses."},
    ]
    assert native["payload"]["params"]["max_length"] == 48


def test_length_stop_is_incomplete(stack: LiveStack) -> None:
    response = client(stack).responses.create(
        model=TEXT_MODEL, input="Tell me about lighthouses.", max_output_tokens=16
    )
    assert native_generation(stack, response.id)["finish_reason"] == "length"
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"


def test_stream_text_is_relayed_live_in_openais_event_order(stack: LiveStack) -> None:
    with client(stack).responses.stream(model=TEXT_MODEL, input="Tell me about lighthouses.") as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == final.output_text == native_generation(stack, final.id)["message"]["content"]
    assert stack.latest_native_request(final.id)["payload"]["stream"] is True  # the relay ran: the worker posted deltas


@pytest.mark.asyncio
async def test_async_stream_with_create(stack: LiveStack) -> None:
    aclient = openai.AsyncOpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=30)
    stream = await aclient.responses.create(model=TEXT_MODEL, input="Tell me about tides.", stream=True)
    events = [event async for event in stream]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == events[-1].response.output_text


def test_wire_format_event_lines_keepalives_and_error_event(stack: LiveStack) -> None:
    """A browser's stream carries the CORS headers and no proxy buffering; each event is ``event: <type>`` and
    ``data: <json>``; keepalive comments (with the queue progress) go out while the request waits; a
    failure after the headers is one ``error`` event that ends the stream (here: no eligible worker after the
    grace, because the only worker of the model is untrusted)."""
    scenario = copy.deepcopy(stack.default_scenario)  # type: ignore[attr-defined]
    scenario["workers"].append(
        {"name": "untrusted-r1", "model": "responses/untrusted-2b", "trusted": False, "features": [], "threads": 1}
    )
    stack.put_scenario(scenario)
    body = {
        "model": "responses/untrusted-2b",
        "input": "Hi",
        "stream": True,
        "horde": {"trusted_workers": True},
    }
    origin = {"Origin": "http://client.example"}
    with httpx.stream("POST", f"{stack.openai_base_url}/responses", json=body, headers=origin, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["access-control-allow-origin"] == "*"  # a browser client reads the stream
        assert response.headers["access-control-expose-headers"] == (
            "Retry-After, x-should-retry, x-horde-queue-position, x-horde-wait-time"
        )
        assert response.headers["x-accel-buffering"] == "no"
        raw = response.read().decode()
    blocks = [block for block in raw.split("\n\n") if block]
    # the keepalive comments say the place, and that no online worker can take it (the only one is untrusted)
    assert {block for block in blocks if block.startswith(":")} == {
        ": queue position 1, no online worker can serve it now"
    }
    events = [block for block in blocks if not block.startswith(":")]
    assert [block.split("\n")[0] for block in events] == [
        "event: response.created",
        "event: response.in_progress",
        "event: error",
    ]
    error = json.loads(events[-1].split("\n")[1].removeprefix("data: "))
    assert error["type"] == "error" and error["sequence_number"] == 2
    assert error["code"] == "no_eligible_worker"
    assert error["message"].startswith("No online worker could serve this request for 1.5 seconds")
    assert error["metadata"]["retry_after"] == 30


# ---------------------------------------------------------------------------------------------------------------------
# Tools


def tool_round_trip(stack: LiveStack, *, stream: bool) -> tuple[openai.types.responses.Response, dict[str, Any]]:
    """Ask for the weather, run the call, send its output back with the whole history; return the last response
    and the native payload of the second request."""
    sdk = client(stack)
    history: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]

    def respond(items: list[Any]) -> openai.types.responses.Response:
        if not stream:
            return sdk.responses.create(model=TOOL_MODEL, input=items, tools=[WEATHER_TOOL])
        with sdk.responses.stream(model=TOOL_MODEL, input=items, tools=[WEATHER_TOOL]) as events:
            return events.get_final_response()

    first = respond(history)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"})
    second = respond(history)
    return second, stack.latest_native_request(second.id)["payload"]


@pytest.mark.parametrize("stream", [False, True])
def test_tools_round_trip(stack: LiveStack, stream: bool) -> None:
    second, payload = tool_round_trip(stack, stream=stream)
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text.strip() and "sunny, 21 C" in second.output_text
    call = payload["messages"][1]["tool_calls"][0]
    assert payload["messages"][1]["role"] == "assistant"
    assert call["function"] == {"name": "get_weather", "arguments": call["function"]["arguments"]}
    assert payload["messages"][2] == {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"}
    assert payload["tools"][0]["function"]["name"] == "get_weather"


# ---------------------------------------------------------------------------------------------------------------------
# Structured output


def test_parse_json_schema(stack: LiveStack) -> None:
    response = client(stack).responses.parse(
        model=TOOL_MODEL, input="Facts about Paris as JSON.", text_format=CityFacts
    )
    assert isinstance(response.output_parsed, CityFacts)
    assert CityFacts.model_validate_json(native_generation(stack, response.id)["message"]["content"]) == (
        response.output_parsed
    )
    format_sent = stack.latest_native_request(response.id)["payload"]["response_format"]
    assert format_sent["type"] == "json_schema" and format_sent["json_schema"]["name"] == "CityFacts"
    assert format_sent["json_schema"]["strict"] is True


def test_stream_parse_json_schema(stack: LiveStack) -> None:
    with client(stack).responses.stream(
        model=TOOL_MODEL, input="Facts about Paris as JSON.", text_format=CityFacts
    ) as stream:
        done = [event for event in stream if event.type == "response.output_text.done"]
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, CityFacts)
    assert len(done) == 1 and done[0].parsed == final.output_parsed


# ---------------------------------------------------------------------------------------------------------------------
# Reasoning


def test_reasoning_item_and_tokens(stack: LiveStack) -> None:
    response = client(stack).responses.create(
        model=REASONING_MODEL, input="Why is the sky blue?", reasoning={"effort": "low"}
    )
    generation = native_generation(stack, response.id)
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert [part.text for part in reasoning.summary] == [generation["message"]["reasoning_content"]]
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == generation["reasoning_tokens"] > 0
    assert stack.latest_native_request(response.id)["payload"]["params"]["reasoning_effort"] == "low"


def test_stream_reasoning_then_text(stack: LiveStack) -> None:
    with client(stack).responses.stream(
        model=REASONING_MODEL, input="Why is the sky blue?", reasoning={"effort": "high"}
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    generation = native_generation(stack, final.id)
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (reasoning, text) == (generation["message"]["reasoning_content"], generation["message"]["content"])
    added = [event.item.type for event in events if event.type == "response.output_item.added"]
    assert added == ["reasoning", "message"]


# ---------------------------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        ({"conversation": "conv_abc"}, "conversation"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"include": ["reasoning.encrypted_content"]}, "include[0]"),
    ],
)
def test_state_needing_features_are_the_sdks_bad_request(stack: LiveStack, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client(stack).responses.create(model=TEXT_MODEL, input="Hi", **extra)
    assert (refused.value.status_code, refused.value.code, refused.value.param) == (
        400,
        "UnsupportedChatParameter",
        param,
    )


def test_unknown_model_names_model(stack: LiveStack) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client(stack).responses.create(model="nobody/serves-this", input="Hi")
    assert refused.value.status_code == 400
    assert (refused.value.code, refused.value.param) == ("UnknownModel", "model")


# ---------------------------------------------------------------------------------------------------------------------
# The OpenAI Agents SDK, imported in the tests that drive it: every pytest-xdist worker imports this file to collect
# it and one runs it, and the SDK takes about two seconds of CPU to import.


@pytest.mark.asyncio
@pytest.mark.parametrize("streamed", [False, True])
async def test_agents_sdk_runs_a_tool_and_answers(stack: LiveStack, streamed: bool) -> None:
    """The Agents SDK's default provider and model (``MultiProvider``, the Responses model) with this front as its
    OpenAI client. Horde model ids hold a slash, which the provider reads as a provider prefix unless
    ``unknown_prefix_mode="model_id"`` (its documented setting for such ids) is set."""
    import agents

    agents.set_tracing_disabled(True)
    provider = agents.MultiProvider(
        openai_client=openai.AsyncOpenAI(
            base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=30
        ),
        unknown_prefix_mode="model_id",
    )
    run_config = agents.RunConfig(model_provider=provider, tracing_disabled=True)
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    agent = agents.Agent(name="weather", instructions="Be brief.", model=TOOL_MODEL, tools=[get_weather])
    result: agents.RunResult | agents.RunResultStreaming
    if streamed:
        streaming = agents.Runner.run_streamed(agent, "What is the weather in Paris?", run_config=run_config)
        kinds = [event.type async for event in streaming.stream_events()]
        assert "raw_response_event" in kinds
        result = streaming
    else:
        result = await agents.Runner.run(agent, "What is the weather in Paris?", run_config=run_config)
    assert calls == ["Paris"]
    assert "sunny in Paris" in result.final_output
    assert [type(item).__name__ for item in result.new_items] == [
        "ToolCallItem",
        "ToolCallOutputItem",
        "MessageOutputItem",
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("carry", ["previous_response_id", "to_input_list"])
async def test_agents_sdk_second_turn_continues_the_conversation(stack: LiveStack, carry: str) -> None:
    """issue 26: the Agents SDK's two ways to run a second turn both hold the conversation. ``previous_response_id``
    (``Runner.run(..., previous_response_id=result.last_response_id)``) sends only the new question and the front
    reads the history from the stored response; ``result.to_input_list()`` sends the whole history back as input
    items. The SDK's own request bodies are recorded (an httpx request hook), and the Horde is sent the first
    question, the first answer as the assistant's message and the second question either way."""
    import agents

    agents.set_tracing_disabled(True)
    bodies: list[dict[str, Any]] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            bodies.append(json.loads(request.content))

    http_client = httpx.AsyncClient(event_hooks={"request": [record]}, timeout=30)
    provider = agents.MultiProvider(
        openai_client=openai.AsyncOpenAI(
            base_url=stack.openai_base_url, api_key="agents-second-turn-key", max_retries=0, http_client=http_client
        ),
        unknown_prefix_mode="model_id",
    )
    run_config = agents.RunConfig(model_provider=provider, tracing_disabled=True)
    agent = agents.Agent(name="guide", instructions="Be brief.", model=TEXT_MODEL)
    try:
        first = await agents.Runner.run(agent, "Tell me about lighthouses.", run_config=run_config)
        question = "And who keeps them?"
        if carry == "previous_response_id":
            second = await agents.Runner.run(
                agent, question, run_config=run_config, previous_response_id=first.last_response_id
            )
        else:
            second = await agents.Runner.run(
                agent, [*first.to_input_list(), {"role": "user", "content": question}], run_config=run_config
            )
    finally:
        await http_client.aclose()
    assert isinstance(first.final_output, str) and first.final_output.strip()
    assert isinstance(second.final_output, str) and second.final_output.strip()
    assert len(bodies) == 2
    if carry == "previous_response_id":
        assert bodies[1]["previous_response_id"] == first.last_response_id
        assert bodies[1]["input"] == [{"role": "user", "content": question}]
    else:
        assert "previous_response_id" not in bodies[1]
        assert [item.get("role") for item in bodies[1]["input"]] == ["user", "assistant", "user"]
    assert second.last_response_id is not None
    entry = stack.latest_native_request(second.last_response_id)
    history = [m for m in entry["payload"]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"], history
    assert history[1]["content"] == first.final_output


# ---------------------------------------------------------------------------------------------------------------------
# Cancels


STUCK_WORKER: dict[str, Any] = {
    "name": "stuck-r1",
    "model": "responses/stuck-2b",
    "features": ["prompt_overflow_refused"],
    "threads": 1,
    "time_to_first_token_seconds": 600,
    "tokens_per_second": 1,
    "post_interval_seconds": 1,
}
"""A worker that takes a job and never posts, so a request stays processing until it is cancelled."""

CANCEL_WAIT_SECONDS = 15.0
"""How long the test waits for the front's cancel to reach the devhorde (it is sent at once; this is the margin)."""


def cancelled_request(stack: LiveStack, marker: str) -> dict[str, Any] | None:
    """The native request whose input carries ``marker`` once it is processing, or None."""
    for entry in stack.native_requests():
        if marker in json.dumps(entry["payload"]["messages"]):
            return entry
    return None


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_gets_its_request_cancelled(stack: LiveStack, stream: bool) -> None:
    """A client that closes the connection while its response waits (streamed: after ``response.created``;
    non-streamed: on its read timeout) leaves a request the front cancels at the Horde."""
    scenario = copy.deepcopy(stack.default_scenario)  # type: ignore[attr-defined]
    scenario["workers"].append(STUCK_WORKER)
    stack.put_scenario(scenario)
    marker = f"leave-{'stream' if stream else 'wait'}"
    body = {"model": "responses/stuck-2b", "input": f"Hi [{marker}]", "stream": stream}
    if stream:
        with httpx.stream("POST", f"{stack.openai_base_url}/responses", json=body, timeout=30) as response:
            assert response.status_code == 200
            first = next(response.iter_lines())
            assert first == "event: response.created"
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{stack.openai_base_url}/responses", json=body, timeout=httpx.Timeout(30, read=2))
    deadline = time.monotonic() + CANCEL_WAIT_SECONDS
    entry = cancelled_request(stack, marker)
    while not (entry and entry["cancelled"]) and time.monotonic() < deadline:
        time.sleep(0.05)
        entry = cancelled_request(stack, marker)
    assert entry is not None and entry["cancelled"] and entry["state"] == "cancelled"
