"""Shared Horde reads end to end: a front on the devhorde's ``aihorde`` scenario (the public AI Horde's text API),
requests arriving at once that all find the performance totals missing read them once (chat.horde.budget.single_flight);
the devhorde counts its routes (``GET /_devhorde/calls``). Its rate limits are off: this file counts calls, the
pacing has its own tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from devhorde.scenario import load_scenario
from tests.conftest import LiveStack, running_stack

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
REQUESTS = 60
"""Under the 90 submits a minute the front paces to without a passkey (every request is served)."""


@pytest.fixture(scope="module")
def aihorde_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    tmp = tmp_path_factory.mktemp("shared-reads")
    document = load_scenario("aihorde").model_dump(mode="json")
    document["aihorde"] = {**document["aihorde"], "rate_limits": False}
    quick = {**document["workers"][0], "time_to_first_token_seconds": 0.0, "tokens_per_second": 2000, "threads": 8}
    document["workers"] = [quick]
    path = tmp / "aihorde-quick.json"
    path.write_text(json.dumps(document))
    with running_stack(tmp, scenario=path, api="text") as stack:
        yield stack


async def completions_at_once(stack: LiveStack, count: int) -> list[int]:
    body = {"model": QWEN, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}
    headers = {"Authorization": "Bearer 0000000000"}  # the anonymous key
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=count), headers=headers) as client:
        answers = await asyncio.gather(
            *(client.post(f"{stack.openai_base_url}/chat/completions", json=body) for _ in range(count))
        )
    return [answer.status_code for answer in answers]


def test_requests_arriving_at_once_read_the_performance_totals_once(aihorde_stack: LiveStack) -> None:
    httpx.post(f"{aihorde_stack.devhorde_control}/reset", timeout=5).raise_for_status()
    statuses = asyncio.run(completions_at_once(aihorde_stack, REQUESTS))
    assert statuses == [200] * REQUESTS
    calls = httpx.get(f"{aihorde_stack.devhorde_control}/calls", timeout=5).json()
    assert calls["POST text_submit"] == REQUESTS
    assert calls["GET performance"] == 1
    assert "GET find_user" not in calls  # 64 tokens are under every free ceiling: no kudos read
