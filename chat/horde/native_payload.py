"""OpenAI chat request -> the native ``POST /v2/generate/chat/async`` payload.

Reference sections: native-horde-chat.md "Submit" for the payload; "Relayed deltas" (:func:`relays_deltas`). The
token arithmetic (the completion limit, the estimates) is chat.horde.tokens.
"""

from __future__ import annotations

from typing import Any, Final

from chat.horde.tokens import completion_limit
from chat.protocol.capabilities import CAPABILITIES
from chat.protocol.chat_request import ChatCompletionRequest

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
