"""A pydantic validation error -> OpenAI's message at the request path (reference: Value and contract validation).

:func:`openai_error_from_validation` words the first failure of any API's request model as OpenAI does (type, range,
length, enum and the cross-field request rules), at the field's request path (:func:`error_path`: never a pydantic
union tag).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MAX_CHAT_SCHEMA_NESTING,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_MIN_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
    SUPPORTED_CHAT_CHOICE_COUNT,
)
from pydantic_core import ErrorDetails

from chat import errors
from chat.errors import OpenAIError
from chat.protocol.chat_request import (
    INVALID_JSON_TYPE_ERROR,
    INVALID_TAG_ERROR,
    REQUEST_RULE_ERROR,
    SCHEMA_NESTING_ERROR,
    UNION_TAGS,
    openai_value_list,
)
from chat.reading.body import json_type_name, show_value
from chat.reading.parameters import unsupported_chat_parameter

RANGED_PARAMETERS: Final[frozenset[str]] = frozenset(
    {*OPENAI_SAMPLING_RANGES, "n", "max_tokens", "max_completion_tokens"}
)
"""Top-level keys whose out-of-range value is ``UnsupportedChatParameter`` (reference: Value and contract
validation); a bound broken elsewhere (``horde.max_kudos``, ...) is ``BadRequest``."""

TOKEN_LIMIT_PARAMETERS: Final[frozenset[str]] = frozenset({"max_tokens", "max_completion_tokens"})
"""The request keys holding a completion limit."""

DECIMAL_PARAMETERS: Final[frozenset[str]] = frozenset({*OPENAI_SAMPLING_RANGES, "horde.max_kudos"})
"""Request paths of numbers (OpenAI's "decimal"); every other bounded value is an integer."""

_TYPE_NAMES: Final[Mapping[str, str]] = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a decimal",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}
"""OpenAI's name for the type each pydantic type error expected."""


def error_path(location: tuple[int | str, ...], body: object = None) -> str:
    """Render a pydantic error location as a request path, ``messages[0].content``.

    The union tags (:data:`chat.protocol.chat_request.UNION_TAGS`) and pydantic's ``[key]`` marker of a dict key are
    left out. With the validated ``body``, a location part that is a key of the object at that point is always kept, so
    a client key spelled like a tag (``{"<string>": 1}``) still appears in the path.
    """
    path = ""
    node = body
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
            node = node[part] if isinstance(node, list) and -len(node) <= part < len(node) else None
        elif isinstance(node, dict) and part in node:
            path += ("." if path else "") + part
            node = node[part]
        elif part not in UNION_TAGS and part != "[key]":
            path += ("." if path else "") + part
            node = None
    return path


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return show_value(value)


def _quoted_values(expected: str) -> str:
    """Pydantic's ``'a', 'b' or 'c'`` as OpenAI's ``'a', 'b', and 'c'``; unquoted values (a ``Literal[0]``'s ``0``)
    stay unquoted: ``0``, ``0 and 1``.
    """
    quoted = re.findall(r"'((?:[^'\\]|\\.)*)'", expected)
    if quoted:
        return openai_value_list(quoted)
    values = [value for value in re.split(r", | or ", expected) if value]
    if len(values) <= 2:
        return " and ".join(values)
    return ", ".join(values[:-1]) + ", and " + values[-1]


_RANGE_BOUND_KEYS: Final[Mapping[str, str]] = {
    "greater_than_equal": "ge",
    "greater_than": "gt",
    "less_than_equal": "le",
    "less_than": "lt",
}
_RANGE_RELATIONS: Final[Mapping[str, str]] = {
    "greater_than_equal": ">=",
    "greater_than": ">",
    "less_than_equal": "<=",
    "less_than": "<",
}


def _type_message(path: str, expected: str, value: object) -> str:
    return f"Invalid type for '{path}': expected {expected}, but got {json_type_name(value)} instead."


def _range_message(path: str, kind: str, value: object, ctx: Mapping[str, Any]) -> str:
    below = kind in ("greater_than_equal", "greater_than")
    bound = ctx.get(_RANGE_BOUND_KEYS[kind])
    relation = _RANGE_RELATIONS[kind]
    number = "decimal" if path in DECIMAL_PARAMETERS else "integer"
    problem = f"{number} {'below minimum' if below else 'above maximum'} value"
    expected = f"Expected a value {relation} {_number(bound)}"
    if path in TOKEN_LIMIT_PARAMETERS:
        if below and isinstance(value, int) and value >= OPENAI_MIN_MAX_TOKENS:
            expected = f"Expected a value >= {MIN_CHAT_MAX_TOKENS}, the smallest completion limit the AI Horde serves"
        elif not below:
            expected = f"Expected a value <= {MAX_CHAT_MAX_TOKENS}, the largest completion limit the AI Horde serves"
        elif below:
            expected = f"Expected a value >= {OPENAI_MIN_MAX_TOKENS}"
    elif path == "n" and not below:
        expected = (
            f"Expected a value <= {SUPPORTED_CHAT_CHOICE_COUNT}, since the AI Horde serves one choice per request"
        )
    return f"Invalid '{path}': {problem}. {expected}, but got {_number(value)} instead."


def _length_message(path: str, kind: str, value: object, ctx: Mapping[str, Any]) -> str:
    if kind in ("string_too_short", "string_too_long"):
        short = kind == "string_too_short"
        limit = ctx.get("min_length" if short else "max_length")
        length = len(value) if isinstance(value, str) else ctx.get("actual_length")
        got = "an empty string" if value == "" else f"a string with length {length}"
        return (
            f"Invalid '{path}': string too {'short' if short else 'long'}. Expected a string with "
            f"{'minimum' if short else 'maximum'} length {limit}, but got {got} instead."
        )
    short = kind == "too_short"
    limit = ctx.get("min_length" if short else "max_length")
    size = len(value) if isinstance(value, list | dict) else ctx.get("actual_length")
    if isinstance(value, dict):
        return (
            f"Invalid '{path}': too {'few' if short else 'many'} properties. Expected an object with at "
            f"{'least' if short else 'most'} {limit} properties, but got an object with {size} properties instead."
        )
    if short and size == 0:
        return (
            f"Invalid '{path}': empty array. Expected an array with minimum length {limit}, but got an empty array "
            "instead."
        )
    return (
        f"Invalid '{path}': array too {'short' if short else 'long'}. Expected an array with "
        f"{'minimum' if short else 'maximum'} length {limit}, but got an array with length {size} instead."
    )


def openai_error_from_validation(error: ErrorDetails, body: object = None) -> OpenAIError:
    """Turn one pydantic error of :class:`ChatCompletionRequest` into OpenAI's error, at the request path.

    ``UnsupportedChatParameter`` (logged) for a sampling value, ``n`` or a token limit out of range, more than four
    stop sequences, an unknown key inside an object that refuses them, and a JSON Schema nested too deeply;
    ``BadRequest`` otherwise (an empty ``messages``, a missing field, a wrong type or value). A rule across fields
    carries its own param, code and message. ``body`` is the validated body (see :func:`error_path`).
    """
    kind = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    path = error_path(error["loc"], body)
    top = re.split(r"[.\[]", path, maxsplit=1)[0]
    if kind == REQUEST_RULE_ERROR:
        if ctx["code"] == errors.UNSUPPORTED_CHAT_PARAMETER:
            return unsupported_chat_parameter(ctx["param"], ctx["message"])
        return OpenAIError(status=400, message=ctx["message"], code=ctx["code"], param=ctx["param"])
    if kind == "extra_forbidden":
        return unsupported_chat_parameter(path, f"Unrecognized request argument supplied: {errors.clip(path)}")
    if kind == SCHEMA_NESTING_ERROR:
        return unsupported_chat_parameter(
            path,
            f"Invalid '{path}': a JSON Schema may nest at most {MAX_CHAT_SCHEMA_NESTING} levels below its root.",
        )
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        message = _range_message(path, kind, value, ctx)
        if top in RANGED_PARAMETERS:
            return unsupported_chat_parameter(path, message)
        return errors.failure(errors.BAD_REQUEST, message, param=path)
    if kind == "string_pattern_mismatch":
        message = (
            f"Invalid '{path}': string does not match pattern. Expected a string that matches the pattern "
            f"'{ctx.get('pattern', '')}'."
        )
        return errors.failure(errors.BAD_REQUEST, message, param=path)
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        message = _length_message(path, kind, value, ctx)
        if path == "stop" and kind == "too_long":
            return unsupported_chat_parameter(path, message)
        return errors.failure(errors.BAD_REQUEST, message, param=path)
    param: str | None = path or None
    if kind == "missing":
        message = f"Missing required parameter: '{path}'."
    elif kind == INVALID_JSON_TYPE_ERROR:
        message = _type_message(path, ctx.get("expected", "another type"), value)
    elif kind == INVALID_TAG_ERROR:
        key = ctx.get("key", "type")
        tag = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, dict):
            message = _type_message(path, "an object", value)
        elif key not in value:
            param = f"{path}.{key}"
            message = f"Missing required parameter: '{param}'."
        elif not isinstance(tag, str):
            param = f"{path}.{key}"
            message = _type_message(param, "a string", tag)
        else:
            param = f"{path}.{key}"
            message = f"Invalid value: {show_value(tag)}. Supported values are: {ctx.get('supported', '')}."
    elif kind in _TYPE_NAMES:
        message = _type_message(path, _TYPE_NAMES[kind], value)
    elif kind in ("literal_error", "enum"):
        supported = _quoted_values(ctx.get("expected", ""))
        message = f"Invalid value: {show_value(value)}. Supported values are: {supported}."
    else:
        message = f"Invalid '{path}': {error['msg']}." if path else f"{error['msg']}."
    return errors.failure(errors.BAD_REQUEST, message, param=param)
