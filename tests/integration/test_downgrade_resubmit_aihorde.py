"""A ceiling the front did not foresee, end to end on the devhorde's ``aihorde`` scenario: the front's performance
read (cached 30 s) says the Horde is idle, the Horde's queue has grown since, and a new user's default 512 is sent with
``allow_downgrade: false``; the Horde answers 403 ``KudosUpfront`` "for requests over 494 tokens", the front submits
again at 494 with ``allow_downgrade: true`` and the reply reports ``kudos_upfront`` 512 -> 494 (the real Horde lowers
silently with ``allow_downgrade: true``, and its totals lag the queue by up to 60 s: the realhorde lane's flake).

Its own stack, so the front's cached performance read is the one this file makes, and the devhorde counts its queue
live (``totals_refresh_seconds: 0``; the real Horde's 60-s count would only widen the gap). Two workers of one
thread each: the idle ceiling is 512 + 10, clamped to 512; 31 queued requests make it 522 - round(27.9) = 494. Chat
completions, then legacy completions."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import LiveStack
from tests.integration.test_text_limits_aihorde import LLAMA, two_text_workers

NOBODY = "koboldcpp/Nobody-1B"
"""A model no worker serves: requests for it wait, and count in the Horde's queue."""
HOLDER_KEY = "0000000000"
"""The scenario's ``kudos_api_keys``: never asked for kudos upfront."""
QUEUED = 31


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    yield from two_text_workers(tmp_path_factory.mktemp("aihorde-resubmit"), totals_refresh_seconds=0)


def client(stack: LiveStack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key=key, max_retries=0, timeout=30)


def submits_of(stack: LiveStack, key_marker: str) -> list[tuple[int, str | None, int, bool]]:
    """``(status, rc, params.max_length, allow_downgrade)`` of each text submit whose prompt holds ``key_marker``."""
    return [
        (entry["status"], entry["rc"], entry["payload"]["params"]["max_length"], entry["payload"]["allow_downgrade"])
        for entry in stack.native_submits()
        if key_marker in str(entry["payload"].get("prompt"))
    ]


def test_a_ceiling_the_front_did_not_foresee_is_submitted_again_at_it_and_reported(stack: LiveStack) -> None:
    first = client(stack, "new-user-first").chat.completions.create(
        model=LLAMA, messages=[{"role": "user", "content": "First [first-mark]"}]
    )
    assert "context_adjustments" not in (first.model_extra or {})["x_horde"]
    assert submits_of(stack, "first-mark") == [(202, None, 512, False)]
    for i in range(QUEUED):
        queued = httpx.post(
            f"{stack.horde_url}/v2/generate/text/async",
            headers={"apikey": HOLDER_KEY},
            json={"prompt": f"queued {i}", "models": [NOBODY], "params": {"max_length": 16}},
            timeout=5,
        )
        assert queued.status_code == 202, queued.text
    performance = httpx.get(f"{stack.horde_url}/v2/status/performance", timeout=5).json()
    assert (performance["queued_text_requests"], performance["text_thread_count"]) == (QUEUED, 2)

    completion = client(stack, "new-user-second").chat.completions.create(
        model=LLAMA, messages=[{"role": "user", "content": "Second [second-mark]"}]
    )
    x_horde = (completion.model_extra or {})["x_horde"]
    assert x_horde["context_adjustments"] == [{"kind": "kudos_upfront", "requested": 512, "applied": 494}]
    assert submits_of(stack, "second-mark") == [(403, "KudosUpfront", 512, False), (202, None, 494, True)]
    [native] = [entry for entry in stack.native_requests() if entry["id"] == completion.id[len("chatcmpl-") :]]
    assert (native["max_length"], native["apikey"]) == (494, "new-user-second")
    assert completion.usage is not None and completion.usage.completion_tokens <= 494

    # The refusal dropped the front's performance read: the next new user is lowered before submit, in one submit.
    third = client(stack, "new-user-third").chat.completions.create(
        model=LLAMA, messages=[{"role": "user", "content": "Third [third-mark]"}]
    )
    assert (third.model_extra or {})["x_horde"]["context_adjustments"] == [
        {"kind": "kudos_upfront", "requested": 512, "applied": 494}
    ]
    assert submits_of(stack, "third-mark") == [(202, None, 494, False)]

    # A legacy completion takes the same path: 10 more queued make the ceiling 522 - round(36.9) = 485, below the 494
    # the front has cached since the third request.
    for i in range(10):
        assert (
            httpx.post(
                f"{stack.horde_url}/v2/generate/text/async",
                headers={"apikey": HOLDER_KEY},
                json={"prompt": f"queued more {i}", "models": [NOBODY], "params": {"max_length": 16}},
                timeout=5,
            ).status_code
            == 202
        )
    legacy = client(stack, "new-user-legacy").completions.create(model=LLAMA, prompt="Once [legacy-mark]")
    assert (legacy.model_extra or {})["x_horde"]["context_adjustments"] == [
        {"kind": "kudos_upfront", "requested": 512, "applied": 485}
    ]
    assert submits_of(stack, "legacy-mark") == [(403, "KudosUpfront", 494, False), (202, None, 485, True)]
