"""Tool calls and structured output on the text path: the prompt in each family's own format, the reply read back into
OpenAI's shape, and the repair turn (chat.serving.tool_formats, chat.serving.text_replies, chat.horde.text.TextRoutes;
the contract shared with the devhorde, /work/wt/notes/tools-contract.md). Replies are written as real models write them.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import httpx
import pytest

from chat.errors import OpenAIError
from chat.horde.text import PreparedTextRequest, TextHordeClient, TextRoutes
from chat.protocol.chat_request import ChatCompletionRequest
from chat.rendering.completion import buffered_chunks, build_completion
from chat.serving.text_replies import ReplyRules
from chat.serving.text_route import prepare_chat_request, text_api_refusal
from chat.serving.tool_formats import HermesTools, Llama3Tools, MalformedCalls, MistralTools
from tests.tool_prompts import CITY_FORMAT

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
LLAMA = "koboldcpp/Llama-3.1-8B-Instruct"
MISTRAL = "koboldcpp/Mistral-7B-Instruct-v0.3"
GENERIC = "koboldcpp/SomeUnknownModel-7B"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
SEARCH = {
    "type": "function",
    "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "object"}}}},
}
CALL_ID = re.compile(r"^call_[A-Za-z0-9]{24}$")


def chat(model: str = QWEN, **body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": model, "messages": [{"role": "user", "content": "Weather in Paris?"}], **body}
    )


def rules_of(model: str = QWEN, **body: Any) -> ReplyRules:
    reader = prepare_chat_request(chat(model, **body)).reply_reader
    assert isinstance(reader, ReplyRules)
    return reader


# --- the prompt ----------------------------------------------------------------------------------------------------

HERMES_BLOCK = (
    HermesTools.PREAMBLE
    + json.dumps(
        {"type": "function", "function": {k: v for k, v in WEATHER["function"].items() if k != "strict"}},
        separators=(",", ":"),
    )
    + HermesTools.INSTRUCTION
)


def test_chatml_writes_the_tools_at_the_end_of_a_new_system_turn_with_tool_choice_required() -> None:
    prompt = prepare_chat_request(chat(tools=[WEATHER], tool_choice="required")).payload["prompt"]
    assert prompt == (
        f"<|im_start|>system\n{HERMES_BLOCK}\nYou must call at least one function.<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chatml_renders_the_history_of_calls_and_tool_results() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "20C"},
    ]
    prompt = prepare_chat_request(chat(messages=messages, tools=[WEATHER])).payload["prompt"]
    assert prompt == (
        f"<|im_start|>system\nBe brief.\n\n{HERMES_BLOCK}<|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name":"get_weather","arguments":{"city":"Rome"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n12C\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_tool_choice_none_writes_no_tools_and_a_named_choice_only_its_function() -> None:
    none = prepare_chat_request(chat(tools=[WEATHER, SEARCH], tool_choice="none"))
    assert "<tools>" not in none.payload["prompt"]
    assert none.reply_reader is None
    named = prepare_chat_request(
        chat(tools=[WEATHER, SEARCH], tool_choice={"type": "function", "function": {"name": "search"}})
    ).payload["prompt"]
    assert '"name":"search"' in named
    assert "get_weather" not in named
    assert "</tool_call>\nYou must call the function search.<|im_end|>" in named
    single = prepare_chat_request(chat(tools=[WEATHER], parallel_tool_calls=False)).payload["prompt"]
    assert "</tool_call>\nCall at most one function.<|im_end|>" in single


def test_llama_3_writes_the_tools_at_the_start_of_the_first_user_turn_and_results_in_ipython() -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
    ]
    prompt = prepare_chat_request(chat(LLAMA, messages=messages, tools=[SEARCH])).payload["prompt"]
    assert prompt == (
        "<|start_header_id|>user<|end_header_id|>\n\n"
        + Llama3Tools.PREAMBLE
        + '{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"q":'
        '{"type":"object"}}}}}\n\nWeather?<|eot_id|>'
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name":"get_weather","parameters":{"city":"Paris"}}<|eot_id|>'
        "<|start_header_id|>ipython<|end_header_id|>\n\n12C<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_mistral_writes_available_tools_before_the_last_inst_and_tool_results() -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "abcDEF123", "type": "function", "function": {"name": "search", "arguments": '{"q":{}}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "abcDEF123", "content": "none"},
        {"role": "user", "content": "And now?"},
    ]
    prompt = prepare_chat_request(chat(MISTRAL, messages=messages, tools=[SEARCH])).payload["prompt"]
    assert prompt == (
        '[INST] Weather? [/INST] [TOOL_CALLS] [{"name":"search","arguments":{"q":{}},"id":"abcDEF123"}]</s>'
        '[TOOL_RESULTS] {"call_id":"abcDEF123","content":"none"}[/TOOL_RESULTS]'
        '[AVAILABLE_TOOLS] [{"type":"function","function":{"name":"search","parameters":{"type":"object",'
        '"properties":{"q":{"type":"object"}}}}}][/AVAILABLE_TOOLS][INST] And now? [/INST]'
    )


def test_mistral_places_available_tools_by_the_messages_not_by_a_marker_in_the_users_text() -> None:
    """A literal ``[INST]`` in the last user message, or a system message before it, does not move the block: it
    goes right before the last user turn, found from the messages."""
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What does [INST] mean? [/INST] and [INST] again"},
    ]
    prompt = prepare_chat_request(chat(MISTRAL, messages=messages, tools=[SEARCH])).payload["prompt"]
    assert prompt == (
        "[INST] Hi [/INST] Hello.</s>"
        '[AVAILABLE_TOOLS] [{"type":"function","function":{"name":"search","parameters":{"type":"object",'
        '"properties":{"q":{"type":"object"}}}}}][/AVAILABLE_TOOLS]'
        "[INST] Be brief.\n\nWhat does [INST] mean? [/INST] and [INST] again [/INST]"
    )


def test_a_json_schema_response_format_ends_the_system_turn_with_the_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    prepared = prepare_chat_request(
        chat(response_format={"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}})
    )
    assert prepared.payload["prompt"].startswith(
        "<|im_start|>system\nReply with one JSON object only: no prose, no code fence.\nThe JSON object must validate "
        'against this JSON schema: {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}'
        "<|im_end|>\n"
    )
    assert prepared.x_horde["prompted_output"] == "json"


def test_an_oversized_tool_list_is_context_length_exceeded_before_submit() -> None:
    tools = [
        {"type": "function", "function": {"name": f"tool_{index}", "description": "word " * 200}} for index in range(20)
    ]
    with pytest.raises(OpenAIError) as refused:
        prepare_chat_request(chat(tools=tools, max_tokens=100))
    assert (refused.value.status, refused.value.code, refused.value.param) == (
        400,
        "context_length_exceeded",
        "messages",
    )


def test_the_tools_turn_is_kept_when_old_turns_are_dropped() -> None:
    messages = [{"role": "user", "content": "x " * 100}, {"role": "assistant", "content": "y " * 2000}]
    messages.append({"role": "user", "content": "Weather?"})
    prepared = prepare_chat_request(chat(LLAMA, messages=messages, tools=[SEARCH], max_tokens=1000))
    assert prepared.x_horde["dropped_messages"] == 1
    assert "Given the following functions" in prepared.payload["prompt"]


def test_tools_and_response_format_are_served_and_image_parts_still_refused() -> None:
    assert text_api_refusal(chat(tools=[WEATHER], response_format={"type": "json_object"})) is None
    image = chat(
        messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.test/a.png"}}]}
        ]
    )
    refusal = text_api_refusal(image)
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.param) == (
        404,
        "no_worker_supports_features",
        "messages.[0].content.[0]",
    )


# --- the family parsers --------------------------------------------------------------------------------------------


def names_and_arguments(parsed: Any) -> list[tuple[object, object]]:
    return [(call.name, call.arguments) for call in parsed.calls]


@pytest.mark.parametrize(
    ("reply", "content", "calls"),
    [
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '  \n<tool_call>  {"name":"get_weather","arguments":{"city":"Paris"}}   </tool_call>\n\n',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "Let me check.",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '<tool_call>\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n</tool_call>',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool_call>',
            "",
            [("a", {}), ("b", {"x": 1})],
        ),
        (
            '<tool_call>\n{"name": "search", "arguments": {"q": {"and": [{"tag": "x"}, {"tag": "y"}]}}}\n</tool_call>',
            "",
            [("search", {"q": {"and": [{"tag": "x"}, {"tag": "y"}]}})],
        ),
        ("It is sunny.", "It is sunny.", []),
    ],
)
def test_hermes_replies(reply: str, content: str, calls: list[tuple[object, object]]) -> None:
    parsed = HermesTools().parse(reply)
    assert (parsed.content, names_and_arguments(parsed)) == (content, calls)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"ci',
            "the reply ends inside a <tool_call> block (no </tool_call>)",
        ),
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris",}}\n</tool_call>',
            "a <tool_call> block does not hold valid JSON (Illegal trailing comma before end of object)",
        ),
    ],
)
def test_hermes_malformed_replies(reply: str, error: str) -> None:
    with pytest.raises(MalformedCalls) as malformed:
        HermesTools().parse(reply)
    assert str(malformed.value) == error


@pytest.mark.parametrize(
    ("reply", "content", "calls"),
    [
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", {"city": "Paris"})]),
        (
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            'Sure, checking.\n\n  {"name": "get_weather", "parameters": {"city": "Paris"}}  ',
            "Sure, checking.",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '```json\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        ('{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}', "", [("a", {}), ("b", {"x": 1})]),
        (
            '{"name": "search", "parameters": {"q": {"deep": {"er": [1, 2]}}}}',
            "",
            [("search", {"q": {"deep": {"er": [1, 2]}}})],
        ),
        ('The person is {"name": "Bob"} in the data.', 'The person is {"name": "Bob"} in the data.', []),
    ],
)
def test_llama_3_replies(reply: str, content: str, calls: list[tuple[object, object]]) -> None:
    parsed = Llama3Tools().parse(reply)
    assert (parsed.content, names_and_arguments(parsed)) == (content, calls)


def test_llama_3_truncated_call() -> None:
    with pytest.raises(MalformedCalls) as malformed:
        Llama3Tools().parse('{"name": "get_weather", "parameters": {"city": "Pa')
    assert str(malformed.value) == 'the reply holds a {"name": ...} call that is not valid JSON'


@pytest.mark.parametrize(
    ("reply", "content", "calls"),
    [
        (
            '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1B2c3D4e"}]',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '  [TOOL_CALLS]\n [ {"name":"get_weather","arguments":{"city":"Paris"}} ]  ',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            'I will look it up. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
            "I will look it up.",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '[TOOL_CALLS] ```json\n[{"name": "get_weather", "arguments": {"city": "Paris"}}]\n```',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '[TOOL_CALLS] [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]',
            "",
            [("a", {}), ("b", {"x": 1})],
        ),
        (
            '[TOOL_CALLS] [{"name": "search", "arguments": {"q": {"deep": [{"x": {}}]}}}]',
            "",
            [("search", {"q": {"deep": [{"x": {}}]}})],
        ),
    ],
)
def test_mistral_replies(reply: str, content: str, calls: list[tuple[object, object]]) -> None:
    parsed = MistralTools().parse(reply)
    assert (parsed.content, names_and_arguments(parsed)) == (content, calls)


@pytest.mark.parametrize("parser", [HermesTools(), MistralTools()])
def test_a_reply_that_is_only_calls_is_read_when_the_backend_stripped_the_marker(parser: Any) -> None:
    """A worker's backend may drop Mistral's ``[TOOL_CALLS]`` (a special token) from the text it returns."""
    bare = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "a", "arguments": {}}]'
    assert names_and_arguments(parser.parse(f"  {bare}\n")) == [("get_weather", {"city": "Paris"}), ("a", {})]
    fenced = parser.parse('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```')
    assert (fenced.content, names_and_arguments(fenced)) == ("", [("get_weather", {"city": "Paris"})])
    prose = parser.parse('Use {"name": "get_weather", "arguments": {}} later.')
    assert (prose.content, prose.calls) == ('Use {"name": "get_weather", "arguments": {}} later.', ())


def test_mistral_truncated_call() -> None:
    with pytest.raises(MalformedCalls) as malformed:
        MistralTools().parse('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"ci')
    assert str(malformed.value).startswith("the [TOOL_CALLS] array is not valid JSON (")


# --- the reply in OpenAI's shape -----------------------------------------------------------------------------------


def test_two_calls_become_tool_calls_entries_with_openai_ids() -> None:
    rules = rules_of(tools=[WEATHER, SEARCH])
    read = rules.read(
        'Checking both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": {"q": {"a": 1}}}\n</tool_call>',
        truncated=False,
    )
    assert read.error is None
    assert read.content == "Checking both."
    assert [call["function"] for call in read.tool_calls] == [
        {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"name": "search", "arguments": '{"q":{"a":1}}'},
    ]
    assert all(call["type"] == "function" and CALL_ID.match(call["id"]) for call in read.tool_calls)
    assert read.tool_calls[0]["id"] != read.tool_calls[1]["id"]


@pytest.mark.parametrize(
    ("body", "reply", "error"),
    [
        (
            {"tools": [WEATHER]},
            '<tool_call>{"name": "get_wether", "arguments": {}}</tool_call>',
            "the reply calls 'get_wether', which is not one of: get_weather",
        ),
        (
            {"tools": [WEATHER]},
            '<tool_call>{"name": "get_weather", "arguments": {"town": "Paris"}}</tool_call>',
            "the arguments of get_weather do not match its parameters: 'city' is a required property",
        ),
        (
            {"tools": [WEATHER]},
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "units": "k"}}</tool_call>',
            "the arguments of get_weather do not match its parameters: 'k' is not one of ['c', 'f'] (at /units)",
        ),
        (
            {"tools": [SEARCH]},
            '<tool_call>{"name": "search", "arguments": [1]}</tool_call>',
            "the arguments of search are not a JSON object",
        ),
        (
            {"tools": [WEATHER], "tool_choice": "required"},
            "It is sunny.",
            "the reply holds no function call, and at least one function call is required",
        ),
        (
            {"tools": [WEATHER, SEARCH], "tool_choice": {"type": "function", "function": {"name": "search"}}},
            '<tool_call>{"name": "get_weather", "arguments": {"city": "x"}}</tool_call>',
            "the reply calls 'get_weather', which is not one of: search",
        ),
    ],
)
def test_calls_that_are_not_passed_on(body: dict[str, Any], reply: str, error: str) -> None:
    read = rules_of(**body).read(reply, truncated=False)
    assert (read.error, read.tool_calls) == (error, ())


def test_a_non_strict_function_takes_any_json_object_and_parallel_false_keeps_the_first_call() -> None:
    rules = rules_of(tools=[SEARCH], parallel_tool_calls=False)
    read = rules.read(
        '<tool_call>{"name": "search", "arguments": {"q": "not an object"}}</tool_call>'
        '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
        truncated=False,
    )
    assert (read.error, [call["function"]["arguments"] for call in read.tool_calls]) == (
        None,
        ['{"q":"not an object"}'],
    )


def test_auto_without_a_call_is_plain_content_and_a_truncated_call_says_so() -> None:
    rules = rules_of(LLAMA, tools=[WEATHER])
    assert rules.read("  It is sunny in Paris.  ", truncated=False).content == "It is sunny in Paris."
    truncated = rules.read('{"name": "get_weather", "parameters": {"ci', truncated=True)
    assert truncated.error == (
        'the reply holds a {"name": ...} call that is not valid JSON (the reply stopped at max_tokens)'
    )


SCHEMA_FORMAT = CITY_FORMAT


@pytest.mark.parametrize(
    ("reply", "content"),
    [
        ('{"name": "Paris", "population": 2100000}', '{"name": "Paris", "population": 2100000}'),
        (
            'Here is the JSON:\n```json\n{"name": "Paris", "population": 2100000}\n```\nHope it helps!',
            '{"name": "Paris", "population": 2100000}',
        ),
        (
            '  \n{\n  "name": "Paris",\n  "population": 2100000\n}\n',
            '{\n  "name": "Paris",\n  "population": 2100000\n}',
        ),
    ],
)
def test_the_json_is_extracted_and_validated(reply: str, content: str) -> None:
    read = rules_of(MISTRAL, response_format=SCHEMA_FORMAT).read(reply, truncated=False)
    assert (read.error, read.content) == (None, content)


@pytest.mark.parametrize(
    ("response_format", "reply", "error"),
    [
        (
            SCHEMA_FORMAT,
            '{"name": "Paris"}',
            "the reply's JSON does not match the schema: 'population' is a required property",
        ),
        (SCHEMA_FORMAT, '{"name": "Paris", "population": 2,}', "the reply holds no JSON object"),
        ({"type": "json_object"}, "[1, 2]", "the reply's JSON is not an object"),
        ({"type": "json_object"}, "Sure! Paris.", "the reply holds no JSON object"),
    ],
)
def test_json_that_is_not_valid(response_format: dict[str, Any], reply: str, error: str) -> None:
    read = rules_of(response_format=response_format).read(reply, truncated=False)
    assert read.error == error


# --- the repair turn, through the text routes ----------------------------------------------------------------------

FIRST_ID = "11111111-1111-4111-8111-111111111111"
REPAIR_ID = "22222222-2222-4222-8222-222222222222"


class ScriptedHorde:
    """A text API over httpx.MockTransport: each submit gets the next id; each status of an id its scripted reply."""

    def __init__(self, replies: dict[str, str], ids: list[str], refusal: httpx.Response | None = None) -> None:
        self.refusal = refusal
        """The answer to every submit after the first, when set."""
        self.replies = replies
        self.ids = list(ids)
        self.submits: list[dict[str, Any]] = []
        self.url = f"http://horde-{uuid.uuid4().hex[:8]}.test/api"

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            body = json.loads(request.content)
            if body.get("dry_run"):
                return httpx.Response(200, json={"kudos": 10})
            self.submits.append(body)
            if self.refusal is not None and len(self.submits) > 1:
                return self.refusal
            return httpx.Response(202, json={"id": self.ids.pop(0), "kudos": 10})
        request_id = request.url.path.rsplit("/", 1)[-1]
        generation = {"text": self.replies[request_id], "state": "ok", "model": QWEN, "worker_id": "w1"}
        return httpx.Response(
            200, json={"done": True, "finished": 1, "waiting": 0, "processing": 0, "generations": [generation]}
        )

    def client(self) -> TextHordeClient:
        return TextHordeClient(self.url, "test:1:none", 5.0, transport=httpx.MockTransport(self.handle))


async def served(prepared: PreparedTextRequest, horde: ScriptedHorde) -> tuple[TextRoutes, Any]:
    client = horde.client()
    routes = TextRoutes(client, prepared)
    try:
        submitted = await routes.submit(prepared.payload, "key")
        return routes, await routes.status(submitted.id, "key")
    finally:
        await client.aclose()


MALFORMED = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris",}}\n</tool_call>'
GOOD = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.asyncio
async def test_a_malformed_call_is_asked_again_once_and_the_repaired_reply_is_tool_calls() -> None:
    request = chat(tools=[WEATHER])
    prepared = prepare_chat_request(request, repair_attempts=1)
    horde = ScriptedHorde({FIRST_ID: MALFORMED, REPAIR_ID: GOOD}, [FIRST_ID, REPAIR_ID])
    routes, status = await served(prepared, horde)
    assert len(horde.submits) == 2
    assert horde.submits[1]["prompt"] == (
        prepared.payload["prompt"]
        + MALFORMED
        + "<|im_end|>\n<|im_start|>user\nYour previous reply was not valid: a <tool_call> block does not hold valid "
        "JSON (Illegal trailing comma before end of object). Reply again, following the format exactly."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert routes.current_id(FIRST_ID) == REPAIR_ID
    completion = build_completion(request, status, FIRST_ID, 1)
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert [call["function"] for call in choice["message"]["tool_calls"]] == [
        {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    ]
    assert completion["x_horde"]["repair_attempts"] == 1
    chunks = buffered_chunks(request, status, FIRST_ID, 1)
    assert [list(chunk["choices"][0]["delta"]) for chunk in chunks] == [["role"], ["tool_calls"], []]
    assert chunks[1]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.asyncio
async def test_without_repairs_a_malformed_call_is_model_reply_invalid() -> None:
    prepared = prepare_chat_request(chat(tools=[WEATHER]), repair_attempts=0)
    horde = ScriptedHorde({FIRST_ID: MALFORMED}, [FIRST_ID])
    with pytest.raises(OpenAIError) as invalid:
        await served(prepared, horde)
    assert len(horde.submits) == 1
    error = invalid.value
    assert (error.status, error.code, error.type) == (502, "ModelReplyInvalid", "api_error")
    assert error.headers() == {"x-should-retry": "false"}  # an SDK retry would pay for its own repairs again
    assert error.message.startswith(
        "The model's reply is not valid: a <tool_call> block does not hold valid JSON (Illegal trailing comma "
        "before end of object). "
    )


@pytest.mark.asyncio
async def test_a_reply_still_invalid_after_the_last_repair_is_model_reply_invalid() -> None:
    prepared = prepare_chat_request(chat(response_format={"type": "json_object"}), repair_attempts=1)
    horde = ScriptedHorde({FIRST_ID: "Paris!", REPAIR_ID: "Still Paris."}, [FIRST_ID, REPAIR_ID])
    with pytest.raises(OpenAIError) as invalid:
        await served(prepared, horde)
    assert len(horde.submits) == 2
    assert invalid.value.message.startswith(
        "The model's reply is not valid after 1 repair attempt: the reply holds no JSON object. "
    )


@pytest.mark.asyncio
async def test_a_repair_over_max_kudos_is_not_submitted() -> None:
    prepared = prepare_chat_request(chat(tools=[WEATHER], horde={"max_kudos": 15}), repair_attempts=1)
    horde = ScriptedHorde({FIRST_ID: MALFORMED}, [FIRST_ID])
    client = horde.client()
    routes = TextRoutes(client, prepared)
    routes.kudos_estimate = 10.0  # the first submit's dry run; the repair's 10 more would pass 15
    try:
        submitted = await routes.submit(prepared.payload, "key")
        with pytest.raises(OpenAIError) as invalid:
            await routes.status(submitted.id, "key")
    finally:
        await client.aclose()
    assert (len(horde.submits), invalid.value.code) == (1, "ModelReplyInvalid")
    assert invalid.value.message == (
        "The model's reply is not valid: a <tool_call> block does not hold valid JSON (Illegal trailing comma before "
        "end of object). It was not asked again: its kudos estimate would take the request over its horde.max_kudos. "
        "The model was asked for tool calls or JSON in its prompt (the text generation API has no constrained "
        "output); send the request again, or use another model."
    )


class RecordedCancels:
    """Stands in for the cancel queue: records each ``cancel_soon`` request id."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel_soon(self, request_id: str, apikey: str | None, submitted_at: float) -> None:
        self.cancelled.append(request_id)


@pytest.mark.asyncio
async def test_a_repair_submit_the_client_left_during_is_cancelled_once_the_horde_answers() -> None:
    prepared = prepare_chat_request(chat(tools=[WEATHER]), repair_attempts=1)
    horde = ScriptedHorde({FIRST_ID: MALFORMED}, [FIRST_ID, REPAIR_ID])
    repair_arrived, release = asyncio.Event(), asyncio.Event()

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and horde.submits:
            repair_arrived.set()
            await release.wait()
        return horde.handle(request)

    client = TextHordeClient(horde.url, "test:1:none", 5.0, transport=httpx.MockTransport(handle))
    cancels = RecordedCancels()
    routes = TextRoutes(client, prepared, cancels=cancels)  # type: ignore[arg-type]
    try:
        submitted = await routes.submit(prepared.payload, "key")
        reading = asyncio.ensure_future(routes.status(submitted.id, "key"))
        await repair_arrived.wait()
        reading.cancel()  # the client leaves while the repair submit is at the Horde
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert cancels.cancelled == []
        release.set()
        for _ in range(100):
            if cancels.cancelled:
                break
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()
    assert cancels.cancelled == [REPAIR_ID]
    assert routes.repairs == 0


def test_a_model_of_no_known_family_gets_the_generic_format_and_its_replies_read() -> None:
    prepared = prepare_chat_request(chat(GENERIC, tools=[SEARCH], tool_choice="required"))
    assert prepared.x_horde["prompt_template"] == "generic-instruct"
    assert prepared.payload["prompt"].startswith("# Tools\n\nYou may call one or more functions")
    assert prepared.payload["prompt"].endswith(
        "</tool_call>\nYou must call at least one function.\n\nUser: Weather in Paris?\nAssistant:"
    )
    rules = prepared.reply_reader
    assert isinstance(rules, ReplyRules)
    read = rules.read(' <tool_call>{"name": "search", "arguments": {"q": {}}}</tool_call>', truncated=False)
    assert [call["function"] for call in read.tool_calls] == [{"name": "search", "arguments": '{"q":{}}'}]


@pytest.mark.parametrize(
    ("parameters", "problem"),
    [
        (
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            "the $ref '#/$defs/missing' cannot be resolved",
        ),
        ({"type": "objekt"}, "'objekt' is not valid under any of the given schemas (at /type)"),
        ({"type": "string", "pattern": "(unclosed"}, "'(unclosed' is not a 'regex' (at /pattern)"),
    ],
)
def test_a_strict_schema_jsonschema_cannot_apply_is_a_400_before_any_submit(
    parameters: dict[str, Any], problem: str
) -> None:
    broken = {"type": "function", "function": {"name": "lookup", "parameters": parameters, "strict": True}}
    with pytest.raises(OpenAIError) as raised:
        prepare_chat_request(chat(tools=[WEATHER, broken]))
    assert (raised.value.status, raised.value.code, raised.value.param, raised.value.message) == (
        400,
        "UnsupportedChatParameter",
        "tools[1].function.parameters",
        f"Invalid schema for function 'lookup': {problem}.",
    )
    assert raised.value.type == "invalid_request_error"


def test_a_json_schema_jsonschema_cannot_apply_is_a_400_before_any_submit() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/definitions/gone"}}}
    with pytest.raises(OpenAIError) as raised:
        prepare_chat_request(
            chat(response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
        )
    assert (raised.value.status, raised.value.param, raised.value.message) == (
        400,
        "response_format.json_schema.schema",
        "Invalid schema for response_format 'answer': the $ref '#/definitions/gone' cannot be resolved.",
    )


def test_a_named_choice_no_tool_declares_is_read_without_a_key_error() -> None:
    """The request rules refuse such a request (test_validation); the reader is a second guard."""
    rules = ReplyRules(tool_format=HermesTools(), tools=(WEATHER,), tool_choice="function", forced_function="lookup")
    read = rules.read('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>', truncated=False)
    assert [call["function"] for call in read.tool_calls] == [{"name": "lookup", "arguments": "{}"}]


@pytest.mark.parametrize(
    ("model", "body", "reply", "error"),
    [
        (
            QWEN,
            {"tools": [SEARCH]},
            '<tool_call>{"name": "search", "arguments": {"q": NaN}}</tool_call>',
            "a <tool_call> block does not hold valid JSON (NaN is not JSON)",
        ),
        (
            QWEN,
            {"tools": [SEARCH]},
            '<tool_call>{"name": "search", "arguments": "{\\"q\\": 1e400}"}</tool_call>',
            "the arguments of search are not valid JSON",
        ),
        (
            MISTRAL,
            {"tools": [SEARCH]},
            '[TOOL_CALLS] [{"name": "search", "arguments": {"q": -Infinity}}]',
            "the [TOOL_CALLS] array is not valid JSON (-Infinity is not JSON)",
        ),
        (
            LLAMA,
            {"tools": [SEARCH]},
            '{"name": "search", "parameters": {"q": Infinity}}',
            'the reply holds a {"name": ...} call that is not valid JSON',
        ),
        (QWEN, {"response_format": {"type": "json_object"}}, '{"x": NaN}', "the reply holds no JSON object"),
    ],
)
def test_nan_and_infinity_in_a_models_json_are_not_json(
    model: str, body: dict[str, Any], reply: str, error: str
) -> None:
    """JSON.parse refuses NaN, Infinity and 1e400; Python's json would pass them on as valid arguments or content."""
    read = rules_of(model, **body).read(reply, truncated=False)
    assert (read.error, read.tool_calls) == (error, ())


def test_a_history_call_whose_arguments_hold_nan_is_rendered_as_its_text() -> None:
    history = [
        {"role": "user", "content": "Search."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": NaN}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "none"},
    ]
    prompt = prepare_chat_request(chat(tools=[SEARCH], messages=history)).payload["prompt"]
    assert '<tool_call>\n{"name":"search","arguments":"{\\"q\\": NaN}"}\n</tool_call>' in prompt


def test_a_catastrophic_pattern_is_stopped_within_the_bound_and_said_so() -> None:
    """(a+)+$ took 33 s in Python's re on the event loop (the regex package answers it at once); (a|aa)+$ backtracks
    in regex too, and its timeout stops it at 0.1 s.
    """
    schema = {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": "^(a|aa)+$"}},
        "patternProperties": {"^(b|bb)+$": {"type": "string"}},
    }
    rules = rules_of(response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    read = rules.read(json.dumps({"word": "a" * 60 + "!"}), truncated=False)
    assert read.error == (
        "the reply's JSON does not match the schema: the schema cannot be applied (the pattern '^(a|aa)+$' ran past "
        "0.1 s)"
    )
    read = rules.read(json.dumps({"b" * 60 + "!": "x"}), truncated=False)
    assert read.error == (
        "the reply's JSON does not match the schema: the schema cannot be applied (the pattern '^(b|bb)+$' ran past "
        "0.1 s)"
    )


@pytest.mark.parametrize(
    ("schema", "value", "error"),
    [
        (
            {"type": "object", "properties": {"w": {"type": "string", "pattern": "^a"}}},
            {"w": "ba"},
            "'ba' does not match '^a' (at /w)",
        ),
        (
            {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
            {"a": 1, "b": 2},
            "Additional properties are not allowed ('b' was unexpected)",
        ),
        (
            {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False},
            {"xa": "s"},
            "'s' is not of type 'integer' (at /xa)",
        ),
        (
            {"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": False},
            {"y": 1},
            "'y' does not match any of the regexes: '^x'",
        ),
    ],
)
def test_the_bounded_keywords_say_what_jsonschema_says(schema: dict[str, Any], value: object, error: str) -> None:
    rules = rules_of(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    read = rules.read(json.dumps(value), truncated=False)
    assert read.error == f"the reply's JSON does not match the schema: {error}"


@pytest.mark.parametrize(
    ("model", "reply", "error"),
    [
        (
            QWEN,
            'Sure: {"name":"get_weather","arguments":{"city":"P"',
            'the reply holds a call of get_weather that is not a whole {"name", "arguments"} object',
        ),
        (
            GENERIC,
            '[{"name":"get_weather","arguments":{"city":"P"}},{"name":"get_wea',
            'the reply holds a call of get_weather that is not a whole {"name", "arguments"} object',
        ),
        (
            MISTRAL,
            'Here: {"name": "get_weather", "arguments": {"city": "Paris"}} and more',
            'the reply holds a call of get_weather that is not a whole {"name", "arguments"} object',
        ),
        (LLAMA, "<|python_tag|>", "the reply holds <|python_tag|> without a call that parses"),
    ],
)
def test_call_shaped_text_under_auto_is_malformed_in_every_family(model: str, reply: str, error: str) -> None:
    read = rules_of(model, tools=[WEATHER]).read(reply, truncated=False)
    assert (read.error, read.tool_calls) == (error, ())


def test_llama_3_reads_an_array_of_calls_after_prose() -> None:
    read = rules_of(LLAMA, tools=[WEATHER]).read(
        'Sure. [{"name":"get_weather","parameters":{"city":"Paris"}}]', truncated=False
    )
    assert (read.error, read.content, [call["function"] for call in read.tool_calls]) == (
        None,
        "Sure.",
        [{"name": "get_weather", "arguments": '{"city":"Paris"}'}],
    )


def test_llama_3_an_object_naming_no_declared_tool_is_prose() -> None:
    reply = 'A call looks like {"name": "example", "parameters": {"a": 1}} in JSON.'
    read = rules_of(LLAMA, tools=[WEATHER]).read(reply, truncated=False)
    assert (read.error, read.content, read.tool_calls) == (None, reply, ())


@pytest.mark.parametrize("name", ["auto", "none", "required"])
def test_a_named_choice_of_a_function_called_like_a_mode_stays_named(name: str) -> None:
    tool = {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    rules = rules_of(tools=[WEATHER, tool], tool_choice={"type": "function", "function": {"name": name}})
    assert (rules.offers_tools, rules.forced_name, rules.choice_lines()) == (
        True,
        name,
        [f"You must call the function {name}."],
    )
    read = rules.read("It is sunny.", truncated=False)
    assert read.error == f"the reply holds no function call, and a call of {name} is required"


@pytest.mark.asyncio
async def test_a_horde_refusal_of_the_repair_is_answered_with_its_headers() -> None:
    prepared = prepare_chat_request(chat(tools=[WEATHER]), repair_attempts=1)
    refusal = httpx.Response(
        403,
        json={
            "message": "Due to heavy demand, for requests over 512 tokens, the client needs to already have the "
            "required kudos.",
            "rc": "KudosUpfront",
        },
    )
    horde = ScriptedHorde({FIRST_ID: MALFORMED}, [FIRST_ID, REPAIR_ID], refusal)
    with pytest.raises(OpenAIError) as refused:
        await served(prepared, horde)
    assert len(horde.submits) == 2
    assert (refused.value.status, refused.value.code, refused.value.headers()) == (
        403,
        "KudosUpfront",
        {"x-should-retry": "false"},
    )


def test_the_generic_format_is_named_generic_and_writes_hermes() -> None:
    from chat.serving.tool_formats import tool_format_for

    assert [tool_format_for(profile).profile for profile in ("chatml", "alpaca", "generic-instruct")] == [
        "chatml",
        "generic",
        "generic",
    ]
    assert isinstance(tool_format_for("alpaca"), HermesTools)
