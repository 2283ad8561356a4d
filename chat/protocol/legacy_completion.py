"""The wire models of OpenAI's legacy ``POST /v1/completions``: the request and its ``text_completion`` (no I/O)."""

from __future__ import annotations

from typing import Annotated, Literal

from horde_sdk.generation_parameters.text.chat_limits import (
    MAX_CHAT_MAX_TOKENS,
    MIN_CHAT_MAX_TOKENS,
    OPENAI_SAMPLING_RANGES,
)
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from chat.protocol.chat_completion import HordeExtras, Usage
from chat.protocol.chat_request import ModelId, Stop, StreamOptions


class CompletionRequest(BaseModel):
    """The body of ``POST /v1/completions`` (OpenAI's legacy completions, text API models only)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    model: ModelId
    """A model served through the Horde's text generation API (``x_horde.api: "text"`` in ``GET /v1/models``)."""

    prompt: (
        Annotated[str, StringConstraints(min_length=1)]
        | Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1, max_length=1)]
    )
    """The prompt, sent to the text API unchanged: a string, or a list of one string (token arrays and batches are
    not served)."""

    max_tokens: int | None = Field(default=None, ge=MIN_CHAT_MAX_TOKENS, le=MAX_CHAT_MAX_TOKENS)
    """The completion limit in tokens, 16 to 16384 (the AI Horde's text API generates at most 4096: a larger limit is
    400 ``no_worker_supports_limit``); absent, 512 (OpenAI's default is 16)."""

    temperature: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["temperature"][0], le=OPENAI_SAMPLING_RANGES["temperature"][1]
    )
    """Sampling temperature, 0 to 2."""

    top_p: float | None = Field(
        default=None, ge=OPENAI_SAMPLING_RANGES["top_p"][0], le=OPENAI_SAMPLING_RANGES["top_p"][1]
    )
    """Nucleus sampling, 0 to 1 (0 is sent as the text API's smallest, 0.001)."""

    stop: Stop | None = None
    """One stop sequence, or an array of up to 4; the reply is cut at the first one found."""

    stream: bool | None = None
    """Stream the reply as ``text_completion`` chunks."""

    stream_options: StreamOptions | None = None
    """``include_usage`` adds a last chunk with ``choices: []`` and ``usage``."""

    echo: Literal[False] | None = None
    """Only false: the prompt is not repeated in the reply."""

    n: Literal[1] | None = None
    """Only 1."""

    @property
    def prompt_text(self) -> str:
        """The prompt as one string."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def requested_models(self) -> list[str]:
        """``[model]`` (the waiter's gap messages read it)."""
        return [self.model]

    @property
    def models(self) -> None:
        """Always None: one model per request."""
        return None

    @property
    def availability_mode(self) -> str:
        """Always ``wait``."""
        return "wait"

    @property
    def progress_option(self) -> None:
        """Always None: the default queue progress (chat.streaming.progress)."""
        return None

    @property
    def is_stream(self) -> bool:
        """Whether the client asked for a streamed reply."""
        return bool(self.stream)

    @property
    def include_usage(self) -> bool:
        """Whether a streamed reply ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


class TextCompletionChoice(BaseModel):
    """The one choice of a ``text_completion``."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    text: str
    """The generated text (in a stream: the whole text in one chunk, then ``""`` in the finish chunk)."""

    index: int
    """Always 0."""

    logprobs: None
    """Always null."""

    finish_reason: Literal["stop", "length", "content_filter"] | None
    """``stop`` when a stop sequence ended the reply or its estimated tokens are under ``max_tokens``, else
    ``length``; ``content_filter`` when the Horde censored the reply (its text as the Horde sent it); null in a
    stream's text chunk."""


class TextCompletion(BaseModel):
    """OpenAI's ``text_completion`` object, the body of ``POST /v1/completions`` and, with ``stream: true``, each
    event's chunk (a chunk has no ``usage``, except the last one with ``stream_options.include_usage``, whose
    ``choices`` is empty).
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str
    """``cmpl-`` followed by the Horde's request id."""

    object: Literal["text_completion"]
    """Always ``text_completion``."""

    created: int
    """Unix seconds when the front received the request."""

    model: str
    """The model that served the reply."""

    system_fingerprint: str | None
    """``fp_`` and 10 hex digits of the serving worker and model; null without a worker id."""

    choices: list[TextCompletionChoice]
    """One choice (none in the usage chunk)."""

    usage: Usage | None = None
    """Estimated token counts (about 4 characters per token): the text API reports none."""

    x_horde: HordeExtras | None = None
    """``api: "text"`` and ``estimated_usage: true``."""
