"""Tool calls and JSON replies written into a text API prompt, answered the way a model of the family answers them.

The front reaches text-only models with one rendered prompt; for tools and structured output it writes the markers of
the shared contract (``notes/tools-contract.md``, docs: devhorde/README.md "Prompted tools and JSON") into it:

- ChatML / Qwen / Hermes and every other format: a ``<tools>`` block (one JSON tool per line) in the system text;
  the model answers ``<tool_call>`` blocks of ``{"name", "arguments"}``, results come back as
  ``<tool_response>`` blocks in a user turn.
- Llama 3.1+: Meta's custom-tool instruction (:data:`LLAMA_TOOLS_INTRO` then one JSON tool per line) at the start of
  the first user turn; the model answers ``{"name", "parameters"}`` lines, results come back in the ``ipython`` role.
- Mistral: ``[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]``; the model answers ``[TOOL_CALLS] [{"name", "arguments",
  "id"}]``, results come back as ``[TOOL_RESULTS] {"call_id", "content"}[/TOOL_RESULTS]``.
- JSON: the line :data:`JSON_LINE`, optionally followed by :data:`SCHEMA_LINE` and the schema as compact JSON.

:func:`read_prompt` finds these in a prompt (None when it holds none); :func:`prompted_reply` writes the reply. Tools
are chosen as the native path's simulated workers choose them (devhorde.replies.choose_tools: the tools the user's
words name, all of them unless :data:`SINGLE_CALL_LINE` forbids parallel calls). After a tool result the reply is
text that quotes the result. A repair turn (a last user turn starting :data:`REPAIR_START`) and the reply it
answers are set aside, so the repaired reply is the one the first attempt should have been. With the scenario's
``malformed_first_replies``, a prompt that holds tools or the JSON instruction and is not a repair gets a malformed
reply (:func:`malformed_reply`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from horde_sdk.generation_parameters.text.chat_policy import ChatToolChoiceMode

from devhorde.replies import build_tool_calls, choose_tools, json_reply

Family = Literal["chatml", "llama-3", "mistral", "generic"]
"""The tool syntax a prompt asks for: ``chatml`` (also every format without its own, the contract's GENERIC),
``llama-3`` or ``mistral``."""

CHATML_TOOLS: Final = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
"""The ChatML / generic tools block: one compact JSON tool object per line."""

CHATML_TOOLS_SECTION: Final = re.compile(r"# Tools\n\n.*?</tool_call>", re.DOTALL)
"""The whole ChatML / generic tools section (heading, block and call format), removed from the user's words."""

LLAMA_TOOLS_INTRO: Final[str] = (
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    "best answers the given prompt.\n\nRespond in the format "
    '{"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n'
)
"""Meta's custom-tool instruction that opens the first user turn, before one JSON tool per line."""

MISTRAL_TOOLS: Final = re.compile(r"\[AVAILABLE_TOOLS\]\s*(\[.*?\])\s*\[/AVAILABLE_TOOLS\]", re.DOTALL)
"""Mistral's tools block, a JSON array."""

REQUIRED_LINE: Final[str] = "You must call at least one function."
"""``tool_choice: required``."""

NAMED_LINE: Final = re.compile(r"You must call the function ([A-Za-z0-9_-]+)\.")
"""``tool_choice`` naming a function."""

SINGLE_CALL_LINE: Final[str] = "Call at most one function."
"""``parallel_tool_calls: false``."""

JSON_LINE: Final[str] = "Reply with one JSON object only: no prose, no code fence."
"""``response_format`` ``json_object`` or ``json_schema``."""

SCHEMA_LINE: Final[str] = "The JSON object must validate against this JSON schema: "
"""``json_schema``: followed by the schema as compact JSON on the same line."""

REPAIR_START: Final[str] = "Your previous reply was not valid: "
"""How the front's repair turn starts."""

MALFORMED_JSON_PROSE: Final[str] = "Sure! Here is the JSON you asked for:\n"
"""The prose a malformed JSON reply opens with (before JSON with a trailing comma)."""

_CHATML_TURN: Final = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)
_LLAMA_TURN: Final = re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|\Z)", re.DOTALL)
_MISTRAL_BLOCK: Final = re.compile(r"\[INST\](.*?)\[/INST\]|\[TOOL_RESULTS\](.*?)\[/TOOL_RESULTS\]", re.DOTALL)
_GENERIC_MARKER: Final = re.compile(r"^(User: |Assistant: ?|### Instruction:\n|### Response:\n)", re.MULTILINE)
_TOOL_RESPONSE: Final = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)
_TOOL_CALL: Final = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(slots=True)
class Turn:
    """One turn of a rendered prompt: ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (a tool result,
    ``results`` holding each result's text).
    """

    role: str
    text: str
    results: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PromptedAsk:
    """What a prompt asks of the model, as :func:`read_prompt` reads it."""

    family: Family
    tools: list[dict[str, Any]]
    mode: ChatToolChoiceMode
    forced: str | None
    parallel: bool
    json_wanted: bool
    schema: dict[str, Any] | None
    turns: list[Turn]
    """The conversation without the repair turns and the replies they answer."""
    repair: bool
    """The prompt is a repair turn."""


def _json_lines(block: str) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for line in block.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            tools.append(value)
    return tools


def _as_tools(values: Sequence[Any]) -> list[dict[str, Any]]:
    """Tool objects with a ``function.name`` (``{"type": "function", "function": {...}}``); a bare function object is
    wrapped.
    """
    tools: list[dict[str, Any]] = []
    for value in values:
        if not isinstance(value, dict):
            continue
        function = value.get("function", value)
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools.append({"type": "function", "function": function})
    return tools


def _read_tools(prompt: str) -> tuple[Family | None, list[dict[str, Any]]]:
    if (found := MISTRAL_TOOLS.search(prompt)) is not None:
        try:
            array = json.loads(found.group(1))
        except ValueError:
            array = []
        return "mistral", _as_tools(array if isinstance(array, list) else [])
    if (start := prompt.find(LLAMA_TOOLS_INTRO)) != -1:
        block = prompt[start + len(LLAMA_TOOLS_INTRO) :].split("\n\n", 1)[0]
        return "llama-3", _as_tools(_json_lines(block))
    if (found := CHATML_TOOLS.search(prompt)) is not None:
        return "chatml", _as_tools(_json_lines(found.group(1)))
    return None, []


def _user_words(text: str) -> str:
    """A user turn's own words: without the tools section, the Llama tool lines and the front's instruction lines."""
    text = CHATML_TOOLS_SECTION.sub("", text)
    if (start := text.find(LLAMA_TOOLS_INTRO)) != -1:
        rest = text[start + len(LLAMA_TOOLS_INTRO) :]
        text = text[:start] + (rest.split("\n\n", 1)[1] if "\n\n" in rest else "")
    lines = [
        line
        for line in text.splitlines()
        if line.strip() not in (REQUIRED_LINE, SINGLE_CALL_LINE, JSON_LINE)
        and not line.startswith(SCHEMA_LINE)
        and not NAMED_LINE.match(line.strip())
    ]
    return "\n".join(lines).strip()


def _turns(prompt: str) -> list[Turn]:
    """Split a rendered prompt into turns by its markers (ChatML, Llama 3, Mistral, else ``User:`` / ``###``)."""
    turns: list[Turn] = []
    if "<|im_start|>" in prompt:
        for role, text in _CHATML_TURN.findall(prompt):
            turns.append(Turn(role, text))
    elif "<|start_header_id|>" in prompt:
        for role, text in _LLAMA_TURN.findall(prompt):
            turns.append(Turn("tool", text, [text]) if role == "ipython" else Turn(role, text))
    elif "[INST]" in prompt:
        position = 0
        for block in _MISTRAL_BLOCK.finditer(prompt):
            gap = MISTRAL_TOOLS.sub("", prompt[position : block.start()]).split("</s>")[0].strip()
            if gap and turns:
                turns.append(Turn("assistant", gap))
            if block.group(1) is not None:
                turns.append(Turn("user", block.group(1).strip()))
            else:
                turns.append(Turn("tool", block.group(2).strip(), [_mistral_result(block.group(2))]))
            position = block.end()
    else:
        markers = list(_GENERIC_MARKER.finditer(prompt))
        head = prompt[: markers[0].start()] if markers else prompt
        if head.strip():
            turns.append(Turn("system" if markers else "user", head.strip()))
        for index, marker in enumerate(markers):
            end = markers[index + 1].start() if index + 1 < len(markers) else len(prompt)
            role = "user" if marker.group(1) in ("User: ", "### Instruction:\n") else "assistant"
            text = prompt[marker.end() : end].strip()
            if text or role == "user":
                turns.append(Turn(role, text))
    if turns and turns[-1].role == "assistant" and not turns[-1].text.strip():
        turns.pop()  # the generation prompt: the assistant turn the model writes
    for turn in turns:
        if turn.role == "user" and turn.text.lstrip().startswith("<tool_response>"):
            turn.role, turn.results = "tool", [result.strip() for result in _TOOL_RESPONSE.findall(turn.text)]
    return turns


def _mistral_result(text: str) -> str:
    """The ``content`` of a ``[TOOL_RESULTS]`` object (as text), or the block's text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text.strip()
    if isinstance(value, dict) and "content" in value:
        content = value["content"]
        return content if isinstance(content, str) else json.dumps(content)
    return text.strip()


def _without_repairs(turns: list[Turn]) -> tuple[list[Turn], bool]:
    """The turns without trailing repair turns and the replies they answer; whether there was one."""
    repair = False
    while turns and turns[-1].role == "user" and turns[-1].text.lstrip().startswith(REPAIR_START):
        repair = True
        turns = turns[:-1]
        if turns and turns[-1].role == "assistant":
            turns = turns[:-1]
    return turns, repair


def read_prompt(prompt: str) -> PromptedAsk | None:
    """What the prompt asks for when it holds tools or the JSON instruction; None otherwise (an ordinary reply)."""
    family, tools = _read_tools(prompt)
    json_wanted = JSON_LINE in prompt
    if not tools and not json_wanted:
        return None
    schema: dict[str, Any] | None = None
    if (start := prompt.find(SCHEMA_LINE)) != -1:
        try:
            value, _ = json.JSONDecoder().raw_decode(prompt, start + len(SCHEMA_LINE))
        except ValueError:
            value = None
        schema = value if isinstance(value, dict) else None
    mode = ChatToolChoiceMode.AUTO
    forced = None
    if (named := NAMED_LINE.search(prompt)) is not None:
        mode, forced = ChatToolChoiceMode.FUNCTION, named.group(1)
    elif REQUIRED_LINE in prompt:
        mode = ChatToolChoiceMode.REQUIRED
    turns, repair = _without_repairs(_turns(prompt))
    return PromptedAsk(
        family=family or "generic",
        tools=tools,
        mode=mode,
        forced=forced,
        parallel=SINGLE_CALL_LINE not in prompt,
        json_wanted=json_wanted,
        schema=schema,
        turns=turns,
        repair=repair,
    )


def _user_request(turns: Sequence[Turn]) -> str:
    for turn in reversed(turns):
        if turn.role == "user":
            return _user_words(turn.text)
    return ""


def _called_names(ask: PromptedAsk, turn: Turn) -> list[tuple[str, str]]:
    """``(name, id)`` of each call in an assistant turn, in the family's syntax (id empty when it has none)."""
    calls: list[tuple[str, str]] = []
    text = turn.text
    if ask.family == "mistral" and "[TOOL_CALLS]" in text:
        try:
            array = json.loads(text.split("[TOOL_CALLS]", 1)[1].strip())
        except ValueError:
            array = []
        values: list[Any] = array if isinstance(array, list) else []
    elif "<tool_call>" in text:
        values = []
        for block in _TOOL_CALL.findall(text):
            try:
                values.append(json.loads(block))
            except ValueError:
                continue
    else:
        values = []
        for line in text.replace("<|python_tag|>", "").replace(";", "\n").splitlines():
            try:
                values.append(json.loads(line))
            except ValueError:
                continue
    for value in values:
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            calls.append((value["name"], str(value.get("id", ""))))
    return calls


def _result_answer(ask: PromptedAsk) -> str:
    """A text answer that uses the trailing tool results: one sentence per result, naming the tool that gave it."""
    trailing: list[Turn] = []
    for turn in reversed(ask.turns):
        if turn.role != "tool":
            break
        trailing.insert(0, turn)
    results = [result for turn in trailing for result in turn.results]
    called = next((_called_names(ask, turn) for turn in reversed(ask.turns) if turn.role == "assistant"), [])
    sentences: list[str] = []
    for index, result in enumerate(results):
        name = called[index][0] if index < len(called) else "requested"
        flat = " ".join(result.split())
        if len(flat) > 400:
            flat = flat[:397] + "..."
        sentences.append(f"The {name} tool returned: {flat}")
    return " ".join(sentences) + " Based on that result, here is the answer you were looking for."


def mistral_call_id(seed: int, index: int) -> str:
    """A Mistral tool call id: 9 alphanumerics, deterministic."""
    digest = hashlib.sha256(f"mistral:{seed}:{index}".encode()).hexdigest()
    return "".join(ch for ch in digest if ch.isalnum())[:9]


def render_calls(family: Family, calls: Sequence[Mapping[str, Any]], seed: int) -> str:
    """OpenAI tool calls in the family's own reply syntax (the contract's "The model replies" lines)."""
    pairs = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in calls]
    if family == "llama-3":
        return "\n".join(json.dumps({"name": name, "parameters": arguments}) for name, arguments in pairs)
    if family == "mistral":
        array = [
            {"name": name, "arguments": arguments, "id": mistral_call_id(seed, index)}
            for index, (name, arguments) in enumerate(pairs)
        ]
        return "[TOOL_CALLS] " + json.dumps(array)
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>" for name, arguments in pairs
    )


@dataclass(frozen=True, slots=True)
class PromptedReply:
    """A reply to a prompted ask: ``kind`` is ``calls``, ``json`` or ``text``."""

    kind: Literal["calls", "json", "text"]
    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)


def good_reply(ask: PromptedAsk, seed: int) -> PromptedReply:
    """The reply a cooperating model of the family writes.

    Tool calls when tools are offered and the user's words name some (or ``tool_choice`` requires one), unless the
    last turn is a tool result under ``auto``; after a tool result, text quoting it (JSON when asked); with the JSON
    instruction, a JSON object following the schema when there is one; else text (``kind: text`` with empty text:
    the caller writes its ordinary reply).
    """
    request = _user_request(ask.turns)
    messages: list[dict[str, Any]] = [{"role": "user", "content": request}]
    after_result = bool(ask.turns) and ask.turns[-1].role == "tool"
    if after_result:
        messages.append({"role": "tool", "content": "", "tool_call_id": ""})
    chosen = choose_tools(ask.tools, ask.mode, ask.forced, messages, ask.parallel) if ask.tools else []
    if chosen:
        calls = build_tool_calls(chosen, messages[:1], seed)
        return PromptedReply("calls", render_calls(ask.family, calls, seed), calls)
    if ask.json_wanted:
        response_format = (
            {"type": "json_schema", "json_schema": {"schema": ask.schema}}
            if ask.schema is not None
            else {"type": "json_object"}
        )
        return PromptedReply("json", json_reply(response_format, messages[:1], seed))
    if after_result:
        return PromptedReply("text", _result_answer(ask))
    return PromptedReply("text", "")


def malformed_reply(ask: PromptedAsk, good: PromptedReply, seed: int) -> str:
    """The ``malformed_first_replies`` reply: the good reply's call syntax with its JSON cut short by one character
    (a call of the first offered tool when the good reply is text), or the good JSON after prose and with a
    trailing comma before its last brace.
    """
    if good.kind == "json" or (good.kind == "text" and not ask.tools):
        body = good.text if good.kind == "json" else "{}"
        cut = body.rstrip()
        broken = cut[:-1] + ",}" if cut.endswith("}") else cut + ","
        return MALFORMED_JSON_PROSE + broken
    calls = good.calls or build_tool_calls(ask.tools[:1], [{"role": "user", "content": _user_request(ask.turns)}], seed)
    rendered = render_calls(ask.family, calls, seed)
    if ask.family in {"chatml", "generic"}:
        first = rendered.split("\n</tool_call>", 1)[0]
        return first[:-1] + "\n</tool_call>"
    return rendered[:-1]


def prompted_reply(prompt: str, seed: int, *, malformed_first: bool = False) -> str | None:
    """The reply to a prompt holding tools or the JSON instruction, or None (no such markers, or nothing but an
    ordinary reply to write).
    """
    ask = read_prompt(prompt)
    if ask is None:
        return None
    good = good_reply(ask, seed)
    if malformed_first and not ask.repair:
        return malformed_reply(ask, good, seed)
    return good.text or None
