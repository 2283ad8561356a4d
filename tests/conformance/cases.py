"""The conformance suite's cases and scenario: real clients' default bodies (``clients/*.json``), the devhorde
scenario that serves them, and the SSE reader the tests share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

CLIENTS_DIR = Path(__file__).resolve().parent / "clients"
"""One JSON file per client default body (see ``clients/README.md``)."""

PLAIN_MODEL = "conformance/plain-8b"
"""A model whose workers declare only ``seed`` and ``prompt_overflow_refused``: most Horde text workers."""

FEATURED_MODEL = "conformance/featured-8b"
"""A model whose workers also declare the penalties, JSON output and tools."""

SLOW_MODEL = "conformance/slow-8b"
"""A model whose worker takes :data:`SLOW_FIRST_TOKEN_SECONDS` to its first token, standing for a wait at the Horde."""

SLOW_FIRST_TOKEN_SECONDS = 4.0
"""Several times the suite's keepalive interval (``HORDE_OAI_KEEPALIVE_SECONDS=0.5`` in tests/conftest.py)."""

MODELS: Mapping[str, str] = {"plain": PLAIN_MODEL, "featured": FEATURED_MODEL}
"""A case file's ``model`` names one of these."""

_FAST = {"time_to_first_token_seconds": 0.01, "tokens_per_second": 2000, "post_interval_seconds": 0.01}

CONFORMANCE_SCENARIO: dict[str, Any] = {
    "name": "conformance",
    "description": "A plain model and one that declares penalties, JSON output and tools, both fast "
    "(tests/conformance).",
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "plain-1",
            "model": PLAIN_MODEL,
            "features": ["seed", "prompt_overflow_refused"],
            "max_context_length": 8192,
            "max_length": 1024,
            "threads": 4,
            **_FAST,
        },
        {
            "name": "featured-1",
            "model": FEATURED_MODEL,
            "features": [
                "seed",
                "frequency_penalty",
                "presence_penalty",
                "json_object",
                "json_schema",
                "structured_output_enforced",
                "tools",
                "tool_choice_enforced",
                "prompt_overflow_refused",
            ],
            "max_context_length": 8192,
            "max_length": 1024,
            "threads": 4,
            **_FAST,
        },
        {
            "name": "slow-1",
            "model": SLOW_MODEL,
            "features": ["seed", "prompt_overflow_refused"],
            "max_context_length": 8192,
            "max_length": 1024,
            "threads": 2,
            "time_to_first_token_seconds": SLOW_FIRST_TOKEN_SECONDS,
            "tokens_per_second": 2000,
            "post_interval_seconds": 0.01,
        },
    ],
}
"""The devhorde scenario of the conformance suite."""


def langchain_legacy_body(model: str, prompt: str) -> dict[str, Any]:
    """The ``POST /v1/completions`` body LangChain's legacy ``OpenAI(model=..., base_url=..., api_key=...).invoke(...)``
    sends on its defaults for ``model`` and ``prompt`` (langchain-openai ``BaseOpenAI._default_params``: temperature
    0.7, top_p 1, both penalties 0, n 1, max_tokens 256, seed and logprobs null, the prompt as a list of one string);
    ``logit_bias`` ``{}`` as its older releases send it."""
    return {
        "model": model,
        "prompt": [prompt],
        "temperature": 0.7,
        "top_p": 1,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "n": 1,
        "logit_bias": {},
        "seed": None,
        "logprobs": None,
        "max_tokens": 256,
    }


ANONYMOUS_KEY = "0000000000"


@dataclass(frozen=True, slots=True)
class ClientCase:
    """One client's default request, read from ``clients/<name>.json``.

    Attributes:
        name: The file's stem (``sillytavern-custom``).
        client: The client's name as the guide (docs/clients.md) names it.
        data: The whole file: ``setting``, ``source``, ``body``, ``streamed``, ``non_streamed``, ``model``,
            ``expected`` and optionally ``expected_streamed``, ``headers`` and ``no_key``.
    """

    name: str
    client: str
    data: Mapping[str, Any] = field(repr=False)

    def body(self, form: str) -> dict[str, Any]:
        """The body of ``form`` (``streamed`` or ``non_streamed``), with the case's model."""
        body = {**self.data["body"], **self.data[form]}
        if "model" in body:
            body["model"] = MODELS[self.data["model"]]
        return body

    def headers(self) -> dict[str, str]:
        """The request's headers: the client's own, and the anonymous key unless the client sends none."""
        headers = dict(self.data.get("headers", {}))
        if not self.data.get("no_key"):
            headers["Authorization"] = f"Bearer {ANONYMOUS_KEY}"
        return headers

    def expected(self, form: str) -> Mapping[str, Any]:
        """The expected outcome of ``form``."""
        if form == "streamed" and "expected_streamed" in self.data:
            return self.data["expected_streamed"]
        return self.data["expected"]


def load_cases() -> list[ClientCase]:
    """Every case file, sorted by name."""
    cases = []
    for path in sorted(CLIENTS_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        cases.append(ClientCase(name=path.stem, client=data["client"], data=data))
    return cases


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A streamed reply: the SSE comment lines and the decoded ``data:`` payloads, in arrival order."""

    status: int
    headers: httpx.Headers
    events: list[tuple[str, Any]]
    """``("comment", text)``, ``("data", decoded JSON)`` or ``("done", None)``."""

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.events if kind == "data"]

    @property
    def content(self) -> str:
        return "".join(
            choice["delta"].get("content") or "" for chunk in self.chunks for choice in chunk.get("choices", [])
        )


def read_stream(response: httpx.Response) -> list[tuple[str, Any]]:
    """The SSE events of ``response`` (an open streamed response), in order."""
    events: list[tuple[str, Any]] = []
    for line in response.iter_lines():
        if line.startswith(":"):
            events.append(("comment", line[1:].strip()))
        elif line.startswith("data:"):
            payload = line.removeprefix("data:").strip()
            events.append(("done", None) if payload == "[DONE]" else ("data", json.loads(payload)))
    return events
