"""The Horde's budgets (chat.horde.budget) against the devhorde's ``aihorde`` scenario, whose rate limits are the real
AI Horde's (2 text submits a second per address, flask-limiter's fixed windows, 429 without ``rc``) and which honours
a service account's proxy passkey (``Proxy-Authorization``, then ``Proxied-For`` is the limited address).

A burst the Horde's limits would refuse is served whole: without a passkey the front paces every user through its own
address's 2 a second; with one it sends each user's address, so the Horde limits each address on its own and the
front, pacing per address, sends the burst at once. In both, no 429 reaches the Horde's limiter: the front logs
"The Horde rate-limited" for each 429 it waits out, and there is none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Process, start_devhorde, start_front

pytestmark = pytest.mark.integration

MODEL = "koboldcpp/Qwen2.5-7B-Instruct"
PASSKEY = "pk-integration-0123456789"
ANONYMOUS_KEY = "0000000000"
"""The anonymous key holds kudos on the aihorde scenario, and its own limit (60 a second) leaves the address's 2 a
second the one that binds."""
RATE_LIMITED_LINE = "The Horde rate-limited"
FRONT_ENV = {"HORDE_OAI_MODELS_CACHE_SECONDS": "5"}
"""The model list read at most every 5 s: its route allows 90 a minute per address at the Horde."""


@dataclass
class BudgetStack:
    devhorde: Process
    horde_url: str
    front: Process
    front_url: str
    passkey_front: Process
    passkey_front_url: str


@pytest.fixture(scope="module")
def budget_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BudgetStack]:
    """The ``aihorde`` devhorde with a known proxy passkey, a front without a passkey and one with it (reading the
    client's address from ``X-Forwarded-For``), none with Redis."""
    tmp = tmp_path_factory.mktemp("budget-live")
    devhorde, horde_url = start_devhorde(tmp, redis=False, scenario="aihorde")
    processes = [devhorde]
    try:
        control = horde_url.removesuffix("/api") + "/_devhorde"
        scenario = httpx.get(f"{control}/scenario", timeout=5).json()
        scenario["aihorde"]["proxy_passkey"] = PASSKEY
        httpx.put(f"{control}/scenario", json=scenario, timeout=5).raise_for_status()
        front, front_url = start_front(tmp, horde_url, redis=False, env=FRONT_ENV)
        processes.append(front)
        passkey_env = {
            **FRONT_ENV,
            "HORDE_OAI_PROXY_PASSKEY": PASSKEY,
            "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For",
        }
        passkey_front, passkey_front_url = start_front(tmp, horde_url, redis=False, env=passkey_env)
        processes.append(passkey_front)
        yield BudgetStack(devhorde, horde_url, front, front_url, passkey_front, passkey_front_url)
    finally:
        for process in reversed(processes):
            process.stop()


def burst(front_url: str, headers: list[dict[str, str]]) -> list[tuple[int, Any]]:
    """One chat completion per header set, all at once, through the SDK without its retries: (status, body)."""

    def one(extra: dict[str, str]) -> tuple[int, Any]:
        sdk = openai.OpenAI(
            base_url=f"{front_url}/v1", api_key=ANONYMOUS_KEY, max_retries=0, timeout=60, default_headers=extra
        )
        try:
            answer = sdk.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=16
            ).http_response
        except openai.APIStatusError as exc:
            answer = exc.response
        return answer.status_code, answer.json()

    with ThreadPoolExecutor(len(headers)) as pool:
        return list(pool.map(one, headers))


def test_a_burst_on_one_address_is_paced_not_refused(budget_stack: BudgetStack) -> None:
    """Eight at once through a front without a passkey share its address's 2 submits a second at the Horde: the
    front paces them, so all eight are served and the Horde's limiter refuses none."""
    answers = burst(budget_stack.front_url, [{}] * 8)
    assert Counter(status for status, _ in answers) == {200: 8}
    assert {body["object"] for _, body in answers} == {"chat.completion"}
    assert RATE_LIMITED_LINE not in budget_stack.front.log()


def test_users_behind_a_passkey_front_spend_their_own_address_budgets(budget_stack: BudgetStack) -> None:
    """Eight users with their own addresses through the passkey front: each call carries ``Proxied-For`` with the
    user's address, so the Horde limits each address on its own and the burst sent at once is not refused."""
    headers = [{"X-Forwarded-For": f"198.51.100.{index + 1}"} for index in range(8)]
    answers = burst(budget_stack.passkey_front_url, headers)
    assert Counter(status for status, _ in answers) == {200: 8}
    assert {body["object"] for _, body in answers} == {"chat.completion"}
    assert RATE_LIMITED_LINE not in budget_stack.passkey_front.log()
