"""chat.metrics and the metrics of chat.serving.request_record.RequestRecord, read from an ``InMemoryMetricReader``.

Reference: Metrics, Refusal attributes, Error attributes, Completion limit source, Histogram buckets, Outcome class.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_asyncio
from django.test import AsyncClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import chat.metrics
from chat import errors
from chat.errors import OpenAIError
from chat.metrics import (
    BUCKETS_BODY_BYTES,
    BUCKETS_MAX_TOKENS,
    BUCKETS_PIECES_PER_POST,
    BUCKETS_POST_GAP_SECONDS,
    BUCKETS_REASONING_SHARE,
    BUCKETS_REQUEST_LIFECYCLE_SECONDS,
    BUCKETS_SECONDS,
    configure_metrics,
    front_metrics,
    histogram_views,
    max_tokens_bucket,
    outcome_class_for,
)
from chat.reading.completions import read_completion_request
from chat.reading.screening import read_chat_request
from chat.serving import service
from chat.serving.request_record import RequestRecord, record_refusal
from chat.serving.runtime import FrontRuntime
from chat.serving.service import Refused
from chat.settings import FrontSettings
from chat.streaming.pacing import DeltaPacer, Piece


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """A separate MeterProvider with an in-memory reader supplied to the front's instruments (``metrics.2``)."""
    memory = InMemoryMetricReader()
    configure_metrics(MeterProvider(metric_readers=[memory], views=histogram_views()))
    yield memory
    chat.metrics._metrics = None


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


@pytest.mark.parametrize(
    ("code", "stage", "expected"),
    [
        (None, "", "served"),
        ("no_eligible_worker", "submit", "unservable"),
        ("no_eligible_worker", "grace", "capacity"),
        ("no_eligible_worker", "", "unclassified"),
        ("queue_unavailable", "", "capacity"),
        ("ChatRequestFaulted", "", "service_fault"),
        ("HordeUnavailable", "", "service_fault"),
        ("FrontAtCapacity", "", "front_at_capacity"),
        ("UnsupportedChatParameter", "", "client_error"),
        ("SomeNewHordeRc", "", "unclassified"),
    ],
)
def test_outcome_class_for(code: str | None, stage: str, expected: str) -> None:
    """ref: outcome-class.1, outcome-class.2, outcome-class.3, outcome-class.4, outcome-class.5, outcome-class.6,
    outcome-class.7, outcome-class.9, outcome-class.11, outcome-class.12"""
    assert outcome_class_for(code, stage) == expected


@pytest.mark.parametrize(
    ("limit", "bucket"),
    [(1, "16"), (16, "16"), (17, "64"), (512, "512"), (600, "768"), (16384, "16384"), (16385, "over")],
)
def test_max_tokens_bucket(limit: int, bucket: str) -> None:
    """ref: error-attributes.5, error-attributes.6"""
    assert max_tokens_bucket(limit) == bucket


def test_bucket_boundaries() -> None:
    """ref: histogram-buckets.4, histogram-buckets.5"""
    assert BUCKETS_MAX_TOKENS == (16, 64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384)
    assert (BUCKETS_POST_GAP_SECONDS[0], BUCKETS_POST_GAP_SECONDS[-1]) == (0.1, 10.0)
    assert (BUCKETS_PIECES_PER_POST[0], BUCKETS_PIECES_PER_POST[-1]) == (1, 80)
    assert BUCKETS_REASONING_SHARE == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def test_histograms_use_the_reference_boundaries(reader: InMemoryMetricReader) -> None:
    """ref: histogram-buckets.2, metrics.2"""
    chat.metrics.front_metrics().request_duration.record(3.0, {"horde.outcome_class": "served"})
    [point] = points(reader, "horde.oai.request.duration")
    assert tuple(point.explicit_bounds) == BUCKETS_REQUEST_LIFECYCLE_SECONDS


def test_refusal_labels_an_unknown_key_other(reader: InMemoryMetricReader) -> None:
    """ref: refusal-attributes.2, refusal-attributes.6, refusal-attributes.7, refusal-attributes.8"""
    record_refusal(OpenAIError(400, "x", code=errors.UNSUPPORTED_CHAT_PARAMETER, param="my_private_key"), 0.0)
    record_refusal(OpenAIError(400, "x", code=errors.UNSUPPORTED_CHAT_PARAMETER, param="messages[0].role"), 0.0)
    record_refusal(OpenAIError(400, "x", code=errors.BAD_REQUEST, param="messages"), 0.0)
    found = {
        (p.attributes["horde.parameter"], p.attributes["horde.code"], p.attributes["horde.outcome_class"], p.value)
        for p in points(reader, "horde.oai.requests.refused")
    }
    assert found == {
        ("other", "UnsupportedChatParameter", "client_error", 1),
        ("messages", "UnsupportedChatParameter", "client_error", 1),
        ("", "BadRequest", "client_error", 1),
    }


def test_a_refusal_at_submit_is_an_error_at_stage_submit_and_records_no_limit(reader: InMemoryMetricReader) -> None:
    """ref: error-attributes.3, error-attributes.5, error-attributes.7, completion-limit-source.2"""
    request = read_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 600}')
    record = RequestRecord(request)
    record.failed(errors.no_eligible_worker("No worker is currently serving the model 'm'. Retry later."))
    record.finish()
    [point] = points(reader, "horde.oai.requests.errors")
    assert dict(point.attributes) == {
        "horde.status": 503,
        "horde.code": "no_eligible_worker",
        "horde.reason": "",
        "horde.stage": "submit",
        "horde.max_tokens_bucket": "768",
        "horde.outcome_class": "unservable",
        "horde.streamed": False,
    }
    assert points(reader, "horde.oai.request.max_tokens") == []
    [duration] = points(reader, "horde.oai.request.duration")
    assert dict(duration.attributes)["horde.outcome_class"] == "unservable"


def test_a_grace_refusal_is_stage_grace_and_records_the_limit_source(reader: InMemoryMetricReader) -> None:
    """ref: error-attributes.4, completion-limit-source.1, completion-limit-source.3, completion-limit-source.4"""
    request = read_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    record = RequestRecord(request, request_id="r1", submitted_at=1.0)
    record.waiter = SimpleNamespace(
        last_status=None, first_status=None, wakes=3, woke_by="timer", woke_at=2.0, done_without_generation_reads=0
    )
    record.failed(errors.no_eligible_worker("No online worker could serve this request."))
    record.finish()
    [point] = points(reader, "horde.oai.requests.errors")
    assert (point.attributes["horde.stage"], point.attributes["horde.outcome_class"]) == ("grace", "capacity")
    [limit] = points(reader, "horde.oai.request.max_tokens")
    assert (dict(limit.attributes), limit.sum) == ({"horde.source": "default"}, 512)


def test_pacing_records_post_gap_pieces_per_post_and_pacing_lag(reader: InMemoryMetricReader) -> None:
    """The pacer records the gap between posts, the pieces of each paced plan and each paced piece's lateness, on the
    reference's buckets. ref: histogram-buckets.4"""
    pacer = DeltaPacer(2.0, 20, clock=lambda: 0.0)
    pacer.add_delta("", "First words.", 1000, now=10.0)  # the first exposed delta goes whole: no plan, no gap yet
    assert pacer.take_due(10.0) == [Piece("content", "First words.")]
    pacer.add_delta("", "a" * 100, 1500, now=10.5)  # gap 0.5 s: window 0.5 s, 10 pieces due every 0.05 s from 10.5
    assert len(pacer.take_due(10.62)) == 3  # due at 10.5, 10.55 and 10.6: late by 0.12, 0.07 and 0.02 s

    (gap,) = points(reader, "horde.oai.stream.post_gap")
    assert (gap.count, gap.sum, tuple(gap.explicit_bounds)) == (1, 0.5, BUCKETS_POST_GAP_SECONDS)
    assert gap.bucket_counts[BUCKETS_POST_GAP_SECONDS.index(0.5)] == 1  # the (0.3, 0.5] bucket
    (pieces,) = points(reader, "horde.oai.stream.pieces_per_post")
    assert (pieces.count, pieces.sum, tuple(pieces.explicit_bounds)) == (1, 10, BUCKETS_PIECES_PER_POST)
    (lag,) = points(reader, "horde.oai.stream.pacing_lag")
    assert (lag.count, tuple(lag.explicit_bounds)) == (3, BUCKETS_POST_GAP_SECONDS)
    assert lag.sum == pytest.approx(0.21)
    assert (lag.min, lag.max) == (pytest.approx(0.02), pytest.approx(0.12))
    assert tuple(lag.bucket_counts[:2]) == (2, 1)  # 0.02 and 0.07 s up to 0.1 s, 0.12 s in (0.1, 0.2]


def test_the_global_meter_provider_is_used_unless_one_is_supplied(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a supplied provider the instruments come from the global one. ref: metrics.1"""
    memory = InMemoryMetricReader()
    monkeypatch.setattr(chat.metrics.metrics, "get_meter_provider", lambda: MeterProvider(metric_readers=[memory]))
    configure_metrics()
    try:
        front_metrics().requests_refused.add(1, {"horde.code": "BadRequest"})
        [point] = points(memory, "horde.oai.requests.refused")
        assert (dict(point.attributes), point.value) == ({"horde.code": "BadRequest"}, 1)
    finally:
        chat.metrics._metrics = None


def test_an_unconfigured_global_provider_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's no-op provider (what an unconfigured process has once nothing sets one) makes no-op instruments.
    ref: metrics.3"""
    from opentelemetry.metrics import NoOpCounter, NoOpHistogram, NoOpMeterProvider

    monkeypatch.setattr(chat.metrics.metrics, "get_meter_provider", NoOpMeterProvider)
    try:
        instruments = configure_metrics()
        assert isinstance(instruments.requests_refused, NoOpCounter)
        assert isinstance(instruments.completions, NoOpCounter)
        assert isinstance(instruments.request_duration, NoOpHistogram)
        assert isinstance(instruments.horde_call_duration, NoOpHistogram)
    finally:
        chat.metrics._metrics = None


def test_native_call_latency_and_body_size_use_their_buckets(reader: InMemoryMetricReader) -> None:
    """ref: histogram-buckets.1, histogram-buckets.3"""
    front_metrics().horde_call_duration.record(0.2, {"horde.call": "submit", "horde.status": 202})
    front_metrics().body_size.record(2048, {})
    [call] = points(reader, "horde.oai.horde.call.duration")
    assert tuple(call.explicit_bounds) == BUCKETS_SECONDS
    assert BUCKETS_SECONDS == (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
    [size] = points(reader, "horde.oai.request.body_size")
    assert tuple(size.explicit_bounds) == BUCKETS_BODY_BYTES


def test_the_completion_model_is_the_served_model(reader: InMemoryMetricReader) -> None:
    """The model attribute comes from the delivered completion (the served model), not the request. ref: metrics.6"""
    request = read_chat_request(b'{"models": ["asked/a", "asked/b"], "messages": [{"role": "user", "content": "hi"}]}')
    record = RequestRecord(request, request_id="r1", submitted_at=1.0)
    record.completion = {"model": "asked/b", "choices": [{"finish_reason": "stop", "message": {"content": "x"}}]}
    record.finish()
    [point] = points(reader, "horde.oai.completions")
    assert point.attributes["horde.model"] == "asked/b"


def test_a_client_limit_that_ended_before_any_status_read_is_recorded_as_client(reader: InMemoryMetricReader) -> None:
    """ref: completion-limit-source.4"""
    request = read_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}')
    record = RequestRecord(request, request_id="r1", submitted_at=1.0)
    record.waiter = SimpleNamespace(
        last_status=None, first_status=None, wakes=0, woke_by=None, woke_at=None, done_without_generation_reads=0
    )
    record.failed(errors.no_eligible_worker("No online worker could serve this request."))
    record.finish()
    [limit] = points(reader, "horde.oai.request.max_tokens")
    assert (dict(limit.attributes), limit.sum) == ({"horde.source": "client"}, 100)


@pytest_asyncio.fixture
async def stopping_runtime(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FrontRuntime]:
    """A runtime whose process has begun stopping (``stopping`` set), as chat.serving.service finds it."""
    runtime = FrontRuntime(FrontSettings(horde_url="http://127.0.0.1:9/api"))
    runtime.stopping.set()
    monkeypatch.setattr(service, "get_runtime", lambda: runtime)
    yield runtime
    await runtime.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_chat_request_arriving_while_the_front_stops_is_on_the_duration_histogram(
    reader: InMemoryMetricReader, stopping_runtime: FrontRuntime, stream: bool
) -> None:
    """503 ``FrontShuttingDown`` before any submit is recorded on ``horde.oai.request.duration`` with the outcome
    class ``front_shutdown`` (issue 24, item 8; ref: outcome-class.1)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    outcome = await service.serve_chat(read_chat_request(json.dumps(body).encode()), None, started=time.monotonic())
    assert isinstance(outcome, Refused)
    assert (outcome.error.status, outcome.error.code) == (503, "FrontShuttingDown")
    [point] = points(reader, "horde.oai.request.duration")
    assert dict(point.attributes) == {
        "horde.status": 503,
        "horde.outcome_class": "front_shutdown",
        "horde.streamed": stream,
    }
    assert point.count == 1
    assert points(reader, "horde.oai.requests.refused") == []


@pytest.mark.asyncio
async def test_a_legacy_completion_arriving_while_the_front_stops_is_on_the_duration_histogram(
    reader: InMemoryMetricReader, stopping_runtime: FrontRuntime
) -> None:
    """ref: outcome-class.1"""
    request = read_completion_request(b'{"model": "m", "prompt": "hi"}')
    outcome = await service.serve_text_completion(request, None, started=time.monotonic())
    assert isinstance(outcome, Refused)
    assert outcome.error.code == "FrontShuttingDown"
    [point] = points(reader, "horde.oai.request.duration")
    assert dict(point.attributes) == {
        "horde.status": 503,
        "horde.outcome_class": "front_shutdown",
        "horde.streamed": False,
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
async def test_another_method_is_405_on_the_duration_histogram_as_a_client_error(
    reader: InMemoryMetricReader, path: str
) -> None:
    """A ``GET`` of a ``POST`` route is 405 ``method_not_allowed``, recorded on ``horde.oai.request.duration`` as
    ``client_error`` (issue 24, item 8; ref: outcome-class.1) and not counted as an admission refusal."""
    response = await AsyncClient().get(path)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert json.loads(response.content)["error"]["code"] == "method_not_allowed"
    [point] = points(reader, "horde.oai.request.duration")
    assert dict(point.attributes) == {
        "horde.status": 405,
        "horde.outcome_class": "client_error",
        "horde.streamed": False,
    }
    assert points(reader, "horde.oai.requests.refused") == []


def test_a_prompted_reply_the_client_left_before_is_counted_abandoned(reader: InMemoryMetricReader) -> None:
    """A client that left is neither a valid nor an invalid reply of the model."""
    request = read_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    record = RequestRecord(request, request_id="r1", submitted_at=1.0, prompted_output="tools")
    record.disconnected = True
    record.finish()
    [point] = points(reader, "horde.oai.text.prompted_replies")
    assert dict(point.attributes) == {
        "horde.prompted_output": "tools",
        "horde.repair_attempts": 0,
        "horde.outcome": "abandoned",
    }
