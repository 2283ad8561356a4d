"""The client's Horde API key, read from ``Authorization: Bearer <key>`` (every API reads it the same way)."""

from __future__ import annotations

from django.http import HttpRequest

from chat import errors

INVALID_API_KEY_MESSAGE = (
    "The API key in the Authorization header is not a valid Horde API key: a key is printable ASCII. "
    "Send 'Authorization: Bearer <your Horde API key>', or no header for the anonymous key."
)
"""401 message for a bearer key that cannot be forwarded as the native ``apikey`` header."""

NOT_BEARER_MESSAGE = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth "
    "(i.e. Authorization: Bearer YOUR_KEY). Send no Authorization header for the Horde's anonymous key."
)
"""401 message for an ``Authorization`` header that is not ``Bearer <key>`` (``Basic ...``, a bare key): OpenAI's
sentences (openai-errors.md, no API key), then what this front does without one."""


def bearer_key(request: HttpRequest) -> str | None:
    """The client's key from ``Authorization: Bearer <key>``, forwarded to the Horde as ``apikey``; None without a
    header (or an empty one) or with an empty bearer key (the anonymous key).

    Raises:
        OpenAIError: 401 ``InvalidAPIKey`` for a header that is not ``Bearer <key>`` (:data:`NOT_BEARER_MESSAGE`), as
            OpenAI answers it, rather than serving it as the anonymous user.
        OpenAIError: 401 ``InvalidAPIKey`` (``authentication_error``) for a key that is not printable ASCII, which no
            Horde key is and no HTTP header can carry.
    """
    header = request.headers.get("Authorization", "")
    if not header.strip():
        return None
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer":
        raise errors.failure(errors.INVALID_API_KEY, NOT_BEARER_MESSAGE)
    if not key:
        return None
    if not (key.isascii() and key.isprintable()):
        raise errors.failure(errors.INVALID_API_KEY, INVALID_API_KEY_MESSAGE)
    return key
