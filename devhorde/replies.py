"""What a simulated worker replies: readable text, reasoning, tool calls and JSON, derived from the conversation.

Every function here is pure and deterministic: the same conversation (messages, tools, response format, seed and
effort) gives the same reply, so tests can compare runs. Tokens are counted the simple way the whole simulator
counts them: one token is one whitespace-separated word with its leading whitespace (:func:`split_tokens`), so a
reply cut at ``max_length`` tokens is a prefix of the uncut text and the progress deltas concatenate to it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import ChatReasoningEffort, ChatToolChoiceMode
from horde_sdk.worker.chat_declaration import ChatFinishReason

from devhorde.payload import message_text

_TOKEN_PATTERN: Final = re.compile(r"\s*\S+|\s+$")
_WORD_PATTERN: Final = re.compile(r"[A-Za-z][A-Za-z'-]*")

STOPWORDS: Final[frozenset[str]] = frozenset(
    """a about above after again all also am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    him his how i if in into is it its itself just let me more most my no nor not now of off on once only or other
    our out over own please same she should so some such tell than that the their them then there these they this
    those through to too under until up very was we were what when where which while who whom why will with would
    you your yours explain describe give show write make help want need know like think could really much many get
    something anything thing things way hi hello hey thanks thank okay ok yes""".split(),  # noqa: SIM905 - a word list reads as text
)
"""Words never taken as a topic."""

REASONING_SENTENCES_BY_EFFORT: Final[Mapping[str, int]] = {
    ChatReasoningEffort.NONE.value: 0,
    ChatReasoningEffort.MINIMAL.value: 1,
    ChatReasoningEffort.LOW.value: 2,
    ChatReasoningEffort.MEDIUM.value: 3,
    ChatReasoningEffort.HIGH.value: 5,
    ChatReasoningEffort.XHIGH.value: 6,
}
"""Reasoning sentences written for each ``reasoning_effort``; a request without one gets the ``medium`` amount."""

_OPENERS: Final = (
    "You asked about {topic}, so here is a plain answer.",
    "Here is a short overview of {topic}.",
    "Good question about {topic}.",
    "Let me walk through {topic} step by step.",
)
_BODY: Final = (
    "When it comes to {topic}, it helps to separate the main idea from the details.",
    "The first thing to know about {topic} is the basic idea behind it, in everyday terms.",
    "People usually care about {topic} because it affects how they plan and decide.",
    "A common mistake with {topic} is to treat every part of it as equally important.",
    "It helps to start with one small example and build from there.",
    "The details depend on the context you have in mind, so the answer can change with your situation.",
    "Most sources agree on the basics, even when they disagree on the finer points.",
    "If you compare a few options side by side, the trade-offs become clearer.",
    "Keep in mind that things can look different in practice than they do on paper.",
    "A simple rule of thumb is to check the assumptions before trusting the conclusion.",
    "With a little practice, the important patterns of {topic} start to feel natural.",
    "Writing down what you already know about {topic} is a good first step.",
)
_CLOSERS: Final = (
    "If you tell me more about what you need, I can go deeper into {topic}.",
    "I hope this helps, and I am happy to expand on any part of it.",
    "Let me know which part of {topic} you would like to explore next.",
)
_REASONING: Final = (
    "The user wants to know about {topic}.",
    "I should answer in plain language and keep the reply readable.",
    "The key points are what it is, why it matters and how to start.",
    "An example would make the explanation concrete.",
    "I should avoid claiming more certainty than I have.",
    "A short closing offer to go deeper would be friendly.",
)
_LEAD_INS: Final = re.compile(
    r"^(?:(?:hi|hello|hey)(?: there)?[\s,!.]+)?(?:(?:please|can you|could you|would you|will you|kindly|now|so|ok|"
    r"okay)[\s,]+)*"
    r"(?:tell me (?:about|more about)|tell me|explain(?: to me)?|describe|summari[sz]e|what (?:is|are|was|were)|"
    r"what's|who (?:is|was)|i (?:want|would like|need) to know(?: about)?|help me understand|talk about|"
    r"write (?:me )?(?:about)?|give me|show me|teach me(?: about)?)?[\s,:]*",
    re.IGNORECASE,
)
_MAX_TOPIC_WORDS: Final = 10


def split_tokens(text: str) -> list[str]:
    """Split text into simulator tokens: each word with its leading whitespace; ``"".join`` gives the text back."""
    return _TOKEN_PATTERN.findall(text)


def count_tokens(text: str) -> int:
    """Return the simulator's token count of ``text``."""
    return len(split_tokens(text))


def prompt_tokens(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None) -> int:
    """Estimate the rendered prompt's tokens: each message's text tokens plus 4 for its template, plus the tools."""
    total = sum(count_tokens(message_text(message)) + 4 for message in messages)
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += count_tokens(f"{function.get('name', '')} {function.get('arguments', '')}")
    if tools:
        total += count_tokens(json.dumps(list(tools)).replace(",", " , "))
    return total


def conversation_seed(*parts: object) -> int:
    """Return a stable integer seed from JSON-serialisable parts (the conversation and its options)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return int(digest[:16], 16)


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """Return the text of the last ``user`` message, or an empty string."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def topic_words(text: str, limit: int = 3) -> list[str]:
    """Return up to ``limit`` content words of a text, in order, lowercased, without stopwords."""
    words: list[str] = []
    for word in _WORD_PATTERN.findall(text):
        lowered = word.lower().strip("'-")
        if len(lowered) > 2 and lowered not in STOPWORDS and lowered not in words:
            words.append(lowered)
        if len(words) == limit:
            break
    return words


def topic_of(text: str) -> str:
    """Return the topic phrase of a user text, such as ``how tides relate to the moon``.

    The first sentence without a lead-in such as "Explain" or "What is" and without final punctuation, when it has
    at most ten words; otherwise up to three content words (``tides, moon and orbit``); ``your message`` without
    any.
    """
    first = re.split(r"(?<=[.?!])\s+|\n", text.strip(), maxsplit=1)[0] if text.strip() else ""
    phrase = _LEAD_INS.sub("", first, count=1).strip().rstrip(".?!:;,").strip()
    if phrase and phrase.split()[0] not in ("I",) and not phrase[:2].isupper():
        phrase = phrase[0].lower() + phrase[1:]
    if phrase and len(phrase.split()) <= _MAX_TOPIC_WORDS and topic_words(phrase, 1):
        return phrase
    words = topic_words(text)
    if not words:
        return "your message"
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " and " + words[-1]


def place_name(text: str) -> str:
    """Return a place-like word of a user text: its last capitalised word after the first, else a content word."""
    words: list[str] = _WORD_PATTERN.findall(text)
    capitalised = [word for word in words[1:] if word[0].isupper() and word.lower() not in STOPWORDS]
    if capitalised:
        return capitalised[-1]
    content = topic_words(text)
    return content[-1].title() if content else "London"


def _image_parts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    urls: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "image_url":
                    urls.append(str((part.get("image_url") or {}).get("url", "")))
    return urls


def reply_text(messages: Sequence[Mapping[str, Any]], *, words: int, seed: int) -> str:
    """Return a readable reply about the conversation's last user message, at least ``words`` words long.

    A short greeting gets a greeting; a conversation whose last message is a tool result gets a summary of it; a
    conversation with images mentions them; otherwise the reply is sentences about the message's topic.
    """
    rng = random.Random(seed)
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        name = _tool_name_for(messages, str(last.get("tool_call_id", "")))
        result = message_text(last).strip().replace("\n", " ")
        if len(result) > 160:
            result = result[:157] + "..."
        return (
            f"The {name} tool returned: {result} Based on that result, here is the answer you were looking for. "
            "Let me know if you want me to check anything else."
        )
    user_text = last_user_text(messages)
    topic = topic_of(user_text)
    sentences: list[str] = []
    if re.match(r"^\s*(hi|hello|hey|good (morning|afternoon|evening))\b", user_text, re.IGNORECASE) and (
        count_tokens(user_text) <= 4
    ):
        sentences.append("Hello! It is nice to hear from you.")
        if topic == "your message":
            return "Hello! It is nice to hear from you. What would you like to talk about today?"
    images = _image_parts(messages)
    if images:
        kind = "an inline image" if images[-1].startswith("data:") else "the linked image"
        sentences.append(
            f"I looked at {kind} you shared; it appears to show a scene related to {topic}, "
            "with a clear subject in the middle and some detail around it.",
        )
    sentences.append(rng.choice(_OPENERS).format(topic=topic))
    if len(topic.split()) > 2:
        topic = "this topic"  # a long phrase reads better named once
    body = list(_BODY)
    rng.shuffle(body)
    index = 0
    while sum(count_tokens(sentence) for sentence in sentences) < words:
        sentences.append(body[index % len(body)].format(topic=topic))
        index += 1
        if index % len(body) == 0:
            rng.shuffle(body)
    sentences.append(rng.choice(_CLOSERS).format(topic=topic))
    return " ".join(sentences)


def reasoning_text(messages: Sequence[Mapping[str, Any]], effort: str | None) -> str:
    """Return the model's reasoning for ``effort`` (sentence count in :data:`REASONING_SENTENCES_BY_EFFORT`)."""
    count = REASONING_SENTENCES_BY_EFFORT.get(effort or ChatReasoningEffort.MEDIUM.value, 3)
    topic = topic_of(last_user_text(messages))
    return " ".join(sentence.format(topic=topic) for sentence in _REASONING[:count])


def _tool_name_for(messages: Sequence[Mapping[str, Any]], call_id: str) -> str:
    for message in messages:
        for call in message.get("tool_calls") or []:
            if call.get("id") == call_id:
                return str((call.get("function") or {}).get("name", "requested"))
    return "requested"


def schema_instance(schema: object, *, hint: str, name: str = "", depth: int = 0, place: str = "London") -> Any:
    """Return a value that roughly satisfies a JSON Schema, with strings drawn from ``hint``.

    Handles ``const``, ``enum``, ``anyOf``/``oneOf``/``allOf`` (first branch), ``type`` lists, objects (required
    properties, else all, at most 8), arrays (one item), strings (``format: date``/``date-time``, ``place`` for
    names mentioning city, location, place or country, ``celsius`` for a unit), numbers (the minimum, else 1) and
    booleans (true). Depth is capped at 12.
    """
    if not isinstance(schema, Mapping) or depth > 12:
        return hint
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for combiner in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(combiner)
        if isinstance(branches, list) and branches:
            non_null = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
            return schema_instance((non_null or branches)[0], hint=hint, name=name, depth=depth + 1, place=place)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        declared = schema.get("properties")
        properties: Mapping[str, Any] = declared if isinstance(declared, Mapping) else {}
        listed = schema.get("required")
        required: list[Any] = listed if isinstance(listed, list) else list(properties)
        return {
            key: schema_instance(properties.get(key, {}), hint=hint, name=str(key), depth=depth + 1, place=place)
            for key in list(required)[:8]
        }
    if kind == "array":
        minimum = schema.get("minItems", 1)
        count = max(1, minimum if isinstance(minimum, int) else 1)
        item = schema.get("items", {})
        return [schema_instance(item, hint=hint, name=name, depth=depth + 1, place=place) for _ in range(count)]
    if kind in ("integer", "number"):
        minimum = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = minimum if isinstance(minimum, int | float) and not isinstance(minimum, bool) else 1
        if "exclusiveMinimum" in schema and value == schema.get("exclusiveMinimum"):
            value += 1
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    string_format = schema.get("format")
    if string_format == "date":
        return "2025-01-01"
    if string_format == "date-time":
        return "2025-01-01T12:00:00Z"
    lowered = name.lower()
    if any(word in lowered for word in ("city", "location", "place", "country")):
        return place
    if "unit" in lowered:
        return "celsius"
    return hint


def tool_call_id(seed: int, index: int) -> str:
    """Return a deterministic OpenAI-style call id, ``call_`` and 24 hex characters."""
    return "call_" + hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:24]


def _name_words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ")
    return [word.lower() for word in spaced.split() if len(word) > 2 and word.lower() not in STOPWORDS]


def choose_tools(
    tools: Sequence[Mapping[str, Any]],
    mode: ChatToolChoiceMode,
    forced: str | None,
    messages: Sequence[Mapping[str, Any]],
    parallel: bool,
) -> list[Mapping[str, Any]]:
    """Return the tool definitions a following worker calls.

    ``function``: the forced one. ``required``: the tools the last user message mentions (by name or a word of the
    name), else the first. ``auto``: the mentioned tools, none after a tool result. ``none``: none. Without
    ``parallel``, at most one.
    """
    if mode is ChatToolChoiceMode.NONE or not tools:
        return []
    if mode is ChatToolChoiceMode.FUNCTION:
        chosen = [tool for tool in tools if tool["function"]["name"] == forced][:1]
        return chosen or list(tools[:1])
    text = last_user_text(messages).lower()
    mentioned = [
        tool
        for tool in tools
        if tool["function"]["name"].lower() in text
        or any(re.search(rf"\b{re.escape(word)}", text) for word in _name_words(tool["function"]["name"]))
    ]
    if mode is ChatToolChoiceMode.AUTO:
        if messages and messages[-1].get("role") == "tool":
            return []
        chosen = mentioned
    else:
        chosen = mentioned or list(tools[:1])
    return chosen if parallel else chosen[:1]


def build_tool_calls(
    chosen: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    seed: int,
) -> list[dict[str, Any]]:
    """Return OpenAI tool calls for ``chosen``: ``call_<hex>`` ids and JSON arguments following each schema."""
    user_text = last_user_text(messages)
    hint = topic_of(user_text)
    if hint == "your message":
        hint = "example"
    place = place_name(user_text)
    calls: list[dict[str, Any]] = []
    for index, tool in enumerate(chosen):
        function = tool["function"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        arguments = schema_instance(parameters, hint=hint, place=place)
        if not isinstance(arguments, dict):
            arguments = {"value": arguments}
        calls.append(
            {
                "id": tool_call_id(seed, index),
                "type": "function",
                "function": {"name": function["name"], "arguments": json.dumps(arguments, ensure_ascii=False)},
            },
        )
    return calls


_JSON_WORD: Final = re.compile(r"\bjson\b", re.IGNORECASE)
"""A prompt that names JSON asks for it (instructor's JSON and MD_JSON modes, LangChain's ``json_mode``, the AI SDK's
``generateObject`` without structured outputs)."""

SCHEMA_KEYS: Final[frozenset[str]] = frozenset({"properties", "$defs", "items", "anyOf", "oneOf", "allOf"})
"""Keys that make a JSON object of a prompt a JSON schema (a bare ``{"type": "object"}`` is one too)."""


def _instruction_texts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The texts of the ``system``, ``developer`` and ``user`` messages, in order."""
    return [message_text(message) for message in messages if message.get("role") in {"system", "developer", "user"}]


def asks_for_json(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a system, developer or user message names JSON (:data:`_JSON_WORD`)."""
    return any(_JSON_WORD.search(text) for text in _instruction_texts(messages))


def prompt_schema(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first JSON schema written into a system, developer or user message (instructor puts the response model's
    schema in the system message, the AI SDK's ``generateObject`` in a system message after "JSON schema:"), or None.
    """
    decoder = json.JSONDecoder()
    for text in _instruction_texts(messages):
        start = text.find("{")
        while start != -1:
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                start = text.find("{", start + 1)
                continue
            if isinstance(value, dict) and (SCHEMA_KEYS & value.keys() or value.get("type") == "object"):
                return value
            start = text.find("{", end)
    return None


def json_reply(response_format: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], seed: int) -> str:
    """Return the JSON text of a ``json_object`` or ``json_schema`` reply, or of a prompt that asks for JSON.

    A ``json_schema`` format's schema is followed; otherwise a schema written into the prompt (:func:`prompt_schema`)
    is, and without one the reply is ``{"topic", "answer"}``.
    """
    user_text = last_user_text(messages)
    topic = topic_of(user_text)
    schema = (
        (response_format.get("json_schema") or {}).get("schema") or {}
        if response_format.get("type") == "json_schema"
        else prompt_schema(messages)
    )
    if schema is not None:
        value = schema_instance(schema, hint=topic, place=place_name(user_text))
    else:
        rng = random.Random(seed)
        value = {"topic": topic, "answer": rng.choice(_BODY).format(topic=topic)}
    return json.dumps(value, ensure_ascii=False)


@dataclass(slots=True)
class ReplyPlan:
    """One attempt's reply, split into the tokens the progress posts carry.

    ``reasoning_tokens_list`` and ``content_tokens_list`` are already cut at the completion limit; their joins are
    ``reasoning`` and ``content`` (``content`` is None only with tool calls).
    """

    reasoning: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: ChatFinishReason
    native_finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    reasoning_tokens_list: list[str] = field(default_factory=list)
    content_tokens_list: list[str] = field(default_factory=list)
    tool_call_tokens: int = 0


def cut_reply(
    reasoning: str,
    content: str | None,
    tool_calls: list[dict[str, Any]] | None,
    *,
    max_length: int,
    stop: Sequence[str] | None,
    prompt: int,
) -> ReplyPlan:
    """Apply the stop sequences and the ``max_length`` token cut and pick the finish reasons.

    Reasoning comes first in the budget, so a long reasoning can use it all and leave an empty ``content`` with
    ``finish_reason: length`` (a reasoning-only reply). Tool calls are never cut; their tokens count in
    ``completion_tokens`` up to ``max_length``.
    """
    native = "eos_token"
    if content and stop:
        cuts = [content.find(sequence) for sequence in stop if sequence and sequence in content]
        if cuts:
            content = content[: min(cuts)]
            native = "stop_sequence"
    reasoning_list = split_tokens(reasoning)
    content_list = split_tokens(content or "")
    call_tokens = sum(count_tokens(json.dumps(call["function"])) for call in tool_calls or [])
    cut = False
    if len(reasoning_list) > max_length:
        reasoning_list, cut = reasoning_list[:max_length], True
    budget = max_length - len(reasoning_list)
    if len(content_list) > budget:
        content_list, cut = content_list[:budget], True
    if tool_calls:
        finish, native = ChatFinishReason.TOOL_CALLS, "tool_calls"
    elif cut:
        finish, native = ChatFinishReason.LENGTH, "length"
    else:
        finish = ChatFinishReason.STOP
    completion = min(max_length, len(reasoning_list) + len(content_list) + call_tokens)
    final_content: str | None = "".join(content_list)
    if tool_calls and not final_content:
        final_content = None
    return ReplyPlan(
        reasoning="".join(reasoning_list),
        content=final_content,
        tool_calls=tool_calls or None,
        finish_reason=finish,
        native_finish_reason=native,
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=len(reasoning_list),
        reasoning_tokens_list=reasoning_list,
        content_tokens_list=content_list,
        tool_call_tokens=call_tokens,
    )
