"""The text API answers prompts that hold the front's tool and JSON contract (notes: tools-contract) like a model of
the family: a call in the family's syntax, parallel calls, a text answer after a tool result, JSON for the JSON
instruction, and the ``malformed_first_replies`` knob. Prompts are written here by hand, as the contract spells them,
so these tests pin the devhorde's side of the contract whatever the front renders."""

from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import pytest
from devhorde_helpers import API, KEY, scenario, worker

from devhorde.prompted import mistral_call_id, prompted_reply, read_prompt
from devhorde.scenario import load_scenario
from tests.tool_prompts import (
    JSON_LINES,
    REPAIR,
    SCHEMA,
    TIME,
    WEATHER,
    chatml,
    chatml_tools_section,
    llama,
    llama_tools,
    mistral_tools,
)


def reply(prompt: str, *, malformed: bool = False) -> str:
    text = prompted_reply(prompt, 7, malformed_first=malformed)
    assert text is not None
    return text


# --- ChatML / Hermes / Qwen, and the generic format ---------------------------------------------------------------


def test_chatml_tools_get_a_tool_call_block_for_the_tool_the_user_names() -> None:
    prompt = chatml(("system", "Be brief.\n\n" + chatml_tools_section([WEATHER, TIME])), ("user", "Weather in Paris?"))
    assert reply(prompt) == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_chatml_parallel_calls_when_the_user_asks_for_several_things_and_one_call_when_forbidden() -> None:
    ask = "What are the weather and the time in Paris?"
    prompt = chatml(("system", chatml_tools_section([WEATHER, TIME])), ("user", ask))
    assert reply(prompt) == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris", "format": "24h"}}\n</tool_call>'
    )
    single = chatml(("system", chatml_tools_section([WEATHER, TIME], "Call at most one function.")), ("user", ask))
    assert reply(single) == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_tool_choice_lines_required_and_named_function() -> None:
    """Words that name no tool: ``auto`` answers text (None: the ordinary reply), ``required`` calls the first
    tool, a named function calls that one."""
    tools = chatml_tools_section([WEATHER, TIME])
    assert prompted_reply(chatml(("system", tools), ("user", "Tell me about tides")), 7) is None
    required = chatml(("system", tools + "\nYou must call at least one function."), ("user", "Tell me about tides"))
    assert reply(required).startswith('<tool_call>\n{"name": "get_weather", ')
    named_tools = chatml_tools_section([TIME], "You must call the function get_time.")  # only the named tool
    named = chatml(("system", named_tools), ("user", "Weather in Paris?"))
    assert reply(named) == (
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris", "format": "24h"}}\n</tool_call>'
    )


def test_chatml_tool_response_gets_a_text_answer_that_uses_the_result() -> None:
    prompt = chatml(
        ("system", chatml_tools_section([WEATHER])),
        ("user", "Weather in Paris?"),
        ("assistant", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
        ("user", '<tool_response>\n{"temperature": 21, "sky": "clear"}\n</tool_response>'),
    )
    assert reply(prompt) == (
        'The get_weather tool returned: {"temperature": 21, "sky": "clear"} Based on that result, here is the answer '
        "you were looking for."
    )


def test_generic_format_uses_the_chatml_tool_syntax() -> None:
    prompt = f"Be brief.\n\n{chatml_tools_section([WEATHER])}\n\nUser: What is the weather in Oslo?\nAssistant:"
    assert reply(prompt) == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    answered = (
        f"{chatml_tools_section([WEATHER])}\n\nUser: What is the weather in Oslo?\n"
        'Assistant: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        "User: <tool_response>\nsnow, -3 C\n</tool_response>\nAssistant:"
    )
    assert reply(answered).startswith("The get_weather tool returned: snow, -3 C ")


# --- Llama 3.1+ -----------------------------------------------------------------------------------------------------


def test_llama_custom_tools_get_json_calls_one_per_line() -> None:
    prompt = llama(("system", "Be brief."), ("user", llama_tools([WEATHER, TIME], "Weather and time in Rome?")))
    assert reply(prompt) == (
        '{"name": "get_weather", "parameters": {"city": "Rome"}}\n'
        '{"name": "get_time", "parameters": {"city": "Rome", "format": "24h"}}'
    )


def test_llama_ipython_results_get_a_text_answer_naming_each_tool() -> None:
    prompt = llama(
        ("user", llama_tools([WEATHER, TIME], "Weather and time in Rome?")),
        (
            "assistant",
            '{"name": "get_weather", "parameters": {"city": "Rome"}}\n'
            '{"name": "get_time", "parameters": {"city": "Rome", "format": "24h"}}',
        ),
        ("ipython", "sunny, 25 C"),
        ("ipython", "14:05"),
    )
    assert reply(prompt) == (
        "The get_weather tool returned: sunny, 25 C The get_time tool returned: 14:05 Based on that result, here is "
        "the answer you were looking for."
    )


# --- Mistral --------------------------------------------------------------------------------------------------------


def test_mistral_available_tools_get_a_tool_calls_array_with_ids() -> None:
    prompt = f"{mistral_tools([WEATHER])}[INST] Be brief.\n\nWeather in Madrid? [/INST]"
    text = reply(prompt)
    assert text.startswith("[TOOL_CALLS] ")
    [call] = json.loads(text.removeprefix("[TOOL_CALLS] "))
    assert call == {"name": "get_weather", "arguments": {"city": "Madrid"}, "id": mistral_call_id(7, 0)}
    assert len(call["id"]) == 9
    assert call["id"].isalnum()


def test_mistral_tool_results_get_a_text_answer() -> None:
    calls = [{"name": "get_weather", "arguments": {"city": "Madrid"}, "id": "a1b2c3d4e"}]
    prompt = (
        f"{mistral_tools([WEATHER])}[INST] Weather in Madrid? [/INST] [TOOL_CALLS] {json.dumps(calls)}</s>"
        '[TOOL_RESULTS] {"call_id": "a1b2c3d4e", "content": "rain, 12 C"}[/TOOL_RESULTS]'
    )
    assert reply(prompt).startswith("The get_weather tool returned: rain, 12 C ")


# --- JSON -----------------------------------------------------------------------------------------------------------


def test_the_json_instruction_gets_a_json_object_valid_for_the_schema() -> None:
    lines = JSON_LINES
    for prompt in (
        chatml(("system", lines), ("user", "Extract: Ada is 36.")),
        llama(("system", lines), ("user", "Extract: Ada is 36.")),
        f"[INST] {lines}\n\nExtract: Ada is 36. [/INST]",
    ):
        value = json.loads(reply(prompt))
        jsonschema.validate(value, SCHEMA)
    plain = chatml(("system", "Reply with one JSON object only: no prose, no code fence."), ("user", "Tides, in json"))
    assert isinstance(json.loads(reply(plain)), dict)


def test_a_prompt_without_the_markers_is_not_prompted() -> None:
    assert read_prompt(chatml(("user", "Tell me about tides and json"))) is None
    assert prompted_reply("User: get_weather in Paris\nAssistant:", 7) is None


# --- the malformed_first_replies knob -------------------------------------------------------------------------------


def test_malformed_first_replies_then_the_repair_turn_gets_the_good_reply() -> None:
    first = chatml(("system", chatml_tools_section([WEATHER])), ("user", "Weather in Paris?"))
    broken = reply(first, malformed=True)
    assert broken == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>'
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken.split("\n")[1])
    repaired = first + broken + "<|im_end|>\n" + chatml(("user", REPAIR))
    assert reply(repaired, malformed=True) == reply(first)
    llama_first = llama(("user", llama_tools([WEATHER], "Weather in Rome?")))
    assert reply(llama_first, malformed=True) == '{"name": "get_weather", "parameters": {"city": "Rome"}'
    mistral_first = f"{mistral_tools([WEATHER])}[INST] Weather in Madrid? [/INST]"
    mistral_broken = reply(mistral_first, malformed=True)
    assert mistral_broken == reply(mistral_first)[:-1]
    mistral_repair = (
        f"[INST] Weather in Madrid? [/INST]{mistral_broken}</s>{mistral_tools([WEATHER])}[INST] {REPAIR} [/INST]"
    )
    assert reply(mistral_repair, malformed=True) == reply(mistral_first)


def test_malformed_json_is_prose_and_a_trailing_comma_and_the_repair_is_valid() -> None:
    lines = JSON_LINES
    first = chatml(("system", lines), ("user", "Extract: Ada is 36."))
    broken = reply(first, malformed=True)
    good = reply(first)
    assert broken == "Sure! Here is the JSON you asked for:\n" + good[:-1] + ",}"
    repaired = first + broken + "<|im_end|>\n" + chatml(("user", REPAIR))
    jsonschema.validate(json.loads(reply(repaired, malformed=True)), SCHEMA)


def test_malformed_knob_breaks_a_text_turn_that_holds_tools_and_leaves_plain_prompts_alone() -> None:
    """The contract: every prompt holding tools gets a malformed first reply, a tool-result turn included (a broken
    call of the first tool); its repair is the text answer. A prompt without tools or JSON is untouched."""
    answered = chatml(
        ("system", chatml_tools_section([WEATHER])),
        ("user", "Weather in Paris?"),
        ("assistant", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
        ("user", "<tool_response>\n21 C\n</tool_response>"),
    )
    assert reply(answered, malformed=True).startswith('<tool_call>\n{"name": "get_weather"')
    repaired = answered + "bad<|im_end|>\n" + chatml(("user", REPAIR))
    assert reply(repaired, malformed=True).startswith("The get_weather tool returned: 21 C ")
    assert prompted_reply(chatml(("user", "Weather in Paris?")), 7, malformed_first=True) is None


# --- through the text API -------------------------------------------------------------------------------------------


async def generate(client: httpx.AsyncClient, prompt: str, model: str) -> str:
    payload = {"prompt": prompt, "models": [model], "params": {"max_length": 256, "max_context_length": 4096}}
    response = await client.post(f"{API}/generate/text/async", json=payload, headers=KEY)
    assert response.status_code == 202, response.text
    for _ in range(500):
        body = (await client.get(f"{API}/generate/text/status/{response.json()['id']}")).json()
        if body["done"]:
            return str(body["generations"][0]["text"])
        await asyncio.sleep(0.01)
    raise AssertionError("the text request did not finish")


@pytest.mark.asyncio
async def test_the_text_api_serves_prompted_replies_and_the_knob(make_client) -> None:
    prompt = chatml(("system", chatml_tools_section([WEATHER])), ("user", "Weather in Paris?"))
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    client = await make_client(scenario(worker("q1", "koboldcpp/Qwen2.5-7B-Instruct", chat=False)))
    assert await generate(client, prompt, "koboldcpp/Qwen2.5-7B-Instruct") == good
    knob = scenario(worker("q1", "koboldcpp/Qwen2.5-7B-Instruct", chat=False), malformed_first_replies=True)
    client = await make_client(knob)
    assert await generate(client, prompt, "koboldcpp/Qwen2.5-7B-Instruct") == good[:-14] + "\n</tool_call>"
    repair = prompt + good[:-14] + "\n</tool_call><|im_end|>\n" + chatml(("user", REPAIR))
    assert await generate(client, repair, "koboldcpp/Qwen2.5-7B-Instruct") == good
    assert (await client.get("/_devhorde/scenario")).json()["malformed_first_replies"] is True


@pytest.mark.asyncio
async def test_the_aihorde_scenario_serves_prompted_replies_with_the_knob(make_client) -> None:
    document = load_scenario("aihorde").model_dump(mode="json")
    knob = scenario(*document["workers"], aihorde=document["aihorde"], malformed_first_replies=True)
    client = await make_client(knob)
    prompt = chatml(("system", JSON_LINES), ("user", "Extract: Ada is 36."))
    broken = await generate(client, prompt, "koboldcpp/Qwen2.5-7B-Instruct")
    assert broken.startswith("Sure! Here is the JSON you asked for:\n{")
    assert broken.endswith(",}")
    repair = prompt + broken + "<|im_end|>\n" + chatml(("user", REPAIR))
    repaired = await generate(client, repair, "koboldcpp/Qwen2.5-7B-Instruct")
    jsonschema.validate(json.loads(repaired), SCHEMA)
