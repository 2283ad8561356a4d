"""Prompts written by hand as the front's text-path tool and JSON contract spells them (issue 36; devhorde/README.md
"Prompted tools and JSON"): what the devhorde's and the lane worker's tests send, whatever the front renders."""

from __future__ import annotations

import json
from typing import Any

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "format": {"type": "string", "enum": ["24h", "12h"]}},
            "required": ["city", "format"],
        },
    },
}
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
JSON_LINES = (
    "Reply with one JSON object only: no prose, no code fence.\n"
    f"The JSON object must validate against this JSON schema: {json.dumps(SCHEMA, separators=(',', ':'))}"
)
REPAIR = "Your previous reply was not valid: the arguments are not JSON. Reply again, following the format exactly."


def chatml_tools_section(tools: list[dict[str, Any]], *extra_lines: str) -> str:
    lines = "\n".join(json.dumps(tool) for tool in tools)
    section = (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        f"function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each function "
        "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
    return section + "".join("\n" + line for line in extra_lines)


def chatml(*turns: tuple[str, str]) -> str:
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns) + "<|im_start|>assistant\n"


def llama(*turns: tuple[str, str]) -> str:
    body = "".join(f"<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>" for role, text in turns)
    return body + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def llama_tools(tools: list[dict[str, Any]], user: str, *extra_lines: str) -> str:
    lines = "\n".join(json.dumps(tool) for tool in tools)
    extra = "".join(line + "\n" for line in extra_lines)
    return (
        "Given the following functions, please respond with a JSON for a function call with its proper arguments "
        'that best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": '
        f"dictionary of argument name and its value}}. Do not use variables.\n\n{lines}\n\n{extra}{user}"
    )


def mistral_tools(tools: list[dict[str, Any]]) -> str:
    return f"[AVAILABLE_TOOLS] {json.dumps(tools)}[/AVAILABLE_TOOLS]"
