"""Tool calls in each model family's own prompt format, for the text path (the shared tool contract).

One class per family, each with the same methods, registered by the prompt contract's ``profile_id``
(:data:`TOOL_FORMATS`; vLLM's ``tool_parsers`` layout): a new family is a new class, not a new branch.

- :meth:`ToolFormat.with_tools`: the template messages with the tools block written where the family expects it;
- :meth:`ToolFormat.call_turn` / :meth:`ToolFormat.result_turns`: the history (an assistant message's
  ``tool_calls``; ``tool`` messages with their ``tool_call_id``) as template messages;
- :meth:`ToolFormat.tools_block`: the tools block of a family that writes it outside any turn (Mistral's
  ``[AVAILABLE_TOOLS]``, placed before the last user turn by chat.serving.prompt_templates.render_within_context);
- :meth:`ToolFormat.parse`: a reply -> the text before the calls and the calls as the model wrote them
  (:class:`ParsedCalls`), or :class:`MalformedCalls` when call-shaped text does not parse. A reply that is only a
  call object or an array of them is read as calls in every family (:func:`bare_calls`): a worker's backend may strip
  a marker such as Mistral's ``[TOOL_CALLS]`` as a special token.

The formats (docs/behaviour.md "Tools and structured output on the text path"):

- ``chatml`` (Qwen, Hermes, Dolphin, ChatML) and every other profile (:class:`HermesTools`): Qwen 2.5's tools
  block at the end of the system turn, calls as ``<tool_call>{"name", "arguments"}</tool_call>``, results as a user
  turn of ``<tool_response>`` blocks.
- ``llama-3`` (:class:`Llama3Tools`): Meta's custom-tool format at the start of the first user turn, calls as
  ``{"name", "parameters"}`` JSON (optionally after ``<|python_tag|>``), results in the ``ipython`` role.
- ``mistral`` (:class:`MistralTools`): ``[AVAILABLE_TOOLS]`` before the last user turn's ``[INST]``, calls as
  ``[TOOL_CALLS] [...]``, results as ``[TOOL_RESULTS] {"call_id", "content"}[/TOOL_RESULTS]``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, override

TemplateMessage = dict[str, str]
"""A message as the prompt templates read it: ``{"role", "content"}``."""

FENCE: Final[re.Pattern[str]] = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:\n?```|\Z)", re.DOTALL)
"""A Markdown code fence (the closing fence may be missing in a truncated reply); group 1 is its body."""

JSON_START: Final[re.Pattern[str]] = re.compile(r"[{\[]")
"""Where a JSON object or array may start."""


def _refuse_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"{text} overflows a double", text, 0)
    return value


_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
"""Reads a model's JSON as ``JSON.parse`` does: NaN, Infinity, -Infinity and a number that overflows a double
(``1e400``) raise ``json.JSONDecodeError`` (Python's ``json`` would accept them)."""


def loads_model_json(text: str) -> object:
    """``text`` (a model's reply, or JSON a client's history holds) as one JSON value, with :data:`_DECODER`.

    Raises:
        json.JSONDecodeError: ``text`` is not exactly one JSON value, or holds NaN / Infinity / an overflowing number.
    """
    return _DECODER.decode(text)


@dataclass(frozen=True, slots=True)
class WrittenCall:
    """One call as the model wrote it: ``name`` and ``arguments`` (a JSON object, or whatever the model put there)."""

    name: object
    arguments: object


@dataclass(frozen=True, slots=True)
class ParsedCalls:
    """A reply read by a family's parser: ``content`` is the text before the first call (stripped), ``calls`` the
    calls in order (empty when the reply holds no call-shaped text).
    """

    content: str
    calls: tuple[WrittenCall, ...]


class MalformedCalls(ValueError):
    """The reply holds call-shaped text that does not parse; the message says what is wrong, for the repair turn."""


def compact_json(value: object) -> str:
    """``value`` as compact JSON (``separators=(",", ":")``, non-ASCII kept; NaN and Infinity raise ``ValueError``,
    as no JSON holds them).
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def tool_objects(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tool objects the prompts list: ``{"type": "function", "function": {name, description, parameters}}``,
    with only the keys the client set.
    """
    objects = []
    for tool in tools:
        function = tool.get("function") or {}
        written = {key: function[key] for key in ("name", "description", "parameters") if function.get(key) is not None}
        objects.append({"type": "function", "function": written})
    return objects


def without_fences(text: str) -> str:
    """``text`` with each Markdown code fence replaced by its body."""
    return FENCE.sub(lambda match: match.group(1), text)


def json_values_in(text: str) -> list[tuple[int, int, object]]:
    """Every top-level JSON object or array in ``text``, as ``(start, end, value)``, scanning left to right."""
    found: list[tuple[int, int, object]] = []
    index = 0
    while index < len(text):
        match = JSON_START.search(text, index)
        if match is None:
            break
        try:
            value, end = _DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            index = match.start() + 1
            continue
        found.append((match.start(), end, value))
        index = end
    return found


def bare_calls(reply: str, arguments_key: str) -> tuple[WrittenCall, ...]:
    """The calls of a reply that is nothing but a call object or an array of call objects (fenced or not): what a
    family's reply becomes when the worker's backend strips its call marker as a special token. Empty otherwise.
    """
    text = without_fences(reply).strip()
    values = json_values_in(text)
    if len(values) != 1 or values[0][0] != 0 or values[0][1] != len(text):
        return ()
    value = values[0][2]
    items = value if isinstance(value, list) else [value]
    calls = [_written_call(item, arguments_key) for item in items]
    return tuple(call for call in calls if call is not None) if calls and None not in calls else ()


CALL_MARKERS: Final[tuple[str, ...]] = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>")
"""The families' call markers (Hermes, Mistral, Llama 3)."""

CALL_START: Final[re.Pattern[str]] = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
"""The start of a call object, ``{"name": "<function>"``; group 1 is the name as written."""


def call_shaped(reply: str, names: Collection[str]) -> str | None:
    """What makes ``reply``, read as holding no call, call-shaped after all (the same for every family): a call
    marker, or a ``{"name": ...`` naming one of ``names`` (the declared functions). None when there is none.
    """
    for marker in CALL_MARKERS:
        if marker in reply:
            return f"the reply holds {marker} without a call that parses"
    for match in CALL_START.finditer(reply):
        if match.group(1) in names:
            return f'the reply holds a call of {match.group(1)} that is not a whole {{"name", "arguments"}} object'
    return None


def _written_call(value: object, arguments_key: str) -> WrittenCall | None:
    """A call object ``{"name": ..., arguments_key: ...}`` (``arguments`` accepted for any family), else None."""
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return None
    for key in (arguments_key, "arguments", "parameters"):
        if key in value:
            return WrittenCall(value["name"], value[key])
    return None


class ToolFormat:
    """The generic format (:class:`HermesTools`'s) and the methods every family implements."""

    profile: ClassVar[str] = "generic"

    def tools_block(self, tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]) -> str:
        """The text that offers ``tools``, then the ``tool_choice`` lines."""
        raise NotImplementedError

    def with_tools(
        self, messages: list[TemplateMessage], tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]
    ) -> list[TemplateMessage]:
        """``messages`` with the tools block written where the family expects it."""
        raise NotImplementedError

    def call_turn(self, content: str, calls: Sequence[Mapping[str, Any]]) -> TemplateMessage:
        """An assistant message that called ``calls`` (OpenAI ``tool_calls`` entries) as a template message."""
        raise NotImplementedError

    def result_turns(self, results: Sequence[tuple[str, str]]) -> list[TemplateMessage]:
        """Consecutive ``tool`` messages (``(tool_call_id, content)``) as template messages."""
        raise NotImplementedError

    def parse(self, reply: str, names: Collection[str] | None = None) -> ParsedCalls:
        """The reply's content and calls. Raises :class:`MalformedCalls` for call-shaped text that does not parse.
        ``names``: the declared functions, where a family reads calls from prose (Llama 3: an object naming another
        function is prose, not a call); None reads every call object.
        """
        raise NotImplementedError


def _arguments(call: Mapping[str, Any]) -> object:
    """A history call's arguments as a JSON value (its ``arguments`` string parsed, the string itself if it is not
    JSON).
    """
    text = (call.get("function") or {}).get("arguments") or "{}"
    try:
        return loads_model_json(text)
    except json.JSONDecodeError:
        return text


def _name(call: Mapping[str, Any]) -> str:
    return str((call.get("function") or {}).get("name") or "")


class HermesTools(ToolFormat):
    """ChatML / Hermes / Qwen, and the generic format of every other profile: ``<tools>`` in the system turn."""

    profile = "chatml"

    PREAMBLE: ClassVar[str] = (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    )
    INSTRUCTION: ClassVar[str] = (
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>"
    )
    CALL: ClassVar[re.Pattern[str]] = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)

    @override
    def tools_block(self, tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]) -> str:
        lines = "\n".join(compact_json(item) for item in tool_objects(tools))
        return self.PREAMBLE + lines + self.INSTRUCTION + "".join(f"\n{line}" for line in choice_lines)

    @override
    def with_tools(
        self, messages: list[TemplateMessage], tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]
    ) -> list[TemplateMessage]:
        block = self.tools_block(tools, choice_lines)
        if messages and messages[0]["role"] == "system":
            first = messages[0]["content"]
            return [{"role": "system", "content": f"{first}\n\n{block}" if first else block}, *messages[1:]]
        return [{"role": "system", "content": block}, *messages]

    @override
    def call_turn(self, content: str, calls: Sequence[Mapping[str, Any]]) -> TemplateMessage:
        blocks = [
            "<tool_call>\n" + compact_json({"name": _name(call), "arguments": _arguments(call)}) + "\n</tool_call>"
            for call in calls
        ]
        return {"role": "assistant", "content": "\n".join([content, *blocks] if content else blocks)}

    @override
    def result_turns(self, results: Sequence[tuple[str, str]]) -> list[TemplateMessage]:
        text = "\n".join(f"<tool_response>\n{content}\n</tool_response>" for _, content in results)
        return [{"role": "user", "content": text}]

    @override
    def parse(self, reply: str, names: Collection[str] | None = None) -> ParsedCalls:
        first = reply.find("<tool_call>")
        if first < 0:
            return ParsedCalls("", bare) if (bare := bare_calls(reply, "arguments")) else ParsedCalls(reply.strip(), ())
        calls = []
        for match in self.CALL.finditer(reply, first):
            body = without_fences(match.group(1)).strip()
            if not match.group(2):
                raise MalformedCalls("the reply ends inside a <tool_call> block (no </tool_call>)")
            try:
                value = loads_model_json(body)
            except json.JSONDecodeError as error:
                raise MalformedCalls(f"a <tool_call> block does not hold valid JSON ({error.msg})") from None
            call = _written_call(value, "arguments")
            if call is None:
                raise MalformedCalls('a <tool_call> block does not hold a {"name", "arguments"} object')
            calls.append(call)
        return ParsedCalls(reply[:first].strip(), tuple(calls))


class Llama3Tools(ToolFormat):
    """Llama 3.1+: Meta's custom-tool format in the first user turn, JSON calls, results in the ``ipython`` role."""

    profile = "llama-3"

    PREAMBLE: ClassVar[str] = (
        "Given the following functions, please respond with a JSON for a function call with its proper arguments "
        'that best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": '
        "dictionary of argument name and its value}. Do not use variables.\n\n"
    )
    PYTHON_TAG: ClassVar[str] = "<|python_tag|>"

    @override
    def tools_block(self, tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]) -> str:
        lines = "\n".join(compact_json(item) for item in tool_objects(tools))
        return self.PREAMBLE + lines + "".join(f"\n{line}" for line in choice_lines)

    @override
    def with_tools(
        self, messages: list[TemplateMessage], tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]
    ) -> list[TemplateMessage]:
        block = self.tools_block(tools, choice_lines)
        written = list(messages)
        for index, message in enumerate(written):
            if message["role"] == "user":
                written[index] = {"role": "user", "content": f"{block}\n\n{message['content']}"}
                return written
        return [*written, {"role": "user", "content": block}]

    @override
    def call_turn(self, content: str, calls: Sequence[Mapping[str, Any]]) -> TemplateMessage:
        lines = [compact_json({"name": _name(call), "parameters": _arguments(call)}) for call in calls]
        return {"role": "assistant", "content": "\n".join([content, *lines] if content else lines)}

    @override
    def result_turns(self, results: Sequence[tuple[str, str]]) -> list[TemplateMessage]:
        return [{"role": "ipython", "content": content} for _, content in results]

    @override
    def parse(self, reply: str, names: Collection[str] | None = None) -> ParsedCalls:
        text = reply.replace(self.PYTHON_TAG, "\n")
        unfenced = without_fences(text)
        calls = []
        start = None
        for begin, _, value in json_values_in(unfenced):
            items = value if isinstance(value, list) else [value]
            written = [_written_call(item, "parameters") for item in items]
            if not written or None in written:
                continue
            found = [call for call in written if call is not None and (names is None or call.name in names)]
            if found:
                calls.extend(found)
                start = begin if start is None else start
        if calls:
            return ParsedCalls(unfenced[:start].strip(), tuple(calls))
        spans = [(begin, end) for begin, end, _ in json_values_in(unfenced)]
        shaped = [
            match.start()
            for match in re.finditer(r'\{\s*"name"\s*:', unfenced)
            if not any(begin <= match.start() < end for begin, end in spans)
        ]
        if shaped:
            raise MalformedCalls('the reply holds a {"name": ...} call that is not valid JSON')
        return ParsedCalls(reply.replace(self.PYTHON_TAG, "").strip(), ())


class MistralTools(ToolFormat):
    """Mistral: ``[AVAILABLE_TOOLS]`` before the last user turn, ``[TOOL_CALLS]`` out, ``[TOOL_RESULTS]`` back."""

    profile = "mistral"

    CALLS_MARKER: ClassVar[str] = "[TOOL_CALLS]"

    @override
    def tools_block(self, tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]) -> str:
        lines = "".join(f"{line}\n" for line in choice_lines)
        return f"[AVAILABLE_TOOLS] {compact_json(tool_objects(tools))}[/AVAILABLE_TOOLS]{lines}"

    @override
    def with_tools(
        self, messages: list[TemplateMessage], tools: Sequence[Mapping[str, Any]], choice_lines: Sequence[str]
    ) -> list[TemplateMessage]:
        return messages  # the block goes before the last user turn once rendered (render_within_context)

    @override
    def call_turn(self, content: str, calls: Sequence[Mapping[str, Any]]) -> TemplateMessage:
        written = [{"name": _name(call), "arguments": _arguments(call), "id": call.get("id")} for call in calls]
        text = f"{self.CALLS_MARKER} {compact_json(written)}"
        return {"role": "assistant", "content": f"{content} {text}" if content else text}

    @override
    def result_turns(self, results: Sequence[tuple[str, str]]) -> list[TemplateMessage]:
        return [
            {"role": "tool", "content": compact_json({"call_id": call_id, "content": content})}
            for call_id, content in results
        ]

    @override
    def parse(self, reply: str, names: Collection[str] | None = None) -> ParsedCalls:
        first = reply.find(self.CALLS_MARKER)
        if first < 0:
            return ParsedCalls("", bare) if (bare := bare_calls(reply, "arguments")) else ParsedCalls(reply.strip(), ())
        rest = without_fences(reply[first + len(self.CALLS_MARKER) :]).lstrip()
        try:
            value, _ = _DECODER.raw_decode(rest)
        except json.JSONDecodeError as error:
            raise MalformedCalls(f"the [TOOL_CALLS] array is not valid JSON ({error.msg})") from None
        items = value if isinstance(value, list) else [value]
        calls = []
        for item in items:
            call = _written_call(item, "arguments")
            if call is None:
                raise MalformedCalls('a [TOOL_CALLS] entry is not a {"name", "arguments"} object')
            calls.append(call)
        return ParsedCalls(reply[:first].strip(), tuple(calls))


TOOL_FORMATS: Final[Mapping[str, ToolFormat]] = {
    HermesTools.profile: HermesTools(),
    Llama3Tools.profile: Llama3Tools(),
    MistralTools.profile: MistralTools(),
}
"""The families with a tool format of their own, by prompt contract ``profile_id``."""


class GenericTools(HermesTools):
    """Every profile without a tool format of its own writes and reads Hermes' format; its ``profile`` says
    ``generic``, as the model cards report it.
    """

    profile = "generic"


GENERIC_TOOLS: Final[ToolFormat] = GenericTools()
"""The format of every other profile (``alpaca``, ``generic-instruct``, catalog templates): Hermes'."""


def tool_format_for(profile_id: str) -> ToolFormat:
    """The tool format of a prompt contract (:data:`TOOL_FORMATS`, else :data:`GENERIC_TOOLS`)."""
    return TOOL_FORMATS.get(profile_id, GENERIC_TOOLS)
