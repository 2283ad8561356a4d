"""Token arithmetic: the client's completion limit and the estimated counts.

Reference section: "Reasoning and usage" for the estimates (:data:`CHARACTERS_PER_TOKEN`), which the replies count
with (chat.rendering.completion) and the text path sizes its prompt with (chat.serving.prompt_templates,
chat.serving.text_route).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from chat.protocol.chat_request import ChatCompletionRequest

CHARACTERS_PER_TOKEN: Final[float] = 4.0
"""The characters-per-token ratio of every estimated count: OpenAI's rule of thumb for English text (about 4
characters per token, "What are tokens and how to count them?"). A count is ``ceil(characters / 4)``, so any text
counts at least one token and no text counts 0. Only counts the worker did not report are estimated."""


def completion_limit(request: ChatCompletionRequest) -> int | None:
    """The client's completion limit: ``max_completion_tokens``, else ``max_tokens``, else None."""
    if request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: ``ceil(len(text) / CHARACTERS_PER_TOKEN)``; 0 for no text."""
    return math.ceil(len(text) / CHARACTERS_PER_TOKEN) if text else 0


def _content_text(content: Any) -> str:
    """The text of a request message's content: the string, or its text and refusal parts joined (image parts count
    none).
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (getattr(part, "text", None) or getattr(part, "refusal", None) for part in content)
        return "".join(text for text in texts if isinstance(text, str))
    return ""


def tool_calls_text(tool_calls: list[dict[str, Any]]) -> str:
    """The characters of tool calls that count as tokens: each call's function name followed by its arguments."""
    text = []
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            text.append(f"{function.get('name') or ''}{function.get('arguments') or ''}")
    return "".join(text)


def estimate_prompt_tokens(request: ChatCompletionRequest) -> int:
    """Estimated prompt tokens: the characters of every message's text, of the history's tool calls (names and
    arguments) and of the tool definitions (compact JSON), at :data:`CHARACTERS_PER_TOKEN`.
    """
    characters = []
    for message in request.messages:
        characters.append(_content_text(message.content))
        calls = getattr(message, "tool_calls", None) or []
        characters.append(tool_calls_text([call.model_dump() for call in calls]))
    if request.tools:
        tools = [tool.model_dump(exclude_none=True, by_alias=True) for tool in request.tools]
        characters.append(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))
    return estimate_tokens("".join(characters))
