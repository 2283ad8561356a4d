"""chat.serving.text_limits and its hooks: the limits a text path request is sent with (the workers' declared limits,
the upfront kudos ceiling), reported as the native path reports worker_max_length (x_horde.context_adjustments, the
effective completion limit, ``max_tokens_source``), and the text model cards' limits (httpx.MockTransport)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from chat import metrics as chat_metrics
from chat.horde.native import HordeClient
from chat.horde.text import TextBounds, native_status
from chat.horde.worker_limits import WorkerSnapshot, WorkerState
from chat.metrics import configure_metrics, histogram_views
from chat.protocol.chat_request import ChatCompletionRequest
from chat.rendering.completion import build_completion, effective_completion_limit
from chat.serving.request_record import RequestRecord, max_tokens_source
from chat.serving.text_limits import chat_text_bounds
from chat.serving.text_route import MAX_TEXT_MAX_LENGTH, prepare_chat_request
from models_list.cards import model_list
from models_list.schema import ModelList

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
WORKER = {
    "id": "91743914-16c2-4d2f-b54e-8c2d2e2999e7",
    "models": [QWEN],
    "threads": 1,
    "uptime": 795,
    "max_length": 512,
    "max_context_length": 4096,
    "maintenance_mode": False,
    "online": True,
}
IDLE = {"text_thread_count": 11, "queued_text_requests": 45}
BUSY = {"text_thread_count": 2, "queued_text_requests": 200}


def horde_client(
    performance: dict[str, Any], kudos: float | None = 0, worker: dict[str, Any] = WORKER
) -> tuple[HordeClient, list[str]]:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api")
        calls.append(path)
        if path == "/v2/workers":
            return httpx.Response(200, content=json.dumps([worker]))
        if path == "/v2/status/performance":
            return httpx.Response(200, content=json.dumps(performance))
        if path == "/v2/find_user" and kudos is not None:
            return httpx.Response(200, content=json.dumps({"username": "new#7", "kudos": kudos}))
        return httpx.Response(404, content=json.dumps({"message": "User not found", "rc": "UserNotFound"}))

    url = f"http://horde-{uuid.uuid4().hex[:8]}.test/api"
    return HordeClient(url, "test:1:none", 5.0, transport=httpx.MockTransport(handle)), calls


def chat(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": QWEN, "messages": [{"role": "user", "content": "Hi"}], **body}
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("performance", "body", "bounds"),
    [
        # The default 512 for a 0-kudos user on an idle Horde: served as it is.
        (IDLE, {}, TextBounds(max_length=512, max_context_length=2048)),
        # A busy Horde's ceiling is below the default: lowered to it, reported.
        (
            BUSY,
            {},
            TextBounds(
                max_length=342,
                max_context_length=2048,
                adjustments=({"kind": "kudos_upfront", "requested": 512, "applied": 342},),
            ),
        ),
        # Above the workers' 512 and context 4096, then above the busy ceiling.
        (
            BUSY,
            {"max_tokens": 1024, "horde": {"max_context_length": 8192}},
            TextBounds(
                max_length=342,
                max_context_length=4096,
                adjustments=(
                    {"kind": "worker_max_length", "requested": 1024, "applied": 512},
                    {"kind": "kudos_upfront", "requested": 512, "applied": 342},
                    {"kind": "worker_max_context_length", "requested": 8192, "applied": 4096},
                ),
            ),
        ),
        (
            IDLE,
            {"max_completion_tokens": 600},
            TextBounds(
                max_length=512,
                max_context_length=2048,
                adjustments=({"kind": "worker_max_length", "requested": 600, "applied": 512},),
            ),
        ),
        (
            IDLE,
            {"max_tokens": 100, "horde": {"max_context_length": 1024}},
            TextBounds(max_length=100, max_context_length=1024),
        ),
    ],
)
async def test_the_bounds_of_a_text_request(
    performance: dict[str, Any], body: dict[str, Any], bounds: TextBounds
) -> None:
    client, _ = horde_client(performance, kudos=0)
    try:
        assert await chat_text_bounds(client, chat(**body), "new-user-key") == bounds
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_user_holding_kudos_keeps_a_limit_above_the_ceiling_and_the_user_is_read_only_then() -> None:
    client, calls = horde_client(BUSY, kudos=5000)
    try:
        assert await chat_text_bounds(client, chat(max_tokens=300), "owner") == TextBounds(
            max_length=300, max_context_length=2048
        )
        assert "/v2/find_user" not in calls
        assert await chat_text_bounds(client, chat(max_tokens=500), "owner") == TextBounds(
            max_length=500, max_context_length=2048
        )
        assert calls == ["/v2/workers", "/v2/status/performance", "/v2/find_user"]
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_limits_below_the_text_apis_smallest_lower_nothing() -> None:
    """A worker declaring max_length 8, or a ceiling of 2 under slow_workers false (512 + 0 - 510), would make a
    request the text API refuses (16 at least): the limit is sent as asked."""
    client, _ = horde_client({"text_thread_count": 0, "queued_text_requests": 567}, worker={**WORKER, "max_length": 8})
    try:
        request = chat(max_tokens=100, horde={"slow_workers": False})
        assert await chat_text_bounds(client, request, "new-user-key") == TextBounds(
            max_length=100, max_context_length=2048
        )
    finally:
        await client.aclose()


LOWERED = TextBounds(
    max_length=342,
    max_context_length=4096,
    adjustments=(
        {"kind": "worker_max_length", "requested": 1024, "applied": 512},
        {"kind": "kudos_upfront", "requested": 512, "applied": 342},
    ),
)


def test_a_lowered_limit_is_sent_and_reported_as_the_native_path_reports_worker_max_length() -> None:
    """ref: assistant-message-and-adjustments.4, reasoning-and-usage.9, completion-limit-source.3"""
    request = chat(max_tokens=1024, horde={"max_context_length": 8192})
    prepared = prepare_chat_request(request, LOWERED)
    assert prepared.payload["params"]["max_length"] == 342
    assert prepared.payload["params"]["max_context_length"] == 4096
    # over 256: the Horde names a lower ceiling in a 403 rather than lowering unreported (test_downgrade_resubmit)
    assert prepared.payload["allow_downgrade"] is False
    assert (prepared.max_length, prepared.x_horde["max_context_length"]) == (342, 4096)
    body = {
        "done": True,
        "finished": 1,
        "waiting": 0,
        "processing": 0,
        "is_possible": True,
        "generations": [{"text": "x" * 4000, "model": QWEN, "worker_id": "w", "worker_name": "n"}],
    }
    status = native_status(body, prepared)
    assert status.context_adjustments == list(LOWERED.adjustments)
    assert effective_completion_limit(request, status) == 342
    assert max_tokens_source(request, status) == "lowered"
    completion = build_completion(request, status, "req-1", 0)
    assert completion["x_horde"]["context_adjustments"] == list(LOWERED.adjustments)
    assert completion["usage"]["completion_tokens"] == 342  # 1000 estimated tokens, capped at the lowered limit
    assert completion["choices"][0]["finish_reason"] == "length"
    plain = native_status(body, prepare_chat_request(chat(max_tokens=100)))
    assert plain.context_adjustments is None
    assert (
        effective_completion_limit(chat(max_tokens=100), plain),
        max_tokens_source(chat(max_tokens=100), plain),
    ) == (
        100,
        "client",
    )


def test_text_cards_state_the_workers_limits() -> None:
    """The loopback Horde's worker declares 512 / 4096 for Qwen2.5-7B-Instruct."""
    entries = [{"name": QWEN, "count": 1, "queued": 0, "jobs": 0, "eta": 0}, {"name": "koboldcpp/other", "count": 1}]
    snapshot = WorkerSnapshot(
        read_at=0.0,
        workers=(
            WorkerState(
                id="a", models=frozenset({QWEN}), threads=1, max_length=512, max_context_length=4096, live=True
            ),
            WorkerState(
                id="b", models=frozenset({QWEN}), threads=2, max_length=1024, max_context_length=16384, live=False
            ),
        ),
    )
    listed = model_list(entries, "auto", snapshot)
    assert ModelList.model_validate(listed).model_dump(mode="json") == listed
    qwen, other = listed["data"]
    assert (qwen["context_length"], qwen["top_provider"], qwen["x_horde"]["threads"]) == (
        16384,
        {"context_length": 16384, "max_completion_tokens": 1024, "is_moderated": False},
        3,
    )
    assert (other["context_length"], other["top_provider"]["max_completion_tokens"], other["x_horde"]["threads"]) == (
        None,
        None,
        None,
    )
    beyond = WorkerState(
        id="c", models=frozenset({QWEN}), threads=1, max_length=99999, max_context_length=4096, live=True
    )
    [card] = model_list(entries[:1], "auto", WorkerSnapshot(read_at=0.0, workers=(beyond,)))["data"]
    assert card["top_provider"]["max_completion_tokens"] == MAX_TEXT_MAX_LENGTH  # never above the text API's bound


def test_a_legacy_completion_is_lowered_and_reports_it_too() -> None:
    from chat.reading.completions import read_completion_request
    from chat.rendering.text_completion import build_text_completion
    from chat.serving.text_route import prepare_completion_request

    legacy = read_completion_request(json.dumps({"model": QWEN, "prompt": "Once upon", "max_tokens": 1024}).encode())
    prepared = prepare_completion_request(legacy, LOWERED)
    assert (prepared.payload["params"]["max_length"], prepared.max_length) == (342, 342)
    assert "max_context_length" not in prepared.payload["params"]
    body = {"done": True, "finished": 1, "generations": [{"text": "y" * 4000, "model": QWEN, "worker_id": "w"}]}
    completion = build_text_completion(legacy, prepared, native_status(body, prepared), "req-2", 0)
    assert completion["x_horde"] == {
        "api": "text",
        "context_adjustments": list(LOWERED.adjustments),
        "estimated_usage": True,
    }
    assert (completion["usage"]["completion_tokens"], completion["choices"][0]["finish_reason"]) == (342, "length")


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    memory = InMemoryMetricReader()
    configure_metrics(MeterProvider(metric_readers=[memory], views=histogram_views()))
    yield memory
    chat_metrics._metrics = None


def test_the_finished_line_and_the_metric_record_the_lowered_limit(reader: InMemoryMetricReader) -> None:
    """ref: completion-limit-source.1, completion-limit-source.3"""
    request = chat()
    prepared = prepare_chat_request(
        request,
        TextBounds(
            max_length=342,
            max_context_length=2048,
            adjustments=({"kind": "kudos_upfront", "requested": 512, "applied": 342},),
        ),
    )
    status = native_status({"done": True, "finished": 1, "generations": [{"text": "Hello.", "model": QWEN}]}, prepared)
    record = RequestRecord(request, request_id="r1", submitted_at=1.0)
    record.waiter = SimpleNamespace(
        last_status=status, first_status=status, wakes=1, woke_by="timer", woke_at=2.0, done_without_generation_reads=0
    )
    record.completion = build_completion(request, status, "r1", 0)
    values = record.finished_values()
    assert (values["max_tokens"], values["max_tokens_source"]) == (342, "lowered")
    record.finish()
    [limit] = [
        point
        for resource in (reader.get_metrics_data() or SimpleNamespace(resource_metrics=[])).resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "horde.oai.request.max_tokens"
        for point in metric.data.data_points
    ]
    assert (dict(limit.attributes), limit.sum) == ({"horde.source": "lowered"}, 342)
