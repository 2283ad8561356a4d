"""Server-sent events framing, shared by every streamed API: the event forms, the keepalive comment, the headers.

Chat completions and legacy completions send ``data: <json>`` events (:func:`data_event`) and end with
:data:`DONE_EVENT`; the Responses API sends typed events (:func:`typed_event`). A stream error's own frame is
:meth:`chat.errors.OpenAIError.stream_event`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from chat.errors import dumps

KEEPALIVE_COMMENT: Final[bytes] = b": keepalive\n\n"
"""An SSE comment line; OpenAI SDKs and browsers ignore it."""

DONE_EVENT: Final[bytes] = b"data: [DONE]\n\n"
"""The last event of every stream."""

SSE_HEADERS: Final[dict[str, str]] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""Headers of a streamed response: no caching, no proxy buffering."""


def data_event(value: Any) -> bytes:
    """``data: <json>`` followed by the blank line that ends an event."""
    return b"data: " + dumps(value) + b"\n\n"


def typed_event(event: Mapping[str, Any]) -> bytes:
    """``event: <type>`` and ``data: <json>``, as OpenAI frames Responses events."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + dumps(event) + b"\n\n"
