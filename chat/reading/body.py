"""A request body's bytes -> a JSON object (reference: Request keys), and how a refusal shows a client's value.

:func:`parse_json_body` is every API's first step: a body that is not JSON, or holds NaN, Infinity or -Infinity (or a
number too large for a double, or a lone UTF-16 surrogate) is 400 ``BadRequest`` with OpenAI's not-JSON sentence;
valid JSON that is not an object is 400 ``BadRequest`` saying the body must be a JSON object.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from chat import errors

NOT_JSON_MESSAGE: Final[str] = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. This API expects a JSON object as the request body, but what was sent was not valid JSON. NaN, "
    "Infinity, numbers too large for a double and lone UTF-16 surrogates are not accepted either.)"
)
"""The message of a body that is not JSON: OpenAI's first sentence (openai-errors.md), then a hint that fits this
front (OpenAI's own hint sends people to OpenAI's help center)."""

NOT_AN_OBJECT_MESSAGE: Final[str] = "The request body must be a JSON object, but got {got} instead."
"""The message of a body that is valid JSON but not an object (``[...]``, ``null``, ``5``); ``{got}`` is OpenAI's
name of its JSON type (:func:`json_type_name`), such as ``an array``."""


SHOWN_VALUE_LENGTH: Final[int] = errors.QUOTED_INPUT_CHARS
"""The most characters of a client's value quoted back in an error message."""

# ---------------------------------------------------------------------------------------------------------------------
# Tables (reference: Parameter screening, Message roles, Refusal attributes)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")
r"""A UTF-16 surrogate written raw in UTF-8 (``\xed\xa0\x80`` is U+D800): invalid UTF-8 that :func:`json.loads`
decodes with ``surrogatepass``, so it must be looked for like the escaped form."""
_UTF_16_OR_32 = b"\x00"
r"""A NUL in a body's first four bytes: :func:`json.loads` reads it as UTF-16 or UTF-32, where a lone surrogate has
no byte pattern of its own, so such a body's strings are always checked."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a double")
    return value


def _holds_lone_surrogate(value: object) -> bool:
    pending = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, str):
            try:
                current.encode()
            except UnicodeEncodeError:
                return True
        elif isinstance(current, dict):
            pending.extend(current.keys())
            pending.extend(current.values())
        elif isinstance(current, list):
            pending.extend(current)
    return False


def parse_json_body(raw: bytes) -> dict[str, Any]:
    r"""Parse a body as a JSON object.

    NaN, Infinity and -Infinity, a number that overflows a double (``1e400``) and a lone UTF-16 surrogate, escaped
    (``"\ud800"``) or as raw bytes (``\xed\xa0\x80``, which is not UTF-8 either), anywhere in the body (a key or a
    value: no UTF-8 text can carry it on to the Horde or a log) are refused like any invalid JSON.

    Raises:
        OpenAIError: 400 ``BadRequest``, param null: :data:`NOT_JSON_MESSAGE` for a body that is not JSON,
            :data:`NOT_AN_OBJECT_MESSAGE` for valid JSON that is not an object.
    """
    try:
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise errors.failure(errors.BAD_REQUEST, NOT_JSON_MESSAGE) from None
    if not isinstance(body, dict):
        message = NOT_AN_OBJECT_MESSAGE.format(got=json_type_name(body))
        raise errors.failure(errors.BAD_REQUEST, message)
    may_hold_surrogate = (
        _SURROGATE_ESCAPE.search(raw) is not None
        or _SURROGATE_BYTES.search(raw) is not None
        or _UTF_16_OR_32 in raw[:4]
    )
    if may_hold_surrogate and _holds_lone_surrogate(body):
        raise errors.failure(errors.BAD_REQUEST, NOT_JSON_MESSAGE)
    return body


# ---------------------------------------------------------------------------------------------------------------------
# Refusal label and log line (reference: Refusal attributes, Refused parameter log line)


def show_value(value: object) -> str:
    """A client's value as an error message quotes it: ``'text'`` for a string, else compact JSON; cut to
    :data:`SHOWN_VALUE_LENGTH` characters with ``…``.
    """
    if isinstance(value, str):
        text = f"'{value}'"
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (ValueError, TypeError, RecursionError):
            text = json_type_name(value)
    return text if len(text) <= SHOWN_VALUE_LENGTH else text[:SHOWN_VALUE_LENGTH] + "…"


def json_type_name(value: object) -> str:
    """OpenAI's name for a value's JSON type: ``a string``, ``an integer``, ``a decimal``, ``null``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
