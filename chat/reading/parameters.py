"""The chat completions parameter tables and the refusal of one (reference: Request keys, Parameter screening, Refused
parameter log line).

:data:`DEFAULT_NO_OP_PARAMETERS` lists the OpenAI keys accepted only at their default, :data:`CHAT_REQUEST_KEYS` the
request's fields; :func:`unsupported_chat_parameter` is the 400 ``UnsupportedChatParameter`` every reader raises, and
logs the reference's "Refused parameter log line" (:func:`log_refused_parameter`); :func:`refusal_parameter_label` is
the ``horde.parameter`` attribute of the refusal counter (reference: Refusal attributes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from loguru import logger

from chat import errors
from chat.errors import OpenAIError
from chat.protocol.chat_request import (
    ChatCompletionRequest,
)

REFUSED_PARAMETER_LOG_LENGTH: Final[int] = 64
"""The most characters of a refused path written to the "Refused parameter log line", before its repr."""


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
forwarded or logged (see their field descriptions in chat.protocol.chat_request). front_operations.openapi documents
the table's keys that are not request fields from it (``NO_OP_PARAMETER_SCHEMAS``)."""

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

CHAT_REQUEST_KEYS: Final[frozenset[str]] = frozenset(
    field.alias or name for name, field in ChatCompletionRequest.model_fields.items()
)
"""The top-level keys of :class:`chat.protocol.chat_request.ChatCompletionRequest`."""

LABELLED_PARAMETERS: Final[frozenset[str]] = (
    CHAT_REQUEST_KEYS
    | frozenset(DEFAULT_NO_OP_PARAMETERS)
    | UNDEFINED_OPENAI_PARAMETERS
    | COMMON_NON_OPENAI_SAMPLER_PARAMETERS
)
"""The top-level keys that name themselves in the refusal counter's ``horde.parameter``; any other is ``other``."""

OTHER_PARAMETER_LABEL: Final[str] = "other"
"""The ``horde.parameter`` of a refusal whose top-level key is not in :data:`LABELLED_PARAMETERS`."""


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
    return errors.failure(errors.UNSUPPORTED_CHAT_PARAMETER, message, param=param)
