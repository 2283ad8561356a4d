"""Waiting on a volunteer network, end to end: every availability, queue, timeout and refusal path.

Reference sections: No eligible worker (Model availability, Declaration gaps, Size limit gaps, Native admission
refusals), Fail-fast admission, Queue position refresh, Stream errors, Completion without a generation, Cancel
outcomes, Error attributes. A real devhorde serves :data:`AVAILABILITY_SCENARIO` (or a variant); the front runs under
uvicorn with the short settings of ``tests.conftest.FAST_FRONT_ENV`` (grace 1.5 s, recheck 0.2 s, budgets 20 s), or
its own settings where a test needs others. Clients are the official ``openai`` SDK; raw ``httpx`` reads the SSE
error events and headers. Each test marks its prompt with a unique token so it can find its own native requests in
``GET /_devhorde/requests``. Waiting is bounded polling; no assertion depends on timing.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from chat.errors import NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS
from tests.conftest import LiveStack, Process, free_port, start_devhorde, start_front
from tests.polling import eventually

pytestmark = pytest.mark.integration

STRICT = "prompt_overflow_refused"
FAST = {"time_to_first_token_seconds": 0.01, "tokens_per_second": 2000, "post_interval_seconds": 0.01}
STUCK = {"time_to_first_token_seconds": 600, "tokens_per_second": 1, "post_interval_seconds": 1}
"""A worker that takes a job and never posts: its one thread stays busy until the job is cancelled."""
FIXED_REPLY = "The tide is high."
GRACE_SECONDS = 1.5
BUDGET_SECONDS = 20
OFFLINE_MESSAGE = "No worker is currently serving the model 'avail/offline-9b'. Retry later."
RETRY_AFTER_30 = {"Retry-After": "30", "x-should-retry": "false"}

AVAILABILITY_SCENARIO: dict[str, Any] = {
    "name": "availability",
    "description": "One model per availability path (tests/integration/test_availability.py).",
    "known_models": ["avail/offline-9b"],
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "plain-1",
            "model": "avail/plain-2b",
            "features": [STRICT],
            "threads": 8,
            "max_length": 1024,
            "max_context_length": 8192,
            "reply_style": "fixed",
            "fixed_reply": FIXED_REPLY,
            **FAST,
        },
        # Tools without the tool_choice_enforced guarantee.
        {"name": "tools-1", "model": "avail/tools-7b", "features": ["tools", STRICT], "threads": 4, **FAST},
        # Untrusted: a request with horde.trusted_workers has no candidate (is_possible false, no known cause).
        {
            "name": "untrusted-1",
            "model": "avail/untrusted-2b",
            "trusted": False,
            "features": [STRICT],
            "max_context_length": 16384,
            **FAST,
        },
        # One stuck thread each: a first request holds it, the next one queues.
        {"name": "slow-1", "model": "avail/slow-2b", "features": [STRICT], "threads": 1, **STUCK},
        {
            "name": "shrink-1",
            "model": "avail/shrink-2b",
            "features": [STRICT],
            "threads": 1,
            "max_length": 1024,
            **STUCK,
        },
        {"name": "vanish-1", "model": "avail/vanish-2b", "features": [STRICT], "threads": 1, **STUCK},
        {
            "name": "fault-1",
            "model": "avail/fault-2b",
            "features": [STRICT],
            "fault_reason": "generation_error",
            **FAST,
        },
        {
            "name": "overflow-1",
            "model": "avail/overflow-2b",
            "features": [STRICT],
            "fault_reason": "prompt_overflow",
            **FAST,
        },
        {"name": "ghost-1", "model": "avail/ghost-2b", "features": [STRICT], "done_without_generation": True, **FAST},
    ],
}


class RecordedRetries(openai.OpenAI):
    """The official client, retrying as it decides, but without sleeping: each retry's computed delay is kept in
    :attr:`retry_delays` and the wait itself is skipped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_delays: list[float] = []

    def _calculate_retry_timeout(self, remaining_retries: int, options: Any, response_headers: Any) -> float:
        self.retry_delays.append(super()._calculate_retry_timeout(remaining_retries, options, response_headers))
        return 0.0


def sdk(base_url: str, *, max_retries: int = 0) -> RecordedRetries:
    return RecordedRetries(base_url=base_url, api_key="0000000000", max_retries=max_retries, timeout=60)


def prompt(marker: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Tell me about tides. [{marker}]"}]


def new_marker() -> str:
    return uuid.uuid4().hex[:12]


def marked_requests(stack: LiveStack, marker: str) -> list[dict[str, Any]]:
    """The devhorde's requests whose messages carry ``marker``, in submit order."""
    return [request for request in stack.native_requests() if marker in json.dumps(request["payload"]["messages"])]


def all_cancelled(stack: LiveStack, marker: str, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` marked requests exist and each was cancelled by a DELETE; return them."""

    def probe() -> list[dict[str, Any]] | None:
        found = marked_requests(stack, marker)
        return (
            found if len(found) == count and all(r["cancelled"] and r["state"] == "cancelled" for r in found) else None
        )

    return eventually(probe, what=f"{count} cancelled request(s) marked {marker}")


def status_error(call: Callable[[], Any]) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def headers_of(error: openai.APIStatusError) -> dict[str, str | None]:
    return {name: error.response.headers.get(name) for name in ("Retry-After", "x-should-retry")}


def sse_events(response: httpx.Response) -> list[str]:
    """The ``data:`` payloads of an SSE response, in order (comments dropped)."""
    return [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]


def stream_raw(base_url: str, body: dict[str, Any]) -> httpx.Response:
    """POST a streamed request with httpx and read the whole response."""
    return httpx.post(
        f"{base_url}/chat/completions",
        json={**body, "stream": True},
        headers={"Authorization": "Bearer 0000000000"},
        timeout=60,
    )


def native_submit(stack: LiveStack, model: str, marker: str, **extra: Any) -> str:
    """Submit straight to the devhorde (a request that holds a worker's thread); return its id."""
    response = httpx.post(
        f"{stack.horde_url}/v2/generate/chat/async",
        headers={"apikey": "0000000000"},
        json={"messages": prompt(marker), "models": [model], **extra},
        timeout=5,
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def native_cancel(stack: LiveStack, request_id: str) -> None:
    httpx.delete(f"{stack.horde_url}/v2/generate/chat/status/{request_id}", headers={"apikey": "0000000000"}, timeout=5)


def request_state(stack: LiveStack, request_id: str) -> dict[str, Any] | None:
    return next((r for r in stack.native_requests() if r["id"] == request_id), None)


@pytest.fixture
def avail(stack: LiveStack) -> Iterator[LiveStack]:
    """The live stack serving :data:`AVAILABILITY_SCENARIO`; requests still holding a stuck worker are cancelled."""
    stack.put_scenario(AVAILABILITY_SCENARIO)
    yield stack
    for request in stack.native_requests():
        if request["state"] in ("waiting", "processing") and any(m.startswith("avail/") for m in request["models"]):
            native_cancel(stack, request["id"])


def with_scenario(stack: LiveStack, **changes: Any) -> None:
    scenario = copy.deepcopy(AVAILABILITY_SCENARIO)
    scenario.update(changes)
    stack.put_scenario(scenario)


def hold_the_thread(stack: LiveStack, model: str) -> str:
    """Occupy the one thread of a stuck worker; return the holding request's id once it is processing."""
    holder = native_submit(stack, model, new_marker(), params={"max_length": 64})
    eventually(
        lambda: (request_state(stack, holder) or {}).get("state") == "processing",
        what=f"the holder on {model} to be processing",
    )
    return holder


# ---------------------------------------------------------------------------------------------------------------------
# Model availability


def test_a_model_without_an_online_worker_is_503_at_once(avail: LiveStack) -> None:
    """ref: model-availability.1, model-availability.2, model-availability.3, model-availability.4,
    model-availability.5, native-admission-refusals.5, error-attributes.1"""
    for stream in (False, True):
        error = status_error(
            lambda: sdk(avail.openai_base_url).chat.completions.create(
                model="avail/offline-9b", messages=prompt(new_marker()), stream=stream
            )
        )
        assert error.status_code == 503
        assert error.body == {
            "message": OFFLINE_MESSAGE,
            "type": "api_error",
            "param": None,
            "code": "no_eligible_worker",
        }
        assert headers_of(error) == RETRY_AFTER_30
        assert error.response.headers["content-type"] == "application/json"


def marked_submits(stack: LiveStack, marker: str) -> list[dict[str, Any]]:
    """Every submit the devhorde received whose messages carry ``marker``, accepted or refused, in arrival order."""
    return [submit for submit in stack.native_submits() if marker in json.dumps(submit["payload"].get("messages"))]


NO_RETRY_SUBMIT_BUDGET_SECONDS = NO_ELIGIBLE_WORKER_RETRY_AFTER_SECONDS / 2
"""A refusal at submit answers within this (15 s): one SDK retry alone would wait ``Retry-After: 30`` first, so half of
it tells the two apart with room for a busy machine (the answer itself takes milliseconds)."""


@pytest.mark.parametrize(
    "refusal",
    [
        {"status": 503, "rc": "NoEligibleWorker", "message": OFFLINE_MESSAGE},
        {"status": 403, "rc": "NoEligibleWorker", "message": "No worker can take this request for kudos now."},
    ],
    ids=["503", "403-without-reason"],
)
def test_a_default_sdk_client_gets_the_submit_refusal_at_once_and_submits_once(
    avail: LiveStack, refusal: dict[str, Any]
) -> None:
    """The official SDK with its default ``max_retries`` (2) raises the 503 ``no_eligible_worker`` at once: the
    front's ``x-should-retry: false`` decides alone, so the SDK neither waits ``Retry-After: 30`` nor submits again.

    ref: native-admission-refusals.2, native-admission-refusals.5, model-availability.2"""
    marker = new_marker()
    with_scenario(avail, submit_refusals=[{**refusal, "models": ["avail/plain-2b"]}])
    client = openai.OpenAI(base_url=avail.openai_base_url, api_key="0000000000", timeout=60)
    assert client.max_retries == 2  # the SDK's default, untouched
    started = time.monotonic()
    error = status_error(lambda: client.chat.completions.create(model="avail/plain-2b", messages=prompt(marker)))
    elapsed = time.monotonic() - started
    assert (error.status_code, error.body["code"], error.body["message"]) == (
        503,
        "no_eligible_worker",
        refusal["message"],
    )
    assert headers_of(error) == RETRY_AFTER_30
    assert elapsed < NO_RETRY_SUBMIT_BUDGET_SECONDS, elapsed
    assert [(s["status"], s["rc"]) for s in marked_submits(avail, marker)] == [(refusal["status"], "NoEligibleWorker")]
    assert marked_requests(avail, marker) == []  # the Horde created nothing


def test_a_default_sdk_client_gets_the_model_without_a_worker_at_once(avail: LiveStack) -> None:
    """A model no online worker serves, refused by the Horde itself (not a scripted refusal): one submit, no retry.

    ref: model-availability.1, model-availability.2, native-admission-refusals.5"""
    marker = new_marker()
    client = openai.OpenAI(base_url=avail.openai_base_url, api_key="0000000000", timeout=60)
    started = time.monotonic()
    error = status_error(lambda: client.chat.completions.create(model="avail/offline-9b", messages=prompt(marker)))
    assert time.monotonic() - started < NO_RETRY_SUBMIT_BUDGET_SECONDS
    assert (error.status_code, error.body["message"]) == (503, OFFLINE_MESSAGE)
    assert headers_of(error) == RETRY_AFTER_30
    assert len(marked_submits(avail, marker)) == 1


def test_impossible_after_submit_waits_the_grace_then_503(avail: LiveStack) -> None:
    """ref: model-availability.6, model-availability.7, model-availability.8, native-admission-refusals.5,
    error-attributes.1"""
    marker = new_marker()
    client = sdk(avail.openai_base_url)
    error = status_error(
        lambda: client.chat.completions.create(
            model="avail/untrusted-2b", messages=prompt(marker), extra_body={"horde": {"trusted_workers": True}}
        )
    )
    [native] = all_cancelled(avail, marker, 1)
    assert error.status_code == 503
    assert error.body == {
        "message": f"No online worker could serve this request for {GRACE_SECONDS:g} seconds: the workers serving the "
        "model went offline or are busy with other work. The request was cancelled.",
        "type": "api_error",
        "param": None,
        "code": "no_eligible_worker",
        "metadata": {"request_id": native["id"]},
    }
    assert headers_of(error) == RETRY_AFTER_30


def test_a_default_sdk_client_does_not_retry_the_grace_refusal(avail: LiveStack) -> None:
    """After the grace the 503 carries ``x-should-retry: false``: the SDK (default ``max_retries``) raises it after one
    grace, not three, and the Horde saw one submit, cancelled.

    ref: native-admission-refusals.5, model-availability.8"""
    marker = new_marker()
    client = sdk(avail.openai_base_url, max_retries=2)
    error = status_error(
        lambda: client.chat.completions.create(
            model="avail/untrusted-2b", messages=prompt(marker), extra_body={"horde": {"trusted_workers": True}}
        )
    )
    assert (error.status_code, error.body["code"]) == (503, "no_eligible_worker")
    assert headers_of(error) == RETRY_AFTER_30
    assert client.retry_delays == []
    [native] = all_cancelled(avail, marker, 1)
    assert len(marked_submits(avail, marker)) == 1
    assert error.body["metadata"] == {"request_id": native["id"]}


def test_a_worker_going_offline_mid_stream_is_an_sse_error_after_the_grace(avail: LiveStack) -> None:
    """ref: model-availability.6, model-availability.8, stream-errors.2, stream-errors.3, buffered-stream-events.1"""
    marker = new_marker()
    hold_the_thread(avail, "avail/vanish-2b")
    result: dict[str, httpx.Response] = {}
    reader = threading.Thread(
        target=lambda: result.update(
            response=stream_raw(avail.openai_base_url, {"model": "avail/vanish-2b", "messages": prompt(marker)})
        )
    )
    reader.start()
    [queued] = eventually(lambda: marked_requests(avail, marker), what="the streamed request to be queued")
    assert queued["state"] == "waiting"
    httpx.post(f"{avail.devhorde_control}/workers/vanish-1", json={"online": False}, timeout=5).raise_for_status()
    reader.join(60)
    response = result["response"]
    assert response.status_code == 200
    assert "Retry-After" not in response.headers
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    [native] = all_cancelled(avail, marker, 1)
    assert error == {
        "message": f"No online worker could serve this request for {GRACE_SECONDS:g} seconds: the workers serving the "
        "model went offline or are busy with other work. The request was cancelled.",
        "type": "api_error",
        "param": None,
        "code": "no_eligible_worker",
        "metadata": {"request_id": native["id"], "retry_after": 30, "should_retry": False},
    }


def test_the_sdk_raises_the_stream_error_event(avail: LiveStack) -> None:
    """ref: stream-errors.2"""
    marker = new_marker()
    stream = sdk(avail.openai_base_url).chat.completions.create(
        model="avail/untrusted-2b",
        messages=prompt(marker),
        stream=True,
        extra_body={"horde": {"trusted_workers": True}},
    )
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert not isinstance(caught.value, openai.APIStatusError)  # the response was a 200 stream
    assert caught.value.code == "no_eligible_worker"
    assert caught.value.body["metadata"]["retry_after"] == 30
    assert caught.value.body["metadata"]["should_retry"] is False
    all_cancelled(avail, marker, 1)


# ---------------------------------------------------------------------------------------------------------------------
# Declaration gaps and size limit gaps


def test_a_declaration_gap_is_404_at_once_and_cancelled(avail: LiveStack) -> None:
    """ref: declaration-gaps.1, declaration-gaps.2, declaration-gaps.3, declaration-gaps.4, declaration-gaps.5,
    native-admission-refusals.4, stream-errors.1, error-attributes.1"""
    for stream in (False, True):
        marker = new_marker()
        client = sdk(avail.openai_base_url, max_retries=2)
        error = status_error(
            lambda: client.chat.completions.create(
                model="avail/plain-2b", messages=prompt(marker), reasoning_effort="low", stream=stream
            )
        )
        [native] = all_cancelled(avail, marker, 1)  # not retried: one native request
        assert client.retry_delays == []
        assert error.status_code == 404
        assert error.body == {
            "message": "No worker can serve this request: no online worker serving the model declares "
            "reasoning_effort. The request was cancelled.",
            "type": "not_found_error",
            "param": None,
            "code": "no_worker_supports_features",
            "metadata": {"request_id": native["id"]},
        }
        assert headers_of(error) == {"Retry-After": None, "x-should-retry": None}


def test_a_missing_guarantee_says_best_effort_does_not_require_it(avail: LiveStack) -> None:
    """ref: declaration-gaps.2"""
    marker = new_marker()
    tools = [{"type": "function", "function": {"name": "get_tide", "parameters": {"type": "object", "properties": {}}}}]
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/tools-7b", messages=prompt(marker), tools=tools, tool_choice="required"
        )
    )
    assert (error.status_code, error.body["code"]) == (404, "no_worker_supports_features")
    assert error.body["message"] == (
        "No worker can serve this request: no online worker serving the model declares tool_choice_enforced. "
        "tool_choice_enforced is a guarantee, and guarantees are not required under best_effort "
        '(horde.conformance: "best_effort"). The request was cancelled.'
    )
    all_cancelled(avail, marker, 1)
    # Under best_effort the same request is served.
    completion = sdk(avail.openai_base_url).chat.completions.create(
        model="avail/tools-7b",
        messages=prompt(new_marker()),
        tools=tools,
        tool_choice="required",
        extra_body={"horde": {"conformance": "best_effort"}},
    )
    assert completion.choices[0].finish_reason in ("tool_calls", "stop")


def test_a_context_length_over_every_worker_is_400_at_the_first_read(avail: LiveStack) -> None:
    """ref: size-limit-gaps.1, size-limit-gaps.4, size-limit-gaps.5, size-limit-gaps.6, stream-errors.1,
    native-admission-refusals.4"""
    for stream in (False, True):
        marker = new_marker()
        error = status_error(
            lambda: sdk(avail.openai_base_url).chat.completions.create(
                model="avail/plain-2b",
                messages=prompt(marker),
                stream=stream,
                extra_body={"horde": {"max_context_length": 100000}},
            )
        )
        [native] = all_cancelled(avail, marker, 1)
        assert error.status_code == 400
        assert error.body == {
            "message": "No worker eligible for this request currently declares a context length that high. The "
            "largest any online worker for the model declares now is 8192 tokens. The request was "
            "cancelled.",
            "type": "invalid_request_error",
            "param": "horde.max_context_length",
            "code": "no_worker_supports_limit",
            "metadata": {"request_id": native["id"]},
        }
        assert headers_of(error) == {"Retry-After": None, "x-should-retry": None}


def test_a_completion_limit_lowered_after_submit_is_400(avail: LiveStack) -> None:
    """ref: size-limit-gaps.2, size-limit-gaps.3, size-limit-gaps.4, size-limit-gaps.5, size-limit-gaps.6,
    size-limit-gaps.8"""
    marker = new_marker()
    hold_the_thread(avail, "avail/shrink-2b")
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            sdk(avail.openai_base_url).chat.completions.create(
                model="avail/shrink-2b", messages=prompt(marker), max_tokens=1024
            )
        except openai.APIStatusError as error:
            outcome["error"] = error

    caller = threading.Thread(target=call)
    caller.start()
    [queued] = eventually(lambda: marked_requests(avail, marker), what="the request to be queued")
    assert (queued["state"], queued["max_length"]) == ("waiting", 1024)
    httpx.post(f"{avail.devhorde_control}/workers/shrink-1", json={"max_length": 512}, timeout=5).raise_for_status()
    caller.join(60)
    error = outcome["error"]
    [native] = all_cancelled(avail, marker, 1)
    assert error.status_code == 400
    assert error.body == {
        "message": "No worker eligible for this request currently declares a completion limit that high. The "
        "largest any online worker for the model declares now is 512 tokens. The request was cancelled.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "no_worker_supports_limit",
        "metadata": {"request_id": native["id"]},
    }


def test_a_size_limit_under_models_names_the_listed_models(avail: LiveStack) -> None:
    """ref: size-limit-gaps.7"""
    marker = new_marker()
    response = httpx.post(
        f"{avail.openai_base_url}/chat/completions",
        timeout=60,
        headers={"Authorization": "Bearer 0000000000"},
        json={
            "models": ["avail/plain-2b", "avail/untrusted-2b"],
            "messages": prompt(marker),
            "horde": {"max_context_length": 100000},
        },
    )
    [native] = all_cancelled(avail, marker, 1)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "No worker eligible for this request currently declares a context length that high. The largest "
            "any online worker for the listed models declares now is 16384 tokens. The request was cancelled.",
            "type": "invalid_request_error",
            "param": "horde.max_context_length",
            "code": "no_worker_supports_limit",
            "metadata": {"request_id": native["id"]},
        }
    }


# ---------------------------------------------------------------------------------------------------------------------
# Native admission refusals (403 NoEligibleWorker)


@pytest.mark.parametrize("stream", [False, True])
def test_a_native_403_with_a_declaration_gap_is_404_without_a_request(avail: LiveStack, stream: bool) -> None:
    """ref: native-admission-refusals.1, native-admission-refusals.2, native-admission-refusals.3,
    native-admission-refusals.4, native-admission-refusals.6"""
    marker = new_marker()
    with_scenario(
        avail,
        submit_refusals=[
            {"status": 403, "rc": "NoEligibleWorker", "message": "Refused for kudos.", "impossible_reason": "auto"}
        ],
    )
    client = sdk(avail.openai_base_url, max_retries=2)
    error = status_error(
        lambda: client.chat.completions.create(
            model="avail/plain-2b", messages=prompt(marker), reasoning_effort="low", stream=stream
        )
    )
    assert error.status_code == 404
    assert error.body == {
        "message": "No worker can serve this request: no online worker serving the model declares reasoning_effort.",
        "type": "not_found_error",
        "param": None,
        "code": "no_worker_supports_features",
    }
    assert headers_of(error) == {"Retry-After": None, "x-should-retry": None}
    assert client.retry_delays == []
    assert marked_requests(avail, marker) == []


def test_a_native_403_with_a_size_limit_is_400_with_the_model_list_value(avail: LiveStack) -> None:
    """ref: native-admission-refusals.2, native-admission-refusals.3, size-limit-gaps.6"""
    with_scenario(
        avail,
        submit_refusals=[
            {
                "status": 403,
                "rc": "NoEligibleWorker",
                "message": "Refused for kudos.",
                "impossible_reason": {
                    "kind": "declaration_gap",
                    "missing_declarations": [],
                    "exceeded_limits": ["max_length"],
                },
            }
        ],
    )
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/plain-2b", messages=prompt(new_marker()), max_tokens=1024
        )
    )
    assert error.status_code == 400
    assert error.body == {
        "message": "No worker eligible for this request currently declares a completion limit that high. The "
        "largest any online worker for the model declares now is 1024 tokens.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "no_worker_supports_limit",
    }


def test_a_native_403_without_a_reason_is_503_with_the_horde_message(avail: LiveStack) -> None:
    """ref: native-admission-refusals.2, native-admission-refusals.5"""
    with_scenario(
        avail,
        submit_refusals=[
            {"status": 403, "rc": "NoEligibleWorker", "message": "No worker can take this request for kudos now."}
        ],
    )
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/plain-2b", messages=prompt(new_marker())
        )
    )
    assert error.status_code == 503
    assert error.body == {
        "message": "No worker can take this request for kudos now.",
        "type": "api_error",
        "param": None,
        "code": "no_eligible_worker",
    }
    assert headers_of(error) == RETRY_AFTER_30


# ---------------------------------------------------------------------------------------------------------------------
# Fail-fast admission and queue position refresh

FAIL_FAST = {"horde": {"availability_mode": "fail_fast"}}


@pytest.mark.parametrize("stream", [False, True])
def test_fail_fast_without_eligible_threads_is_queue_unavailable(avail: LiveStack, stream: bool) -> None:
    """ref: fail-fast-admission.1, fail-fast-admission.3, fail-fast-admission.4, fail-fast-admission.5,
    queue-position-refresh.6, stream-errors.1, error-attributes.1, error-attributes.2"""
    marker = new_marker()
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/untrusted-2b",
            messages=prompt(marker),
            stream=stream,
            extra_body={"horde": {"availability_mode": "fail_fast", "trusted_workers": True}},
        )
    )
    [native] = all_cancelled(avail, marker, 1)
    assert error.status_code == 503
    assert (error.body["type"], error.body["code"], error.body["param"]) == (
        "api_error",
        "queue_unavailable",
        "horde.availability_mode",
    )
    assert re.fullmatch(
        r"No eligible worker thread is online for this request \(0 eligible worker threads, an estimated wait of 0 "
        r"seconds, (1[0-9]|20) seconds of budget left\) under horde.availability_mode \"fail_fast\"\. The request "
        r"was cancelled\.",
        error.body["message"],
    )
    metadata = error.body["metadata"]
    assert {key: metadata[key] for key in ("request_id", "reason", "eligible_worker_threads", "wait_time")} == {
        "request_id": native["id"],
        "reason": "no_eligible_threads",
        "eligible_worker_threads": 0,
        "wait_time": 0,
    }
    assert 0 < metadata["remaining_budget_seconds"] <= BUDGET_SECONDS
    assert headers_of(error) == {"Retry-After": "60", "x-should-retry": None}


@pytest.mark.parametrize("stream", [False, True])
def test_fail_fast_behind_a_slow_queue_is_wait_exceeds_budget(avail: LiveStack, stream: bool) -> None:
    """ref: fail-fast-admission.1, fail-fast-admission.2, fail-fast-admission.3, fail-fast-admission.5,
    queue-position-refresh.3, queue-position-refresh.8, stream-errors.1"""
    marker = new_marker()
    hold_the_thread(avail, "avail/slow-2b")
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/slow-2b", messages=prompt(marker), max_tokens=40, stream=stream, extra_body=FAIL_FAST
        )
    )
    all_cancelled(avail, marker, 1)
    assert (error.status_code, error.body["code"], error.body["param"]) == (
        503,
        "queue_unavailable",
        "horde.availability_mode",
    )
    assert error.body["metadata"]["reason"] == "wait_exceeds_budget"
    assert (error.body["metadata"]["eligible_worker_threads"], error.body["metadata"]["wait_time"]) == (1, 40)
    assert re.fullmatch(
        r"The estimated queue wait exceeds this request's remaining time budget \(1 eligible worker thread, an "
        r"estimated wait of 40 seconds, (1[0-9]|20) seconds of budget left\) under horde.availability_mode "
        r"\"fail_fast\"\. The request was cancelled\.",
        error.body["message"],
    )
    assert headers_of(error) == {"Retry-After": "40", "x-should-retry": None}


def test_fail_fast_retry_after_is_capped(avail: LiveStack) -> None:
    """ref: fail-fast-admission.3"""
    hold_the_thread(avail, "avail/slow-2b")
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/slow-2b", messages=prompt(new_marker()), max_tokens=500, extra_body=FAIL_FAST
        )
    )
    assert error.body["metadata"]["wait_time"] == 500
    assert headers_of(error) == {"Retry-After": "60", "x-should-retry": None}


def test_fail_fast_rereads_until_the_queue_position_is_refreshed(avail: LiveStack) -> None:
    """ref: queue-position-refresh.1, queue-position-refresh.2, queue-position-refresh.3, queue-position-refresh.4"""
    with_scenario(avail, queue_position_delay_seconds=1)
    hold_the_thread(avail, "avail/slow-2b")
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/slow-2b", messages=prompt(new_marker()), max_tokens=40, extra_body=FAIL_FAST
        )
    )
    # The first reads said queue_position 0 and wait_time 0; the refusal comes from a refreshed read.
    assert (error.body["code"], error.body["metadata"]["wait_time"]) == ("queue_unavailable", 40)


def test_fail_fast_uses_the_latest_reading_at_the_positioned_deadline(avail: LiveStack) -> None:
    """ref: queue-position-refresh.4, queue-position-refresh.5"""
    marker = new_marker()
    with_scenario(avail, queue_position_delay_seconds=30)
    hold_the_thread(avail, "avail/slow-2b")
    with httpx.stream(
        "POST",
        f"{avail.openai_base_url}/chat/completions",
        timeout=60,
        headers={"Authorization": "Bearer 0000000000"},
        json={"model": "avail/slow-2b", "messages": prompt(marker), "max_tokens": 40, "stream": True, **FAIL_FAST},
    ) as response:
        # Admitted on the unrefreshed reading (wait 0): the stream opened.
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
    all_cancelled(avail, marker, 1)  # the client left; the front cancelled


def test_fail_fast_admits_a_request_that_fits(avail: LiveStack) -> None:
    completion = sdk(avail.openai_base_url).chat.completions.create(
        model="avail/plain-2b", messages=prompt(new_marker()), extra_body=FAIL_FAST
    )
    assert completion.choices[0].message.content == FIXED_REPLY


def test_fail_fast_a_declaration_gap_takes_precedence(avail: LiveStack) -> None:
    """ref: fail-fast-admission.6"""
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/plain-2b", messages=prompt(new_marker()), reasoning_effort="low", extra_body=FAIL_FAST
        )
    )
    assert (error.status_code, error.body["code"]) == (404, "no_worker_supports_features")


@pytest.mark.parametrize("stream", [False, True])
def test_fail_fast_on_an_older_horde_never_refuses_on_threads(avail: LiveStack, stream: bool) -> None:
    """ref: fail-fast-admission.7, queue-position-refresh.7, stream-errors.2"""
    marker = new_marker()
    with_scenario(avail, older_horde=True)
    body = {
        "model": "avail/untrusted-2b",
        "messages": prompt(marker),
        "horde": {"availability_mode": "fail_fast", "trusted_workers": True},
    }
    if stream:
        response = stream_raw(avail.openai_base_url, body)
        assert response.status_code == 200  # threads unknown: admitted, then the grace applies
        error = json.loads(sse_events(response)[-2])["error"]
        assert (error["code"], error["metadata"]["retry_after"]) == ("no_eligible_worker", 30)
    else:
        error = status_error(
            lambda: sdk(avail.openai_base_url).chat.completions.create(
                model=body["model"], messages=body["messages"], extra_body={"horde": body["horde"]}
            )
        )
        assert (error.status_code, error.body["code"]) == (503, "no_eligible_worker")
        assert headers_of(error) == RETRY_AFTER_30
    all_cancelled(avail, marker, 1)


# ---------------------------------------------------------------------------------------------------------------------
# Rate limits, faults, timeouts, an unreachable Horde


@pytest.mark.parametrize(
    ("refusal", "code", "retry_after"),
    [
        ({"status": 429, "message": "Too many requests.", "retry_after": 7}, "rate_limit_exceeded", "7"),
        ({"status": 429, "rc": "TooManyPrompts", "message": "Too many prompts."}, "TooManyPrompts", None),
    ],
)
def test_horde_rate_limits_at_submit(avail: LiveStack, refusal: dict, code: str, retry_after: str | None) -> None:
    """ref: error-attributes.1"""
    with_scenario(avail, submit_refusals=[refusal])
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/plain-2b", messages=prompt(new_marker())
        )
    )
    assert error.status_code == 429
    assert error.body == {"message": refusal["message"], "type": "rate_limit_error", "param": None, "code": code}
    assert headers_of(error) == {"Retry-After": retry_after, "x-should-retry": None}


def test_a_faulted_request_is_502_and_not_cancelled(avail: LiveStack) -> None:
    """ref: error-attributes.1"""
    marker = new_marker()
    for stream in (False, True):
        if stream:
            stream_iter = sdk(avail.openai_base_url).chat.completions.create(
                model="avail/fault-2b", messages=prompt(marker), stream=True
            )
            with pytest.raises(openai.APIError) as caught:
                list(stream_iter)
            assert caught.value.code == "ChatRequestFaulted"
        else:
            error = status_error(
                lambda: sdk(avail.openai_base_url).chat.completions.create(
                    model="avail/fault-2b", messages=prompt(marker)
                )
            )
            assert error.status_code == 502
            natives = eventually(lambda: marked_requests(avail, marker), what="the faulted request")
            assert error.body == {
                "message": "The worker faulted the request (generation_error).",
                "type": "api_error",
                "param": None,
                "code": "ChatRequestFaulted",
                "metadata": {"request_id": natives[0]["id"], "fault_reason": "generation_error"},
            }
    natives = marked_requests(avail, marker)
    assert [(n["state"], n["cancel_requests"]) for n in natives] == [("faulted", 0), ("faulted", 0)]


@pytest.mark.parametrize(
    ("model", "fault_reason", "should_retry", "submits"),
    [("avail/overflow-2b", "prompt_overflow", "false", 1), ("avail/fault-2b", "generation_error", None, 3)],
    ids=["prompt_overflow", "generation_error"],
)
def test_a_default_sdk_client_retries_a_fault_only_when_a_retry_can_pass(
    avail: LiveStack, model: str, fault_reason: str, should_retry: str | None, submits: int
) -> None:
    """A 502 ``ChatRequestFaulted`` whose fault is ``prompt_overflow`` carries ``x-should-retry: false`` (the same
    prompt overflows again), so the official SDK with its default ``max_retries`` (2) raises it after one submit; any
    other fault carries no ``x-should-retry``, and the SDK's default (retry a 5xx) applies: three submits.

    ref: error-attributes.1"""
    marker = new_marker()
    client = sdk(avail.openai_base_url, max_retries=2)
    error = status_error(lambda: client.chat.completions.create(model=model, messages=prompt(marker)))
    assert (error.status_code, error.body["code"], error.body["message"]) == (
        502,
        "ChatRequestFaulted",
        f"The worker faulted the request ({fault_reason}).",
    )
    assert error.body["metadata"]["fault_reason"] == fault_reason
    assert headers_of(error) == {"Retry-After": None, "x-should-retry": should_retry}
    assert len(client.retry_delays) == submits - 1
    assert [submit["status"] for submit in marked_submits(avail, marker)] == [202] * submits


def test_done_without_a_generation_is_502_after_the_recheck(avail: LiveStack) -> None:
    """ref: completion-without-a-generation.1, completion-without-a-generation.2,
    completion-without-a-generation.3, stream-errors.2"""
    marker = new_marker()
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(model="avail/ghost-2b", messages=prompt(marker))
    )
    [native] = eventually(lambda: marked_requests(avail, marker), what="the request")
    assert error.status_code == 502
    assert error.body == {
        "message": "The Horde finished the request without a generation. The request was cancelled.",
        "type": "api_error",
        "param": None,
        "code": "ChatRequestNoGeneration",
        "metadata": {"request_id": native["id"]},
    }
    eventually(
        lambda: (request_state(avail, native["id"]) or {}).get("cancel_requests", 0) >= 1, what="the front's cancel"
    )
    stream_iter = sdk(avail.openai_base_url).chat.completions.create(
        model="avail/ghost-2b", messages=prompt(new_marker()), stream=True
    )
    with pytest.raises(openai.APIError) as caught:
        list(stream_iter)
    assert caught.value.code == "ChatRequestNoGeneration"


def test_a_horde_5xx_at_submit_is_horde_unavailable(avail: LiveStack) -> None:
    """ref: error-attributes.1"""
    with_scenario(avail, submit_refusals=[{"status": 500, "message": "Internal error."}])
    error = status_error(
        lambda: sdk(avail.openai_base_url).chat.completions.create(
            model="avail/plain-2b", messages=prompt(new_marker())
        )
    )
    assert (error.status_code, error.body["code"], error.body["type"]) == (502, "HordeUnavailable", "api_error")
    assert error.body["message"] == "The Horde answered HTTP 500 Internal Server Error without an error code."


@pytest.fixture(scope="module")
def short_budget_front(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A front on the session devhorde with 2-second budgets. Yields its /v1 URL."""
    process: Process
    process, base = start_front(
        tmp_path_factory.mktemp("short-budget"),
        live_stack.horde_url,
        env={"HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": "2", "HORDE_OAI_STREAM_TIMEOUT_SECONDS": "2"},
    )
    try:
        yield f"{base}/v1"
    finally:
        process.stop()


def test_the_budget_ends_with_408_and_a_cancel(avail: LiveStack, short_budget_front: str) -> None:
    """The 408 carries ``x-should-retry: false`` (the request already waited its whole budget), so the official SDK
    with its default ``max_retries`` (2) raises it after one submit instead of tripling the wait; streamed, the SSE
    error's ``metadata.should_retry`` says the same.

    ref: error-attributes.1, stream-errors.2"""
    marker = new_marker()
    client = sdk(short_budget_front, max_retries=2)
    error = status_error(lambda: client.chat.completions.create(model="avail/slow-2b", messages=prompt(marker)))
    [native] = all_cancelled(avail, marker, 1)
    assert error.status_code == 408
    assert error.body == {
        "message": "No worker finished the request within 2 seconds. The request was cancelled.",
        "type": "timeout_error",
        "param": None,
        "code": "ChatRequestTimeout",
        "metadata": {"request_id": native["id"]},
    }
    assert headers_of(error) == {"Retry-After": None, "x-should-retry": "false"}
    assert client.retry_delays == []
    assert len(marked_submits(avail, marker)) == 1
    # Streamed: the headers went out at the first read, so the timeout is the SSE error event.
    marker = new_marker()
    response = stream_raw(short_budget_front, {"model": "avail/slow-2b", "messages": prompt(marker)})
    assert response.status_code == 200
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    [native] = all_cancelled(avail, marker, 1)
    assert json.loads(events[-2])["error"] == {
        "message": "No worker finished the request within 2 seconds. The request was cancelled.",
        "type": "timeout_error",
        "param": None,
        "code": "ChatRequestTimeout",
        "metadata": {"request_id": native["id"], "should_retry": False},
    }


@pytest.fixture(scope="module")
def unreachable_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A front whose HORDE_URL is a closed 127.0.0.1 port. Yields its /v1 URL."""
    process: Process
    process, base = start_front(
        tmp_path_factory.mktemp("unreachable"), f"http://127.0.0.1:{free_port()}/api", redis=False
    )
    try:
        yield f"{base}/v1"
    finally:
        process.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_an_unreachable_horde_is_502_horde_unavailable(unreachable_front: str, stream: bool) -> None:
    """ref: error-attributes.1, stream-errors.1"""
    error = status_error(
        lambda: sdk(unreachable_front).chat.completions.create(
            model="avail/plain-2b", messages=prompt(new_marker()), stream=stream
        )
    )
    assert error.status_code == 502
    assert (error.body["type"], error.body["code"], error.body["param"]) == ("api_error", "HordeUnavailable", None)
    assert error.body["message"].startswith("The Horde could not be reached (ConnectError")
    assert "/v2/" not in error.body["message"] and "cancelled" not in error.body["message"]
    assert error.response.headers["content-type"] == "application/json"


# ---------------------------------------------------------------------------------------------------------------------
# Cancel outcomes: failed cancels are retried, and once more at shutdown


def test_a_failed_cancel_is_retried_until_the_horde_answers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ref: cancel-outcomes.2, error-attributes.1"""
    tmp = tmp_path_factory.mktemp("cancel-retry")
    devhorde, horde_url = start_devhorde(tmp, redis=False, scenario=None)
    port = int(horde_url.removesuffix("/api").rsplit(":", 1)[1])
    front, base = start_front(tmp, horde_url, redis=False)
    restarted: Process | None = None
    try:
        scenario = copy.deepcopy(AVAILABILITY_SCENARIO)
        httpx.put(f"{horde_url.removesuffix('/api')}/_devhorde/scenario", json=scenario, timeout=5).raise_for_status()
        with httpx.stream(
            "POST",
            f"{base}/v1/chat/completions",
            timeout=60,
            headers={"Authorization": "Bearer 0000000000"},
            json={"model": "avail/slow-2b", "messages": prompt(new_marker()), "stream": True},
        ) as stream:
            assert stream.status_code == 200
            devhorde.stop()  # reads now fail: HordeUnavailable, and the cancel fails too
            events = [line.removeprefix("data: ") for line in stream.iter_lines() if line.startswith("data: ")]
        error = json.loads(events[-2])["error"]
        assert error["code"] == "HordeUnavailable"
        request_id = error["metadata"]["request_id"]
        eventually(lambda: f"Cancel of chat request {request_id} ended: failed" in front.log(), what="a failed cancel")
        restarted = _start_devhorde_on(tmp, port)
        # The new devhorde does not know the request: the retried cancel reads 404.
        eventually(
            lambda: f"Cancel of chat request {request_id} ended: not_found" in front.log(), what="the retried cancel"
        )
    finally:
        front.stop()
        devhorde.stop()
        if restarted is not None:
            restarted.stop()


def test_shutdown_retries_a_failed_cancel_once_more(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ref: cancel-outcomes.2"""
    tmp = tmp_path_factory.mktemp("cancel-shutdown")
    devhorde, horde_url = start_devhorde(tmp, redis=False, scenario=None)
    port = int(horde_url.removesuffix("/api").rsplit(":", 1)[1])
    front, base = start_front(tmp, horde_url, redis=False, env={"HORDE_OAI_CANCEL_RETRY_SECONDS": "600"})
    restarted: Process | None = None
    try:
        httpx.put(
            f"{horde_url.removesuffix('/api')}/_devhorde/scenario", json=AVAILABILITY_SCENARIO, timeout=5
        ).raise_for_status()
        with httpx.stream(
            "POST",
            f"{base}/v1/chat/completions",
            timeout=60,
            headers={"Authorization": "Bearer 0000000000"},
            json={"model": "avail/slow-2b", "messages": prompt(new_marker()), "stream": True},
        ) as stream:
            assert stream.status_code == 200
            devhorde.stop()
            events = [line.removeprefix("data: ") for line in stream.iter_lines() if line.startswith("data: ")]
        request_id = json.loads(events[-2])["error"]["metadata"]["request_id"]
        eventually(lambda: f"Cancel of chat request {request_id} ended: failed" in front.log(), what="a failed cancel")
        restarted = _start_devhorde_on(tmp, port)
        front.popen.terminate()  # SIGTERM: uvicorn runs the lifespan shutdown
        front.popen.wait(30)
        log = front.log()
        assert log.count(f"Cancel of chat request {request_id} ended: failed") == 1  # no retry before shutdown
        assert f"Cancel of chat request {request_id} ended: not_found" in log  # the shutdown attempt
    finally:
        front.stop()
        devhorde.stop()
        if restarted is not None:
            restarted.stop()


def _start_devhorde_on(tmp: Any, port: int) -> Process:
    """Start a devhorde (no Redis, default scenario) on a given port."""
    import sys

    from tests.conftest import start_process, wait_http

    process = start_process(
        [sys.executable, "-m", "devhorde", "--host", "127.0.0.1", "--port", str(port)],
        {},
        tmp / f"devhorde-restarted-{port}.log",
    )
    wait_http(f"http://127.0.0.1:{port}/api/v2/status/heartbeat", process.popen)
    return process
