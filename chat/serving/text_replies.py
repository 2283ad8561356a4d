"""Tools and structured output on the text path: what the prompt asks for, and the reply read back into OpenAI's shape.

A request's :class:`ReplyRules` (``tools``, ``tool_choice``, ``parallel_tool_calls``, ``response_format``, and the
model family's tool format, chat.serving.tool_formats) decide:

- the prompt (:func:`conversation`): the history's tool calls and tool results in the family's format; the tools
  block unless ``tool_choice`` is ``none`` (only the named function for a named choice), then the line
  :data:`REQUIRED_LINE`, :data:`NAMED_LINE` or :data:`SINGLE_CALL_LINE`; for a JSON ``response_format`` the system
  turn ends with :data:`JSON_LINE` (and :data:`SCHEMA_LINE` with the schema);
- the reply (:meth:`ReplyRules.read`, a :class:`chat.horde.text.ReadReply`): each call becomes an OpenAI
  ``tool_calls`` entry (``id`` ``call_`` + 24 letters and digits, ``type: "function"``, ``function: {name,
  arguments}`` with the arguments as compact JSON); the text before the calls is ``content``, None when there is
  none. A call's name must be a declared tool (the named one under a named ``tool_choice``) and its arguments a JSON
  object, validated against the function's ``parameters`` with ``jsonschema`` when the function is ``strict``; under
  ``parallel_tool_calls: false`` the first call is kept. A JSON ``response_format`` reply's JSON is extracted (code
  fences and prose removed), must be an object for ``json_object`` and validate against the schema for
  ``json_schema``, and is the whole ``content``. Anything else is an ``error`` (what the model returned wrong), which
  the text routes answer with a repair turn (:meth:`ReplyRules.repair_prompt`, ``HORDE_OAI_TEXT_REPAIR_ATTEMPTS``)
  and, after the last attempt, 502 ``ModelReplyInvalid`` (chat.horde.text.TextRoutes).
"""

from __future__ import annotations

import functools
import json
import secrets
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import regex
from jsonschema import exceptions as schema_exceptions
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from chat import errors
from chat.horde.text import ReadReply
from chat.protocol.chat_request import ChatCompletionRequest
from chat.serving.prompt_templates import PINNED_KEY, SYSTEM_ROLES, message_text
from chat.serving.tool_formats import (
    MalformedCalls,
    TemplateMessage,
    ToolFormat,
    call_shaped,
    compact_json,
    json_values_in,
    loads_model_json,
    without_fences,
)

REQUIRED_LINE: Final[str] = "You must call at least one function."
"""Appended after the tools block under ``tool_choice: "required"``."""

NAMED_LINE: Final[str] = "You must call the function {name}."
"""Appended after the tools block (holding only that function) under a named ``tool_choice``."""

SINGLE_CALL_LINE: Final[str] = "Call at most one function."
"""Appended after the tools block under ``parallel_tool_calls: false``."""

JSON_LINE: Final[str] = "Reply with one JSON object only: no prose, no code fence."
"""The last line of the system turn for a ``json_object`` or ``json_schema`` response format."""

SCHEMA_LINE: Final[str] = "The JSON object must validate against this JSON schema: {schema}"
"""After :data:`JSON_LINE` for ``json_schema``: the schema as compact JSON."""

REPAIR_TURN: Final[str] = "Your previous reply was not valid: {error}. Reply again, following the format exactly."
"""The user turn after the model's own reply when it is asked again (the repair turn)."""

CALL_ID_PREFIX: Final[str] = "call_"
CALL_ID_ALPHABET: Final[str] = string.ascii_letters + string.digits
CALL_ID_LENGTH: Final[int] = 24
"""A tool call id is ``call_`` + 24 letters and digits, OpenAI's form."""


_SYSTEM_RANDOM: Final = secrets.SystemRandom()
"""The operating system's random source (``secrets``), drawing a call id's 24 characters in one call."""


def new_call_id() -> str:
    """A fresh OpenAI-form tool call id (``call_`` + 24 letters and digits)."""
    return CALL_ID_PREFIX + "".join(_SYSTEM_RANDOM.choices(CALL_ID_ALPHABET, k=CALL_ID_LENGTH))


PATTERN_TIMEOUT_SECONDS: Final[float] = 0.1
"""The longest one ``pattern`` / ``patternProperties`` regular expression of a client's schema may run (the ``regex``
package's ``timeout``), so a catastrophic pattern (``(a+)+$``) never holds the event loop longer."""


class SchemaCannotApply(Exception):
    """A client's schema cannot be applied: a pattern ran past :data:`PATTERN_TIMEOUT_SECONDS`."""


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def _search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's ``pattern``), within the time bound.

    Raises:
        SchemaCannotApply: the pattern ran past :data:`PATTERN_TIMEOUT_SECONDS`.
    """
    try:
        return _compiled(pattern).search(text, timeout=PATTERN_TIMEOUT_SECONDS) is not None
    except TimeoutError:
        raise SchemaCannotApply(f"the pattern {pattern!r} ran past {PATTERN_TIMEOUT_SECONDS} s") from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [key for key in instance if key not in properties and not any(_search(p, key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        named = ", ".join(repr(extra) for extra in sorted(extras, key=str))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(pattern) for pattern in sorted(patterns))
            yield ValidationError(f"{named} {verb} not match any of the regexes: {regexes}")
        else:
            yield ValidationError(
                f"Additional properties are not allowed ({named} {'was' if len(extras) == 1 else 'were'} unexpected)"
            )


def bounded_validator(schema: Mapping[str, Any]) -> Any:
    """A validator of ``schema`` (its draft's: ``$schema``, else the latest) whose ``pattern``, ``patternProperties``
    and ``additionalProperties`` run their regular expressions with the ``regex`` package's ``timeout``
    (jsonschema's ``validators.extend``).
    """
    return _bounded_class(validators.validator_for(schema))(schema)


@functools.cache
def _bounded_class(cls: Any) -> Any:
    return validators.extend(  # type: ignore[no-untyped-call]  # types-jsonschema leaves extend untyped
        cls,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )


def _refs(schema: object) -> tuple[list[str], bool]:
    """Every ``$ref`` string in ``schema`` (document order), and whether a subschema sets its own ``$id``."""
    refs: list[str] = []
    nested_id = False
    pending: list[tuple[object, bool]] = [(schema, True)]
    while pending:
        node, root = pending.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            nested_id = nested_id or (not root and "$id" in node)
            pending.extend((value, False) for value in reversed(list(node.values())))
        elif isinstance(node, list):
            pending.extend((value, False) for value in reversed(node))
    return refs, nested_id


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why jsonschema cannot apply a client's ``schema``, None when it can: it breaks its draft's metaschema
    (``check_schema``: an unknown ``type``, a pattern that does not compile), a ``$ref`` does not resolve within the
    schema, or a trial validation (of ``{}``) raises.
    """
    try:
        validators.validator_for(schema).check_schema(dict(schema))
    except schema_exceptions.SchemaError as error:
        path = "/".join(str(part) for part in error.absolute_path)
        return f"{error.message} (at /{path})" if path else error.message
    refs, nested_id = _refs(schema)
    if not nested_id:
        resolver = Registry().resolver_with_root(Resource.from_contents(schema, default_specification=DRAFT202012))
        for ref in refs:
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return f"the $ref {ref!r} cannot be resolved"
    try:
        for _ in bounded_validator(schema).iter_errors({}):
            pass
    except SchemaCannotApply as cannot:
        return str(cannot)
    except Exception:  # noqa: BLE001 - whatever jsonschema raises on the client's schema is the client's error
        return "a keyword of the schema cannot run"
    return None


def _schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """The first way ``value`` fails ``schema`` (:func:`bounded_validator`), as ``message (at /path)``."""
    try:
        error = schema_exceptions.best_match(bounded_validator(schema).iter_errors(value))
    except SchemaCannotApply as cannot:
        return f"the schema cannot be applied ({cannot})"
    except Exception:  # noqa: BLE001 - a client schema jsonschema cannot apply (a $ref it cannot resolve) is reported, never a 500
        return "the schema cannot be applied (a $ref it points to cannot be resolved, or a keyword cannot run)"
    if error is None:
        return None
    path = "/".join(str(part) for part in error.absolute_path)
    return f"{error.message} (at /{path})" if path else error.message


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyRules:
    """What a text path request asks of the reply, and how its family writes tools (see the module docstring).

    Attributes:
        tool_format: The family's format (chat.serving.tool_formats).
        tools: The declared tools (``{"type": "function", "function": {...}}``).
        tool_choice: ``"none"``, ``"auto"``, ``"required"``, or ``"function"`` for a named choice.
        forced_function: The named choice's function (a function may be called ``auto``), else None.
        parallel_tool_calls: False keeps the first call only.
        response_format: The ``response_format`` (``{"type", "json_schema"?}``), None for text.
        messages: The conversation as template messages (for the repair turn).
        render: Renders template messages to the prompt sent (the context fit included); None when it cannot fit.
    """

    tool_format: ToolFormat
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str = "auto"
    forced_function: str | None = None
    parallel_tool_calls: bool = True
    response_format: Mapping[str, Any] | None = None
    messages: tuple[TemplateMessage, ...] = ()
    render: Callable[[Sequence[TemplateMessage]], str | None] | None = field(default=None, compare=False)

    @property
    def offers_tools(self) -> bool:
        """Whether the prompt offers tools (some are declared and ``tool_choice`` is not ``none``)."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def forced_name(self) -> str | None:
        """The named ``tool_choice``'s function, else None."""
        return self.forced_function if self.tool_choice == "function" else None

    @property
    def offered_tools(self) -> tuple[Mapping[str, Any], ...]:
        """The tools written into the prompt: none under ``none``, the named one under a named choice."""
        if not self.offers_tools:
            return ()
        if self.forced_name is None:
            return self.tools
        return tuple(tool for tool in self.tools if _function(tool).get("name") == self.forced_name)

    @property
    def json_schema(self) -> Mapping[str, Any] | None:
        """The ``json_schema`` response format's ``schema``, else None."""
        if self.response_format is None or self.response_format.get("type") != "json_schema":
            return None
        schema = (self.response_format.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, Mapping) else None

    @property
    def wants_json(self) -> bool:
        """Whether the reply must be JSON (``json_object`` or ``json_schema``)."""
        return self.response_format is not None and self.response_format.get("type") in {"json_object", "json_schema"}

    @property
    def checks_reply(self) -> bool:
        """Whether the reply is read at all (tools offered, or JSON wanted)."""
        return self.offers_tools or self.wants_json

    def choice_lines(self) -> list[str]:
        """The lines after the tools block (see the module docstring)."""
        lines = []
        if self.tool_choice == "required":
            lines.append(REQUIRED_LINE)
        if self.forced_name is not None:
            lines.append(NAMED_LINE.format(name=self.forced_name))
        if not self.parallel_tool_calls:
            lines.append(SINGLE_CALL_LINE)
        return lines

    def json_lines(self) -> list[str]:
        """The lines that end the system turn for a JSON response format."""
        if not self.wants_json:
            return []
        schema = self.json_schema
        lines = [JSON_LINE]
        if schema is not None:
            lines.append(SCHEMA_LINE.format(schema=compact_json(schema)))
        return lines

    # --- reading ---------------------------------------------------------------------------------------------------

    def read(self, reply: str, *, truncated: bool) -> ReadReply:
        """The reply in OpenAI's shape, or what is wrong with it (see the module docstring). ``truncated``: the
        worker stopped at ``max_tokens`` (said in the error).
        """
        read = self._read(reply)
        if read.error is not None and truncated:
            return ReadReply(content=read.content, error=f"{read.error} (the reply stopped at max_tokens)")
        return read

    def _read(self, reply: str) -> ReadReply:
        if self.offers_tools:
            names = {str(_function(tool).get("name")) for tool in self.tools}
            try:
                parsed = self.tool_format.parse(reply, names)
            except MalformedCalls as malformed:
                return ReadReply(content=reply, error=str(malformed))
            if parsed.calls:
                return self._calls(parsed.content, parsed.calls)
            shaped = call_shaped(reply, names)
            if shaped is not None:
                return ReadReply(content=reply, error=shaped)
            if self.tool_choice == "required" or self.forced_name is not None:
                wanted = "a call of " + self.forced_name if self.forced_name else "at least one function call"
                return ReadReply(content=reply, error=f"the reply holds no function call, and {wanted} is required")
        if self.wants_json:
            return self._json(reply)
        return ReadReply(content=reply.strip())

    def _calls(self, content: str, calls: Sequence[Any]) -> ReadReply:
        declared = {str(_function(tool).get("name")): _function(tool) for tool in self.tools}
        allowed = {self.forced_name} if self.forced_name is not None else set(declared)
        tool_calls = []
        for call in calls if self.parallel_tool_calls else calls[:1]:
            name = call.name
            if name not in allowed:
                names = ", ".join(sorted(allowed))
                return ReadReply(content=content, error=f"the reply calls {name!r}, which is not one of: {names}")
            arguments = call.arguments
            if isinstance(arguments, str):
                try:
                    arguments = loads_model_json(arguments or "{}")
                except json.JSONDecodeError:
                    return ReadReply(content=content, error=f"the arguments of {name} are not valid JSON")
            if not isinstance(arguments, dict):
                return ReadReply(content=content, error=f"the arguments of {name} are not a JSON object")
            function = declared.get(name, {})  # the request rules refuse a named choice no tool declares
            schema = function.get("parameters")
            if function.get("strict") and isinstance(schema, Mapping):
                problem = _schema_error(schema, arguments)
                if problem is not None:
                    return ReadReply(
                        content=content, error=f"the arguments of {name} do not match its parameters: {problem}"
                    )
            tool_calls.append(
                {
                    "id": new_call_id(),
                    "type": "function",
                    "function": {"name": name, "arguments": compact_json(arguments)},
                }
            )
        return ReadReply(content=content or None, tool_calls=tuple(tool_calls))

    def _json(self, reply: str) -> ReadReply:
        unfenced = without_fences(reply)
        values = json_values_in(unfenced)
        schema = self.json_schema
        if not values:
            return ReadReply(content=reply, error="the reply holds no JSON object")
        begin, end, value = values[0]
        if schema is None and not isinstance(value, dict):
            return ReadReply(content=reply, error="the reply's JSON is not an object")
        if schema is not None:
            problem = _schema_error(schema, value)
            if problem is not None:
                return ReadReply(content=reply, error=f"the reply's JSON does not match the schema: {problem}")
        return ReadReply(content=unfenced[begin:end])

    def repair_prompt(self, reply: str, error: str) -> str | None:
        """The prompt that asks again: the conversation, the model's own reply as an assistant turn, then the
        repair turn (:data:`REPAIR_TURN`); None when it cannot fit the context.
        """
        if self.render is None:
            return None
        turns = [
            *self.messages,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": REPAIR_TURN.format(error=error)},
        ]
        return self.render(turns)


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else {}


def conversation(messages: Sequence[Mapping[str, Any]], rules: ReplyRules) -> tuple[list[TemplateMessage], str | None]:
    """The messages as template messages in the family's format, with the tools and JSON instructions written in;
    and the tools block when the family places it after rendering (chat.serving.tool_formats.MistralTools).

    A template message with chat.serving.prompt_templates.PINNED_KEY set holds the tools block; it is never dropped
    to fit the context.
    """
    tool_format = rules.tool_format
    turns: list[TemplateMessage] = []
    results: list[tuple[str, str]] = []

    def flush_results() -> None:
        if results:
            turns.extend(tool_format.result_turns(results))
            results.clear()

    for message in messages:
        role = str(message.get("role"))
        text = message_text(message.get("content"))
        if role == "tool":
            results.append((str(message.get("tool_call_id") or ""), text))
            continue
        flush_results()
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            turns.append(tool_format.call_turn(text, calls))
        else:
            turns.append({"role": "system" if role in SYSTEM_ROLES else role, "content": text})
    flush_results()
    placed_block: str | None = None
    offered = rules.offered_tools
    if offered:
        before = [dict(turn) for turn in turns]
        turns = tool_format.with_tools(turns, offered, rules.choice_lines())
        if turns == before:
            placed_block = tool_format.tools_block(offered, rules.choice_lines())
        else:
            for index, turn in enumerate(turns):
                if index >= len(before) or turn != before[index]:
                    turns[index] = {**turn, PINNED_KEY: "1"}
                    break
    json_lines = rules.json_lines()
    if json_lines:
        text = "\n".join(json_lines)
        if turns and turns[0]["role"] == "system":
            first = turns[0]["content"]
            turns[0] = {**turns[0], "content": f"{first}\n\n{text}" if first else text}
        else:
            turns.insert(0, {"role": "system", "content": text})
    return turns, placed_block


def reply_rules(request: ChatCompletionRequest, tool_format: ToolFormat) -> ReplyRules:
    """What the request asks of the reply (chat.serving.text_replies): its tools, ``tool_choice`` (``auto`` when
    unset; a named choice as ``function`` and its function's name), ``parallel_tool_calls`` (true when unset) and a JSON
    ``response_format``.
    """
    tools = tuple(tool.model_dump(exclude_none=True) for tool in request.tools or ())
    choice = request.tool_choice
    tool_choice = "auto" if choice is None else choice if isinstance(choice, str) else "function"
    forced_function = None if choice is None or isinstance(choice, str) else choice.function.name
    response_format = request.response_format
    rules = ReplyRules(
        tool_format=tool_format,
        tools=tools,
        tool_choice=tool_choice,
        forced_function=forced_function,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        response_format=(
            response_format.model_dump(by_alias=True, exclude_none=True)
            if response_format is not None and response_format.type != "text"
            else None
        ),
    )
    check_client_schemas(rules)
    return rules


def check_client_schemas(rules: ReplyRules) -> None:
    """Refuse, before any submit, a schema the reply would be validated against that jsonschema cannot apply
    (:func:`schema_problem`): a strict offered function's ``parameters``, then the ``json_schema`` schema.

    Raises:
        OpenAIError: 400 ``UnsupportedChatParameter`` at ``tools[<i>].function.parameters`` ("Invalid schema for
            function '<name>': <problem>.") or ``response_format.json_schema.schema`` ("Invalid schema for
            response_format '<name>': <problem>.").
    """
    offered = {id(tool) for tool in rules.offered_tools}
    for index, tool in enumerate(rules.tools):
        function = _function(tool)
        schema = function.get("parameters")
        if id(tool) in offered and function.get("strict") and isinstance(schema, Mapping):
            problem = schema_problem(schema)
            if problem is not None:
                raise errors.failure(
                    errors.UNSUPPORTED_CHAT_PARAMETER,
                    f"Invalid schema for function '{function.get('name')}': {problem}.",
                    param=f"tools[{index}].function.parameters",
                )
    schema = rules.json_schema
    if schema is not None:
        problem = schema_problem(schema)
        if problem is not None:
            name = ((rules.response_format or {}).get("json_schema") or {}).get("name")
            raise errors.failure(
                errors.UNSUPPORTED_CHAT_PARAMETER,
                f"Invalid schema for response_format '{name}': {problem}.",
                param="response_format.json_schema.schema",
            )
