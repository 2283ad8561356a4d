"""The client's Horde API key, read from ``Authorization: Bearer <key>`` (every API reads it the same way)."""

from __future__ import annotations

from django.http import HttpRequest

from chat import errors

INVALID_API_KEY_MESSAGE = (
    "The API key in the Authorization header is not a valid Horde API key: a key is printable ASCII. "
    "Send 'Authorization: Bearer <your Horde API key>', or no header for the anonymous key."
)
"""401 message for a bearer key that cannot be forwarded as the native ``apikey`` header."""


def bearer_key(request: HttpRequest) -> str | None:
    """The client's key from ``Authorization: Bearer <key>``, forwarded to the Horde as ``apikey``; None if absent.

    Raises:
        OpenAIError: 401 ``InvalidAPIKey`` (``authentication_error``) for a key that is not printable ASCII, which no
            Horde key is and no HTTP header can carry.
    """
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    if not (key.isascii() and key.isprintable()):
        raise errors.failure(errors.INVALID_API_KEY, INVALID_API_KEY_MESSAGE)
    return key
