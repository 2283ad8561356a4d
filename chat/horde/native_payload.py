"""OpenAI chat request -> the native ``POST /v2/generate/chat/async`` payload, and the token estimates.

Reference sections: native-horde-chat.md "Submit" for the payload; "Relayed deltas" (:func:`relays_deltas`);
"Reasoning and usage" for the estimates (:data:`CHARACTERS_PER_TOKEN`), which the replies count with
(chat.rendering.completion) and the text path sizes its prompt with.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from chat.protocol.capabilities import CAPABILITIES
from chat.protocol.chat_request import ChatCompletionRequest

CHARACTERS_PER_TOKEN: Final[float] = 4.0
"""The characters-per-token ratio of every estimated count: OpenAI's rule of thumb for English text (about 4
characters per token, "What are tokens and how to count them?"). A count is ``ceil(characters / 4)``, so any text
counts at least one token and no text counts 0. Only counts the worker did not report are estimated."""


HORDE_OPTION_KEYS: Final[tuple[str, ...]] = (
    "conformance",
    "openai_guards",
    "max_kudos",
    "trusted_workers",
    "slow_workers",
    "workers",
    "worker_blacklist",
)
"""``horde`` options forwarded as top-level native keys; ``max_context_length`` goes into ``params`` and
``include_reasoning`` and ``availability_mode`` are the front's own."""

CONVERTED_FIELDS: Final[frozenset[str]] = frozenset(
    {"messages", "model", "models", "max_tokens", "max_completion_tokens", "stop"}
)
"""Request fields :func:`build_native_payload` converts itself (messages, the model list, the completion limit, the
stop sequences); every other field with a native key (chat.protocol.capabilities) is forwarded unchanged."""

SAMPLING_PARAM_KEYS: Final[tuple[str, ...]] = tuple(
    capability.field
    for capability in CAPABILITIES
    if capability.field not in CONVERTED_FIELDS and capability.native_key == f"params.{capability.field}"
)
"""Request keys forwarded unchanged into the native ``params``: ``temperature``, ``top_p``, ``seed``,
``frequency_penalty``, ``presence_penalty``, ``reasoning_effort``."""

TOP_LEVEL_KEYS: Final[tuple[str, ...]] = tuple(
    capability.field
    for capability in CAPABILITIES
    if capability.field not in CONVERTED_FIELDS and capability.native_key == capability.field
)
"""Request keys forwarded unchanged as top-level native keys: ``tools``, ``parallel_tool_calls``, ``tool_choice``,
``response_format``."""


def completion_limit(request: ChatCompletionRequest) -> int | None:
    """The client's completion limit: ``max_completion_tokens``, else ``max_tokens``, else None."""
    if request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens


def build_native_payload(request: ChatCompletionRequest, *, stream_progress: bool) -> dict[str, Any]:
    """Return the ``POST /v2/generate/chat/async`` body for a validated request.

    Keys the client did not send are omitted, never sent as null. ``stream`` is sent (true) only when
    ``stream_progress`` is set: a request :func:`relays_deltas` selects, on a front with Redis.
    """
    body = request.model_dump(exclude_none=True, by_alias=True)
    payload: dict[str, Any] = {
        "messages": [native_message(message) for message in body["messages"]],
        "models": request.requested_models,
    }
    params: dict[str, Any] = {}
    limit = completion_limit(request)
    if limit is not None:
        params["max_length"] = limit
    horde = body.get("horde") or {}
    if "max_context_length" in horde:
        params["max_context_length"] = horde["max_context_length"]
    for key in SAMPLING_PARAM_KEYS:
        if key in body:
            params[key] = body[key]
    if "stop" in body:
        params["stop_sequence"] = [body["stop"]] if isinstance(body["stop"], str) else body["stop"]
    if params:
        payload["params"] = params
    for key in TOP_LEVEL_KEYS:
        if key in body:
            payload[key] = body[key]
    for key in HORDE_OPTION_KEYS:
        if key in horde:
            payload[key] = horde[key]
    if stream_progress:
        payload["stream"] = True
    return payload


def native_message(message: dict[str, Any]) -> dict[str, Any]:
    """A validated message as the native route takes it: an assistant's ``refusal`` content part becomes a text part
    with the refusal's text (the native route takes ``text`` and ``image_url`` parts), so it stays that turn's text.
    """
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return message
    parts = [{"type": "text", "text": part["refusal"]} if part.get("type") == "refusal" else part for part in content]
    return {**message, "content": parts}


def relays_deltas(request: ChatCompletionRequest) -> bool:
    """Whether a request's text is relayed live (reference: Relayed deltas).

    True for ``stream: true`` with no tools and no ``response_format`` other than ``text``: the Horde verifies tool
    calls and structured output only once the reply is complete, so relaying earlier could expose a refused reply.
    """
    if not request.is_stream or request.tools:
        return False
    return request.response_format is None or request.response_format.type == "text"


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
