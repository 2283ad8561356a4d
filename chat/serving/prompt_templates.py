"""Chat messages -> one text prompt, for models the front reaches through the Horde's text generation API.

The text API (``POST /v2/generate/text/async``) takes a raw ``prompt``; a chat model expects its conversation in the
turn markers it was trained on. The template of a model is chosen in this order (:func:`template_for_model`):

1. The model's prompt contract in ``horde_model_reference``'s text guidance catalog (``TextPromptContract``), when
   it holds a Jinja2 template (``RawPromptTemplate`` with ``syntax: jinja2``); its ``stop_sequences`` are the stops.
2. A built-in template whose name or alias matches the model's legacy ``instruct_format`` label, when known.
3. A built-in template whose family pattern matches the model name, in this order: ``Qwen``/``Hermes``/``Dolphin``/
   ``ChatML`` -> ChatML, ``Llama-3`` -> Llama 3, ``Mistral``/``Mixtral`` -> Mistral, ``Alpaca`` -> Alpaca.
4. The generic instruct format (:data:`GENERIC_INSTRUCT`).

The built-in templates (:data:`BUILT_IN_TEMPLATES`) are written as ``horde_model_reference`` prompt contracts, in its
vocabulary: ChatML, Llama 3, Mistral (``[INST]``), Alpaca and the generic instruct format. They start no BOS token:
the worker's tokenizer adds it. Every template ends with the assistant's turn opened (a generation prompt); the
contract's ``stop_sequences`` (its turn markers) are added to the request's ``stop``.

Templates run in Jinja2's sandboxed environment (``jinja2.sandbox.ImmutableSandboxedEnvironment``), so a catalog
template cannot reach Python objects. A template sees ``messages`` (a list of ``{"role", "content"}`` with text
content) and ``add_generation_prompt`` (always true).

Messages become template messages as follows (:func:`template_messages`): ``developer`` reads as ``system``; a
content given as parts is its text parts joined by a newline (the text API takes no images: image parts are refused
before rendering, by chat.serving.text_route).

The prompt fits the context by dropping whole turns (:func:`render_within_context`): while the estimated prompt
tokens exceed ``max_context_length - max_length``, the oldest message that is not a system message and not the
last message is dropped. Tokens are estimated at chat.horde.tokens' ``CHARACTERS_PER_TOKEN``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

import horde_model_reference
from horde_model_reference.text_guidance import (
    RawPromptTemplate,
    TemplateSyntax,
    TextInteractionMode,
    TextPromptContract,
)
from horde_model_reference.text_guidance_store import TextGuidanceStore
from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chat.horde.tokens import estimate_tokens

SYSTEM_ROLES: Final[frozenset[str]] = frozenset({"system", "developer"})
"""Roles rendered as the template's ``system`` role."""

PINNED_KEY: Final[str] = "pinned"
"""A template message with this key set is never dropped to fit the context (it holds the tools)."""

PART_SEPARATOR: Final[str] = "\n"
"""What joins the text parts of one message's content."""

_ENVIRONMENT: Final = ImmutableSandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


def _contract(  # noqa: PLR0913, PLR0917 - one built-in template's fields, in its table's column order
    profile_id: str, name: str, aliases: list[str], template: str, stops: list[str], markers: dict[str, str]
) -> TextPromptContract:
    return TextPromptContract(
        profile_id=profile_id,
        display_name=name,
        aliases=aliases,
        summary=f"The {name} chat format, built into the front.",
        interaction_modes=[TextInteractionMode.CHAT, TextInteractionMode.INSTRUCTION],
        accepted_roles=["system", "user", "assistant"],
        role_markers=markers,
        stop_sequences=stops,
        templates=[
            RawPromptTemplate(template_id=profile_id, name=name, syntax=TemplateSyntax.JINJA2, template=template)
        ],
    )


CHATML: Final[TextPromptContract] = _contract(
    "chatml",
    "ChatML",
    ["chatml", "chat-ml", "qwen", "hermes", "dolphin"],
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    ["<|im_end|>", "<|im_start|>"],
    {"system": "<|im_start|>system\n", "user": "<|im_start|>user\n", "assistant": "<|im_start|>assistant\n"},
)
"""ChatML: ``<|im_start|>role\\n...<|im_end|>\\n`` per turn; stops ``<|im_end|>`` and ``<|im_start|>``."""

LLAMA_3: Final[TextPromptContract] = _contract(
    "llama-3",
    "Llama 3",
    ["llama 3", "llama3", "llama-3", "llama 3 instruct", "llama-3-instruct"],
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    ["<|eot_id|>", "<|start_header_id|>"],
    {
        "system": "<|start_header_id|>system<|end_header_id|>\n\n",
        "user": "<|start_header_id|>user<|end_header_id|>\n\n",
        "assistant": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    },
)
"""Llama 3: ``<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`` per turn; stops ``<|eot_id|>`` and
``<|start_header_id|>``."""

MISTRAL: Final[TextPromptContract] = _contract(
    "mistral",
    "Mistral",
    ["mistral", "mistral instruct", "mixtral", "[inst]"],
    "{% set ns = namespace(system='') %}{% for m in messages %}"
    "{% if m.role == 'system' %}{% set ns.system = ns.system ~ m.content ~ '\n\n' %}"
    "{% elif m.role == 'user' %}[INST] {{ ns.system }}{{ m.content }} [/INST]{% set ns.system = '' %}"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS] {{ m.content }}[/TOOL_RESULTS]"
    "{% else %} {{ m.content }}</s>{% endif %}{% endfor %}",
    ["</s>", "[INST]"],
    {"user": "[INST] ", "assistant": " [/INST]"},
)
"""Mistral: ``[INST] ... [/INST] reply</s>``; Mistral has no system turn, so system text opens the next user turn; a
``tool`` turn is ``[TOOL_RESULTS] ...[/TOOL_RESULTS]`` (chat.serving.tool_formats.MistralTools). Stops ``</s>`` and
``[INST]``."""

ALPACA: Final[TextPromptContract] = _contract(
    "alpaca",
    "Alpaca",
    ["alpaca"],
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n\n"
    "{% elif m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n"
    "{% else %}### Response:\n{{ m.content }}\n\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}### Response:\n{% endif %}",
    ["### Instruction:", "### Response:"],
    {"user": "### Instruction:\n", "assistant": "### Response:\n"},
)
"""Alpaca: system text, then ``### Instruction:`` / ``### Response:`` blocks; stops at either marker."""

GENERIC_INSTRUCT: Final[TextPromptContract] = _contract(
    "generic-instruct",
    "Generic instruct",
    ["generic", "instruct"],
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n\n"
    "{% elif m.role == 'user' %}User: {{ m.content }}\n"
    "{% else %}Assistant: {{ m.content }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}",
    ["\nUser:", "\nAssistant:"],
    {"user": "User: ", "assistant": "Assistant: "},
)
"""The fallback for a model with no known format: system text, then ``User: ...`` and ``Assistant: ...`` lines,
ending with ``Assistant:``; stops ``\\nUser:`` and ``\\nAssistant:``."""

BUILT_IN_TEMPLATES: Final[tuple[TextPromptContract, ...]] = (CHATML, LLAMA_3, MISTRAL, ALPACA, GENERIC_INSTRUCT)
"""Every built-in prompt contract; matched by ``display_name`` or an alias (case-insensitive)."""

FAMILY_PATTERNS: Final[tuple[tuple[re.Pattern[str], TextPromptContract], ...]] = (
    (re.compile(r"chatml|qwen|hermes|dolphin", re.IGNORECASE), CHATML),
    (re.compile(r"llama[-_ .]?3", re.IGNORECASE), LLAMA_3),
    (re.compile(r"mi[sx]tral", re.IGNORECASE), MISTRAL),
    (re.compile(r"alpaca", re.IGNORECASE), ALPACA),
)
"""Model name patterns of the families whose format is known, checked in order: ChatML first, because the Hermes,
Dolphin and Qwen fine-tunes of Llama 3 or Mistral bases (``Hermes-3-Llama-3.1-8B``) are trained on ChatML."""


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """A prompt ready for the text API.

    Attributes:
        prompt: The rendered text.
        stop_sequences: The template's turn markers, to add to the request's ``stop``.
        template: The contract's ``profile_id`` (``chatml``, ``llama-3``, ... or a catalog profile).
        dropped_messages: How many of the oldest non-system turns were dropped to fit the context.
        estimated_prompt_tokens: The prompt's estimated tokens.
    """

    prompt: str
    stop_sequences: tuple[str, ...]
    template: str
    dropped_messages: int
    estimated_prompt_tokens: int


class PromptTooLong(Exception):
    """Even with every droppable turn dropped, the prompt exceeds the budget (``estimated`` > ``budget`` tokens)."""

    def __init__(self, estimated: int, budget: int) -> None:
        super().__init__(f"{estimated} > {budget}")
        self.estimated = estimated
        self.budget = budget


def built_in_template(label: str | None) -> TextPromptContract | None:
    """The built-in contract whose display name or alias is ``label`` (case-insensitive), or None."""
    if not label or not label.strip():
        return None
    wanted = label.strip().casefold()
    for contract in BUILT_IN_TEMPLATES:
        if wanted in {name.casefold() for name in (contract.display_name, *contract.aliases)}:
            return contract
    return None


def jinja_template(contract: TextPromptContract) -> RawPromptTemplate | None:
    """The contract's first Jinja2 template, or None."""
    return next((item for item in contract.templates if item.syntax is TemplateSyntax.JINJA2), None)


@cache
def guidance_store() -> TextGuidanceStore:
    """``horde_model_reference``'s packaged text guidance catalog, read-only."""
    packaged = Path(horde_model_reference.__file__).resolve().parent / "data" / "guidance"
    return TextGuidanceStore(root_path=packaged, writable=False)


def catalog_contract(model: str) -> TextPromptContract | None:
    """The model's prompt contract from the guidance catalog when it has a Jinja2 template, else None."""
    resolved = guidance_store().resolve(model, legacy_instruct_format=None)
    contract = resolved.primary_profile
    return contract if contract is not None and jinja_template(contract) is not None else None


def template_for_model(
    model: str, *, instruct_format: str | None = None, catalog: TextPromptContract | None = None
) -> TextPromptContract:
    """The prompt contract for ``model`` (see the module docstring for the order). ``catalog`` overrides the
    catalog lookup (tests); ``instruct_format`` is the model's legacy label, when known.
    """
    contract = catalog if catalog is not None else catalog_contract(model)
    if contract is not None and jinja_template(contract) is not None:
        return contract
    labelled = built_in_template(instruct_format)
    if labelled is not None:
        return labelled
    for pattern, family in FAMILY_PATTERNS:
        if pattern.search(model):
            return family
    return GENERIC_INSTRUCT


def message_text(content: object) -> str:
    """A message content as text: the string, or its ``text`` parts joined by :data:`PART_SEPARATOR`."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else getattr(part, "text", None)
            if isinstance(text, str):
                texts.append(text)
        return PART_SEPARATOR.join(texts)
    return ""


def template_messages(messages: Sequence[Mapping[str, object]]) -> list[dict[str, str]]:
    """Messages as templates read them: ``{"role", "content"}`` with text content, ``developer`` as ``system``
    (and :data:`PINNED_KEY` kept when set).
    """
    rendered = []
    for message in messages:
        role = str(message.get("role"))
        item = {"role": "system" if role in SYSTEM_ROLES else role, "content": message_text(message.get("content"))}
        if message.get(PINNED_KEY):
            item[PINNED_KEY] = "1"
        rendered.append(item)
    return rendered


def render(
    contract: TextPromptContract, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
) -> str:
    """Render template messages with the contract's Jinja2 template in the sandbox; ``add_generation_prompt`` false
    leaves the assistant's turn unopened (the rendered turns alone).

    Raises:
        ValueError: The contract has no Jinja2 template, or the template fails (a syntax error, a sandbox refusal).
    """
    raw = jinja_template(contract)
    if raw is None:
        raise ValueError(f"The prompt contract {contract.profile_id!r} has no Jinja2 template.")
    try:
        return _ENVIRONMENT.from_string(raw.template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt
        )
    except TemplateError as error:
        raise ValueError(f"The prompt template {contract.profile_id!r} failed: {error}") from error


def last_user_turn_offset(contract: TextPromptContract, messages: Sequence[Mapping[str, str]], prompt: str) -> int:
    """Where the last ``user`` message's turn starts in ``prompt`` (``messages`` rendered whole): the length of the
    turns before it rendered alone, found from the messages, never by searching the text (a user's text may hold the
    turn markers). 0 when there is no user message, or when the template does not render its turns in order (the
    turns before it are not the start of ``prompt``).

    Raises:
        ValueError: As :func:`render`.
    """
    users = [index for index, message in enumerate(messages) if message["role"] == "user"]
    if not users:
        return 0
    before = render(contract, messages[: users[-1]], add_generation_prompt=False)
    return len(before) if prompt.startswith(before) else 0


def render_within_context(
    contract: TextPromptContract,
    messages: Sequence[Mapping[str, object]],
    *,
    budget_tokens: int,
    tools_block: str | None = None,
) -> RenderedPrompt:
    """Render ``messages`` so the prompt's estimated tokens fit ``budget_tokens`` (the context length less the
    completion limit), dropping the oldest turns that are neither system messages, nor pinned (``PINNED_KEY`` set:
    the turn that holds the tools, chat.serving.text_replies), nor the last message. ``tools_block``, when given,
    is written right before the last user turn (:func:`last_user_turn_offset`; Mistral's ``[AVAILABLE_TOOLS]``,
    chat.serving.tool_formats.MistralTools) and measured with the prompt.

    Raises:
        PromptTooLong: The prompt exceeds the budget with every droppable turn dropped.
        ValueError: As :func:`render`.
    """
    kept = template_messages(messages)
    dropped = 0
    while True:
        prompt = render(contract, kept)
        if tools_block is not None:
            at = last_user_turn_offset(contract, kept, prompt)
            prompt = prompt[:at] + tools_block + prompt[at:]
        estimated = estimate_tokens(prompt)
        if estimated <= budget_tokens:
            return RenderedPrompt(
                prompt=prompt,
                stop_sequences=tuple(contract.stop_sequences),
                template=contract.profile_id,
                dropped_messages=dropped,
                estimated_prompt_tokens=estimated,
            )
        droppable = next(
            (
                index
                for index, item in enumerate(kept[:-1])
                if item["role"] not in SYSTEM_ROLES and not item.get(PINNED_KEY)
            ),
            None,
        )
        if droppable is None:
            raise PromptTooLong(estimated, budget_tokens)
        del kept[droppable]
        dropped += 1
