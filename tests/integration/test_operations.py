"""What an operator sees of real requests: the reference's log lines and the metrics, end to end.

Reference sections: Refused parameter log line, Finished-request log line, No-visible-text log line, Metrics, Refusal
attributes, Error attributes, Completion attributes, Completion limit source, Outcome class. A devhorde serves
:data:`OPS_SCENARIO`; the front runs under uvicorn with ``HORDE_OAI_LOG_JSON=true`` (each Loguru record one JSON
object on standard error, captured in its log file) and ``HORDE_OAI_METRICS_ENDPOINT=true`` (``GET /metrics`` serves
the instruments in Prometheus text, parsed with prometheus_client). Clients are the official ``openai`` SDK.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chat.metrics import BUCKETS_SECONDS
from tests.conftest import Process, start_devhorde, start_front

pytestmark = pytest.mark.integration

FAST = {"time_to_first_token_seconds": 0.01, "tokens_per_second": 2000, "post_interval_seconds": 0.01}
FIXED_REPLY = "The tide is high."
STRICT = "prompt_overflow_refused"
"""The guarantee the default conformance requires of a worker."""
OPS_SCENARIO: dict[str, Any] = {
    "name": "operations",
    "description": "Served, refused, queue_unavailable, reasoning-only (tests/integration/test_operations.py).",
    "known_models": ["ops/offline-9b"],
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "plain-1",
            "model": "ops/plain-2b",
            "threads": 4,
            "features": [STRICT],
            "max_length": 1024,
            "reply_style": "fixed",
            "fixed_reply": FIXED_REPLY,
            **FAST,
        },
        {"name": "untrusted-1", "model": "ops/untrusted-2b", "trusted": False, "features": [STRICT], **FAST},
        {
            "name": "thinker-1",
            "model": "ops/thinker-8b",
            "reasoning": "always",
            "reasoning_only": True,
            "features": ["reasoning_effort", STRICT],
            **FAST,
        },
    ],
}


class Front:
    """The front under test: its base URL and its captured Loguru records."""

    def __init__(self, process: Process, url: str) -> None:
        self.process = process
        self.url = url

    def records(self) -> list[dict[str, Any]]:
        """Every JSON log record written so far (``record`` of Loguru's serialized form)."""
        found = []
        for line in self.process.log().splitlines():
            if line.startswith("{"):
                found.append(json.loads(line)["record"])
        return found

    def wait_record(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for record in self.records():
                if predicate(record):
                    return record
            time.sleep(0.05)
        pytest.fail(f"no log record for {what}")

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """``GET /metrics`` parsed: sample name -> [(labels, value)]."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return samples

    def sample(self, name: str, **labels: str) -> float:
        """The value of the sample ``name`` whose labels include ``labels`` (0 when none)."""
        total = 0.0
        for found, value in self.metrics().get(name, []):
            if all(found.get(key) == wanted for key, wanted in labels.items()):
                total += value
        return total


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    tmp: Path = tmp_path_factory.mktemp("ops")
    devhorde, horde_url = start_devhorde(tmp, redis=False, scenario=None)
    try:
        httpx.put(
            horde_url.removesuffix("/api") + "/_devhorde/scenario", json=OPS_SCENARIO, timeout=5
        ).raise_for_status()
        front, url = start_front(
            tmp, horde_url, redis=False, env={"HORDE_OAI_LOG_JSON": "true", "HORDE_OAI_METRICS_ENDPOINT": "true"}
        )
    except Exception:
        devhorde.stop()
        raise
    try:
        yield Front(front, url)
    finally:
        front.stop()
        devhorde.stop()


def sdk(front: Front) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{front.url}/v1", api_key="0000000000", max_retries=0, timeout=30)


def prompt() -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Tell me about tides. [{uuid.uuid4().hex[:8]}]"}]


def unix(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"


def finished_after(front: Front, start: int) -> dict[str, Any]:
    """The first finished-request line among the log records after the first ``start`` ones."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for record in front.records()[start:]:
            if record["message"].startswith("Chat request ") and " finished: " in record["message"]:
                return record
        time.sleep(0.05)
    pytest.fail("no finished-request line")


def finished_of(front: Front, request_id: str) -> dict[str, Any]:
    return front.wait_record(
        lambda record: record["message"].startswith(f"Chat request {request_id} finished:"), f"{request_id} finished"
    )


def test_served_request_logs_the_finished_line(ops: Front) -> None:
    """ref: finished-request-log-line.1, finished-request-log-line.2, finished-request-log-line.3,
    finished-request-log-line.5, finished-request-log-line.6, finished-request-log-line.9, completion-limit-source.3"""
    before = time.time()
    completion = sdk(ops).chat.completions.create(model="ops/plain-2b", messages=prompt(), max_tokens=64)
    request_id = completion.id.removeprefix("chatcmpl-")
    record = finished_of(ops, request_id)
    extra = record["extra"]
    assert record["level"]["name"] == "INFO"
    assert before <= extra["submitted_at"] <= time.time()
    assert extra["woke_at"] is None or extra["woke_at"] >= extra["submitted_at"]
    waited = "none" if extra["waited"] is None else f"{extra['waited']:.3f}"
    assert record["message"] == (
        f"Chat request {request_id} finished: streamed=False submitted_at={unix(extra['submitted_at'])} "
        f"woke_at={unix(extra['woke_at'])} woke_by={extra['woke_by']} waited={waited}s status=200 code=None "
        f"wakes={extra['wakes']} estimated_usage=False done_without_generation_reads=0 "
        "requested_model=ops/plain-2b served_model=ops/plain-2b retry_after=none "
        f"first_read_wait_time={extra['first_read_wait_time']} first_read_eligible_worker_threads=4 max_tokens=64 "
        "max_tokens_source=client"
    )
    assert isinstance(extra["first_read_wait_time"], int)
    assert extra["request_id"] == request_id
    assert (extra["status"], extra["code"], extra["served_model"], extra["max_tokens_source"]) == (
        200,
        None,
        "ops/plain-2b",
        "client",
    )
    assert "0000000000" not in json.dumps(record) and "Tell me about tides" not in json.dumps(record)


def test_refusal_at_submit_logs_the_unsubmitted_line(ops: Front) -> None:
    """ref: finished-request-log-line.7, finished-request-log-line.8, model-availability.1"""
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(ops).chat.completions.create(model="ops/offline-9b", messages=prompt())
    assert caught.value.status_code == 503
    record = ops.wait_record(
        lambda record: (
            record["message"].startswith("Unsubmitted chat request finished:")
            and record["extra"].get("requested_model") == "ops/offline-9b"
        ),
        "the unsubmitted line",
    )
    extra = record["extra"]
    assert record["message"] == (
        f"Unsubmitted chat request finished: streamed=False submitted_at={unix(extra['submitted_at'])} woke_at=none "
        "woke_by=None waited=nones status=503 code=no_eligible_worker wakes=0 estimated_usage=None "
        "done_without_generation_reads=0 requested_model=ops/offline-9b served_model=none retry_after=30 "
        "first_read_wait_time=none first_read_eligible_worker_threads=none max_tokens=512 max_tokens_source=default"
    )
    assert extra["request_id"] is None


def test_queue_unavailable_logs_the_queue_fields(ops: Front) -> None:
    """ref: finished-request-log-line.4, finished-request-log-line.5"""
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(ops).chat.completions.create(
            model="ops/untrusted-2b",
            messages=prompt(),
            extra_body={"horde": {"availability_mode": "fail_fast", "trusted_workers": True}},
        )
    request_id = caught.value.body["metadata"]["request_id"]
    record = finished_of(ops, request_id)
    extra = record["extra"]
    waited = "none" if extra["waited"] is None else f"{extra['waited']:.3f}"
    assert record["message"] == (
        f"Chat request {request_id} finished: streamed=False submitted_at={unix(extra['submitted_at'])} "
        f"woke_at={unix(extra['woke_at'])} woke_by={extra['woke_by']} waited={waited}s status=503 "
        f"code=queue_unavailable wakes={extra['wakes']} estimated_usage=None done_without_generation_reads=0 "
        "requested_model=ops/untrusted-2b served_model=none retry_after=60 queue_reason=no_eligible_threads "
        "wait_time=0 eligible_worker_threads=0 first_read_wait_time=0 first_read_eligible_worker_threads=0 "
        "max_tokens=512 max_tokens_source=default"
    )
    assert (extra["queue_reason"], extra["wait_time"], extra["eligible_worker_threads"]) == (
        "no_eligible_threads",
        0,
        0,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_only_logs_the_no_visible_text_line_first(ops: Front, stream: bool) -> None:
    """ref: no-visible-text-log-line.1, no-visible-text-log-line.2, no-visible-text-log-line.3,
    no-visible-text-log-line.4"""
    client = sdk(ops)
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="ops/thinker-8b",
                messages=prompt(),
                stream=True,
                stream_options={"include_usage": True},
                reasoning_effort="low",
            )
        )
        request_id = chunks[0].id.removeprefix("chatcmpl-")
        usage = chunks[-1].usage
        finish_reason = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
    else:
        completion = client.chat.completions.create(model="ops/thinker-8b", messages=prompt(), reasoning_effort="low")
        request_id = completion.id.removeprefix("chatcmpl-")
        usage = completion.usage
        finish_reason = completion.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens_details is not None
    reasoning_tokens = usage.completion_tokens_details.reasoning_tokens
    finished_of(ops, request_id)
    messages = [record["message"] for record in ops.records() if request_id in record["message"]]
    assert messages[0] == (
        f"Chat request {request_id} returned no visible text: content=reasoning_only model=ops/thinker-8b "
        f"max_tokens=512 max_tokens_source=default reasoning_effort=low reasoning_tokens={reasoning_tokens} "
        f"finish_reason={finish_reason}"
    )
    assert messages[1].startswith(f"Chat request {request_id} finished: streamed={stream} ")
    line = messages[0]
    assert "Tell me about tides." not in line and "tides" not in line  # not the messages
    assert "reasoning" not in line.replace("reasoning_effort", "").replace("reasoning_tokens", "").replace(
        "reasoning_only", ""
    )  # no reasoning or reply text, only the listed fields
    extra = next(r for r in ops.records() if "returned no visible text" in r["message"] and request_id in r["message"])
    assert extra["extra"] == {
        "request_id": request_id,
        "content": "reasoning_only",
        "model": "ops/thinker-8b",
        "max_tokens": 512,
        "max_tokens_source": "default",
        "reasoning_effort": "low",
        "reasoning_tokens": reasoning_tokens,
        "finish_reason": finish_reason,
    }


def test_refused_parameter_line_and_no_django_refusal_line(ops: Front) -> None:
    """ref: refused-parameter-log-line.1, refused-parameter-log-line.2, refused-parameter-log-line.4,
    refused-parameter-log-line.5, refused-parameter-log-line.6, refusal-attributes.7, refusal-attributes.10"""
    client = sdk(ops)
    for key in ("top_k", "frobnicate\nlevel"):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="ops/plain-2b", messages=prompt(), extra_body={key: 1})
    messages = [record["message"] for record in ops.records()]
    assert "Refused unsupported chat parameter: path='top_k' label=top_k" in messages
    assert "Refused unsupported chat parameter: path='frobnicate\\nlevel' label=other" in messages
    log = ops.process.log()
    assert "Bad Request: /v1/chat/completions" not in log
    assert "Service Unavailable: /v1/chat/completions" not in log


def test_metrics_endpoint_parses_with_telemetry_off(ops: Front) -> None:
    """``/metrics`` with only ``HORDE_OAI_METRICS_ENDPOINT=true``: 200 in Prometheus text format that
    prometheus_client's parser reads, each family once, the histograms with their explicit buckets (ref:
    histogram-buckets.1)."""
    sdk(ops).models.list()
    response = httpx.get(f"{ops.url}/metrics", timeout=5)
    assert response.status_code == 200
    families = list(text_string_to_metric_families(response.text))
    names = [family.name for family in families]
    assert len(names) == len(set(names))
    (call_duration,) = [family for family in families if family.name == "horde_oai_horde_call_duration_seconds"]
    assert call_duration.type == "histogram"
    bounds = sorted(
        {sample.labels["le"] for sample in call_duration.samples if sample.name.endswith("_bucket")}, key=float
    )
    assert bounds == [*(repr(float(bound)) for bound in BUCKETS_SECONDS), "+Inf"]


def test_metrics_after_real_requests(ops: Front) -> None:
    """ref: completion-attributes.1, metrics.4, metrics.5, metrics.7, refusal-attributes.1, refusal-attributes.6,
    refusal-attributes.7,
    error-attributes.2, error-attributes.3, error-attributes.4, error-attributes.5, outcome-class.1, outcome-class.4,
    outcome-class.6, completion-limit-source.1, completion-limit-source.2"""
    refused = "horde_oai_requests_refused_total"
    errors = "horde_oai_requests_errors_total"
    other_before = ops.sample(refused, horde_parameter="other", horde_code="UnsupportedChatParameter")
    messages_before = ops.sample(refused, horde_parameter="messages")
    client = sdk(ops)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="ops/plain-2b", messages=prompt(), extra_body={"my_secret_key": 1})
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="ops/plain-2b", messages=[{"role": "function", "content": "x"}])
    assert ops.sample(refused, horde_parameter="other", horde_code="UnsupportedChatParameter") == other_before + 1
    assert ops.sample(refused, horde_parameter="messages", horde_outcome_class="client_error") == messages_before + 1
    assert "my_secret_key" not in httpx.get(f"{ops.url}/metrics", timeout=5).text

    submit_labels = {"horde_code": "no_eligible_worker", "horde_stage": "submit"}
    submit_before = ops.sample(errors, **submit_labels, horde_outcome_class="unservable")
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="ops/offline-9b", messages=prompt(), max_tokens=600)
    assert ops.sample(errors, **submit_labels, horde_outcome_class="unservable", horde_max_tokens_bucket="768") >= 1
    assert ops.sample(errors, **submit_labels, horde_outcome_class="unservable") == submit_before + 1

    grace_labels = {"horde_code": "no_eligible_worker", "horde_stage": "grace", "horde_outcome_class": "capacity"}
    grace_before = ops.sample(errors, **grace_labels)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="ops/untrusted-2b", messages=prompt(), extra_body={"horde": {"trusted_workers": True}}
        )
    assert caught.value.status_code == 503
    assert ops.sample(errors, **grace_labels, horde_status="503", horde_reason="") == grace_before + 1

    queue_labels = {"horde_code": "queue_unavailable", "horde_reason": "no_eligible_threads", "horde_stage": ""}
    queue_before = ops.sample(errors, **queue_labels, horde_outcome_class="capacity")
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(
            model="ops/untrusted-2b",
            messages=prompt(),
            extra_body={"horde": {"availability_mode": "fail_fast", "trusted_workers": True}},
        )
    assert ops.sample(errors, **queue_labels, horde_outcome_class="capacity") == queue_before + 1

    completions = "horde_oai_completions_total"
    served = {"horde_model": "ops/plain-2b", "horde_content": "text", "horde_finish_reason": "stop"}
    served_before = ops.sample(completions, **served, horde_max_tokens_source="client")
    duration_before = ops.sample("horde_oai_request_duration_seconds_count", horde_outcome_class="served")
    client.chat.completions.create(model="ops/plain-2b", messages=prompt(), max_tokens=64)
    assert ops.sample(completions, **served, horde_max_tokens_source="client") == served_before + 1
    assert ops.sample("horde_oai_request_duration_seconds_count", horde_outcome_class="served") == duration_before + 1
    thinker_before = ops.sample(completions, horde_model="ops/thinker-8b", horde_content="reasoning_only")
    client.chat.completions.create(model="ops/thinker-8b", messages=prompt())
    assert ops.sample(completions, horde_model="ops/thinker-8b", horde_content="reasoning_only") == thinker_before + 1

    samples = ops.metrics()
    for name in ("horde_oai_request_max_tokens", "horde_oai_request_body_size_bytes"):
        assert any(sample_name.startswith(name) for sample_name in samples), name
    labels = {key for entries in samples.values() for found, _ in entries for key in found}
    assert not labels & {"horde_request_id", "horde_api_key", "horde_client_address", "client_address"}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_route_logs_and_counts_like_chat_completions(ops: Front, stream: bool) -> None:
    """``POST /v1/responses`` goes through the same path as chat completions (chat.serving.service.serve_chat),
    so it writes the same finished-request line and counts the same completion and request duration.

    ref: finished-request-log-line.1, metrics.4"""
    completions = "horde_oai_completions_total"
    served = {"horde_model": "ops/plain-2b", "horde_content": "text", "horde_finish_reason": "stop"}
    served_before = ops.sample(completions, **served, horde_max_tokens_source="client")
    duration_before = ops.sample("horde_oai_request_duration_seconds_count", horde_outcome_class="served")
    text = f"Tell me about tides. [{uuid.uuid4().hex[:8]}]"
    records_before = len(ops.records())
    if stream:
        with sdk(ops).responses.stream(model="ops/plain-2b", input=text, max_output_tokens=64) as events:
            for _ in events:
                pass
            response = events.get_final_response()
    else:
        response = sdk(ops).responses.create(model="ops/plain-2b", input=text, max_output_tokens=64)
    assert response.output_text == FIXED_REPLY
    # A response's id is random and names no native request (issue 35): the finished line after this request's
    # start carries the native id.
    record = finished_after(ops, records_before)
    request_id = record["message"].split()[2]
    assert request_id not in response.id
    extra = record["extra"]
    assert record["message"].startswith(f"Chat request {request_id} finished: streamed={stream} ")
    assert (extra["status"], extra["code"], extra["served_model"], extra["max_tokens"], extra["max_tokens_source"]) == (
        200,
        None,
        "ops/plain-2b",
        64,
        "client",
    )
    assert ops.sample(completions, **served, horde_max_tokens_source="client") == served_before + 1
    assert ops.sample("horde_oai_request_duration_seconds_count", horde_outcome_class="served") == duration_before + 1


def test_responses_refusal_at_submit_is_logged_and_counted_with_the_responses_error(ops: Front) -> None:
    """A Responses request the Horde cannot serve is logged with the unsubmitted line and counted at ``submit``, and
    the client gets the 503 ``no_eligible_worker`` error.

    ref: finished-request-log-line.7, model-availability.1"""
    errors = "horde_oai_requests_errors_total"
    labels = {"horde_code": "no_eligible_worker", "horde_stage": "submit", "horde_outcome_class": "unservable"}
    before = ops.sample(errors, **labels)
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(ops).responses.create(model="ops/offline-9b", input=f"Tell me about tides. [{uuid.uuid4().hex[:8]}]")
    assert caught.value.status_code == 503
    assert isinstance(caught.value.body, dict) and caught.value.body.get("code") == "no_eligible_worker"
    assert ops.sample(errors, **labels) == before + 1
