"""The public field descriptions of the request and response models (they are ``/openapi.json``'s descriptions;
reference: Field descriptions).

A docstring cannot interpolate a constant, so a number that comes from horde-sdk (or from ``chat.limits``) is
written out by hand; these tests read each description back from ``Model.model_fields[name].description`` and
compare every number in it with the constant it states, so a new SDK release that changes a limit fails here instead
of leaving the document quietly wrong. They also pin the descriptions a reviewer found bare, and the list of
``error.metadata`` keys against the errors that send them.
"""

from __future__ import annotations

import json
import re

import pytest
from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MAX_CHAT_SCHEMA_NESTING,
    MAX_CHAT_STOP_SEQUENCES,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_MIN_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
    SUPPORTED_CHAT_CHOICE_COUNT,
)
from pydantic import BaseModel

from chat import errors
from chat.horde.native import NativeStatus
from chat.limits import DEFAULT_CHAT_MAX_TOKENS, MAX_CHAT_MODEL_COUNT
from chat.protocol.chat_completion import OpenAIErrorBody, OpenAIErrorEnvelope
from chat.protocol.chat_request import (
    ChatCompletionRequest,
    FunctionDefinition,
    ImageContentPart,
    JsonObjectResponseFormat,
    JsonSchemaFormat,
    JsonSchemaResponseFormat,
    NamedToolChoice,
    TextResponseFormat,
    ToolDefinition,
)
from chat.reading.screening import read_chat_request
from chat.waiting import waiter

NUMBER = re.compile(r"-?\d+")


def description(model: type[BaseModel], field: str) -> str:
    """The field's description with its docstring's line breaks read as spaces."""
    text = model.model_fields[field].description
    assert text, f"{model.__name__}.{field} has no description"
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("model", "field", "numbers"),
    [
        (FunctionDefinition, "parameters", [MAX_CHAT_SCHEMA_NESTING]),
        (JsonSchemaFormat, "schema_", [MAX_CHAT_SCHEMA_NESTING]),
        (ChatCompletionRequest, "models", [1, MAX_CHAT_MODEL_COUNT]),
        (
            ChatCompletionRequest,
            "max_tokens",
            [MIN_CHAT_MAX_TOKENS, MAX_CHAT_MAX_TOKENS, OPENAI_MIN_MAX_TOKENS, DEFAULT_CHAT_MAX_TOKENS],
        ),
        (ChatCompletionRequest, "max_completion_tokens", [MIN_CHAT_MAX_TOKENS, MAX_CHAT_MAX_TOKENS]),
        (ChatCompletionRequest, "stop", [MAX_CHAT_STOP_SEQUENCES]),
        (ChatCompletionRequest, "n", [SUPPORTED_CHAT_CHOICE_COUNT]),
        (ChatCompletionRequest, "temperature", list(OPENAI_SAMPLING_RANGES["temperature"])),
        (ChatCompletionRequest, "top_p", list(OPENAI_SAMPLING_RANGES["top_p"])),
        (ChatCompletionRequest, "frequency_penalty", list(OPENAI_SAMPLING_RANGES["frequency_penalty"])),
        (ChatCompletionRequest, "presence_penalty", list(OPENAI_SAMPLING_RANGES["presence_penalty"])),
    ],
)
def test_numbers_in_descriptions_are_their_constants(model: type[BaseModel], field: str, numbers: list[int]) -> None:
    """Every number of the description, in order, is the constant it states (the ``models`` lower bound 1 is the
    field's ``min_length``).

    ref: field-descriptions.1"""
    assert [int(number) for number in NUMBER.findall(description(model, field))] == numbers


def test_models_lower_bound_is_the_fields_min_length() -> None:
    """ref: field-descriptions.1"""
    constraints = {type(item).__name__: item for item in ChatCompletionRequest.model_fields["models"].metadata}
    assert constraints["MinLen"].min_length == 1
    assert constraints["MaxLen"].max_length == MAX_CHAT_MODEL_COUNT


@pytest.mark.parametrize(
    ("model", "value"),
    [
        (ToolDefinition, "function"),
        (NamedToolChoice, "function"),
        (TextResponseFormat, "text"),
        (JsonObjectResponseFormat, "json_object"),
        (JsonSchemaResponseFormat, "json_schema"),
    ],
)
def test_type_tags_read_always(model: type[BaseModel], value: str) -> None:
    """A one-value ``type`` reads "Always ``<value>``.", like the message roles.

    ref: field-descriptions.1"""
    assert description(model, "type").startswith(f"Always ``{value}``.")


BARE = re.compile(r"(?:The|An?) \w+\.")
"""A description that only names its field's type: "The image.", "An error."."""


@pytest.mark.parametrize(
    ("model", "field", "expected"),
    [
        (ImageContentPart, "image_url", "The image to show the model: its ``url`` and an optional ``detail`` hint."),
        (
            ToolDefinition,
            "function",
            "The function the model may call: its ``name``, and optionally a ``description``, a ``parameters`` schema "
            "and ``strict``.",
        ),
        (
            OpenAIErrorEnvelope,
            "error",
            "What went wrong: ``message``, ``type``, ``param`` and ``code``, with ``metadata`` where it applies.",
        ),
    ],
)
def test_formerly_bare_descriptions_say_what_the_object_holds(
    model: type[BaseModel], field: str, expected: str
) -> None:
    """ref: field-descriptions.1"""
    assert description(model, field) == expected
    assert not BARE.fullmatch(expected)


def test_error_body_description_is_not_bare() -> None:
    """The error object's own description (its class docstring, the schema's description) says what it is.

    ref: field-descriptions.1"""
    text = " ".join((OpenAIErrorBody.__doc__ or "").split())
    assert not BARE.fullmatch(text)
    assert text == (
        "Why the front refused or failed the request, in OpenAI's error shape: a message, OpenAI's error type, the "
        "request path at fault and a code, plus ``metadata`` on the errors that carry more facts."
    )


def test_model_states_the_unknown_model_difference_from_openai() -> None:
    """ref: field-descriptions.1"""
    assert description(ChatCompletionRequest, "model").endswith(
        "A model the Horde does not know is 400 ``UnknownModel`` at ``model`` (OpenAI answers 404 ``model_not_found``)."
    )
    assert errors.UNKNOWN_MODEL == "UnknownModel"


def test_stream_options_states_it_is_accepted_without_stream() -> None:
    """The description's claim holds: screening accepts ``stream_options`` without ``stream: true``.

    ref: field-descriptions.1"""
    assert description(ChatCompletionRequest, "stream_options") == (
        "Options of a streamed reply. Accepted, and ignored, without ``stream: true`` (OpenAI refuses it there)."
    )
    for stream in ({}, {"stream": False}):
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream_options": {"include_usage": True},
            **stream,
        }
        request = read_chat_request(json.dumps(body).encode())
        assert not request.stream
        assert request.stream_options is not None and request.stream_options.include_usage is True


METADATA_KEYS = [
    "request_id",
    "retry_after",
    "should_retry",
    "rc",
    "kudos_estimate",
    "max_kudos",
    "reason",
    "eligible_worker_threads",
    "wait_time",
    "remaining_budget_seconds",
    "fault_reason",
]
"""The ``error.metadata`` keys the front sends, in the description's order."""


def sent_metadata_keys() -> set[str]:
    """The metadata keys of the front's errors that carry metadata, built with the front's own constructors."""
    kudos = errors.kudos_cap_error(
        "The request's kudos estimate at current pricing is 215, above its horde.max_kudos of 1. Raise "
        "horde.max_kudos or lower max_tokens."
    )
    status = NativeStatus(eligible_worker_threads=0, wait_time=0, faulted=True, fault_reason="backend crashed")
    queue = waiter.queue_unavailable_error(waiter.NO_ELIGIBLE_THREADS, status, remaining_seconds=12.5, request_id="r1")
    faulted = waiter.faulted_error(status, "r1")
    stream_error = json.loads(errors.no_eligible_worker("No worker.").stream_event().removeprefix(b"data: "))
    keys: set[str] = set()
    for error in (kudos, queue, faulted, waiter.no_generation_error("r1"), waiter.grace_error(60, "r1")):
        keys |= set(error.metadata or {})
    return keys | set(stream_error["error"]["metadata"])


def test_error_metadata_description_lists_the_keys_sent() -> None:
    """The description names every key the front's errors send, and each group's error code.

    ref: field-descriptions.1, kudos-cap.1, fail-fast-admission.5, stream-errors.3"""
    codes = {errors.MAX_KUDOS_EXCEEDED, errors.QUEUE_UNAVAILABLE, errors.CHAT_REQUEST_FAULTED}
    named = re.findall(r"``(\w+)``", description(OpenAIErrorBody, "metadata"))
    assert [name for name in named if name not in codes] == METADATA_KEYS
    assert [name for name in named if name in codes] == [
        errors.MAX_KUDOS_EXCEEDED,
        errors.QUEUE_UNAVAILABLE,
        errors.CHAT_REQUEST_FAULTED,
    ]
    assert sent_metadata_keys() == set(METADATA_KEYS)
