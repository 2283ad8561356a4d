"""The front's tool history rule and the Horde's agree: one table of histories, both sides, the same verdict.

The front applies OpenAI's tool history rule before it submits
(``chat.reading.request_rules.find_tool_history_violation``, run by ``chat.reading.screening.read_chat_request``); the
native route repeats it (the devhorde's ``devhorde.payload``, which imports nothing from the front's ``chat`` package,
as the real Horde does not). Each history goes through both whole paths: the front reads the OpenAI body, the devhorde
validates and rule-checks the native payload the front would send. A history both accept also checks that the devhorde
accepts the exact payload the front builds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat.errors import OpenAIError
from chat.horde.native_payload import build_native_payload
from chat.reading.request_rules import find_tool_history_violation
from chat.reading.screening import read_chat_request
from devhorde.payload import request_rule_refusal, tool_history_refusal, validate_payload

MODEL = "m/tools-7b"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]

Verdict = tuple[str, str, str] | None
"""``(code, param, message)`` of the refusal, or None when the history is accepted."""


def user(text: str = "Weather in Paris and Rome?") -> dict[str, Any]:
    return {"role": "user", "content": text}


def system() -> dict[str, Any]:
    return {"role": "system", "content": "Be brief."}


def calls(*ids: str, content: str | None = None) -> dict[str, Any]:
    """An assistant turn calling ``get_weather`` once per id."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "x"}'}}
            for call_id in ids
        ],
    }


def answer(call_id: str, text: str = "12 C") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def reply(text: str = "Done.") -> dict[str, Any]:
    return {"role": "assistant", "content": text}


UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "The following tool_call_ids did not have response messages: {ids}"
)
ORPHAN = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
UNKNOWN = "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."
U = "UnsupportedChatParameter"

HISTORIES: list[tuple[str, list[dict[str, Any]], Verdict]] = [
    # accepted
    ("no tools at all", [system(), user(), reply(), user("And tomorrow?")], None),
    ("one call answered", [user(), calls("c1"), answer("c1"), reply()], None),
    ("one call answered, history ends on the answer", [user(), calls("c1"), answer("c1")], None),
    ("two calls answered in order", [user(), calls("c1", "c2"), answer("c1"), answer("c2"), reply()], None),
    ("two calls answered out of order", [user(), calls("c1", "c2"), answer("c2"), answer("c1")], None),
    (
        "two turns of calls",
        [user(), calls("c1"), answer("c1"), reply(), user("Rome?"), calls("c2"), answer("c2"), reply()],
        None,
    ),
    ("calls right after calls answered", [user(), calls("c1"), answer("c1"), calls("c2"), answer("c2")], None),
    ("calls with text", [user(), calls("c1", content="Checking."), answer("c1"), reply()], None),
    ("the same id reused by a later turn", [user(), calls("c1"), answer("c1"), calls("c1"), answer("c1")], None),
    # refused: a tool message answering nothing
    ("tool message first", [answer("c1"), user()], (U, "messages.[0].role", ORPHAN)),
    ("tool message after a user message", [user(), answer("c1")], (U, "messages.[1].role", ORPHAN)),
    ("tool message after a plain reply", [user(), reply(), answer("c1")], (U, "messages.[2].role", ORPHAN)),
    (
        "tool message after the turn was closed by a user message",
        [user(), calls("c1"), answer("c1"), user("ok"), answer("c1")],
        (U, "messages.[4].role", ORPHAN),
    ),
    (
        "a second answer to the same call",
        [user(), calls("c1"), answer("c1"), answer("c1"), reply()],
        (U, "messages.[3].role", ORPHAN),
    ),
    (
        "a second answer while another call is open",
        [user(), calls("c1", "c2"), answer("c1"), answer("c1"), answer("c2")],
        (U, "messages.[3].role", ORPHAN),
    ),
    # refused: an id the turn did not call
    ("an unknown id", [user(), calls("c1"), answer("zz")], (U, "messages.[2].tool_call_id", UNKNOWN.format(id="zz"))),
    (
        "an unknown id after the calls were answered",
        [user(), calls("c1"), answer("c1"), answer("zz")],
        (U, "messages.[3].tool_call_id", UNKNOWN.format(id="zz")),
    ),
    (
        "an id of an earlier turn",
        [user(), calls("c1"), answer("c1"), reply(), user(), calls("c2"), answer("c1")],
        (U, "messages.[6].tool_call_id", UNKNOWN.format(id="c1")),
    ),
    # refused: calls left unanswered
    ("history ends on the calls", [user(), calls("c1")], (U, "messages", UNANSWERED.format(ids="c1"))),
    (
        "history ends with one of two answered",
        [user(), calls("c1", "c2"), answer("c2")],
        (U, "messages", UNANSWERED.format(ids="c1")),
    ),
    (
        "a user message before the answers",
        [user(), calls("c1", "c2"), user("hurry"), answer("c1")],
        (U, "messages.[2].role", UNANSWERED.format(ids="c1, c2")),
    ),
    (
        "a reply before the last answer",
        [user(), calls("c1", "c2", "c3"), answer("c2"), reply(), answer("c1")],
        (U, "messages.[3].role", UNANSWERED.format(ids="c1, c3")),
    ),
    (
        "new calls before the old ones are answered",
        [user(), calls("c1"), calls("c2"), answer("c1"), answer("c2")],
        (U, "messages.[2].role", UNANSWERED.format(ids="c1")),
    ),
    # refused: tool_calls on a message that is not an assistant's
    (
        "tool_calls on a user message",
        [{**user(), "tool_calls": calls("c1")["tool_calls"]}, answer("c1")],
        (
            U,
            "messages[0].tool_calls",
            (
                "Invalid parameter: only messages with role 'assistant' can have 'tool_calls', but 'messages[0]' has "
                "role 'user'."
            ),
        ),
    ),
]


def front_verdict(messages: list[dict[str, Any]]) -> Verdict:
    """The front's verdict on an OpenAI body with ``messages`` and the tools, through its whole read path."""
    body = {"model": MODEL, "messages": messages, "tools": TOOLS}
    try:
        read_chat_request(json.dumps(body).encode())
    except OpenAIError as error:
        if error.status != 400:
            pytest.fail(f"status {error.status}, not 400: {error.message}")
        return (str(error.code), str(error.param), error.message)
    return None


def native_payload(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The native payload of ``messages``: the front's own when it accepts them, else the same keys by hand."""
    body = {"model": MODEL, "messages": messages, "tools": TOOLS}
    try:
        return build_native_payload(read_chat_request(json.dumps(body).encode()), stream_progress=False)
    except OpenAIError:
        return {"messages": messages, "models": [MODEL], "tools": TOOLS}


def horde_verdict(messages: list[dict[str, Any]]) -> Verdict:
    """The devhorde's verdict: payload validation must pass, then its request rules decide."""
    payload = native_payload(messages)
    assert validate_payload(payload) == {}
    refusal = request_rule_refusal(payload)
    return None if refusal is None else (refusal.rc, refusal.param, refusal.message)


def test_the_table_covers_at_least_twenty_histories_of_both_kinds() -> None:
    """ref: value-and-contract-validation.8"""
    assert len(HISTORIES) >= 20
    assert sum(verdict is None for _, _, verdict in HISTORIES) >= 8
    assert sum(verdict is not None for _, _, verdict in HISTORIES) >= 12


@pytest.mark.parametrize(("history", "verdict"), [(h, v) for _, h, v in HISTORIES], ids=[n for n, _, _ in HISTORIES])
def test_front_and_horde_give_the_same_verdict_param_and_message(
    history: list[dict[str, Any]], verdict: Verdict
) -> None:
    """A tool history breaking OpenAI's rule is refused by the front with OpenAI's message and param, and the Horde,
    given the same history, refuses it the same way (or accepts it, when the front does).

    ref: value-and-contract-validation.8, value-and-contract-validation.10, message-roles.1"""
    assert front_verdict(history) == verdict
    assert horde_verdict(history) == verdict


@pytest.mark.parametrize(
    ("history", "verdict"), [(h, v) for _, h, v in HISTORIES if v is None or v[1] != "messages[0].tool_calls"]
)
def test_the_rule_functions_agree_on_their_own(history: list[dict[str, Any]], verdict: Verdict) -> None:
    """The two rule functions, without the paths around them, agree too.

    ref: value-and-contract-validation.8"""
    front = find_tool_history_violation(history)
    horde = tool_history_refusal(history)
    assert (None if front is None else (front.code, front.param, front.message)) == verdict
    assert (None if horde is None else (horde.rc, horde.param, horde.message)) == verdict
