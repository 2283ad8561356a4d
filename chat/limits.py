"""The Horde's chat constants that horde-sdk does not define, and re-exports of the ones it does.

Values horde-sdk publishes are imported, never copied (``MIN_CHAT_MAX_TOKENS``, ``MAX_CHAT_MAX_TOKENS``,
``OPENAI_SAMPLING_RANGES``, ...). The three below are the native route's own (native-horde-chat.md).
"""

from __future__ import annotations

from typing import Final

DEFAULT_CHAT_MAX_TOKENS: Final[int] = 512
"""The completion limit the Horde applies when a request sets neither ``max_completion_tokens`` nor ``max_tokens``."""

MAX_CHAT_MODEL_COUNT: Final[int] = 5
"""The most model ids one request may list in ``models`` (reference: Model selection)."""

MAX_MODEL_ID_LENGTH: Final[int] = 255
"""The longest model id a request may name: the Horde's own model names are at most this long (its workers' model
column is ``String(255)``); a longer one is refused at ``model`` before anything is sent."""

HORDE_CHAT_REQUEST_EXPIRY_SECONDS: Final[int] = 1200
"""Seconds after submit when the Horde forgets a chat request (status 404 ``RequestNotFound``); cancels stop then."""
