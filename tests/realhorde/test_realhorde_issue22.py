"""The front on the real AI Horde as issue 22 asks for it ("The front, on a Horde without chat routes"), through the
official ``openai`` SDK. Each test names the point of the issue it pins (every one of them failed on the front before
issue 22's work). What the front served before is in ``test_realhorde_front.py``.

The coordinator's decisions pinned here: a model no online worker serves is 503 ``no_eligible_worker`` with
``Retry-After: 30`` and ``x-should-retry: false``, answered without a submit; a censored generation finishes with
``content_filter``; ``Retry-After`` only on answers that mean "retry later"; no 429 reaches a client of a burst the
Horde's budgets can serve; the cards' limits come from ``GET /v2/workers``.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from tests.expected_errors import MAX_TOKENS_5000_ON_TEXT_API
from tests.realhorde.conftest import REPLY, Fleet, Front, RealHorde, client, eventually, marker
from tests.realhorde.harness import waiting_prompts

pytestmark = pytest.mark.realhorde


def raw_chat(front: Front, key: str, model: str, mark: str, *, timeout: float = 60, **options: Any) -> Any:
    """The SDK's raw response (status and headers), raising nothing for an error status."""
    sdk = client(front, key, timeout=timeout)
    try:
        return sdk.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": f"Harbours? [{mark}]"}], **options
        ).http_response
    except openai.APIStatusError as exc:
        return exc.response


def assert_no_eligible_worker(answer: Any) -> None:
    assert answer.status_code == 503
    body = answer.json()["error"]
    assert body["code"] == "no_eligible_worker"
    assert answer.headers.get("retry-after") == "30"
    assert answer.headers.get("x-should-retry") == "false"


@pytest.mark.submits(0)
def test_cards_take_their_limits_from_the_horde_workers(realhorde: RealHorde, front: Front, fleet: Fleet) -> None:
    """issue 22: the cards' ``context_length`` and ``top_provider.max_completion_tokens`` are the limits the worker
    declares (``GET /v2/workers?type=text``), not null."""
    model = fleet.model("limits")
    sdk = client(front, realhorde.client_key)
    # The Horde refreshes its worker list every 30 s (horde/database/__init__.py:37).
    card = eventually(
        lambda: (c := sdk.models.retrieve(model).model_dump())["context_length"] and c,
        timeout=40,
        interval=2,
        what=f"the card of {model} with a context_length",
    )
    assert card["context_length"] == 3072
    assert card["top_provider"]["context_length"] == 3072
    assert card["top_provider"]["max_completion_tokens"] == 300


@pytest.mark.submits(0)
def test_a_model_the_horde_lists_nowhere_is_503_no_eligible_worker_at_once_without_a_submit(
    realhorde: RealHorde, front: Front
) -> None:
    """issue 22, item 1: a typo or a model nobody serves answers at once (no ``HordeApiRootWrong``) and costs the
    Horde no submit. The client's 15 s timeout would end a request the front made wait."""
    mark = marker()
    answer = raw_chat(front, realhorde.client_key, realhorde.model("nobody-serves"), mark, max_tokens=20, timeout=15)
    assert_no_eligible_worker(answer)
    assert waiting_prompts(mark) == []


def test_a_model_that_just_lost_its_worker_is_503_no_eligible_worker(
    realhorde: RealHorde, front: Front, fleet: Fleet
) -> None:
    """issue 22, item 6: the model's only worker stopped (the Horde still counts it online for 300 s); the request
    gets ``no_eligible_worker`` within its grace instead of waiting into its timeout, and nothing of it is left
    waiting at the Horde. The front sees a stopped worker once its uptime has not grown for 120 s (the Horde records
    it at most every 30 s while the worker pops, and its list and the front's copy are each up to 30 s old); then the
    grace runs. The client's 280 s timeout is inside the Horde's 300 s window (the old front waited into its own
    timeout)."""
    model = fleet.model("lost")
    mark = marker()
    answer = raw_chat(front, realhorde.client_key, model, mark, max_tokens=20, timeout=280)
    assert_no_eligible_worker(answer)
    assert [wp.n for wp in waiting_prompts(mark)] in ([], [0])


@pytest.mark.parametrize("state", ["censored", "csam"])
def test_a_censored_generation_finishes_with_content_filter(
    realhorde: RealHorde, front: Front, fleet: Fleet, state: str
) -> None:
    """issue 22, item 6: a generation the Horde marks ``censored`` or ``csam`` is OpenAI's ``content_filter``."""
    model = fleet.model(state)
    mark = marker()
    completion = client(front, realhorde.client_key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Harbours? [{mark}]"}], max_tokens=20
    )
    assert completion.choices[0].finish_reason == "content_filter"


def test_a_bad_key_answer_carries_no_retry_after(realhorde: RealHorde, front: Front, fleet: Fleet) -> None:
    """issue 22, item 5: the Horde's limiter puts ``Retry-After: 1`` on every answer; a 401 ``InvalidAPIKey`` is
    permanent and must not tell the client to retry."""
    model = fleet.model("badkey")
    answer = raw_chat(front, "not-a-key-of-this-horde", model, marker(), max_tokens=20)
    assert answer.status_code == 401
    assert "retry-after" not in answer.headers
    assert answer.headers.get("x-should-retry") == "false"


@pytest.mark.submits(2)
def test_a_large_max_tokens_for_a_user_without_kudos_is_served_with_the_lowered_limit_reported(
    realhorde: RealHorde, front: Front, fleet: Fleet
) -> None:
    """issue 22, item 3: 1024 for a user without kudos is served at the Horde's free ceiling, not refused 403
    ``KudosUpfront``, and the reply reports it as the native ``worker_max_length`` adjustment is reported: a
    ``context_adjustments`` entry with the requested and the applied limit, of kind ``kudos_upfront`` (the front
    foresees the Horde's free ceiling from ``/v2/status/performance`` and the user's kudos and lowers before submit;
    a ceiling it did not foresee comes back as a 403 naming it and is submitted again at it, chat.serving.text_limits;
    the pool's workers declare 4096, so no ``worker_max_length`` applies)."""
    model = fleet.model("downgrade")
    new_key, _ = realhorde.new_user("big")
    mark = marker()
    answer = raw_chat(front, new_key, model, mark, max_tokens=1024)
    assert answer.status_code == 200, answer.text
    [stored] = waiting_prompts(mark)
    assert 256 <= stored.max_length <= 512
    adjustments = answer.json()["x_horde"]["context_adjustments"]
    assert adjustments == [{"kind": "kudos_upfront", "requested": 1024, "applied": stored.max_length}]


@pytest.mark.submits(0)
def test_max_tokens_above_the_horde_bound_is_refused_at_max_tokens_naming_the_bound(
    realhorde: RealHorde, front: Front, fleet: Fleet
) -> None:
    """issue 22, item 4: the real server's ``max_length`` bound is 4096 (``horde/apis/models/kobold_v2.py:197-200``;
    horde-sdk's 16384 is not the server's); the front refuses 5000 before any submit with 400
    ``no_worker_supports_limit`` at ``max_tokens``, naming the bound, not a bare "Input payload validation failed"."""
    model = fleet.model("bound")
    mark = marker()
    answer = raw_chat(
        front, realhorde.client_key, model, mark, max_tokens=5000, extra_body={"horde": {"max_context_length": 8192}}
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == MAX_TOKENS_5000_ON_TEXT_API
    assert "retry-after" not in answer.headers
    assert waiting_prompts(mark) == []


def burst(front: Front, keys: list[str], model: str, mark: str, headers: list[dict[str, str]] | None = None) -> list:
    def one(i: int) -> Any:
        sdk = client(front, keys[i], timeout=90, default_headers=(headers or [{}] * len(keys))[i])
        try:
            return sdk.chat.completions.with_raw_response.create(
                model=model, messages=[{"role": "user", "content": f"Harbours {i}? [{mark}]"}], max_tokens=20
            ).http_response
        except openai.APIStatusError as exc:
            return exc.response

    with ThreadPoolExecutor(len(keys)) as pool:
        return list(pool.map(one, range(len(keys))))


def served(answers: list) -> list[tuple[int, str]]:
    return [
        (a.status_code, a.json()["choices"][0]["message"]["content"] if a.status_code == 200 else a.text[:120])
        for a in answers
    ]


@pytest.mark.submits(20)
def test_twenty_concurrent_requests_on_one_key_are_all_served(realhorde: RealHorde, front: Front, fleet: Fleet) -> None:
    """issue 22, item 2: the Horde allows 2 submits a second per key; the front paces them (and retries a 429 after
    its ``Retry-After``) so that no 429 reaches any of 20 requests at once."""
    model = fleet.model("paced")
    mark = marker()
    answers = burst(front, [realhorde.client_key] * 20, model, mark)
    assert Counter(a.status_code for a in answers) == {200: 20}, served(answers)
    assert served(answers) == [(200, REPLY)] * 20


@pytest.mark.submits(10)
def test_ten_users_at_once_through_a_front_without_a_passkey_are_all_served(
    realhorde: RealHorde, front: Front, fleet: Fleet
) -> None:
    """issue 22, item 2 ("submits paced per key and per front address"): without a passkey every user of the front
    shares the front's address budget at the Horde (2 submits a second, 90 a minute), so 10 users at once are paced
    through it, not refused: all 10 are served, none gets a 429, and the Horde stored the front's own address for
    every one of them (no ``Proxied-For`` is sent)."""
    model = fleet.model("users")
    keys = [key for key, _ in realhorde.users(10)]
    mark = marker()
    answers = burst(front, keys, model, mark)
    assert Counter(a.status_code for a in answers) == {200: 10}, served(answers)
    assert served(answers) == [(200, REPLY)] * 10
    assert [wp.ipaddr for wp in waiting_prompts(mark)] == ["127.0.0.1"] * 10


@pytest.mark.submits(10)
def test_ten_users_with_their_own_addresses_through_a_passkey_front_are_served_on_their_own_budgets(
    realhorde: RealHorde, passkey_front: Front, fleet: Fleet
) -> None:
    """issue 22, ``HORDE_OAI_PROXY_PASSKEY``: the front sends ``Proxy-Authorization`` and ``Proxied-For`` with each
    client's address, so the Horde charges each user's own budget (its stored ``ipaddr``) and all 10 are served."""
    model = fleet.model("proxied")
    keys = [key for key, _ in realhorde.users(10)]
    addresses = [f"10.77.{int(realhorde.tag[:2], 16)}.{i + 1}" for i in range(10)]
    mark = marker()
    answers = burst(passkey_front, keys, model, mark, [{"X-Forwarded-For": a} for a in addresses])
    assert Counter(a.status_code for a in answers) == {200: 10}, served(answers)
    assert served(answers) == [(200, REPLY)] * 10
    assert sorted(wp.ipaddr for wp in waiting_prompts(mark)) == sorted(addresses)
