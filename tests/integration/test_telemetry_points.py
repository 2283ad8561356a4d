"""What the front's histograms and counters record per outcome, read from ``GET /metrics`` of a front under uvicorn
(reference: Metrics, Outcome class, Refusal attributes; issue 24, items 3 and 8).

The front (``HORDE_OAI_METRICS_ENDPOINT=true``, ``HORDE_OAI_LOG_JSON=true``, Redis for relayed streams) serves the
devhorde's :data:`SCENARIO`; each test scrapes ``/metrics`` before and after what it drives and compares the counts
of the series it names (``prometheus_client``'s parser), so the tests share one front.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LiveStack, Process, running_stack

pytestmark = pytest.mark.integration

API_KEY = "0000000000"
PACE = {"time_to_first_token_seconds": 0.05, "tokens_per_second": 40, "post_interval_seconds": 0.05}
SCENARIO: dict[str, Any] = {
    "name": "telemetry-points",
    "description": "Relayed, whole, faulting and slow replies (tests/integration/test_telemetry_points.py).",
    "queue_position_delay_seconds": 0,
    "workers": [
        {"name": "plain-1", "model": "points/plain-7b", "threads": 4, "reply_words": 12, **PACE},
        {"name": "silent-1", "model": "points/silent-7b", "threads": 4, "reply_words": 12, "posts_progress": False},
        {
            "name": "json-1",
            "model": "points/json-7b",
            "threads": 4,
            "reply_words": 12,
            "features": ["json_object", "prompt_overflow_refused"],
            **PACE,
        },
        {"name": "faulty-1", "model": "points/faulty-7b", "threads": 4, "fault_reason": "generation_error"},
        {"name": "slow-1", "model": "points/slow-7b", "threads": 4, "reply_words": 4, "time_to_first_token_seconds": 4},
    ],
}
FRONT_ENV = {
    "HORDE_OAI_METRICS_ENDPOINT": "true",
    "HORDE_OAI_LOG_JSON": "true",
    "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": "1",
    "HORDE_OAI_MAX_BODY_BYTES": "4096",
}


@pytest.fixture(scope="module")
def points_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    tmp: Path = tmp_path_factory.mktemp("points")
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    with running_stack(tmp, scenario=scenario, front_env=FRONT_ENV) as stack:
        yield stack


@pytest.fixture(scope="module")
def front(points_stack: LiveStack) -> tuple[Process, str]:
    return points_stack.front, points_stack.front_url


def counts(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics`` by (sample name, labels)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def added(before: dict[Any, float], after: dict[Any, float], name: str, **labels: str) -> float:
    """How much the samples named ``name`` whose labels include ``labels`` rose."""
    wanted = set(labels.items())
    return sum(value - before.get(key, 0.0) for key, value in after.items() if key[0] == name and wanted <= set(key[1]))


def ended(url: str, before: dict[Any, float], requests: int = 1) -> dict[Any, float]:
    """``/metrics`` once ``requests`` more requests have ended on ``horde.oai.request.duration`` (a request ends just
    after its last byte is sent, so a scrape right after the answer may precede it); the last scrape after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        after = counts(url)
        if added(before, after, "horde_oai_request_duration_seconds_count") >= requests or time.monotonic() > deadline:
            return after
        time.sleep(0.05)


def chat(url: str, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me about tides."}], **extra}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
        response.read()
        return response


def stream_text(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("points/plain-7b", {}),
        ("points/silent-7b", {}),
        ("points/json-7b", {"response_format": {"type": "json_object"}}),
    ],
    ids=["relayed", "relay-mode-whole", "buffered"],
)
def test_first_content_is_recorded_for_streams(front: tuple[Process, str], model: str, extra: Any) -> None:
    """ref: histogram-buckets.2"""
    _, url = front
    before = counts(url)
    response = chat(url, model, stream=True, **extra)
    assert response.status_code == 200
    assert any(chunk["choices"] and chunk["choices"][0]["delta"].get("content") for chunk in stream_text(response))
    after = ended(url, before)
    assert added(before, after, "horde_oai_request_first_content_seconds_count", horde_streamed="true") == 1
    assert added(before, after, "horde_oai_request_duration_seconds_count", horde_outcome_class="served") == 1


def test_a_relay_mode_stream_that_relayed_nothing_is_not_relayed(front: tuple[Process, str]) -> None:
    _, url = front
    before = counts(url)
    response = chat(url, "points/faulty-7b", stream=True)
    assert response.status_code == 200
    assert '"code":"ChatRequestFaulted"' in response.text.replace(" ", "")
    after = ended(url, before)
    failures = "horde_oai_stream_failures_total"
    assert added(before, after, failures, horde_code="ChatRequestFaulted", horde_relayed="false") == 1
    assert added(before, after, failures, horde_relayed="true") == 0


SLOT_HELD_SECONDS = 30.0
"""How long :func:`refuse_at_capacity` waits for the slow request to reach the devhorde (a bound, not a timing)."""


def refuse_at_capacity(stack: LiveStack) -> tuple[httpx.Response, dict[Any, float]]:
    """One request sent while a slow one of the same client is in flight (the per-client cap is 1), and ``/metrics``
    from just before it. The probe is sent only once the devhorde holds the slow request, so the slow one has the
    slot (a probe sent first would take it and get the slow one refused instead, on a busy machine)."""
    url = stack.front_url
    slow = threading.Thread(target=chat, args=(url, "points/slow-7b"))
    slow.start()
    try:
        deadline = time.monotonic() + SLOT_HELD_SECONDS
        while not any(
            "points/slow-7b" in json.dumps(entry["payload"]) and entry["state"] in ("waiting", "processing")
            for entry in stack.native_requests()
        ):
            assert slow.is_alive(), "the slow request ended before it reached the devhorde"
            assert time.monotonic() < deadline, f"the slow request did not reach the devhorde in {SLOT_HELD_SECONDS} s"
            time.sleep(0.05)
        before = counts(url)
        return chat(url, "points/plain-7b"), before
    finally:
        slow.join()


REFUSALS: list[tuple[str, int, str]] = [
    ("bad_json", 400, "client_error"),
    ("unsupported_parameter", 400, "client_error"),
    ("too_large", 413, "client_error"),
    ("unknown_model", 400, "client_error"),
    ("front_at_capacity", 503, "front_at_capacity"),
]


@pytest.mark.parametrize(("kind", "status", "outcome_class"), REFUSALS, ids=[kind for kind, _, _ in REFUSALS])
def test_refusals_are_on_the_duration_histogram_with_their_outcome_class(
    points_stack: LiveStack, kind: str, status: int, outcome_class: str
) -> None:
    """ref: outcome-class.1, outcome-class.11"""
    url = points_stack.front_url
    before = counts(url)
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    if kind == "bad_json":
        response = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", headers=headers, timeout=10)
    elif kind == "unsupported_parameter":
        response = chat(url, "points/plain-7b", top_k=5)
    elif kind == "too_large":
        response = chat(url, "points/plain-7b", user="x" * 8192)
    elif kind == "unknown_model":
        response = chat(url, "points/no-such-model")
    else:
        response, before = refuse_at_capacity(points_stack)
    assert response.status_code == status
    after = counts(url)
    duration = "horde_oai_request_duration_seconds_count"
    assert added(before, after, duration, horde_status=str(status), horde_outcome_class=outcome_class) == 1
    refused = "horde_oai_requests_refused_total"
    assert added(before, after, refused, horde_status=str(status), horde_outcome_class=outcome_class) == 1


def test_another_method_is_on_the_duration_histogram_as_a_client_error(front: tuple[Process, str]) -> None:
    """A ``GET`` of ``/v1/chat/completions`` is 405 ``method_not_allowed``: on ``horde.oai.request.duration`` as
    ``client_error``, not on ``horde.oai.requests.refused`` (issue 24, item 8; ref: outcome-class.1)"""
    _, url = front
    before = counts(url)
    response = httpx.get(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    after = ended(url, before)
    duration = "horde_oai_request_duration_seconds_count"
    assert added(before, after, duration, horde_status="405", horde_outcome_class="client_error") == 1
    assert added(before, after, "horde_oai_requests_refused_total") == 0


def test_uvicorn_start_up_lines_are_json_too(front: tuple[Process, str]) -> None:
    process, _ = front
    lines = [line for line in process.log().splitlines() if line.strip()]
    messages = [json.loads(line)["record"]["message"] for line in lines]
    assert any(message.startswith("Started server process [") for message in messages)
    assert any(message.startswith("Uvicorn running on http://127.0.0.1:") for message in messages)
