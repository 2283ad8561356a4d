"""Issue 22's refusals against the devhorde's ``aihorde`` scenario (the public AI Horde as real-horde.md records it:
no chat routes, ``Retry-After`` from its limiter on every answer, the 4096 bound, a cancel that only empties the
request, generation ``state``), through the official ``openai`` SDK and a front on loopback.

Each submitting test waits out the scenario's 2-a-second submit window first (:func:`paced`), so the simulated
limiter never answers 429 here; the limits themselves are another suite's.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import LiveStack, running_stack, scenario_restored
from tests.expected_errors import MAX_TOKENS_5000_ON_TEXT_API

MODEL = "koboldcpp/Qwen2.5-7B-Instruct"
"""The aihorde scenario's one served model."""

KUDOS_UPFRONT_MESSAGE = (
    "Due to heavy demand, for requests over 256 tokens, the client needs to already have the required kudos. "
    "This request requires 253.85 kudos to fulfil."
)
"""The real Horde's ``KudosUpfront`` message (horde/apis/v2/kobold.py:150-157) for 700 tokens of the scenario's model
(``round(700 * 7615616512 / 1e9 / 21, 2)``), scripted as a submit refusal so it comes whatever the front sends."""


@pytest.fixture(scope="module")
def aihorde_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """The devhorde's ``aihorde`` scenario and a front with the default settings (text API fallback ``auto``)."""
    with running_stack(tmp_path_factory.mktemp("aihorde-refusals"), scenario="aihorde", api="text") as stack:
        stack.default_scenario = stack.get_scenario()  # type: ignore[attr-defined]
        yield stack


@pytest.fixture
def stack(aihorde_stack: LiveStack) -> Iterator[LiveStack]:
    """The aihorde stack, its scenario restored and its requests forgotten after the test."""
    with scenario_restored(aihorde_stack, forget_requests=True):
        yield aihorde_stack


def scenario_with(stack: LiveStack, **changes: Any) -> dict[str, Any]:
    """The default aihorde scenario with top-level ``changes`` and, under ``worker``, changes to its one worker."""
    scenario: dict[str, Any] = copy.deepcopy(stack.default_scenario)  # type: ignore[attr-defined]
    worker = changes.pop("worker", {})
    scenario["workers"][0].update(worker)
    scenario.update(changes)
    return scenario


def paced() -> None:
    """Wait out the simulated limiter's one-second window before a submit (2 per second per address)."""
    time.sleep(1.1)


def sdk(stack: LiveStack, key: str = "0000000000") -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key=key, max_retries=0, timeout=30)


def raw_chat(stack: LiveStack, key: str = "0000000000", **options: Any) -> httpx.Response:
    """The front's raw answer (status, headers, body) to a chat completion, raising nothing for an error status."""
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Harbours?"}], **options}
    try:
        return sdk(stack, key).chat.completions.with_raw_response.create(**body).http_response
    except openai.APIStatusError as exc:
        return exc.response


def text_submits(stack: LiveStack) -> list[dict[str, Any]]:
    return [entry for entry in stack.native_requests() if entry["api"] == "text"]


def test_a_model_no_worker_serves_is_503_no_eligible_worker_at_once_without_a_submit(stack: LiveStack) -> None:
    """ref: model-availability.1, model-availability.2"""
    answer = raw_chat(stack, model="koboldcpp/Nobody-Serves-This", max_tokens=20)
    assert answer.status_code == 503
    assert answer.json() == {
        "error": {
            "message": "No worker is currently serving the model 'koboldcpp/Nobody-Serves-This'. Retry later. "
            "GET /v1/models lists the models served now.",
            "type": "api_error",
            "param": None,
            "code": "no_eligible_worker",
        }
    }
    assert (answer.headers.get("retry-after"), answer.headers.get("x-should-retry")) == ("30", "false")
    assert text_submits(stack) == []


def test_a_legacy_completion_for_a_model_no_worker_serves_is_503_too(stack: LiveStack) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        sdk(stack).completions.create(model="koboldcpp/Nobody-Serves-This", prompt="Harbours?", max_tokens=20)
    assert refused.value.status_code == 503
    assert refused.value.code == "no_eligible_worker"
    assert text_submits(stack) == []


def test_max_tokens_above_the_servers_4096_is_refused_before_submit(stack: LiveStack) -> None:
    answer = raw_chat(stack, max_tokens=5000)
    assert answer.status_code == 400
    assert answer.json()["error"] == MAX_TOKENS_5000_ON_TEXT_API
    assert "retry-after" not in answer.headers
    assert text_submits(stack) == []


def test_a_bad_key_is_401_without_the_limiters_retry_after(stack: LiveStack) -> None:
    stack.put_scenario(scenario_with(stack, invalid_api_keys=["not-a-key-of-this-horde"]))
    paced()
    answer = raw_chat(stack, "not-a-key-of-this-horde", max_tokens=20)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "InvalidAPIKey"
    assert "retry-after" not in answer.headers
    assert answer.headers.get("x-should-retry") == "false"


def test_kudos_upfront_is_403_at_the_clients_limit_key_with_how_to_get_kudos(stack: LiveStack) -> None:
    refusal = {"status": 403, "rc": "KudosUpfront", "message": KUDOS_UPFRONT_MESSAGE, "retry_after": 1}
    stack.put_scenario(scenario_with(stack, submit_refusals=[refusal]))
    paced()
    answer = raw_chat(stack, "a-new-users-key", max_completion_tokens=700)
    assert answer.status_code == 403
    assert answer.json()["error"] == {
        "message": f"{KUDOS_UPFRONT_MESSAGE} The API key sent must already hold those kudos: register an account at "
        "the Horde (on the public AI Horde, https://aihorde.net/register) and send its API key as the bearer key; "
        "kudos are earned by running a worker or given by other users. Or ask for fewer tokens (a smaller "
        "'max_completion_tokens').",
        "type": "permission_error",
        "param": "max_completion_tokens",
        "code": "KudosUpfront",
    }
    assert "retry-after" not in answer.headers
    assert answer.headers.get("x-should-retry") == "false"
    # 700, lowered before submit to 512 (the free ceiling of an idle Horde), is sent with allow_downgrade false; the
    # ceiling the 403 names (256) is submitted once with allow_downgrade true, and that submit's refusal (scripted:
    # the real Horde lowers instead, unless it disables the downgrade) is the answer
    tried = [
        (entry["status"], entry["payload"]["params"]["max_length"], entry["payload"]["allow_downgrade"])
        for entry in stack.native_submits()[-2:]
    ]
    assert tried == [(403, 512, False), (403, 256, True)]


@pytest.mark.parametrize("state", ["censored", "csam"])
def test_a_censored_generation_finishes_with_content_filter(stack: LiveStack, state: str) -> None:
    stack.put_scenario(scenario_with(stack, worker={"text_state": state}))
    paced()
    completion = sdk(stack).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Harbours?"}], max_tokens=20
    )
    assert completion.choices[0].finish_reason == "content_filter"


def test_a_request_cancelled_at_the_horde_ends_at_once_with_502_chat_request_cancelled(stack: LiveStack) -> None:
    """Someone cancels the front's request at the Horde by its id while the front waits: the aihorde cancel only
    empties it (``n = 0``, never done), and the front ends the wait at that status (502 ``ChatRequestCancelled``)
    instead of waiting into its 20 s timeout (408 ``ChatRequestTimeout``)."""
    stack.put_scenario(scenario_with(stack, worker={"time_to_first_token_seconds": 15}))
    paced()
    answers: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: answers.append(raw_chat(stack, max_tokens=20)))
    waiting.start()
    deadline = time.monotonic() + 10
    processing: list[dict[str, Any]] = []
    while not processing and time.monotonic() < deadline:
        processing = [entry for entry in text_submits(stack) if entry["state"] == "processing"]
        time.sleep(0.1)
    assert len(processing) == 1, text_submits(stack)
    request_id = processing[0]["id"]
    httpx.delete(f"{stack.horde_url}/v2/generate/text/status/{request_id}", timeout=5).raise_for_status()
    waiting.join(timeout=60)
    [answer] = answers
    assert answer.status_code == 502
    assert answer.json()["error"] == {
        "message": "The Horde cancelled this request before any worker finished it (its status reads nothing "
        "waiting, processing or finished): someone cancelled it with its id, or the Horde dropped it. Send it again "
        "to start a new request.",
        "type": "api_error",
        "param": None,
        "code": "ChatRequestCancelled",
        "metadata": {"request_id": request_id},
    }
    assert answer.headers.get("x-should-retry") == "false"
