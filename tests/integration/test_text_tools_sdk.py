"""Agents on text-API models (issue 36), live: the front over the devhorde's ``text-only`` scenario, driven by the
libraries themselves, one model per family (ChatML: Qwen 2.5, added to the scenario here; Llama 3; Mistral).

The front writes tools and JSON instructions into the prompt in the family's format and parses the reply; the
devhorde answers like a model of the family (devhorde/README.md "Prompted tools and JSON"). Covered: the OpenAI SDK
(tool calls, parallel calls, the tool-result turn, ``chat.completions.parse``), the OpenAI Agents SDK's loop,
LangChain's ``bind_tools`` with a ``ToolMessage`` turn and ``with_structured_output``, the Vercel AI SDK's
``generateText`` with a tool and ``generateObject`` (``openai-compatible`` and the default Responses provider), a
streamed call, and one repair with the devhorde's ``malformed_first_replies`` knob.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import openai
import pytest
from pydantic import BaseModel

from devhorde.prompted import REPAIR_START, SCHEMA_LINE
from tests.conftest import LiveStack, scenario_restored
from tests.integration.test_ai_sdk import run_client
from tests.tool_prompts import TIME, WEATHER

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

# The agent libraries (the Agents SDK, LangChain) are imported in the tests that drive them: every pytest-xdist worker
# imports this file to collect it and one runs it, and each library takes 1-2 s of CPU to import.

pytestmark = pytest.mark.integration

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
LLAMA = "koboldcpp/Meta-Llama-3-8B-Instruct"
MISTRAL = "koboldcpp/Mistral-7B-Instruct-v0.3"
TINY = "koboldcpp/tiny-story-1b"
MODELS = {"chatml": QWEN, "llama-3": LLAMA, "mistral": MISTRAL}
"""One text model per family of the contract, by the front's ``x_horde.prompt_template``."""
FAMILIES = sorted(MODELS)
TOOLS_MARKERS = {
    "chatml": "<tools>\n",
    "generic-instruct": "<tools>\n",
    "llama-3": "Given the following functions, please respond with a JSON for a function call",
    "mistral": "[AVAILABLE_TOOLS] ",
}
RESULT_MARKERS = {
    "generic-instruct": "<tool_response>\n",
    "chatml": "<tool_response>\n",
    "llama-3": "<|start_header_id|>ipython",
    "mistral": "[TOOL_RESULTS] ",
}
QWEN_WORKER = {
    "name": "qwen-text-1",
    "model": QWEN,
    "chat": False,
    "max_context_length": 8192,
    "max_length": 512,
    "threads": 2,
    "time_to_first_token_seconds": 0.1,
    "tokens_per_second": 200,
    "reply_words": 30,
}


class City(BaseModel):
    name: str
    population: int
    coastal: bool


def with_qwen(scenario: dict[str, Any], **knobs: Any) -> dict[str, Any]:
    return {**scenario, "workers": [*scenario["workers"], QWEN_WORKER], **knobs}


@pytest.fixture
def tools_stack(text_live_stack: LiveStack) -> Iterator[LiveStack]:
    """The text-only stack with a Qwen 2.5 text worker, its scenario restored after the test."""
    with scenario_restored(text_live_stack):
        text_live_stack.put_scenario(with_qwen(text_live_stack.default_scenario))  # type: ignore[attr-defined]
        yield text_live_stack


@pytest.fixture
def malformed_stack(text_live_stack: LiveStack) -> Iterator[LiveStack]:
    """As :func:`tools_stack`, with ``malformed_first_replies``."""
    with scenario_restored(text_live_stack):
        scenario = with_qwen(text_live_stack.default_scenario, malformed_first_replies=True)  # type: ignore[attr-defined]
        text_live_stack.put_scenario(scenario)
        yield text_live_stack


def client(stack: LiveStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=60)


def marker() -> str:
    return "mk" + uuid.uuid4().hex[:10]


def prompts(stack: LiveStack, mark: str) -> list[str]:
    """The text prompts the devhorde received holding ``mark``, in submit order."""
    return [
        str(r["payload"]["prompt"])
        for r in stack.native_requests()
        if r.get("api") == "text" and mark in r["payload"]["prompt"]
    ]


# --- the OpenAI SDK -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", [*FAMILIES, "generic-instruct"])
def test_a_tool_call_then_the_tool_result_turn(tools_stack: LiveStack, family: str) -> None:
    """Each family, and the generic format of a model without one (``tiny-story-1b``)."""
    model = {**MODELS, "generic-instruct": TINY}[family]
    mark = marker()
    sdk = client(tools_stack)
    messages: list[Any] = [{"role": "user", "content": f"What is the weather in Paris? [{mark}]"}]
    first = sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=200)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert first.model_extra is not None
    assert first.model_extra["x_horde"]["prompt_template"] == family
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"},
    ]
    second = sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=200)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls is None
    assert "The get_weather tool returned: sunny, 24 C" in (second.choices[0].message.content or "")
    sent_first, sent_second = prompts(tools_stack, mark)
    assert TOOLS_MARKERS[family] in sent_first
    assert RESULT_MARKERS[family] in sent_second


@pytest.mark.parametrize("family", FAMILIES)
def test_parallel_calls_and_parallel_tool_calls_false(tools_stack: LiveStack, family: str) -> None:
    mark = marker()
    messages = [{"role": "user", "content": f"What are the weather and the time in Rome? [{mark}]"}]
    both = client(tools_stack).chat.completions.create(
        model=MODELS[family], messages=messages, tools=[WEATHER, TIME], max_tokens=300
    )
    calls = both.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Rome"}),
        ("get_time", {"city": "Rome", "format": "24h"}),
    ]
    assert len({c.id for c in calls}) == 2
    assert both.choices[0].finish_reason == "tool_calls"
    one = client(tools_stack).chat.completions.create(
        model=MODELS[family], messages=messages, tools=[WEATHER, TIME], parallel_tool_calls=False, max_tokens=300
    )
    assert [c.function.name for c in one.choices[0].message.tool_calls or []] == ["get_weather"]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_streamed_tool_call(tools_stack: LiveStack, family: str) -> None:
    """The buffered stream carries the call as the native path streams it: one tool call delta with the id, name and
    the whole arguments, then ``finish_reason: tool_calls``."""
    mark = marker()
    chunks = list(
        client(tools_stack).chat.completions.create(
            model=MODELS[family],
            messages=[{"role": "user", "content": f"What is the weather in Paris? [{mark}]"}],
            tools=[WEATHER],
            max_tokens=200,
            stream=True,
        )
    )
    deltas = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert {delta.index for delta in deltas} == {0}
    [call_id] = [delta.id for delta in deltas if delta.id]
    assert call_id.startswith("call_")
    assert "".join(delta.function.name or "" for delta in deltas if delta.function) == "get_weather"
    arguments = "".join(delta.function.arguments or "" for delta in deltas if delta.function)
    assert json.loads(arguments) == {"city": "Paris"}
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_completions_parse_with_a_pydantic_model(tools_stack: LiveStack, family: str) -> None:
    mark = marker()
    completion = client(tools_stack).chat.completions.parse(
        model=MODELS[family],
        messages=[{"role": "user", "content": f"Describe the city of Lisbon. [{mark}]"}],
        response_format=City,
        max_tokens=200,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, City)
    assert json.loads(choice.message.content or "") == choice.message.parsed.model_dump()
    [prompt] = prompts(tools_stack, mark)
    schema, _ = json.JSONDecoder().raw_decode(prompt.split(SCHEMA_LINE, 1)[1])
    assert sorted(schema["properties"]) == ["coastal", "name", "population"]


# --- the OpenAI Agents SDK ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_the_agents_sdk_runs_a_function_tool_and_answers_with_its_result(tools_stack: LiveStack, family: str) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # the SDK would export traces to OpenAI's servers
    mark = marker()
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather now in a city."""
        cities.append(city)
        return f"sunny, 24 C in {city} ({mark})"

    sdk = openai.AsyncOpenAI(base_url=tools_stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=60)
    agent = Agent(
        name="weather",
        instructions="answer with the tools you have.",
        model=OpenAIChatCompletionsModel(model=MODELS[family], openai_client=sdk),
        model_settings=ModelSettings(max_tokens=300),
        tools=[get_weather],
    )
    result = asyncio.run(Runner.run(agent, f"What is the weather in Paris? [{mark}]", max_turns=3))
    assert cities == ["Paris"]
    assert f"The get_weather tool returned: sunny, 24 C in Paris ({mark})" in result.final_output
    assert len(prompts(tools_stack, mark)) == 2


# --- LangChain ------------------------------------------------------------------------------------------------------


def langchain_chat(stack: LiveStack, family: str) -> ChatOpenAI:
    """LangChain's ``ChatOpenAI`` on the stack's front, for the family's model, 300 tokens a reply."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=stack.openai_base_url,
        api_key="0000000000",  # type: ignore[arg-type]
        model=MODELS[family],
        max_retries=0,
        max_tokens=300,  # type: ignore[call-arg]
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_langchain_bind_tools_and_a_tool_message_turn(tools_stack: LiveStack, family: str) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage

    mark = marker()
    chat = langchain_chat(tools_stack, family)
    bound = chat.bind_tools([WEATHER])
    history: list[Any] = [HumanMessage(f"What is the weather in Oslo? [{mark}]")]
    reply = bound.invoke(history)
    [call] = reply.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Oslo"})
    assert reply.response_metadata["finish_reason"] == "tool_calls"
    history += [reply, ToolMessage("snow, -3 C", tool_call_id=call["id"])]
    answer = bound.invoke(history)
    assert answer.tool_calls == []
    assert "The get_weather tool returned: snow, -3 C" in str(answer.content)
    assert answer.response_metadata["finish_reason"] == "stop"


@pytest.mark.parametrize("family", FAMILIES)
def test_langchain_with_structured_output_a_pydantic_model(tools_stack: LiveStack, family: str) -> None:
    mark = marker()
    chat = langchain_chat(tools_stack, family)
    city = chat.with_structured_output(City).invoke(f"Describe the city of Lisbon. [{mark}]")
    assert isinstance(city, City)
    [prompt] = prompts(tools_stack, mark)
    assert SCHEMA_LINE in prompt or TOOLS_MARKERS[family] in prompt


# --- the Vercel AI SDK ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_ai_sdk_openai_compatible_generate_text_with_a_tool(tools_stack: LiveStack, family: str) -> None:
    result = run_client(tools_stack, "compat-tools", TOOL_MODEL=MODELS[family])
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls"
    assert first["toolCalls"] == [{"toolName": "weather", "input": {"city": "Paris"}}]
    assert first["toolResults"] == [
        {"toolName": "weather", "output": {"city": "Paris", "forecast": "sunny", "celsius": 21}}
    ]
    assert second["finishReason"] == "stop"
    assert result["finishReason"] == "stop"
    assert 'The weather tool returned: {"city":"Paris","forecast":"sunny","celsius":21}' in result["text"]


@pytest.mark.parametrize("family", FAMILIES)
def test_ai_sdk_openai_compatible_generate_object(tools_stack: LiveStack, family: str) -> None:
    result = run_client(tools_stack, "compat-object", TOOL_MODEL=MODELS[family])
    assert City.model_validate(result["object"])
    assert result["finishReason"] == "stop"
    [body] = result["bodies"]
    assert body["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize("family", FAMILIES)
def test_ai_sdk_default_provider_generate_text_with_a_tool(tools_stack: LiveStack, family: str) -> None:
    """The default provider calls ``POST /v1/responses``: ``function`` tools, ``function_call`` output items and
    ``function_call_output`` input on the text path."""
    result = run_client(tools_stack, "tools", TOOL_MODEL=MODELS[family])
    first, second = result["steps"]
    assert first["toolCalls"] == [{"toolName": "weather", "input": {"city": "Paris"}}]
    assert second["finishReason"] == "stop"
    assert 'The weather tool returned: {"city":"Paris","forecast":"sunny","celsius":21}' in result["text"]


@pytest.mark.parametrize("family", FAMILIES)
def test_ai_sdk_default_provider_generate_object(tools_stack: LiveStack, family: str) -> None:
    result = run_client(tools_stack, "object", TOOL_MODEL=MODELS[family])
    assert City.model_validate(result["object"])
    assert result["finishReason"] == "stop"


# --- the repair -----------------------------------------------------------------------------------------------------


def test_a_malformed_first_reply_is_repaired_with_one_more_submit(malformed_stack: LiveStack) -> None:
    """The devhorde's first reply holds a ``<tool_call>`` whose JSON does not parse; the front asks again once, with
    the reply and the error as the next turns, and the client gets the good call."""
    mark = marker()
    completion = client(malformed_stack).chat.completions.create(
        model=QWEN,
        messages=[{"role": "user", "content": f"What is the weather in Paris? [{mark}]"}],
        tools=[WEATHER],
        max_tokens=200,
    )
    [call] = completion.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert completion.choices[0].finish_reason == "tool_calls"
    first, repair = prompts(malformed_stack, mark)
    assert REPAIR_START not in first
    assert REPAIR_START in repair
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>' in repair
    assert completion.model_extra is not None
    assert completion.model_extra["x_horde"]["repair_attempts"] == 1
