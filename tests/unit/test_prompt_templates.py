"""Chat messages rendered into text prompts for the Horde's text generation API (chat.serving.prompt_templates)."""

from __future__ import annotations

import pytest
from horde_model_reference.text_guidance import (
    RawPromptTemplate,
    TemplateSyntax,
    TextInteractionMode,
    TextPromptContract,
)

from chat.serving.prompt_templates import (
    ALPACA,
    CHATML,
    GENERIC_INSTRUCT,
    LLAMA_3,
    MISTRAL,
    PromptTooLong,
    render,
    render_within_context,
    template_for_model,
    template_messages,
)

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Why?"},
]
"""System, a multi-part user turn, an assistant turn and a last user turn."""

EXPECTED = {
    "chatml": (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    ),
    "llama-3": (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi\nthere<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "mistral": "[INST] Be brief.\n\nHi\nthere [/INST] Hello!</s>[INST] Why? [/INST]",
    "alpaca": (
        "Be brief.\n\n### Instruction:\nHi\nthere\n\n### Response:\nHello!\n\n### Instruction:\nWhy?\n\n### Response:\n"
    ),
    "generic-instruct": "Be brief.\n\nUser: Hi\nthere\nAssistant: Hello!\nUser: Why?\nAssistant:",
}


@pytest.mark.parametrize("contract", [CHATML, LLAMA_3, MISTRAL, ALPACA, GENERIC_INSTRUCT], ids=lambda c: c.profile_id)
def test_built_in_templates_render_the_conversation(contract: TextPromptContract) -> None:
    """Each built-in renders system, multi-part user (parts joined by a newline) and assistant turns, then opens the
    assistant's turn."""
    assert render(contract, template_messages(CONVERSATION)) == EXPECTED[contract.profile_id]


def test_stop_sequences_are_the_turn_markers() -> None:
    assert CHATML.stop_sequences == ["<|im_end|>", "<|im_start|>"]
    assert LLAMA_3.stop_sequences == ["<|eot_id|>", "<|start_header_id|>"]
    assert MISTRAL.stop_sequences == ["</s>", "[INST]"]
    assert ALPACA.stop_sequences == ["### Instruction:", "### Response:"]
    assert GENERIC_INSTRUCT.stop_sequences == ["\nUser:", "\nAssistant:"]


def test_developer_reads_as_system() -> None:
    messages = template_messages([{"role": "developer", "content": "Rules."}, {"role": "user", "content": "Go"}])
    assert messages == [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Go"}]


@pytest.mark.parametrize(
    ("model", "label", "expected"),
    [
        ("koboldcpp/Meta-Llama-3.1-8B-Instruct", None, "llama-3"),
        ("aphrodite/NousResearch/Hermes-3-Llama-3.1-8B", None, "chatml"),
        ("koboldcpp/Mistral-7B-Instruct-v0.3", None, "mistral"),
        ("koboldcpp/Mixtral-8x7B", None, "mistral"),
        ("koboldcpp/Qwen2.5-7B-Instruct", None, "chatml"),
        ("koboldcpp/alpaca-native-7b", None, "alpaca"),
        ("koboldcpp/Fimbulvetr-11B", None, "generic-instruct"),
        ("koboldcpp/Fimbulvetr-11B", "Alpaca", "alpaca"),
        ("koboldcpp/Fimbulvetr-11B", "ChatML", "chatml"),
        ("koboldcpp/Fimbulvetr-11B", "unknown label", "generic-instruct"),
    ],
)
def test_template_for_model_by_label_then_family_then_generic(model: str, label: str | None, expected: str) -> None:
    assert template_for_model(model, instruct_format=label).profile_id == expected


def test_a_catalog_contract_with_a_jinja_template_wins() -> None:
    """A ``horde_model_reference`` prompt contract with a Jinja2 template is used as is, with its own stops."""
    contract = TextPromptContract(
        profile_id="house-format",
        display_name="House",
        summary="A test format.",
        interaction_modes=[TextInteractionMode.CHAT],
        stop_sequences=["<end>"],
        templates=[
            RawPromptTemplate(
                template_id="house",
                name="House",
                syntax=TemplateSyntax.JINJA2,
                template="{% for m in messages %}<{{ m.role }}>{{ m.content }}<end>{% endfor %}<assistant>",
            )
        ],
    )
    chosen = template_for_model("koboldcpp/Meta-Llama-3-8B", catalog=contract)
    assert chosen is contract
    rendered = render_within_context(chosen, CONVERSATION[2:], budget_tokens=1000)
    assert rendered.prompt == "<assistant>Hello!<end><user>Why?<end><assistant>"
    assert rendered.stop_sequences == ("<end>",)
    assert rendered.template == "house-format"


def test_a_catalog_contract_without_jinja_falls_back() -> None:
    contract = TextPromptContract(
        profile_id="display-only",
        display_name="Display",
        summary="Handlebars only.",
        interaction_modes=[TextInteractionMode.CHAT],
        templates=[RawPromptTemplate(template_id="h", name="h", syntax=TemplateSyntax.HANDLEBARS, template="{{x}}")],
    )
    assert template_for_model("koboldcpp/Mistral-7B", catalog=contract) is MISTRAL


def test_the_sandbox_refuses_python_internals() -> None:
    contract = TextPromptContract(
        profile_id="escape",
        display_name="Escape",
        summary="Tries to reach Python.",
        interaction_modes=[TextInteractionMode.CHAT],
        templates=[
            RawPromptTemplate(
                template_id="e",
                name="e",
                syntax=TemplateSyntax.JINJA2,
                template="{{ messages.__class__.__mro__[1].__subclasses__() }}",
            )
        ],
    )
    with pytest.raises(ValueError, match="The prompt template 'escape' failed"):
        render(contract, template_messages(CONVERSATION))


def test_trimming_drops_the_oldest_non_system_turns_first() -> None:
    """The budget (context length less the completion limit) keeps the system message and the last message."""
    whole = render_within_context(CHATML, CONVERSATION, budget_tokens=1000)
    assert whole.dropped_messages == 0
    assert whole.prompt == EXPECTED["chatml"]
    assert whole.estimated_prompt_tokens == -(-len(EXPECTED["chatml"]) // 4)
    trimmed = render_within_context(CHATML, CONVERSATION, budget_tokens=whole.estimated_prompt_tokens - 1)
    assert trimmed.dropped_messages == 1
    assert trimmed.prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    )
    smallest = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    last = render_within_context(CHATML, CONVERSATION, budget_tokens=-(-len(smallest) // 4))
    assert last.dropped_messages == 2
    assert last.prompt == smallest


def test_a_prompt_that_cannot_fit_raises_with_its_numbers() -> None:
    smallest = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(PromptTooLong) as too_long:
        render_within_context(CHATML, CONVERSATION, budget_tokens=10)
    assert (too_long.value.estimated, too_long.value.budget) == (-(-len(smallest) // 4), 10)
