"""Agents on the real AI Horde's text API (issue 36): the front writes tools and JSON instructions into the prompt in
the model family's own format, a worker of the lane answers with a call in that syntax and then, once the tool
result is in the prompt, with text (``worker.SimWorker(prompted=True)``, replying as ``devhorde.prompted`` does).

The worker serves one model per family under names of this session's own, so no other worker of the Horde pops these
requests; the front picks the template from the family word in the name (``qwen`` -> ChatML, ``llama-3`` ->
Llama 3, ``mistral`` -> Mistral, chat.serving.prompt_templates.FAMILY_PATTERNS).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from pydantic import BaseModel

from devhorde.prompted import SCHEMA_LINE
from tests.realhorde.conftest import (
    HONEST_DELAY_SECONDS,
    REPLY,
    Front,
    RealHorde,
    client,
    eventually,
    listed_models,
    marker,
    retry_a_foreign_429,
)
from tests.realhorde.harness import text_status, waiting_prompts
from tests.realhorde.worker import SimWorker
from tests.tool_prompts import WEATHER, chatml, chatml_tools_section, llama, llama_tools, mistral_tools

pytestmark = pytest.mark.realhorde

FAMILY_SLUGS = {"chatml": "qwen2.5-tools", "llama-3": "llama-3.1-tools", "mistral": "mistral-tools"}
"""The slug of each family's model (``RealHorde.model``): the family word picks the front's template."""

TOOLS_MARKERS = {
    "chatml": "<tools>\n",
    "llama-3": "Given the following functions, please respond with a JSON for a function call",
    "mistral": "[AVAILABLE_TOOLS] ",
}
RESULT_MARKERS = {"chatml": "<tool_response>\n", "llama-3": "<|start_header_id|>ipython", "mistral": "[TOOL_RESULTS] "}


@dataclass
class ToolWorker:
    worker: SimWorker
    models: dict[str, str]

    def prompts(self, mark: str) -> list[str]:
        return [prompt for prompt in self.worker.popped_prompts() if mark in prompt]


@pytest.fixture(scope="module")
def tool_worker(realhorde: RealHorde) -> Iterator[ToolWorker]:
    """One prompted worker of a user of its own, serving a model of each family; listed before the tests start."""
    models = {family: realhorde.model(slug) for family, slug in FAMILY_SLUGS.items()}
    key, _ = realhorde.new_user("tools")
    worker = SimWorker(
        realhorde.horde_url,
        key,
        f"lane{realhorde.tag}-tools",
        list(models.values()),
        max_length=4096,
        max_context_length=16384,
        delay=HONEST_DELAY_SECONDS,
        text=REPLY,
        prompted=True,
    ).start()
    try:
        worker.wait_registered()
        deadline = time.monotonic() + 40
        while not set(models.values()) <= listed_models(realhorde.horde_url):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Horde did not list {sorted(models.values())} within 40 s")
            time.sleep(2)
        yield ToolWorker(worker, models)
    finally:
        worker.stop(abandon=True, timeout=5)


def contract_turns(family: str, mark: str) -> tuple[str, str, str]:
    """A first prompt with the weather tool as the contract writes it for ``family``, the call the worker answers,
    and the next prompt with that call and its result."""
    ask = f"What is the weather in Paris? [{mark}]"
    if family == "chatml":
        first = chatml(("system", chatml_tools_section([WEATHER])), ("user", ask))
        call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        result = chatml(("user", "<tool_response>\nsunny, 24 C\n</tool_response>"))
        return first, call, first + call + "<|im_end|>\n" + result
    if family == "llama-3":
        first = llama(("user", llama_tools([WEATHER], ask)))
        call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
        result = "<|start_header_id|>ipython<|end_header_id|>\n\nsunny, 24 C<|eot_id|>"
        return first, call, f"{first}{call}<|eot_id|>{result}<|start_header_id|>assistant<|end_header_id|>\n\n"
    first = f"{mistral_tools([WEATHER])}[INST] {ask} [/INST]"
    call = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]'
    result = '[TOOL_RESULTS] {"call_id": "a1b2c3d4e", "content": "sunny, 24 C"}[/TOOL_RESULTS]'
    return first, call, f"{first}{call}</s>{result}"


def horde_generate(realhorde: RealHorde, model: str, prompt: str) -> str:
    """Submit a prompt straight to the Horde's text API and return the worker's generation. A status read while the
    worker's submit commits can say ``done`` with no generation yet (the real Horde counts finished jobs and lists
    generations in separate reads): such a status is read again, as the front re-reads it."""
    answer = httpx.post(
        f"{realhorde.horde_url}/v2/generate/text/async",
        headers={"apikey": realhorde.client_key, "Client-Agent": "realhorde-lane:1:local"},
        json={"prompt": prompt, "params": {"max_length": 200, "max_context_length": 4096}, "models": [model]},
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    request_id = answer.json()["id"]
    status = eventually(
        lambda: (
            body
            if (body := text_status(realhorde.horde_url, request_id))["done"]
            and (body["generations"] or body["faulted"])
            else None
        ),
        timeout=60,
        what="the worker's generation",
    )
    assert not status["faulted"], status
    return str(status["generations"][0]["text"])


@pytest.mark.submits(2)
@pytest.mark.parametrize("family", sorted(FAMILY_SLUGS))
def test_the_lane_worker_answers_tools_with_a_call_and_a_tool_result_with_text(
    realhorde: RealHorde, tool_worker: ToolWorker, family: str
) -> None:
    """The worker's side of the contract, on the real Horde without the front: a call in the family's syntax for the
    tool the user names, then text that quotes the result."""
    mark = marker()
    first, call, second = contract_turns(family, mark)
    generated = horde_generate(realhorde, tool_worker.models[family], first)
    if family == "mistral":
        prefix, array = generated.split(" ", 1)
        assert prefix == "[TOOL_CALLS]"
        assert [{k: v for k, v in c.items() if k != "id"} for c in json.loads(array)] == [
            {"name": "get_weather", "arguments": {"city": "Paris"}}
        ]
    else:
        assert generated == call
    time.sleep(1.1)  # the Horde allows 2 submits a second per key
    assert horde_generate(realhorde, tool_worker.models[family], second) == (
        "The get_weather tool returned: sunny, 24 C Based on that result, here is the answer you were looking for."
    )
    assert len(tool_worker.prompts(mark)) == 2


@pytest.mark.submits(2)
@pytest.mark.parametrize("family", sorted(FAMILY_SLUGS))
@retry_a_foreign_429
def test_the_agents_sdk_runs_a_function_tool_and_answers_with_its_result(
    realhorde: RealHorde, front: Front, tool_worker: ToolWorker, family: str
) -> None:
    """The OpenAI Agents SDK's loop over Chat Completions: the model calls ``get_weather`` (the family's call
    syntax, parsed by the front into ``tool_calls``), the SDK runs it and sends the result back, and the final answer
    quotes it."""
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI's servers
    mark = marker()
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather now in a city."""
        cities.append(city)
        return f"sunny, 24 C in {city} ({mark})"

    sdk = openai.AsyncOpenAI(base_url=front.base_url, api_key=realhorde.client_key, max_retries=0, timeout=120)
    agent = Agent(
        name="weather",
        instructions="answer with the tools you have.",
        model=OpenAIChatCompletionsModel(model=tool_worker.models[family], openai_client=sdk),
        model_settings=ModelSettings(max_tokens=300),
        tools=[get_weather],
    )
    result = asyncio.run(Runner.run(agent, f"What is the weather in Paris? [{mark}]", max_turns=3))
    assert cities == ["Paris"]
    assert f"get_weather tool returned: sunny, 24 C in Paris ({mark})" in result.final_output
    first, second = tool_worker.prompts(mark)
    assert TOOLS_MARKERS[family] in first
    assert RESULT_MARKERS[family] in second
    assert f"sunny, 24 C in Paris ({mark})" in second
    assert len(waiting_prompts(mark)) == 2


class City(BaseModel):
    name: str
    population: int
    coastal: bool


@pytest.mark.parametrize("family", sorted(FAMILY_SLUGS))
@retry_a_foreign_429
def test_chat_completions_parse_returns_the_pydantic_model(
    realhorde: RealHorde, front: Front, tool_worker: ToolWorker, family: str
) -> None:
    """``client.chat.completions.parse`` with a pydantic model: the front writes the schema line into the prompt,
    the worker replies with JSON for it, and the SDK parses ``content`` into the model."""
    mark = marker()
    completion = client(front, realhorde.client_key, timeout=120).chat.completions.parse(
        model=tool_worker.models[family],
        messages=[{"role": "user", "content": f"Describe the city of Lisbon. [{mark}]"}],
        response_format=City,
        max_tokens=200,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, City)
    assert json.loads(choice.message.content or "") == choice.message.parsed.model_dump()
    [prompt] = tool_worker.prompts(mark)
    schema_text = prompt.split(SCHEMA_LINE, 1)[1]
    schema, _ = json.JSONDecoder().raw_decode(schema_text)
    assert sorted(schema["properties"]) == ["coastal", "name", "population"]
    assert len(waiting_prompts(mark)) == 1
