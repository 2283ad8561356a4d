"""The CPU cost of reading a text path reply for tool calls: parse the family's syntax, check each call's name and
validate its arguments with ``jsonschema`` (chat.serving.text_replies.ReplyRules.read).

Run: ``.venv/bin/python -m bench.text_tools [--replies 2000] [--json]``.

In process, no network: for each family (``chatml``, ``llama-3``, ``mistral``) a typical reply (a sentence, then one
call with three arguments against a strict schema) and a 20-call reply (20 parallel calls of that function) are read
``--replies`` times each; the figure is the CPU microseconds per reply (``time.process_time``). Bounded: about 3 s
at the default on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

import django

django.setup()

from chat.protocol.chat_request import ChatCompletionRequest  # noqa: E402
from chat.serving.text_replies import ReplyRules  # noqa: E402
from chat.serving.text_route import prepare_chat_request  # noqa: E402

MODELS = {
    "chatml": "koboldcpp/Qwen2.5-7B-Instruct",
    "llama-3": "koboldcpp/Llama-3.1-8B-Instruct",
    "mistral": "koboldcpp/Mistral-7B-Instruct-v0.3",
}
"""A model of each family, named as the public Horde lists them."""

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "units": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city", "units", "days"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}

ARGUMENTS = {"city": "Paris", "units": "c", "days": 3}


def reply(family: str, calls: int) -> str:
    """A reply as the family's models write it: a sentence, then ``calls`` calls of ``get_weather``."""
    if family == "chatml":
        block = "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": ARGUMENTS}) + "\n</tool_call>"
        return "Let me check the weather.\n" + "\n".join([block] * calls)
    if family == "llama-3":
        line = json.dumps({"name": "get_weather", "parameters": ARGUMENTS})
        return "<|python_tag|>" + "; ".join([line] * calls)
    items = [{"name": "get_weather", "arguments": ARGUMENTS, "id": "a1B2c3D4e"}] * calls
    return "Let me check the weather. [TOOL_CALLS] " + json.dumps(items)


def rules_for(family: str) -> ReplyRules:
    """The reply rules of a request with :data:`TOOL` to the family's model."""
    request = ChatCompletionRequest.model_validate(
        {"model": MODELS[family], "messages": [{"role": "user", "content": "Weather?"}], "tools": [TOOL]}
    )
    reader = prepare_chat_request(request).reply_reader
    if not isinstance(reader, ReplyRules):
        raise TypeError("a request with tools has reply rules")
    return reader


def measure(rules: ReplyRules, text: str, replies: int, calls: int) -> float:
    """CPU microseconds per :meth:`ReplyRules.read` of ``text``."""
    read = rules.read(text, truncated=False)
    if read.error is not None or len(read.tool_calls) != calls:
        raise RuntimeError(f"the bench reply does not read as {calls} calls: {read.error}")
    started = time.process_time()
    for _ in range(replies):
        rules.read(text, truncated=False)
    return (time.process_time() - started) / replies * 1e6


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure every family; ``{"replies", "families": {family: {"one_call_us", "twenty_calls_us"}}}``."""
    parser = argparse.ArgumentParser(prog="python -m bench.text_tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replies", type=int, default=2000, help="replies read per figure")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    families: dict[str, dict[str, float]] = {}
    for family in MODELS:
        rules = rules_for(family)
        families[family] = {
            "one_call_us": round(measure(rules, reply(family, 1), args.replies, 1), 1),
            "twenty_calls_us": round(measure(rules, reply(family, 20), max(args.replies // 10, 1), 20), 1),
        }
    result = {"replies": args.replies, "families": families}
    if args.json:
        print(json.dumps(result))
    else:
        for family, figures in families.items():
            print(
                f"{family}: {figures['one_call_us']} us per one-call reply, "
                f"{figures['twenty_calls_us']} us per 20-call reply"
            )
    return result


if __name__ == "__main__":
    run(sys.argv[1:])
