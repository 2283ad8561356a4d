"""Prompts written as the front's text-path tool and JSON contract spells them (issue 36; devhorde/README.md
"Prompted tools and JSON"): what the devhorde's and the lane worker's tests send, whatever the front renders. The
families' fixed texts come from the product (chat.serving.tool_formats, chat.serving.text_replies); the tools, turns
and markers are written here.
"""

from __future__ import annotations

import json
from typing import Any

from chat.serving.text_replies import JSON_LINE, REPAIR_TURN, SCHEMA_LINE
from chat.serving.tool_formats import HermesTools, Llama3Tools

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
CITY_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
            "additionalProperties": False,
        },
    },
}
"""A ``json_schema`` response format of a city (the bench's and the unit tests')."""
JSON_LINES = JSON_LINE + "\n" + SCHEMA_LINE.format(schema=json.dumps(SCHEMA, separators=(",", ":")))
REPAIR = REPAIR_TURN.format(error="the arguments are not JSON")


def chatml_tools_section(tools: list[dict[str, Any]], *extra_lines: str) -> str:
    lines = "\n".join(json.dumps(tool) for tool in tools)
    section = HermesTools.PREAMBLE + lines + HermesTools.INSTRUCTION
    return section + "".join("\n" + line for line in extra_lines)


def chatml(*turns: tuple[str, str]) -> str:
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns) + "<|im_start|>assistant\n"


def llama(*turns: tuple[str, str]) -> str:
    body = "".join(f"<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>" for role, text in turns)
    return body + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def llama_tools(tools: list[dict[str, Any]], user: str, *extra_lines: str) -> str:
    lines = "\n".join(json.dumps(tool) for tool in tools)
    extra = "".join(line + "\n" for line in extra_lines)
    return f"{Llama3Tools.PREAMBLE}{lines}\n\n{extra}{user}"


def mistral_tools(tools: list[dict[str, Any]]) -> str:
    return f"[AVAILABLE_TOOLS] {json.dumps(tools)}[/AVAILABLE_TOOLS]"
