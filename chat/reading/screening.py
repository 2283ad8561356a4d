"""Reading, screening and validating a chat completions body (reference: Request keys, Parameter screening, Model
selection, Value and contract validation, Message roles, Refused parameter log line).

:func:`read_chat_request` is the one entry point: bytes in, a validated
:class:`chat.protocol.chat_request.ChatCompletionRequest` out, or :class:`chat.errors.OpenAIError` raised with OpenAI's
envelope (always a 400). The steps, in order:

1. :func:`parse_json_body`: a body that is not JSON, or holds NaN, Infinity or -Infinity (or a number too large for a
   double, or a lone UTF-16 surrogate) is 400 ``BadRequest`` with OpenAI's not-JSON sentence; valid JSON that is not
   an object is 400 ``BadRequest`` saying the body must be a JSON object.
2. :func:`find_refused_parameter`: unknown top-level keys, non-default values of :data:`DEFAULT_NO_OP_PARAMETERS`,
   unsupported roles, ``tool_calls`` on a message other than an assistant message, and unsupported content part
   types are 400 ``UnsupportedChatParameter`` at their path.
3. :func:`drop_default_no_ops`: the keys of :data:`DEFAULT_NO_OP_PARAMETERS` at their default are removed.
4. :func:`drop_unknown_nested_keys`: unknown keys inside messages, tool definitions and ``tool_choice`` are removed.
5. :func:`validate_chat_request`: pydantic validation; the first failure becomes OpenAI's message at the failing
   field's request path (never a pydantic union tag).
6. chat.reading.request_rules's request rules, shared with the native route.

Every ``UnsupportedChatParameter`` refusal logs the reference's "Refused parameter log line"
(:func:`log_refused_parameter`); :func:`refusal_parameter_label` is the ``horde.parameter`` attribute of the refusal
counter (reference: Refusal attributes).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MAX_CHAT_SCHEMA_NESTING,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_MIN_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
    SUPPORTED_CHAT_CHOICE_COUNT,
)
from loguru import logger
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from chat import errors
from chat.errors import OpenAIError
from chat.protocol.chat_request import (
    ASSISTANT_CONTENT_PART_TYPES,
    INVALID_JSON_TYPE_ERROR,
    INVALID_TAG_ERROR,
    MESSAGE_ROLES,
    REQUEST_RULE_ERROR,
    SCHEMA_NESTING_ERROR,
    UNION_TAGS,
    USER_CONTENT_PART_TYPES,
    ChatCompletionRequest,
    openai_value_list,
)
from chat.reading.request_rules import find_chat_rule_violation

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

REFUSED_PARAMETER_LOG_LENGTH: Final[int] = 64
"""The most characters of a refused path written to the "Refused parameter log line", before its repr."""

SHOWN_VALUE_LENGTH: Final[int] = 64
"""The most characters of a client's value quoted back in an error message."""

# ---------------------------------------------------------------------------------------------------------------------
# Tables (reference: Parameter screening, Message roles, Refusal attributes)


@dataclass(frozen=True, slots=True)
class NoOpParameter:
    """An OpenAI parameter the front accepts only at its default, where it changes nothing.

    Attributes:
        default: OpenAI's default, as JSON. ``null`` is also accepted: OpenAI reads an explicit null as the default.
        description: What the parameter asks of OpenAI and why the Horde serves only its default (OpenAPI text).
        unrecognized_otherwise: Any other value is refused as an unknown key (OpenAI's ``Unrecognized request
            argument supplied: <key>``, in the unknown keys' pass) instead of with the unsupported-value message:
            the key is one the front does not define, accepted at its default only because clients send it there.
    """

    default: object
    description: str
    unrecognized_otherwise: bool = False


DEFAULT_NO_OP_PARAMETERS: Final[Mapping[str, NoOpParameter]] = {
    "audio": NoOpParameter(None, "Audio output settings. The Horde's workers reply with text only; only null."),
    "logit_bias": NoOpParameter(
        {},
        "Token biases. Workers take none, so any bias is refused as an unrecognized argument; the empty map (OpenAI's "
        "default) and null change nothing and are accepted and dropped. A deliberate deviation from the reference, "
        "which refuses logit_bias whatever its value: SillyTavern's Custom (OpenAI-compatible) source sends {} by "
        "default.",
        unrecognized_otherwise=True,
    ),
    "logprobs": NoOpParameter(False, "Log probabilities of the output tokens. Workers do not return them; only false."),
    "modalities": NoOpParameter(["text"], 'Output types. Workers reply with text only; only ["text"].'),
    "prediction": NoOpParameter(None, "Predicted output. Workers do not use one; only null."),
    "service_tier": NoOpParameter("auto", 'OpenAI\'s processing tier. The Horde has one queue; only "auto".'),
    "store": NoOpParameter(False, "Store the completion at OpenAI. The front stores none; only false."),
    "top_logprobs": NoOpParameter(0, "Most likely tokens per position with log probabilities. Not returned; only 0."),
    "verbosity": NoOpParameter(
        "medium", 'Reply verbosity of OpenAI\'s GPT-5 models. Workers have no such control; only "medium".'
    ),
    "web_search_options": NoOpParameter(None, "OpenAI's web search tool. Workers do not search the web; only null."),
}
"""OpenAI chat completions parameters (API reference, "Create chat completion") that the front accepts only at their
default, where they change nothing, and then drops (:func:`drop_default_no_ops`); any other value is 400
``UnsupportedChatParameter`` at the key. Defaults, from OpenAI's reference: ``audio`` null, ``logit_bias`` ``{}``
(OpenAI: null, no bias; see below), ``logprobs`` false, ``modalities`` ``["text"]``, ``prediction`` null,
``service_tier`` ``"auto"``, ``store`` false (for chat completions), ``top_logprobs`` 0 (no alternatives; OpenAI
states no default), ``verbosity`` ``"medium"``, ``web_search_options`` null (absent). ``n``, ``stream`` and
``parallel_tool_calls`` are request fields.

``logit_bias`` is a deliberate deviation from the reference, which lists it among the parameters the front does not
define (:data:`UNDEFINED_OPENAI_PARAMETERS`): SillyTavern's Custom (OpenAI-compatible) source sends ``{}`` by default,
which biases nothing, so the empty map and null are dropped like the other defaults; any other value keeps the
unknown key's refusal (``Unrecognized request argument supplied: logit_bias``) and its ``logit_bias`` label.

The identifiers that never change a reply (``user``, ``safety_identifier``, ``prompt_cache_key``, ``metadata``) are
request fields accepted with any valid value, because real clients always send them; they are validated and not
forwarded or logged (see their field descriptions in chat.protocol.chat_request). oaifront.openapi documents the table's
keys that are not request fields from it (``NO_OP_PARAMETER_SCHEMAS``)."""

UNDEFINED_OPENAI_PARAMETERS: Final[frozenset[str]] = frozenset(
    {
        "logit_bias",
        "functions",
        "function_call",
        "moderation",
        "prompt_cache_options",
        "prompt_cache_retention",
        "best_of",
        "echo",
        "suffix",
    }
)
"""OpenAI parameters the front does not define: refused like any unknown key, whatever their value (even null),
and named in the refusal counter's label (reference: Refusal attributes). The one exception, a deliberate deviation,
is ``logit_bias`` at its no-op default (``{}`` or null), accepted and dropped (:data:`DEFAULT_NO_OP_PARAMETERS`).
``functions`` and ``function_call`` are OpenAI's deprecated forms of ``tools`` and ``tool_choice``; ``best_of``,
``echo`` and ``suffix`` are parameters of OpenAI's legacy completions route that clients send to chat."""

COMMON_NON_OPENAI_SAMPLER_PARAMETERS: Final[frozenset[str]] = frozenset(
    {
        "top_k",
        "min_p",
        "top_a",
        "typical",
        "typical_p",
        "tfs",
        "tfs_z",
        "rep_pen",
        "rep_pen_range",
        "rep_pen_slope",
        "repetition_penalty",
        "repetition_penalty_range",
        "mirostat",
        "mirostat_mode",
        "mirostat_tau",
        "mirostat_eta",
        "smoothing_factor",
        "smoothing_curve",
        "dynatemp_range",
        "dynatemp_exponent",
        "dynatemp_low",
        "dynatemp_high",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_sequence_breakers",
        "dry_penalty_last_n",
        "xtc_threshold",
        "xtc_probability",
        "top_n_sigma",
        "epsilon_cutoff",
        "eta_cutoff",
        "sampler_order",
        "min_tokens",
        "ignore_eos",
        "length_penalty",
        "no_repeat_ngram_size",
    }
)
"""Sampler keys of KoboldAI, SillyTavern, text-generation-webui, llama.cpp and vLLM that clients send to OpenAI
routes. OpenAI defines none of them: they are refused like any unknown key and named in the refusal counter's label,
so the ``label=other`` log lines show which keys this list misses (reference: Refused parameter log line)."""

REQUEST_KEYS: Final[frozenset[str]] = frozenset(
    field.alias or name for name, field in ChatCompletionRequest.model_fields.items()
)
"""The top-level keys of :class:`chat.protocol.chat_request.ChatCompletionRequest`."""

LABELLED_PARAMETERS: Final[frozenset[str]] = (
    REQUEST_KEYS
    | frozenset(DEFAULT_NO_OP_PARAMETERS)
    | UNDEFINED_OPENAI_PARAMETERS
    | COMMON_NON_OPENAI_SAMPLER_PARAMETERS
)
"""The top-level keys that name themselves in the refusal counter's ``horde.parameter``; any other is ``other``."""

OTHER_PARAMETER_LABEL: Final[str] = "other"
"""The ``horde.parameter`` of a refusal whose top-level key is not in :data:`LABELLED_PARAMETERS`."""

SUPPORTED_MESSAGE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "tool_calls", "name"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
"""The keys each role retains (reference: Message roles); any other key of a message is dropped, including ``name``
on a tool message and the fields the OpenAI SDK adds to a replayed reply (``refusal``, ``audio``, ``annotations``,
``function_call``, ``parsed``)."""

SUPPORTED_CONTENT_PART_TYPES: Final[Mapping[str, tuple[str, ...]]] = {
    role: {"user": USER_CONTENT_PART_TYPES, "assistant": ASSISTANT_CONTENT_PART_TYPES}.get(role, ("text",))
    for role in MESSAGE_ROLES
}
"""The content part types each role takes: ``text`` and ``image_url`` in a user message, ``text`` and ``refusal`` in
an assistant message, ``text`` elsewhere."""

CONTENT_PART_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "text": frozenset({"type", "text"}),
    "image_url": frozenset({"type", "image_url"}),
    "refusal": frozenset({"type", "refusal"}),
}
"""The keys a content part retains, by type."""

IMAGE_URL_KEYS: Final[frozenset[str]] = frozenset({"url", "detail"})
"""The keys an ``image_url`` object retains."""

TOOL_CALL_KEYS: Final[frozenset[str]] = frozenset({"id", "type", "function"})
"""The keys a history tool call retains (``index``, added by the OpenAI SDK, is dropped)."""

TOOL_CALL_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name", "arguments"})
"""The keys a history tool call's function retains (``parsed_arguments``, added by the OpenAI SDK, is dropped)."""

TOOL_KEYS: Final[frozenset[str]] = frozenset({"type", "function"})
"""The keys a ``tools`` entry retains."""

TOOL_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name", "description", "parameters", "strict"})
"""The keys a tool's function retains; ``parameters`` is forwarded unchanged."""

TOOL_CHOICE_KEYS: Final[frozenset[str]] = frozenset({"type", "function"})
"""The keys a ``tool_choice`` object retains."""

TOOL_CHOICE_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name"})
"""The keys a ``tool_choice`` object's function retains."""

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

# ---------------------------------------------------------------------------------------------------------------------
# Body parsing (reference: Request keys)

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


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

    NaN, Infinity and -Infinity, a number that overflows a double (``1e400``) and an escaped lone UTF-16 surrogate
    (``"\ud800"``, which no UTF-8 text can carry on to the Horde) are refused like any invalid JSON.

    Raises:
        OpenAIError: 400 ``BadRequest``, param null: :data:`NOT_JSON_MESSAGE` for a body that is not JSON,
            :data:`NOT_AN_OBJECT_MESSAGE` for valid JSON that is not an object.
    """
    try:
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise OpenAIError(status=400, message=NOT_JSON_MESSAGE, code=errors.BAD_REQUEST) from None
    if not isinstance(body, dict):
        message = NOT_AN_OBJECT_MESSAGE.format(got=json_type_name(body))
        raise OpenAIError(status=400, message=message, code=errors.BAD_REQUEST)
    if _SURROGATE_ESCAPE.search(raw) and _holds_lone_surrogate(body):
        raise OpenAIError(status=400, message=NOT_JSON_MESSAGE, code=errors.BAD_REQUEST)
    return body


# ---------------------------------------------------------------------------------------------------------------------
# Refusal label and log line (reference: Refusal attributes, Refused parameter log line)


def refusal_parameter_label(path: str) -> str:
    """The ``horde.parameter`` attribute of an ``UnsupportedChatParameter`` refusal at ``path``.

    The top-level key of the path (before the first ``.``, ``[`` or ``=``) when it is a request field, a
    :data:`DEFAULT_NO_OP_PARAMETERS` key, or in :data:`UNDEFINED_OPENAI_PARAMETERS` or
    :data:`COMMON_NON_OPENAI_SAMPLER_PARAMETERS`; otherwise ``other``, so client keys never become metric labels.
    ``messages[0].role`` is ``messages``, ``horde.foo`` is ``horde``, ``top_k`` is ``top_k``, ``foo`` is ``other``.
    """
    key = re.split(r"[.\[=]", path, maxsplit=1)[0]
    return key if key in LABELLED_PARAMETERS else OTHER_PARAMETER_LABEL


def log_refused_parameter(path: str) -> None:
    """Log the reference's INFO line ``Refused unsupported chat parameter: path=<repr> label=<label>``.

    The path is cut to :data:`REFUSED_PARAMETER_LOG_LENGTH` characters, then written in Python repr form, so a
    client-chosen key cannot make the line long or split it. ``path`` and ``label`` are also bound to the record.
    """
    shown = repr(path[:REFUSED_PARAMETER_LOG_LENGTH])
    label = refusal_parameter_label(path)
    logger.bind(path=shown, label=label).info("Refused unsupported chat parameter: path={} label={}", shown, label)


def unsupported_chat_parameter(param: str, message: str, *, path: str | None = None) -> OpenAIError:
    """400 ``UnsupportedChatParameter`` at ``param``, logged with :func:`log_refused_parameter`.

    Args:
        param: The error's ``param``.
        message: The whole message (it names the parameter itself; the front adds no prefix).
        path: The refused request path when it differs from ``param`` (a content part type's ``param`` carries
            ``=<type>``; its logged path does not).
    """
    log_refused_parameter(path if path is not None else param)
    return OpenAIError(status=400, message=message, code=errors.UNSUPPORTED_CHAT_PARAMETER, param=param)


# ---------------------------------------------------------------------------------------------------------------------
# Screening (reference: Parameter screening, Message roles)


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


def _json_equal(value: object, default: object) -> bool:
    """JSON equality: ``false`` is not ``0``, ``0`` is ``0.0``."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value == default
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default
    if isinstance(value, list) and isinstance(default, list):
        return len(value) == len(default) and all(map(_json_equal, value, default))
    if isinstance(value, dict) and isinstance(default, dict):
        return value.keys() == default.keys() and all(_json_equal(value[key], default[key]) for key in value)
    return type(value) is type(default) and value == default


def is_default_no_op(key: str, value: object) -> bool:
    """Whether ``value`` of a :data:`DEFAULT_NO_OP_PARAMETERS` key is its default (or null)."""
    return value is None or _json_equal(value, DEFAULT_NO_OP_PARAMETERS[key].default)


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusedParameter:
    """A parameter :func:`find_refused_parameter` refuses.

    Attributes:
        path: The refused request path, as logged (``messages[0].content[1].type``).
        param: The error's ``param``: the path, with ``=<type>`` after an unsupported content part type.
        message: The error's message, in OpenAI's wording.
    """

    path: str
    param: str
    message: str


def find_refused_parameter(body: Mapping[str, Any]) -> RefusedParameter | None:
    """The first parameter the front refuses before validation (reference: Parameter screening, step 1).

    In this order: an unknown top-level key (OpenAI's ``Unrecognized request argument supplied: <key>``; so is
    ``logit_bias`` at any value other than ``{}`` or null); a :data:`DEFAULT_NO_OP_PARAMETERS` key with a value other
    than its default or null; then, message by message, an unsupported role (``messages[<i>].role``), ``tool_calls``
    on a message other than an assistant message (``messages[<i>].tool_calls``; null is let through and dropped) and
    a content part type the role does not take (param ``messages[<i>].content[<j>].type=<type>``). A role or type
    that is missing or not a string is left to validation, which reports its type.

    Returns:
        The refusal, or None when screening passes.
    """
    for key, value in body.items():
        no_op = DEFAULT_NO_OP_PARAMETERS.get(key)
        if key not in REQUEST_KEYS and (
            no_op is None or (no_op.unrecognized_otherwise and not is_default_no_op(key, value))
        ):
            return RefusedParameter(path=key, param=key, message=f"Unrecognized request argument supplied: {key}")
    for key, value in body.items():
        if key in DEFAULT_NO_OP_PARAMETERS and not is_default_no_op(key, value):
            default = show_value(DEFAULT_NO_OP_PARAMETERS[key].default)
            return RefusedParameter(
                path=key,
                param=key,
                message=(
                    f"Unsupported value: '{key}' does not support {show_value(value)} on the AI Horde. "
                    f"Only the default ({default}) value is supported."
                ),
            )
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(message, dict):
            refused = _refused_in_message(index, message)
            if refused is not None:
                return refused
    return None


def _refused_in_message(index: int, message: dict[str, Any]) -> RefusedParameter | None:
    role = message.get("role")
    if not isinstance(role, str):
        return None
    if role not in SUPPORTED_MESSAGE_KEYS:
        path = f"messages[{index}].role"
        return RefusedParameter(
            path=path,
            param=path,
            message=f"Invalid value: {show_value(role)}. Supported values are: {openai_value_list(MESSAGE_ROLES)}.",
        )
    if role != "assistant" and message.get("tool_calls") is not None:
        path = f"messages[{index}].tool_calls"
        return RefusedParameter(
            path=path,
            param=path,
            message=(
                f"Invalid parameter: only messages with role 'assistant' can have 'tool_calls', but "
                f"'messages[{index}]' has role '{role}'."
            ),
        )
    content = message.get("content")
    supported = SUPPORTED_CONTENT_PART_TYPES[role]
    for part_index, part in enumerate(content if isinstance(content, list) else []):
        part_type = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part_type, str) or part_type in supported:
            continue
        path = f"messages[{index}].content[{part_index}].type"
        return RefusedParameter(
            path=path,
            param=f"{path}={part_type}",
            message=f"Invalid value: {show_value(part_type)}. Supported values are: {openai_value_list(supported)}.",
        )
    return None


def drop_default_no_ops(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``body`` without the :data:`DEFAULT_NO_OP_PARAMETERS` keys, whose values screening found at their
    default (reference: Parameter screening, step 2).
    """
    return {key: value for key, value in body.items() if key not in DEFAULT_NO_OP_PARAMETERS}


def _keep(value: object, keys: frozenset[str]) -> object:
    return {key: item for key, item in value.items() if key in keys} if isinstance(value, dict) else value


def _keep_nested(value: object, keys: frozenset[str], nested_key: str, nested_keys: frozenset[str]) -> object:
    kept = _keep(value, keys)
    if isinstance(kept, dict) and nested_key in kept:
        kept[nested_key] = _keep(kept[nested_key], nested_keys)
    return kept


def _screen_message(message: object) -> object:
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(role, str) or role not in SUPPORTED_MESSAGE_KEYS:
        return message
    kept = _keep(message, SUPPORTED_MESSAGE_KEYS[role])
    assert isinstance(kept, dict)
    content = kept.get("content")
    if isinstance(content, list):
        kept["content"] = [_screen_content_part(part) for part in content]
    tool_calls = kept.get("tool_calls")
    if isinstance(tool_calls, list):
        kept["tool_calls"] = [
            _keep_nested(call, TOOL_CALL_KEYS, "function", TOOL_CALL_FUNCTION_KEYS) for call in tool_calls
        ]
    return kept


def _screen_content_part(part: object) -> object:
    part_type = part.get("type") if isinstance(part, dict) else None
    if not isinstance(part_type, str) or part_type not in CONTENT_PART_KEYS:
        return part
    return _keep_nested(part, CONTENT_PART_KEYS[part_type], "image_url", IMAGE_URL_KEYS)


def drop_unknown_nested_keys(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``body`` with unknown keys removed inside messages, tool definitions and ``tool_choice``
    (reference: Parameter screening, step 3, and Message roles).

    A message keeps its role's :data:`SUPPORTED_MESSAGE_KEYS`; a history tool call keeps ``id``, ``type`` and
    ``function`` (``name``, ``arguments``); a text part keeps ``type`` and ``text``, an image part ``type`` and
    ``image_url`` (``url``, ``detail``); a tool keeps ``type`` and ``function`` (``name``, ``description``,
    ``parameters``, ``strict``; ``parameters`` unchanged); a ``tool_choice`` object keeps ``type`` and ``function``
    (``name``). Values of the wrong JSON type are left for validation. ``body`` is not modified.
    """
    screened = dict(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        screened["messages"] = [_screen_message(message) for message in messages]
    tools = body.get("tools")
    if isinstance(tools, list):
        screened["tools"] = [_keep_nested(tool, TOOL_KEYS, "function", TOOL_FUNCTION_KEYS) for tool in tools]
    if "tool_choice" in body:
        screened["tool_choice"] = _keep_nested(
            body["tool_choice"], TOOL_CHOICE_KEYS, "function", TOOL_CHOICE_FUNCTION_KEYS
        )
    return screened


# ---------------------------------------------------------------------------------------------------------------------
# Validation (reference: Model selection, Value and contract validation)


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
        return unsupported_chat_parameter(path, f"Unrecognized request argument supplied: {path}")
    if kind == SCHEMA_NESTING_ERROR:
        return unsupported_chat_parameter(
            path,
            f"Invalid '{path}': a JSON Schema may nest at most {MAX_CHAT_SCHEMA_NESTING} levels below its root.",
        )
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        message = _range_message(path, kind, value, ctx)
        if top in RANGED_PARAMETERS:
            return unsupported_chat_parameter(path, message)
        return OpenAIError(status=400, message=message, code=errors.BAD_REQUEST, param=path)
    if kind == "string_pattern_mismatch":
        message = (
            f"Invalid '{path}': string does not match pattern. Expected a string that matches the pattern "
            f"'{ctx.get('pattern', '')}'."
        )
        return OpenAIError(status=400, message=message, code=errors.BAD_REQUEST, param=path)
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        message = _length_message(path, kind, value, ctx)
        if path == "stop" and kind == "too_long":
            return unsupported_chat_parameter(path, message)
        return OpenAIError(status=400, message=message, code=errors.BAD_REQUEST, param=path)
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
    return OpenAIError(status=400, message=message, code=errors.BAD_REQUEST, param=param)


def validate_chat_request(body: Mapping[str, Any]) -> ChatCompletionRequest:
    """Validate a screened body against :class:`ChatCompletionRequest`.

    Raises:
        OpenAIError: 400 for the first unknown key, else the first failing field, in the model's field order
            (:func:`openai_error_from_validation`).
    """
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        failures = exc.errors(include_url=False)
        # An unknown key is reported before the other failures of its object, as screening reports unknown
        # top-level keys first: ``schema_`` is refused as unknown, not as a missing ``schema``.
        first = next((failure for failure in failures if failure["type"] == "extra_forbidden"), failures[0])
        raise openai_error_from_validation(first, body) from None


def check_chat_rules(body: Mapping[str, Any]) -> None:
    """Apply chat.reading.request_rules's request rules to a screened, validated body.

    Raises:
        OpenAIError: 400 ``UnsupportedChatParameter`` (logged) or ``ChatRequestConflict`` with OpenAI's message and
            param.
    """
    horde = body.get("horde")
    openai_guards = isinstance(horde, dict) and horde.get("openai_guards") is True
    violation = find_chat_rule_violation(body, openai_guards=openai_guards)
    if violation is None:
        return
    if violation.code == errors.UNSUPPORTED_CHAT_PARAMETER:
        raise unsupported_chat_parameter(violation.param, violation.message)
    raise OpenAIError(status=400, message=violation.message, code=violation.code, param=violation.param)


def read_chat_request(raw: bytes) -> ChatCompletionRequest:
    """Parse, screen and validate a ``POST /v1/chat/completions`` body, then apply the request rules.

    Raises:
        OpenAIError: 400 with OpenAI's message, the front's code and the parameter's path.
    """
    body = parse_json_body(raw)
    refused = find_refused_parameter(body)
    if refused is not None:
        raise unsupported_chat_parameter(refused.param, refused.message, path=refused.path)
    screened = drop_unknown_nested_keys(drop_default_no_ops(body))
    request = validate_chat_request(screened)
    check_chat_rules(screened)
    return request
