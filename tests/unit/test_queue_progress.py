"""Queue progress (issues 25 and 26): the texts, headers and chunks of a waiting request's place, the keepalive rule
of chat.streaming.progress, the Responses form, and the waiter's DEBUG line. No real time is asserted: the rule is
driven with explicit clock values, the streams with a wait the test ends itself.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from loguru import logger

from chat.errors import OpenAIError
from chat.horde.native import NativeStatus
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.legacy_completion import CompletionRequest
from chat.protocol.responses_api import ResponsesRequest
from chat.reading.screening import read_chat_request
from chat.rendering.progress import PROCESSING, WAITING, QueueProgress, is_progress_chunk, progress_chunk
from chat.rendering.responses_events import ResponseEventWriter, response_events
from chat.rendering.sse import KEEPALIVE_COMMENT, data_event
from chat.streaming.buffered import buffered_stream
from chat.streaming.progress import StreamProgress
from chat.waiting.waiter import ChatWaiter

REQUEST_ID = "req-progress-1"
CREATED = 1700000000


def status(**fields: Any) -> NativeStatus:
    return NativeStatus.model_validate(fields)


def chat_request(**horde: Any) -> ChatCompletionRequest:
    body: dict[str, Any] = {"model": "org/m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    if horde:
        body["horde"] = horde
    return ChatCompletionRequest.model_validate(body)


# --- the forms ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"waiting": 1, "queue_position": 3, "wait_time": 12}, "queue position 3, estimated wait 12 s"),
        ({"waiting": 1, "queue_position": 0, "wait_time": 12}, "estimated wait 12 s"),
        ({"waiting": 1, "queue_position": 2, "wait_time": 0}, "queue position 2"),
        ({"waiting": 1}, "waiting for a worker"),
        ({"processing": 1}, "processing"),
        ({"done": True, "finished": 1}, "processing"),
        (
            {"waiting": 1, "queue_position": 1, "is_possible": False},
            "queue position 1, no online worker can serve it now",
        ),
        ({"processing": 1, "is_possible": False}, "processing"),
    ],
)
def test_progress_text_and_comment(fields: dict[str, Any], text: str) -> None:
    """Each read's place as text, and as the SSE comment a waiting stream sends instead of ``: keepalive``."""
    progress = QueueProgress.of(status(**fields))
    assert progress.text == text
    assert progress.comment() == f": {text}\n\n".encode()


THIRD_IN_LINE_X_HORDE: dict[str, Any] = {
    "queue": {
        "state": "waiting",
        "queue_position": 3,
        "wait_time": 12,
        "waiting": 1,
        "processing": 0,
        "is_possible": True,
    }
}
"""``x_horde`` of ``QueueProgress(WAITING, 3, 12, 1, 0)``: waiting third in line, 12 s estimated."""


def test_progress_x_horde_and_headers() -> None:
    progress = QueueProgress.of(status(waiting=1, queue_position=3, wait_time=12))
    assert progress == QueueProgress(WAITING, 3, 12, 1, 0)
    assert progress.x_horde() == THIRD_IN_LINE_X_HORDE
    assert progress.headers() == {"x-horde-queue-position": "3", "x-horde-wait-time": "12"}
    assert QueueProgress.of(status(waiting=1)).headers() == {}  # not placed yet: no header says "position 0"
    assert QueueProgress.of(status(processing=1, wait_time=4)).headers() == {
        "x-horde-queue-position": "0",
        "x-horde-wait-time": "4",
    }
    assert QueueProgress.of(status(processing=1, wait_time=4)).x_horde() == {
        "queue": {
            "state": "processing",
            "queue_position": 0,
            "wait_time": 4,
            "waiting": 0,
            "processing": 1,
            "is_possible": True,
        }
    }


def test_progress_chunks_of_chat_and_legacy_completions() -> None:
    """A chunk without a choice, as the usage chunk, carrying ``x_horde.queue``."""
    progress = QueueProgress(WAITING, 3, 12, 1, 0)
    chat = progress_chunk(
        progress, object_type="chat.completion.chunk", chunk_id="chatcmpl-r", created=CREATED, model="org/m"
    )
    assert chat == {
        "id": "chatcmpl-r",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "org/m",
        "system_fingerprint": None,
        "choices": [],
        "x_horde": THIRD_IN_LINE_X_HORDE,
    }
    legacy = progress_chunk(progress, object_type="text_completion", chunk_id="cmpl-r", created=CREATED, model="m")
    assert list(legacy) == ["id", "object", "created", "model", "choices", "x_horde"]
    assert is_progress_chunk(chat) and is_progress_chunk(legacy)
    usage_chunk = {"object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 3}}
    assert not is_progress_chunk(usage_chunk)
    assert not is_progress_chunk({"choices": [{"index": 0, "delta": {}}], "x_horde": {"queue": {}}})


# --- the keepalive rule -------------------------------------------------------------------------------------------


def fake_waiter(chunk_after: float = 60.0) -> Any:
    settings = SimpleNamespace(progress_chunk_seconds=chunk_after, keepalive_seconds=10.0)
    return SimpleNamespace(settings=settings, request_id=REQUEST_ID, progress=None)


def decoded(frame: bytes) -> dict[str, Any]:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    payload: dict[str, Any] = json.loads(frame[6:])
    return payload


def test_default_rule_comments_then_a_chunk_after_the_quiet_time() -> None:
    """Before any read: ``: keepalive``; then the read's comment; once 60 s passed without a data event, a progress
    chunk, and the next one only 60 s after it (LangChain's ``astream`` gives up after 120 s without a chunk)."""
    waiter = fake_waiter()
    progress = StreamProgress(chat_request(), waiter, CREATED, now=1000.0)
    assert progress.keepalive(1010.0) == KEEPALIVE_COMMENT
    waiter.progress = QueueProgress(WAITING, 3, 12, 1, 0)
    assert progress.keepalive(1020.0) == b": queue position 3, estimated wait 12 s\n\n"
    assert progress.keepalive(1059.9) == b": queue position 3, estimated wait 12 s\n\n"
    chunk = decoded(progress.keepalive(1060.0))
    assert chunk["id"] == f"chatcmpl-{REQUEST_ID}"
    assert chunk["model"] == "org/m"
    assert chunk["choices"] == []
    assert chunk["x_horde"]["queue"]["queue_position"] == 3
    assert progress.keepalive(1070.0) == b": queue position 3, estimated wait 12 s\n\n"
    assert progress.keepalive(1119.9).startswith(b": ")
    assert decoded(progress.keepalive(1120.0))["choices"] == []
    assert progress.chunks_sent == 2


def test_a_data_event_restarts_the_quiet_time() -> None:
    """A relayed stream's deltas are data events: no progress chunk comes within 60 s of one."""
    waiter = fake_waiter()
    waiter.progress = QueueProgress(PROCESSING, 0, 0, 0, 1)
    progress = StreamProgress(chat_request(), waiter, CREATED, now=0.0)
    progress.sent_data(50.0)
    assert progress.keepalive(100.0) == b": processing\n\n"
    assert decoded(progress.keepalive(110.0))["x_horde"]["queue"]["state"] == "processing"


def test_progress_true_sends_a_chunk_at_each_change() -> None:
    waiter = fake_waiter()
    progress = StreamProgress(chat_request(progress=True), waiter, CREATED, now=0.0)
    assert progress.keepalive(10.0) == KEEPALIVE_COMMENT
    waiter.progress = QueueProgress(WAITING, 2, 8, 1, 0)
    assert decoded(progress.keepalive(20.0))["x_horde"]["queue"]["queue_position"] == 2
    assert progress.keepalive(30.0) == b": queue position 2, estimated wait 8 s\n\n"
    waiter.progress = QueueProgress(WAITING, 1, 4, 1, 0)
    assert decoded(progress.keepalive(40.0))["x_horde"]["queue"]["queue_position"] == 1


def test_progress_false_and_zero_chunk_time() -> None:
    """``horde.progress: false``: bare keepalives only; ``HORDE_OAI_PROGRESS_CHUNK_SECONDS=0``: comments only."""
    waiter = fake_waiter()
    waiter.progress = QueueProgress(WAITING, 3, 12, 1, 0)
    off = StreamProgress(chat_request(progress=False), waiter, CREATED, now=0.0)
    assert [off.keepalive(t) for t in (10.0, 600.0)] == [KEEPALIVE_COMMENT, KEEPALIVE_COMMENT]
    never = StreamProgress(chat_request(), fake_waiter(chunk_after=0), CREATED, now=0.0)
    never.waiter.progress = waiter.progress
    assert never.keepalive(600.0) == b": queue position 3, estimated wait 12 s\n\n"


def test_legacy_completion_progress_chunk() -> None:
    waiter = fake_waiter()
    legacy = CompletionRequest.model_validate({"model": "org/t", "prompt": "Once", "stream": True})
    chunk = decoded(StreamProgress(legacy, waiter, CREATED, now=0.0).keepalive(60.0))
    assert {key: chunk[key] for key in ("id", "object", "model", "choices")} == {
        "id": f"cmpl-{REQUEST_ID}",
        "object": "text_completion",
        "model": "org/t",
        "choices": [],
    }


def test_the_option_is_refused_in_openais_envelope_when_not_a_boolean() -> None:
    body = {"model": "a/b", "messages": [{"role": "user", "content": "hi"}], "horde": {"progress": "yes"}}
    with pytest.raises(OpenAIError) as refused:
        read_chat_request(json.dumps(body).encode())
    error = refused.value
    assert (error.status, error.code, error.param, error.message) == (
        400,
        "BadRequest",
        "horde.progress",
        "Invalid type for 'horde.progress': expected a boolean, but got a string instead.",
    )


# --- the streams --------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_buffered_stream_sends_progress_comments_then_the_reference_chunks() -> None:
    """A buffered stream that waits sends the read's comment at each tick, then exactly the reference's chunks."""
    release = asyncio.Event()
    done = status(
        done=True,
        finished=1,
        generations=[{"worker_id": "w", "model": "org/m", "message": {"content": "Hi."}, "finish_reason": "stop"}],
    )

    class Waiter:
        settings = SimpleNamespace(keepalive_seconds=0.001, progress_chunk_seconds=0.0)
        request_id = REQUEST_ID
        progress: QueueProgress | None = QueueProgress(WAITING, 3, 12, 1, 0)

        async def wait_done(self, first: NativeStatus) -> NativeStatus:
            await release.wait()
            return done

    ended: list[bool] = []
    events = buffered_stream(chat_request(), Waiter(), status(waiting=1), CREATED, lambda: ended.append(True))  # type: ignore[arg-type]
    first = await anext(events)
    assert first == b": queue position 3, estimated wait 12 s\n\n"
    release.set()
    rest = [frame async for frame in events]
    frames = [frame for frame in rest if not frame.startswith(b":")]
    chunks = [decoded(frame) for frame in frames[:-1]]
    assert [chunk["choices"][0]["delta"] for chunk in chunks] == [{"role": "assistant"}, {"content": "Hi."}, {}]
    assert frames[-1] == b"data: [DONE]\n\n"
    assert ended == [True]


def responses_request() -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "org/m", "input": "hi", "stream": True})


@pytest.mark.asyncio
async def test_responses_stream_repeats_in_progress_with_the_queue() -> None:
    """A progress chunk becomes another ``response.in_progress`` (the same response, the next sequence number,
    ``x_horde.queue``); a progress comment passes through."""
    writer = ResponseEventWriter(responses_request(), REQUEST_ID, CREATED, "org/m")
    progress = QueueProgress(WAITING, 3, 12, 1, 0)
    chunk = progress_chunk(
        progress, object_type="chat.completion.chunk", chunk_id="chatcmpl-r", created=CREATED, model="org/m"
    )

    async def chat_events() -> Any:
        yield progress.comment()
        yield data_event(chunk)

    out = [frame async for frame in response_events(writer, chat_events(), [], lambda: CREATED)]
    typed = [frame for frame in out if frame.startswith(b"event: ")]
    assert out[2] == b": queue position 3, estimated wait 12 s\n\n"
    event = json.loads(typed[2].split(b"\ndata: ", 1)[1])
    assert typed[2].startswith(b"event: response.in_progress\n")
    assert event["sequence_number"] == 2
    assert event["response"]["status"] == "in_progress"
    assert event["response"]["output"] == []
    assert event["x_horde"] == progress.x_horde()


# --- the waiter ---------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_waiter_keeps_the_place_and_logs_each_change_at_debug() -> None:
    reads = iter(
        [
            status(waiting=1, queue_position=3, wait_time=12),
            status(waiting=1, queue_position=3, wait_time=12),
            status(waiting=1, queue_position=1, wait_time=4),
            status(processing=1),
        ]
    )

    class Horde:
        async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
            return next(reads)

    settings = SimpleNamespace(
        signal_recheck_seconds=1.0, signal_recheck_max_seconds=30.0, signal_recheck_reads_per_second=25.0
    )
    runtime = SimpleNamespace(horde=Horde(), signals=None, settings=settings)
    waiter = ChatWaiter(runtime, REQUEST_ID, None, timeout_seconds=60)  # type: ignore[arg-type]
    lines: list[str] = []
    sink = logger.add(lines.append, level="DEBUG", format="{level} {message}")
    try:
        for _ in range(4):
            await waiter.read()
    finally:
        logger.remove(sink)
    progress_lines = [line.strip() for line in lines if "queue progress" in line]
    assert progress_lines == [
        f"DEBUG Chat request {REQUEST_ID} queue progress: queue position 3, estimated wait 12 s "
        "(queue_position=3 wait_time=12 waiting=1 processing=0)",
        f"DEBUG Chat request {REQUEST_ID} queue progress: queue position 1, estimated wait 4 s "
        "(queue_position=1 wait_time=4 waiting=1 processing=0)",
        f"DEBUG Chat request {REQUEST_ID} queue progress: processing (queue_position=0 wait_time=0 waiting=0 "
        "processing=1)",
    ]
    assert waiter.progress == QueueProgress(PROCESSING, 0, 0, 0, 1)
    assert waiter.queued_progress == QueueProgress(WAITING, 1, 4, 1, 0)
