"""The relayed stream's exact event sequences, driven with a fake runtime, a fake waiter and hand-fed delta queues.

Reference: "Relayed deltas", "Delta fields", "Pacing", "Final reply reconciliation", "Model and fingerprint",
"Redis reads and recovery". Entries put on the queue together form one read batch; :func:`settle` lets the stream
take them before the next batch. No assertion depends on wall time: keepalives and paced pieces are observed in
their order only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from chat.errors import OpenAIError
from chat.horde.delta_stream import DeltaEntry
from chat.horde.native import NativeStatus
from chat.protocol.chat_request import ChatCompletionRequest
from chat.rendering.completion import buffered_chunks, build_system_fingerprint
from chat.rendering.sse import DONE_EVENT, KEEPALIVE_COMMENT
from chat.streaming.pacing import plan_pieces
from chat.streaming.relayed import STREAM_DIVERGED_MESSAGE, relayed_stream

pytestmark = pytest.mark.asyncio

REQUEST_ID = "req-relay-1"
CREATED = 1700000000
WORKER = "8d5b7c0e-0000-4000-8000-000000000001"
OTHER_WORKER = "8d5b7c0e-0000-4000-8000-000000000002"
GUARD_SECONDS = 10.0
"""Only a guard against a hung test; no assertion depends on it."""


# --- fakes --------------------------------------------------------------------------------------------------------


class FakeDeltas:
    """Stands in for chat.horde.delta_stream.DeltaStreamReader: one queue per registered request, fed by the test."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[DeltaEntry]] = {}
        self.registered: list[str] = []
        self.unregistered: list[str] = []

    def register(self, request_id: str) -> asyncio.Queue[DeltaEntry]:
        self.registered.append(request_id)
        queue = self.queues[request_id] = asyncio.Queue()
        return queue

    def unregister(self, request_id: str) -> None:
        self.unregistered.append(request_id)


class FakeWaiter:
    """Stands in for chat.waiting.waiter.ChatWaiter: ``wait_done`` returns (or raises) what the test sets."""

    def __init__(self, **settings: float) -> None:
        defaults = {
            "keepalive_seconds": 3600.0,
            "delta_pacing_max_window_seconds": 0.0,
            "delta_pacing_max_chunks_per_second": 20.0,
            "progress_chunk_seconds": 0.0,
        }
        self.settings = SimpleNamespace(**{**defaults, **settings})
        self.request_id = REQUEST_ID
        self.progress = None  # no read: keepalives are the bare comment (chat.streaming.progress)
        self.outcome: asyncio.Future[NativeStatus] = asyncio.get_running_loop().create_future()
        self.wait_cancelled = False

    async def wait_done(self, status: NativeStatus | None = None) -> NativeStatus:
        try:
            return await self.outcome
        except asyncio.CancelledError:
            self.wait_cancelled = True
            raise


class Run:
    """One relayed stream consumed by a background task; events are collected as they are yielded."""

    def __init__(self, request: ChatCompletionRequest, **settings: float) -> None:
        self.deltas = FakeDeltas()
        self.waiter = FakeWaiter(**settings)
        self.ended = 0
        self.raw: list[bytes] = []
        runtime = SimpleNamespace(deltas=self.deltas, settings=self.waiter.settings)
        self.stream: AsyncIterator[bytes] = relayed_stream(
            request,
            self.waiter,
            NativeStatus(),
            CREATED,
            self.on_end,
            runtime,  # type: ignore[arg-type]
        )
        self.task = asyncio.ensure_future(self._consume())

    def on_end(self) -> None:
        self.ended += 1

    async def _consume(self) -> None:
        async for event in self.stream:
            self.raw.append(event)

    @property
    def queue(self) -> asyncio.Queue[DeltaEntry]:
        return self.deltas.queues[REQUEST_ID]

    async def feed(self, *entries: DeltaEntry, read: bool = True) -> None:
        """Queue ``entries`` as one read batch and let the stream take them (``read=False``: the stream stopped
        reading, as after a broken relay, so they stay queued)."""
        await settle()
        for entry in entries:
            self.queue.put_nowait(entry)
        await settle()
        assert self.queue.empty() is read

    async def finish(self, status: NativeStatus | OpenAIError) -> list[Any]:
        """Let the wait end with ``status`` (or raise it) and return every event of the stream."""
        await settle()
        if isinstance(status, OpenAIError):
            self.waiter.outcome.set_exception(status)
        else:
            self.waiter.outcome.set_result(status)
        await asyncio.wait_for(self.task, GUARD_SECONDS)
        return self.events

    @property
    def events(self) -> list[Any]:
        return [parse(event) for event in self.raw]


async def settle() -> None:
    """Run the event loop until the stream has handled what it can without a timer."""
    for _ in range(50):
        await asyncio.sleep(0)


async def wait_for_events(run: Run, count: int) -> None:
    """Wait until the stream yielded ``count`` events."""

    async def reached() -> None:
        while len(run.raw) < count:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(reached(), GUARD_SECONDS)


# --- builders -----------------------------------------------------------------------------------------------------


def request(**extra: Any) -> ChatCompletionRequest:
    body = {"model": "org/m", "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}
    if "models" in extra:
        body.pop("model")
    return ChatCompletionRequest.model_validate(body)


_ids = iter(range(1, 1_000_000))


def delta(
    gen: str,
    seq: int,
    text: str = "",
    reasoning: str = "",
    *,
    model: str | None = "org/m",
    worker: str | None = WORKER,
    ms: int | None = None,
) -> DeltaEntry:
    fields = {"gen": gen, "seq": str(seq), "text": text, "reasoning": reasoning}
    if model is not None:
        fields["model"] = model
    if worker is not None:
        fields["worker"] = worker
    stream_ms = ms if ms is not None else 1_700_000_000_000 + seq * 500
    return DeltaEntry.from_fields(f"{stream_ms}-{next(_ids)}", fields)


def ended(gen: str, reason: str | None = "completed", *, ms: int = 1_700_000_009_000) -> DeltaEntry:
    fields = {"gen": gen, "ended": "1"}
    if reason is not None:
        fields["reason"] = reason
    return DeltaEntry.from_fields(f"{ms}-{next(_ids)}", fields)


def final(content: str, reasoning: str | None = None, *, model: str = "org/m", worker: str = WORKER) -> NativeStatus:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return NativeStatus.model_validate(
        {
            "done": True,
            "finished": 1,
            "stream_progress": True,
            "generations": [
                {
                    "id": "gen-final",
                    "worker_id": worker,
                    "model": model,
                    "message": message,
                    "finish_reason": "stop",
                    "native_finish_reason": "eos_token",
                    "prompt_tokens": 5,
                    "completion_tokens": 9,
                }
            ],
        }
    )


def parse(event: bytes) -> Any:
    """``":"`` for a keepalive, ``"[DONE]"``, or the event's JSON."""
    if event == KEEPALIVE_COMMENT:
        return ":"
    if event == DONE_EVENT:
        return "[DONE]"
    assert event.startswith(b"data: ") and event.endswith(b"\n\n"), event
    return json.loads(event[6:-2])


def deltas(events: list[Any]) -> list[Any]:
    """Each event reduced to what a test compares: the delta, ``"finish:<reason>"``, ``"usage"``, the error code,
    ``":"`` or ``"[DONE]"``."""
    reduced: list[Any] = []
    for event in events:
        if isinstance(event, str):
            reduced.append(event)
        elif "error" in event:
            reduced.append(f"error:{event['error']['code']}")
        elif not event["choices"]:
            reduced.append("usage")
        elif event["choices"][0]["finish_reason"] is not None:
            reduced.append(f"finish:{event['choices'][0]['finish_reason']}")
        else:
            reduced.append(event["choices"][0]["delta"])
    return reduced


def buffered_events(req: ChatCompletionRequest, status: NativeStatus) -> list[Any]:
    return [*buffered_chunks(req, status, REQUEST_ID, CREATED), "[DONE]"]


# --- exposure, fields, model and fingerprint ----------------------------------------------------------------------


async def test_each_delta_is_relayed_whole_then_the_remainder_finish_usage_and_done() -> None:
    """ref: delta-fields.1, delta-fields.2, delta-fields.3, delta-fields.6, pacing.1, pacing.18,
    final-reply-reconciliation.4, model-and-fingerprint.7, buffered-stream-events.12"""
    run = Run(request(stream_options={"include_usage": True}))
    await run.feed(delta("A", 1, "Hello"))
    await run.feed(delta("A", 2, " wide"))
    await run.feed(delta("A", 3, " world"))
    events = await run.finish(final("Hello wide world."))
    fingerprint = build_system_fingerprint(WORKER, "org/m")
    common = {
        "id": f"chatcmpl-{REQUEST_ID}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "org/m",
        "system_fingerprint": fingerprint,
    }

    def chunk(delta_: dict[str, Any]) -> dict[str, Any]:
        return {
            **common,
            "choices": [{"index": 0, "delta": delta_, "logprobs": None, "finish_reason": None}],
            "usage": None,
        }

    assert fingerprint is not None and fingerprint.startswith("fp_")
    assert events == [
        chunk({"role": "assistant"}),
        chunk({"content": "Hello"}),
        chunk({"content": " wide"}),
        chunk({"content": " world"}),
        chunk({"content": "."}),
        {
            **common,
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": "stop",
                    "native_finish_reason": "eos_token",
                    "x_horde": {},
                }
            ],
            "usage": None,
        },
        {**common, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}},
        "[DONE]",
    ]
    assert run.deltas.registered == [REQUEST_ID]
    assert REQUEST_ID in run.deltas.unregistered
    assert run.ended == 1


async def test_reasoning_chunk_precedes_content_chunk_and_final_reasoning_rest_precedes_text_rest() -> None:
    """ref: delta-fields.3, final-reply-reconciliation.1, final-reply-reconciliation.2"""
    run = Run(request())
    await run.feed(delta("A", 1, reasoning="Think"))
    await run.feed(delta("A", 2, "Hi", reasoning=" more"))
    events = await run.finish(final("Hi there", "Think more."))
    assert deltas(events) == [
        {"role": "assistant"},
        {"reasoning_content": "Think"},
        {"reasoning_content": " more"},
        {"content": "Hi"},
        {"reasoning_content": "."},
        {"content": " there"},
        "finish:stop",
        "[DONE]",
    ]


async def test_final_reasoning_that_does_not_continue_the_relayed_one_sends_no_more_reasoning() -> None:
    """ref: final-reply-reconciliation.1, final-reply-reconciliation.3"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hi", reasoning="Think"))
    events = await run.finish(final("Hi there", "Other thoughts entirely"))
    assert deltas(events) == [
        {"role": "assistant"},
        {"reasoning_content": "Think"},
        {"content": "Hi"},
        {"content": " there"},
        "finish:stop",
        "[DONE]",
    ]


async def test_hidden_reasoning_is_discarded_and_a_reasoning_only_delta_still_advances_the_sequence() -> None:
    """The reasoning-only seq 1 does not expose the stream; seq 2 is no gap, so its text is relayed.

    ref: delta-fields.2, delta-fields.4, delta-fields.5, buffered-stream-events.5"""
    run = Run(request(horde={"include_reasoning": False}))
    await run.feed(delta("A", 1, reasoning="Secret plan"))
    assert run.raw == []
    await run.feed(delta("A", 2, "Hi", reasoning=" more"))
    await run.feed(delta("A", 3, " there"))
    events = await run.finish(final("Hi there!", "Secret plan more"))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hi"},
        {"content": " there"},
        {"content": "!"},
        "finish:stop",
        "[DONE]",
    ]


async def test_model_less_worker_less_deltas_use_the_first_listed_model_and_a_null_fingerprint_throughout() -> None:
    """The final generation names org/b and a worker, yet every chunk, the final ones too, keeps the first delta's.

    ref: delta-fields.6, delta-fields.7, model-and-fingerprint.7, model-and-fingerprint.8"""
    run = Run(request(models=["org/a", "org/b"]))
    await run.feed(delta("A", 1, "Hello", model=None, worker=None))
    events = await run.finish(final("Hello there", model="org/b", worker=WORKER))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": " there"},
        "finish:stop",
        "[DONE]",
    ]
    chunks = events[:-1]
    assert {chunk["model"] for chunk in chunks} == {"org/a"}
    assert {chunk["system_fingerprint"] for chunk in chunks} == {None}


async def test_model_less_delta_with_a_worker_fingerprints_the_worker_with_the_request_model() -> None:
    """ref: delta-fields.6, delta-fields.7, model-and-fingerprint.7"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello", model=None))
    events = await run.finish(final("Hello", model="org/m"))
    chunks = events[:-1]
    assert deltas(events) == [{"role": "assistant"}, {"content": "Hello"}, "finish:stop", "[DONE]"]
    assert {chunk["model"] for chunk in chunks} == {"org/m"}
    assert {chunk["system_fingerprint"] for chunk in chunks} == {build_system_fingerprint(WORKER, "org/m")}


async def test_the_first_delta_s_model_and_worker_hold_for_the_final_chunks_after_a_restart() -> None:
    """ref: model-and-fingerprint.7, delta-fields.6"""
    run = Run(request(models=["org/a", "org/b"]))
    await run.feed(delta("A", 1, "Same", model="org/b", worker=WORKER))
    await run.feed(ended("A", "restarted"))
    events = await run.finish(final("Same text", model="org/a", worker=OTHER_WORKER))
    assert {chunk["model"] for chunk in events[:-1]} == {"org/b"}
    assert {chunk["system_fingerprint"] for chunk in events[:-1]} == {build_system_fingerprint(WORKER, "org/b")}


# --- before exposure ----------------------------------------------------------------------------------------------


async def test_a_stream_without_deltas_is_delivered_whole_like_the_buffered_stream() -> None:
    """A worker that posts no progress, or a stream that stopped before anything was sent.

    ref: relayed-deltas.4, redis-reads-and-recovery.6"""
    req = request(stream_options={"include_usage": True})
    run = Run(req)
    status = final("The whole reply.", "Why.")
    events = await run.finish(status)
    assert events == buffered_events(req, status)
    assert deltas(events) == [
        {"role": "assistant"},
        {"reasoning_content": "Why."},
        {"content": "The whole reply."},
        "finish:stop",
        "usage",
        "[DONE]",
    ]


async def test_a_delta_read_with_its_generation_s_ended_marker_is_dropped_and_the_reply_delivered_whole() -> None:
    """ref: final-reply-reconciliation.6, final-reply-reconciliation.7, relayed-deltas.4"""
    req = request()
    run = Run(req)
    await run.feed(delta("A", 1, "Hello"), delta("A", 2, " there"), ended("A", "restarted"))
    assert run.raw == []
    status = final("A different reply.")
    assert await run.finish(status) == buffered_events(req, status)


async def test_after_a_dropped_attempt_the_next_attempt_s_first_delta_pins_and_exposes() -> None:
    """ref: final-reply-reconciliation.6, final-reply-reconciliation.7, delta-fields.1"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello"), ended("A", "restarted"), delta("B", 1, "Second", model="org/b"))
    await run.feed(delta("B", 2, " try"))
    events = await run.finish(final("Second try.", model="org/b"))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Second"},
        {"content": " try"},
        {"content": "."},
        "finish:stop",
        "[DONE]",
    ]
    assert {chunk["model"] for chunk in events[:-1]} == {"org/b"}


async def test_an_ended_marker_before_exposure_unpins_so_the_attempt_s_later_delta_is_not_relayed() -> None:
    """seq 1 carries nothing to send; the marker unpins A, so A's seq 2 (no first delta) pins nothing.

    ref: final-reply-reconciliation.6, final-reply-reconciliation.7, delta-fields.1"""
    req = request()
    run = Run(req)
    await run.feed(delta("A", 1, ""))
    await run.feed(ended("A", None))
    await run.feed(delta("A", 2, "ghost"))
    assert run.raw == []
    status = final("ghost and more")
    assert await run.finish(status) == buffered_events(req, status)


async def test_a_gap_before_exposure_unpins_and_the_next_attempt_pins_again() -> None:
    """Hidden reasoning keeps A unexposed; seq 3 after seq 1 is a gap, A's later deltas are ignored, B pins.

    ref: final-reply-reconciliation.7, delta-fields.1, delta-fields.4"""
    run = Run(request(horde={"include_reasoning": False}))
    await run.feed(delta("A", 1, reasoning="hmm"))
    await run.feed(delta("A", 3, "lost"))
    await run.feed(delta("A", 4, " also lost"))
    assert run.raw == []
    await run.feed(delta("B", 1, "Fresh", worker=OTHER_WORKER))
    events = await run.finish(final("Fresh start", worker=OTHER_WORKER))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Fresh"},
        {"content": " start"},
        "finish:stop",
        "[DONE]",
    ]
    assert {chunk["system_fingerprint"] for chunk in events[:-1]} == {build_system_fingerprint(OTHER_WORKER, "org/m")}


async def test_a_gap_before_exposure_without_another_attempt_delivers_the_reply_whole() -> None:
    """ref: final-reply-reconciliation.7, relayed-deltas.4"""
    req = request(horde={"include_reasoning": False})
    run = Run(req)
    await run.feed(delta("A", 1, reasoning="hmm"))
    await run.feed(delta("A", 3, "after the gap"))
    status = final("before the gap after the gap", "hmm")
    assert await run.finish(status) == buffered_events(req, status)


async def test_a_first_read_without_seq_1_pins_nothing() -> None:
    """ref: delta-fields.1, relayed-deltas.4"""
    req = request()
    run = Run(req)
    await run.feed(delta("A", 2, "middle"))
    status = final("start middle")
    assert await run.finish(status) == buffered_events(req, status)


# --- after exposure -----------------------------------------------------------------------------------------------


async def test_a_restart_after_exposure_is_not_appended_and_a_diverging_final_reply_is_chatstreamdiverged() -> None:
    """ref: final-reply-reconciliation.5, final-reply-reconciliation.8"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello"))
    await run.feed(delta("B", 1, "Goodbye"))
    await run.feed(delta("B", 2, " now"), read=False)
    events = await run.finish(final("Goodbye now"))
    assert deltas(events)[:2] == [{"role": "assistant"}, {"content": "Hello"}]
    assert events[2:] == [
        {
            "error": {
                "message": STREAM_DIVERGED_MESSAGE,
                "type": "api_error",
                "param": None,
                "code": "ChatStreamDiverged",
                "metadata": {"request_id": REQUEST_ID},
            }
        },
        "[DONE]",
    ]
    assert run.ended == 1


async def test_a_restarted_marker_after_exposure_breaks_the_relay_and_a_matching_final_reply_sends_the_rest() -> None:
    """The new attempt re-posts the text from its start; none of it is appended, nothing is sent twice.

    ref: final-reply-reconciliation.5, final-reply-reconciliation.4"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello"))
    await run.feed(ended("A", "restarted"))
    await run.feed(delta("B", 1, "Hello", worker=OTHER_WORKER), read=False)
    await run.feed(delta("B", 2, " world", worker=OTHER_WORKER), read=False)
    events = await run.finish(final("Hello world", worker=OTHER_WORKER))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": " world"},
        "finish:stop",
        "[DONE]",
    ]
    assert run.deltas.unregistered.count(REQUEST_ID) >= 1


async def test_a_gap_after_exposure_breaks_the_relay_and_the_final_reply_fills_in() -> None:
    """ref: final-reply-reconciliation.5, redis-reads-and-recovery.6"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello"))
    await run.feed(delta("A", 3, " there"))
    await run.feed(delta("A", 4, " friend"), read=False)
    events = await run.finish(final("Hello world there friend"))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": " world there friend"},
        "finish:stop",
        "[DONE]",
    ]


async def test_a_completed_marker_and_a_stream_that_stops_leave_the_rest_to_the_final_reply() -> None:
    """ref: redis-reads-and-recovery.6, final-reply-reconciliation.4"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello"), delta("A", 2, " there"))
    await run.feed(ended("A", "completed"))
    events = await run.finish(final("Hello there, friend."))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": " there"},
        {"content": ", friend."},
        "finish:stop",
        "[DONE]",
    ]


async def test_a_final_text_that_does_not_start_with_the_relayed_text_is_chatstreamdiverged() -> None:
    """ref: final-reply-reconciliation.8"""
    run = Run(request(stream_options={"include_usage": True}))
    await run.feed(delta("A", 1, "Hello"))
    events = await run.finish(final("Correction: Hello"))
    assert deltas(events) == [{"role": "assistant"}, {"content": "Hello"}, "error:ChatStreamDiverged", "[DONE]"]
    assert events[2]["error"]["type"] == "api_error"
    assert events[2]["error"]["param"] is None
    assert events[2]["error"]["metadata"] == {"request_id": REQUEST_ID}


async def test_a_wait_error_after_exposure_is_the_sse_error_event() -> None:
    """ref: stream-errors.2"""
    run = Run(request())
    await run.feed(delta("A", 1, "Hello"))
    error = OpenAIError(
        status=502,
        message="The worker faulted the request (generation_error).",
        code="ChatRequestFaulted",
        metadata={"request_id": REQUEST_ID},
    )
    events = await run.finish(error)
    assert deltas(events) == [{"role": "assistant"}, {"content": "Hello"}, "error:ChatRequestFaulted", "[DONE]"]
    assert events[2] == error.envelope()


# --- pacing, keepalives, disconnect -------------------------------------------------------------------------------


PACED = {"delta_pacing_max_window_seconds": 50.0, "delta_pacing_max_chunks_per_second": 0.2}
"""A 50 s window at 0.2 pieces per second: 10 pieces of a later delta, due 5 s apart, far beyond any test step."""


async def test_a_later_delta_is_paced_and_its_pending_pieces_flush_at_once_when_the_request_finishes() -> None:
    """ref: pacing.1, pacing.2, pacing.3, pacing.4, pacing.16"""
    run = Run(request(), **PACED)
    text = " alpha beta gamma delta epsilon"
    await run.feed(delta("A", 1, "Hello", ms=1_000_000))
    await run.feed(delta("A", 2, text, ms=1_050_000))  # a 50 s gap: the window is 50 s, 10 pieces
    pieces = [piece.text for piece in plan_pieces("", text, 50.0, 0.2)]
    assert len(pieces) == 10
    await wait_for_events(run, 3)
    events = await run.finish(final("Hello" + text + "!"))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": pieces[0]},
        {"content": "".join(pieces[1:])},
        {"content": "!"},
        "finish:stop",
        "[DONE]",
    ]


async def test_a_read_batch_of_several_deltas_is_paced_as_one_merged_plan_not_sent_as_a_burst() -> None:
    """Deltas read in one batch (after a slow or failed read) arrive together: their text is merged and spread over
    one window from the arrival, so one piece goes at once, not one per delta; the rest flush at the finish.
    ref: pacing.3, pacing.14, pacing.15, pacing.16"""
    run = Run(request(), **PACED)
    await run.feed(delta("A", 1, "Hello", ms=1_000_000))
    batch = [" alpha beta", " gamma delta", " epsilon zeta", " eta theta"]
    await run.feed(*(delta("A", seq, text, ms=1_000_000 + (seq - 1) * 50_000) for seq, text in enumerate(batch, 2)))
    plan = [piece.text for piece in plan_pieces("", "".join(batch), 50.0, 0.2)]
    assert len(plan) == 10
    await wait_for_events(run, 3)
    await settle()
    assert deltas(run.events) == [{"role": "assistant"}, {"content": "Hello"}, {"content": plan[0]}]
    events = await run.finish(final("Hello" + "".join(batch)))
    assert deltas(events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": plan[0]},
        {"content": "".join(plan[1:])},
        "finish:stop",
        "[DONE]",
    ]


async def test_a_restart_flushes_the_pending_pieces_at_once_before_reconciliation() -> None:
    """ref: pacing.16, final-reply-reconciliation.5"""
    run = Run(request(), **PACED)
    text = " alpha beta gamma delta epsilon"
    await run.feed(delta("A", 1, "Hello", ms=1_000_000))
    await run.feed(delta("A", 2, text, ms=1_050_000))
    pieces = [piece.text for piece in plan_pieces("", text, 50.0, 0.2)]
    await wait_for_events(run, 3)
    await run.feed(ended("A", "restarted"))
    await wait_for_events(run, 4)
    assert deltas(run.events) == [
        {"role": "assistant"},
        {"content": "Hello"},
        {"content": pieces[0]},
        {"content": "".join(pieces[1:])},
    ]
    events = await run.finish(final("Hello" + text))
    assert deltas(events)[4:] == ["finish:stop", "[DONE]"]


async def test_a_client_disconnect_drops_the_pending_pieces_and_still_ends_the_request() -> None:
    """ref: pacing.17"""
    run = Run(request(), **PACED)
    await run.feed(delta("A", 1, "Hello", ms=1_000_000))
    await run.feed(delta("A", 2, " alpha beta gamma delta epsilon", ms=1_050_000))
    await wait_for_events(run, 3)
    run.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run.task
    await settle()
    assert len(run.raw) == 3
    assert run.ended == 1
    assert run.waiter.wait_cancelled
    assert run.deltas.unregistered == [REQUEST_ID]


async def test_keepalive_comments_continue_while_waiting_and_between_deltas() -> None:
    """ref: delta-fields.8, buffered-stream-events.2"""
    run = Run(request(), keepalive_seconds=0.001)
    await wait_for_events(run, 1)
    assert run.events == [":"]
    await run.feed(delta("A", 1, "Hi"))
    first = len(run.raw)
    await wait_for_events(run, first + 1)
    await run.feed(delta("A", 2, " there"))
    events = await run.finish(final("Hi there"))
    reduced = list(deltas(events))
    start = reduced.index({"role": "assistant"})
    hi = reduced.index({"content": "Hi"})
    there = reduced.index({"content": " there"})
    assert set(reduced[:start]) == {":"}
    assert hi == start + 1
    assert there > hi + 1 and set(reduced[hi + 1 : there]) == {":"}
    assert [event for event in reduced[there:] if event != ":"] == [{"content": " there"}, "finish:stop", "[DONE]"]
    assert reduced[-1] == "[DONE]"
