"""The Horde's own chat constants that ``horde_sdk`` does not define.

Vocabulary and request-side limits (``MAX_CHAT_MAX_TOKENS``, ``ChatFeature``, ``check_chat_request_limits``, ...) are
imported from ``horde_sdk`` wherever they are used and never repeated here. Only values that belong to the Horde
server itself, and that the contract (``native-horde-chat.md``) or the front's reference names, live in this module.
"""

from __future__ import annotations

from typing import Final

DEFAULT_CHAT_MAX_TOKENS: Final[int] = 512
"""The completion limit (``params.max_length``, tokens) the Horde applies when a request sends none (contract:
Submit)."""

MAX_CHAT_MODEL_COUNT: Final[int] = 5
"""The most distinct model ids one request's ``models`` may list (contract: Submit)."""

HORDE_CHAT_REQUEST_EXPIRY_SECONDS: Final[int] = 1200
"""Seconds after submit at which a chat request expires: its status and cancel answer 404 ``RequestNotFound`` and its
progress stream's TTL ends (contract: Status)."""

MAX_CHAT_TOOL_CALLS_PER_MESSAGE: Final[int] = 128
"""The most tool calls one history message may carry. The reference names the Horde's ``MAX_CHAT_TOOL_CALL_*``
bounds without publishing their values; this simulator's value is an assumption, refused as
``UnsupportedChatParameter`` like the real bound."""

MAX_CHAT_TOOL_CALL_ID_CHARS: Final[int] = 256
"""The longest tool call ``id`` (characters) a history message may carry; an assumed value, as above."""

STREAM_KEY_PREFIX: Final[str] = "horde:chat:stream:"
"""Prefix of a request's Redis progress stream key, ``horde:chat:stream:<request id>`` (contract: Progress stream)."""

STREAM_MAXLEN: Final[int] = 10000
"""The approximate ``MAXLEN ~`` of every progress stream (contract: Progress stream)."""

SIGNALS_CHANNEL: Final[str] = "horde:chat:signals"
"""The Redis pub/sub channel of the ``{"id", "event"}`` state signals (contract: Signals)."""

ANONYMOUS_API_KEY: Final[str] = "0000000000"
"""The Horde's anonymous API key; always valid, never holds kudos upfront."""
