"""The text path's limits end to end on the devhorde's ``aihorde`` scenario (the public AI Horde's answers): the
cards' limits from ``GET /v2/workers?type=text``, a completion limit above the workers' declared ``max_length``
lowered to it, and a new user's limit lowered to the Horde's free ceiling (``GET /v2/status/performance``,
``GET /v2/find_user``), each reported in ``x_horde.context_adjustments`` and sent so, over 256 tokens with
``allow_downgrade: false`` (a ceiling the front did not foresee: test_downgrade_resubmit_aihorde).

Two workers: Qwen declares ``max_length`` 512, Llama 4096. The scenario's rate limits are off (this file is not about
them; the front's pacing has its own tests)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from devhorde.scenario import load_scenario
from tests.conftest import LiveStack, running_stack

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
LLAMA = "koboldcpp/Llama-3.1-8B-Instruct"
HOLDER_KEY = "0000000000"
"""The scenario's ``kudos_api_keys`` (the anonymous key holds kudos on the real Horde of the harness)."""
NEW_USER_KEY = "new-user-key-limits-1"
"""A new user's key: 0 kudos."""
PROMPT = [{"role": "user", "content": "Tell me about lighthouses."}]


def two_text_workers(tmp: Path, **aihorde: Any) -> Iterator[LiveStack]:
    """A text-path stack on the ``aihorde`` scenario without its rate limits (and with ``aihorde``'s knobs), with two
    quick workers of one thread: Qwen declaring ``max_length`` 512 and context 4096, Llama 4096 and 8192."""
    document = load_scenario("aihorde").model_dump(mode="json")
    document["aihorde"] = {**document["aihorde"], "rate_limits": False, **aihorde}
    qwen = {**document["workers"][0], "time_to_first_token_seconds": 0.0, "tokens_per_second": 2000}
    llama = {**qwen, "name": "sim-text-worker-2", "model": LLAMA, "max_length": 4096, "max_context_length": 8192}
    document["workers"] = [qwen, llama]
    path = tmp / "aihorde-two-workers.json"
    path.write_text(json.dumps(document))
    with running_stack(tmp, scenario=path, api="text") as stack:
        yield stack


@pytest.fixture(scope="module")
def aihorde_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    yield from two_text_workers(tmp_path_factory.mktemp("aihorde-limits"))


def client(stack: LiveStack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key=key, max_retries=0, timeout=30)


def test_text_cards_carry_the_workers_declared_limits(aihorde_stack: LiveStack) -> None:
    cards = {model.id: model.model_dump() for model in client(aihorde_stack, HOLDER_KEY).models.list()}
    assert sorted(cards) == [LLAMA, QWEN]
    limits = {
        name: (card["context_length"], card["top_provider"]["max_completion_tokens"], card["x_horde"]["threads"])
        for name, card in cards.items()
    }
    assert limits == {QWEN: (4096, 512, 1), LLAMA: (8192, 4096, 1)}
    assert cards[QWEN]["top_provider"]["context_length"] == 4096


def test_a_limit_above_the_workers_max_length_is_lowered_and_reported(aihorde_stack: LiveStack) -> None:
    completion = client(aihorde_stack, HOLDER_KEY).chat.completions.create(model=QWEN, messages=PROMPT, max_tokens=1024)
    x_horde = (completion.model_extra or {})["x_horde"]
    assert x_horde["context_adjustments"] == [{"kind": "worker_max_length", "requested": 1024, "applied": 512}]
    assert completion.usage is not None and completion.usage.completion_tokens <= 512
    [native] = [entry for entry in aihorde_stack.native_requests() if entry["id"] == completion.id[len("chatcmpl-") :]]
    assert native["payload"]["params"]["max_length"] == 512
    assert native["payload"]["allow_downgrade"] is False


def test_a_new_users_limit_is_lowered_to_the_free_ceiling_and_reported(aihorde_stack: LiveStack) -> None:
    completion = client(aihorde_stack, NEW_USER_KEY).chat.completions.create(
        model=LLAMA, messages=PROMPT, max_tokens=1024
    )
    x_horde = (completion.model_extra or {})["x_horde"]
    # idle, two threads: 512 + 5 x 2 clamped to 512
    assert x_horde["context_adjustments"] == [{"kind": "kudos_upfront", "requested": 1024, "applied": 512}]
    [native] = [entry for entry in aihorde_stack.native_requests() if entry["id"] == completion.id[len("chatcmpl-") :]]
    assert (native["payload"]["params"]["max_length"], native["max_length"]) == (512, 512)
    assert native["apikey"] == NEW_USER_KEY


def test_a_holder_of_kudos_keeps_the_limit(aihorde_stack: LiveStack) -> None:
    completion = client(aihorde_stack, HOLDER_KEY).chat.completions.create(
        model=LLAMA, messages=PROMPT, max_tokens=1024
    )
    assert "context_adjustments" not in (completion.model_extra or {})["x_horde"]
    [native] = [entry for entry in aihorde_stack.native_requests() if entry["id"] == completion.id[len("chatcmpl-") :]]
    assert native["payload"]["params"]["max_length"] == 1024
