"""The capability table (chat.protocol.capabilities) has one entry per chat request field, and the places that read
it get the same lists they held before the table."""

from __future__ import annotations

from chat.horde.native_payload import SAMPLING_PARAM_KEYS, TOP_LEVEL_KEYS
from chat.protocol.capabilities import CAPABILITIES, CAPABILITY_BY_FIELD, TEXT_API_REFUSED, card_parameters
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.responses_api import ResponsesRequest
from chat.reading.responses import COPIED_PARAMETERS
from chat.serving.text_route import REFUSED_SAMPLING_KEYS
from models_list.cards import BASE_SUPPORTED_PARAMETERS, TEXT_API_SUPPORTED_PARAMETERS, supported_parameters


def test_every_request_field_has_one_entry_and_every_entry_is_a_field() -> None:
    """A new parameter cannot be forgotten: the table and the request model name the same fields, once each."""
    fields = [field.alias or name for name, field in ChatCompletionRequest.model_fields.items()]
    table = [capability.field for capability in CAPABILITIES]
    assert len(table) == len(set(table))
    assert set(table) == set(fields)
    assert set(CAPABILITY_BY_FIELD) == set(fields)


def test_every_responses_mapping_is_a_responses_parameter() -> None:
    """A ``responses`` name is a top-level key of the Responses request (its dotted form's first key)."""
    keys = {field.alias or name for name, field in ResponsesRequest.model_fields.items()}
    for capability in CAPABILITIES:
        if capability.responses is not None:
            assert capability.responses.split(".")[0] in keys, capability.field


def test_the_native_forwarding_lists() -> None:
    """The keys copied into the native ``params`` and the top-level keys copied as they are."""
    assert SAMPLING_PARAM_KEYS == (
        "temperature",
        "top_p",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "reasoning_effort",
    )
    assert TOP_LEVEL_KEYS == ("tools", "parallel_tool_calls", "tool_choice", "response_format")


def test_the_text_api_refusals_in_their_order() -> None:
    """The text path refuses the first of these that is set, in this order."""
    assert (
        REFUSED_SAMPLING_KEYS
        == TEXT_API_REFUSED
        == ("seed", "frequency_penalty", "presence_penalty", "reasoning_effort")
    )


def test_the_responses_copies() -> None:
    """The Responses parameters copied into the chat body under their own name."""
    assert COPIED_PARAMETERS == (
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "user",
        "safety_identifier",
        "prompt_cache_key",
    )


def test_card_parameters_follow_the_declared_features() -> None:
    """``supported_parameters`` of a chat card: the base four, then what the declared features enable."""
    assert card_parameters(set()) == ["max_tokens", "temperature", "top_p", "stop"]
    assert card_parameters({"tools"}) == ["max_tokens", "temperature", "top_p", "stop", "tools", "parallel_tool_calls"]
    assert card_parameters({"tool_choice_enforced"}) == ["max_tokens", "temperature", "top_p", "stop"]
    assert card_parameters({"json_schema", "seed", "tools", "tool_choice_enforced", "reasoning_effort"}) == [
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "reasoning_effort",
        "tools",
        "parallel_tool_calls",
        "tool_choice",
        "response_format",
    ]


def test_the_cards_read_the_table() -> None:
    """A chat card's base parameters are the table's every-worker ones; a text API card lists every parameter a card
    can list that the text API does not refuse, and ``structured_outputs``."""
    assert BASE_SUPPORTED_PARAMETERS == ("max_tokens", "temperature", "top_p", "stop")
    assert supported_parameters(["seed", "tools"]) == card_parameters({"seed", "tools"})
    listed = {capability.field for capability in CAPABILITIES if capability.card is not None}
    assert set(TEXT_API_SUPPORTED_PARAMETERS) == (listed - set(TEXT_API_REFUSED)) | {"structured_outputs"}
