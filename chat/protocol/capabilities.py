"""One capability entry per parameter of the chat request: what each place of the front does with it.

:data:`CAPABILITIES` has one :class:`Capability` per field of :class:`chat.protocol.chat_request.ChatCompletionRequest`
(tests/unit/test_capabilities.py checks both ways), in the order model cards list them. The places that read it:

- native forwarding (chat.horde.native_payload): :attr:`Capability.native_key`;
- the text API (chat.serving.text_route): :attr:`Capability.text_api`, the refused parameters
  (:data:`TEXT_API_REFUSED`);
- the model cards' ``supported_parameters`` (models_list.cards): :attr:`Capability.card`;
- the Responses API (chat.reading.responses): :attr:`Capability.responses`, the Responses parameter a chat parameter
  stands for.

Reference sections: native-horde-chat.md "Submit" (native keys), Model card fields, the Responses API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from horde_sdk.generation_parameters.text.chat_policy import ChatFeature, ChatGuarantee

TextApiSupport = Literal["served", "refused", "prompted"]
"""How the Horde's text generation API takes a parameter: ``served`` (sent or applied as on the native route, or
accepted and not forwarded as there), ``refused`` (404 ``no_worker_supports_features`` at the parameter when set:
the text API has no equivalent) or ``prompted`` (written into the prompt and the reply read back:
chat.serving.text_replies)."""


@dataclass(frozen=True)
class CardSupport:
    """When a model card lists a parameter in ``supported_parameters``: every feature or guarantee of ``all_of`` and,
    when ``any_of`` is not empty, one of ``any_of`` declared by the model's chat workers. Both empty: every card.
    """

    all_of: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()

    def listed(self, declared: frozenset[str] | set[str]) -> bool:
        """Whether a card whose workers declare ``declared`` (feature and guarantee values) lists the parameter."""
        if not all(feature in declared for feature in self.all_of):
            return False
        return not self.any_of or any(feature in declared for feature in self.any_of)


EVERY_WORKER: Final[CardSupport] = CardSupport()
"""A parameter every chat worker applies."""


@dataclass(frozen=True)
class Capability:
    """One parameter of the chat request.

    Attributes:
        field: the request field (its JSON key).
        native_key: where its value goes in the native ``POST /v2/generate/chat/async`` body: a top-level key, or
            ``params.<key>``; None when it is not forwarded (the front's own, or accepted and dropped).
        text_api: :data:`TextApiSupport`.
        card: when a model card lists it (:class:`CardSupport`); None when cards never list it.
        responses: the ``POST /v1/responses`` parameter it stands for (``max_output_tokens``, ``text.format``); None
            when the Responses API has none.
    """

    field: str
    native_key: str | None
    text_api: TextApiSupport
    card: CardSupport | None
    responses: str | None


def _features(*features: ChatFeature | ChatGuarantee) -> tuple[str, ...]:
    return tuple(feature.value for feature in features)


CAPABILITIES: Final[tuple[Capability, ...]] = (
    Capability("max_tokens", "params.max_length", "served", EVERY_WORKER, "max_output_tokens"),
    Capability("temperature", "params.temperature", "served", EVERY_WORKER, "temperature"),
    Capability("top_p", "params.top_p", "served", EVERY_WORKER, "top_p"),
    Capability("stop", "params.stop_sequence", "served", EVERY_WORKER, None),
    Capability("seed", "params.seed", "refused", CardSupport(_features(ChatFeature.SEED)), None),
    Capability(
        "frequency_penalty",
        "params.frequency_penalty",
        "refused",
        CardSupport(_features(ChatFeature.FREQUENCY_PENALTY)),
        None,
    ),
    Capability(
        "presence_penalty",
        "params.presence_penalty",
        "refused",
        CardSupport(_features(ChatFeature.PRESENCE_PENALTY)),
        None,
    ),
    Capability(
        "reasoning_effort",
        "params.reasoning_effort",
        "refused",
        CardSupport(_features(ChatFeature.REASONING_EFFORT)),
        "reasoning.effort",
    ),
    Capability("tools", "tools", "prompted", CardSupport(_features(ChatFeature.TOOLS)), "tools"),
    Capability(
        "parallel_tool_calls",
        "parallel_tool_calls",
        "prompted",
        CardSupport(_features(ChatFeature.TOOLS)),
        "parallel_tool_calls",
    ),
    Capability(
        "tool_choice",
        "tool_choice",
        "prompted",
        CardSupport(_features(ChatFeature.TOOLS, ChatGuarantee.TOOL_CHOICE_ENFORCED)),
        "tool_choice",
    ),
    Capability(
        "response_format",
        "response_format",
        "prompted",
        CardSupport(any_of=_features(ChatFeature.JSON_OBJECT, ChatFeature.JSON_SCHEMA)),
        "text.format",
    ),
    Capability("messages", "messages", "served", None, "input"),
    Capability("model", "models", "served", None, "model"),
    Capability("models", "models", "served", None, "model"),
    Capability("stream", None, "served", None, "stream"),
    Capability("stream_options", None, "served", None, None),
    Capability("max_completion_tokens", "params.max_length", "served", None, "max_output_tokens"),
    Capability("n", None, "served", None, None),
    Capability("user", None, "served", None, "user"),
    Capability("safety_identifier", None, "served", None, "safety_identifier"),
    Capability("prompt_cache_key", None, "served", None, "prompt_cache_key"),
    Capability("metadata", None, "served", None, "metadata"),
    Capability("horde", None, "served", None, "horde"),
)
"""Every parameter of the chat request, in the order model cards list the ones they list. ``horde``'s options are
forwarded one by one (chat.horde.native_payload.HORDE_OPTION_KEYS), so the object itself has no native key."""

CAPABILITY_BY_FIELD: Final[dict[str, Capability]] = {capability.field: capability for capability in CAPABILITIES}
""":data:`CAPABILITIES` by request field."""

TEXT_API_REFUSED: Final[tuple[str, ...]] = tuple(
    capability.field for capability in CAPABILITIES if capability.text_api == "refused"
)
"""The parameters the text API has no equivalent for, in the order the text path checks them: ``seed``,
``frequency_penalty``, ``presence_penalty``, ``reasoning_effort``."""


def card_parameters(declared: frozenset[str] | set[str]) -> list[str]:
    """A chat card's ``supported_parameters`` for workers declaring ``declared`` (features and guarantees), in
    :data:`CAPABILITIES` order.
    """
    return [
        capability.field
        for capability in CAPABILITIES
        if capability.card is not None and capability.card.listed(declared)
    ]


def responses_renames() -> tuple[tuple[str, str], ...]:
    """The chat parameters whose Responses parameter has another name, with that name, in :data:`CAPABILITIES`
    order: ``(("max_tokens", "max_output_tokens"), ...)``.
    """
    return tuple(
        (capability.field, capability.responses)
        for capability in CAPABILITIES
        if capability.responses is not None and capability.responses != capability.field
    )
