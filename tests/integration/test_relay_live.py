"""Relayed streams end to end: the devhorde writes real progress to Redis, the front relays it, the SDK reads it.

Reference sections: "Relayed deltas", "Redis reads and recovery", "Delta fields", "Pacing", "Final reply
reconciliation", "Model and fingerprint". The shared stack (``stack``: the devhorde and the front, Redis
127.0.0.1:6379, stream database 11) serves :data:`RELAY_SCENARIO` and relays. Every test compares what the client
read with the final reply of the native status and, where it matters, with the entries the devhorde wrote to
``horde:chat:stream:<id>``.

(The in-process tests of the Redis side are ``tests/unit/test_delta_stream.py``; without package ``__init__`` files
pytest refuses two test modules with one basename, so each keeps its own.)
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
import redis

from chat.protocol.chat_request import ChatCompletionChunk
from tests.conftest import CONTROL_CLIENT, REDIS_URL, STREAM_REDIS_DB, LiveStack, Process, start_front

pytestmark = pytest.mark.integration

API_KEY = "0000000000"
PROMPT = [{"role": "user", "content": "Tell me about lighthouses and their keepers."}]
STRICT = "prompt_overflow_refused"
PACE = {"time_to_first_token_seconds": 0.05, "tokens_per_second": 20, "post_interval_seconds": 0.1}
"""Two words per post, ten posts a second: a reply takes a second or two, long enough to watch it arrive."""

# Worker ids of the scenario, new in each process: no two devhordes of a parallel run (pytest-xdist) share one.
PLAIN_ID = str(uuid.uuid4())
ANON_ID = str(uuid.uuid4())
FIXED_REPLY = "This reply comes from another worker entirely."

RELAY_SCENARIO: dict[str, Any] = {
    "name": "relay",
    "description": "One worker per relay case (tests/integration/test_relay_live.py).",
    "known_models": ["relay/first-listed"],
    "workers": [
        {"name": "plain-1", "id": PLAIN_ID, "model": "relay/plain-7b", "threads": 4, "reply_words": 24, **PACE},
        {
            "name": "reasoner-1",
            "model": "relay/reasoner-8b",
            "threads": 4,
            "reasoning": "always",
            "features": ["reasoning_effort", STRICT],
            "reply_words": 16,
            **PACE,
        },
        # Restarts once after two posts of reasoning (nothing to send when reasoning is hidden), then completes.
        {
            "name": "rethinker-1",
            "model": "relay/rethink-8b",
            "threads": 4,
            "reasoning": "always",
            "features": ["reasoning_effort", STRICT],
            "reply_words": 16,
            "restart_after_posts": 2,
            **PACE,
        },
        # Restarts once after two posts of text, then completes the same reply from its start.
        {
            "name": "restarter-1",
            "model": "relay/restart-7b",
            "threads": 4,
            "reply_words": 24,
            "restart_after_posts": 2,
            **PACE,
        },
        # Goes offline on command (the test does it mid-stream); fixed-1 then serves a different reply.
        {"name": "leaving-1", "model": "relay/leave-7b", "threads": 1, "reply_words": 40, **PACE},
        {
            "name": "fixed-1",
            "model": "relay/leave-7b",
            "threads": 1,
            "reply_style": "fixed",
            "fixed_reply": FIXED_REPLY,
            **PACE,
        },
        # seq 3 is never written.
        {"name": "gap-1", "model": "relay/gap-7b", "threads": 4, "reply_words": 24, "skip_seq": 3, **PACE},
        # Stream entries without a model field.
        {
            "name": "anon-1",
            "id": ANON_ID,
            "model": "relay/anon-7b",
            "threads": 4,
            "reply_words": 16,
            "omit_model_in_deltas": True,
            **PACE,
        },
        # Posts no progress.
        {
            "name": "silent-1",
            "model": "relay/silent-7b",
            "threads": 4,
            "reply_words": 16,
            "posts_progress": False,
            **PACE,
        },
    ],
}


def start_relay_front(
    tmp: Path, horde_url: str, redis_url: str, stream_db: int, env: dict[str, str] | None = None
) -> tuple[Process, str]:
    """Start a front (uvicorn, ``tests.conftest.start_front``) that relays deltas from ``redis_url`` (database
    ``stream_db``); return it and its base URL."""
    return start_front(
        tmp,
        horde_url,
        env={"HORDE_OAI_REDIS_URL": redis_url, "HORDE_OAI_STREAM_REDIS_DB": str(stream_db), **(env or {})},
    )


def fingerprint(worker_id: str, model: str) -> str:
    """fp_ + the first 10 hex characters of SHA-256 over the worker id followed by the model."""
    return "fp_" + hashlib.sha256(f"{worker_id}{model}".encode()).hexdigest()[:10]


@dataclass
class Streamed:
    """What one streamed request delivered to the SDK."""

    chunks: list[Any] = field(default_factory=list)
    error: openai.APIError | None = None
    states_at_content: list[str] = field(default_factory=list)
    """The native request's state when each of the first content chunks arrived."""

    @property
    def request_id(self) -> str:
        return self.chunks[0].id.removeprefix("chatcmpl-")

    def deltas(self) -> list[Any]:
        return [chunk.choices[0].delta for chunk in self.chunks if chunk.choices]

    def contents(self) -> list[str]:
        return [delta.content for delta in self.deltas() if delta.content]

    def reasonings(self) -> list[str]:
        return [text for delta in self.deltas() if (text := (delta.model_extra or {}).get("reasoning_content"))]

    def content(self) -> str:
        return "".join(self.contents())

    def reasoning(self) -> str:
        return "".join(self.reasonings())

    def kinds(self) -> list[str]:
        """Each chunk as ``role``, ``reasoning``, ``content``, ``finish:<reason>`` or ``usage``."""
        kinds = []
        for chunk in self.chunks:
            if not chunk.choices:
                kinds.append("usage")
                continue
            choice = chunk.choices[0]
            delta = choice.delta
            if choice.finish_reason is not None:
                kinds.append(f"finish:{choice.finish_reason}")
            elif delta.role:
                kinds.append("role")
            elif (delta.model_extra or {}).get("reasoning_content"):
                kinds.append("reasoning")
            elif delta.content:
                kinds.append("content")
            else:
                kinds.append("other")
        return kinds


def stream_chat(
    base_url: str, control_url: str | None = None, *, watch: int = 0, on_content: Any = None, **kwargs: Any
) -> Streamed:
    """Stream one completion with the official SDK; validate each chunk against
    ``chat.protocol.chat_request.ChatCompletionChunk``.

    ``watch``: record the native request's state (from ``control_url``) when each of the first ``watch`` content
    chunks arrives. ``on_content(n)`` is called after the n-th content chunk. An ``openai.APIError`` raised by the
    SDK for an error event is kept in ``error``.
    """
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=0, timeout=60)
    result = Streamed()
    seen = 0
    try:
        for chunk in client.chat.completions.create(stream=True, messages=PROMPT, **kwargs):
            sent = chunk.to_dict()
            validated = ChatCompletionChunk.model_validate(copy.deepcopy(sent))
            assert validated.model_dump(mode="json", exclude_unset=True) == sent
            result.chunks.append(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                seen += 1
                if seen <= watch and control_url is not None:
                    states = {entry["id"]: entry["state"] for entry in native_requests(control_url)}
                    result.states_at_content.append(states[chunk.id.removeprefix("chatcmpl-")])
                if on_content is not None:
                    on_content(seen)
    except openai.APIError as error:
        if isinstance(error, openai.APIStatusError | openai.APIConnectionError):
            raise
        result.error = error
    return result


def native_status(horde_url: str, request_id: str) -> dict[str, Any]:
    """The devhorde's native status of a request (read at every content chunk: :data:`CONTROL_CLIENT`)."""
    response = CONTROL_CLIENT.get(f"{horde_url}/v2/generate/chat/status/{request_id}", headers={"apikey": API_KEY})
    response.raise_for_status()
    return response.json()


def native_requests(control_url: str) -> list[dict[str, Any]]:
    """The devhorde's control listing of every request (payload, attempts, state)."""
    body = CONTROL_CLIENT.get(f"{control_url}/requests").json()
    return body["requests"] if isinstance(body, dict) else body


def native_request(control_url: str, request_id: str) -> dict[str, Any]:
    """The devhorde's control listing entry of one request."""
    return {entry["id"]: entry for entry in native_requests(control_url)}[request_id]


def stream_entries(redis_url: str, db: int, request_id: str) -> list[dict[str, str]]:
    """Every entry the devhorde wrote to ``horde:chat:stream:<request id>``, in order."""
    # Read database ``db`` by host and port, not through from_url, whose URL path would override ``db``.
    address = urlsplit(redis_url)
    client = redis.Redis(host=address.hostname, port=address.port or 6379, db=db, decode_responses=True)
    try:
        return [fields for _, fields in client.xrange(f"horde:chat:stream:{request_id}")]
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture
def relay_front(live_stack: LiveStack) -> str:
    """The shared front (Redis on 127.0.0.1:6379, stream database 11); its base URL."""
    return live_stack.front_url


@pytest.fixture
def relay(stack: LiveStack) -> LiveStack:
    """The shared devhorde serving :data:`RELAY_SCENARIO` (its default scenario comes back after the test)."""
    stack.put_scenario(RELAY_SCENARIO)
    return stack


def entries_of(request_id: str) -> list[dict[str, str]]:
    return stream_entries(REDIS_URL, STREAM_REDIS_DB, request_id)


# ---------------------------------------------------------------------------------------------------------------------
# Tests


def test_text_arrives_live_in_several_chunks_and_adds_up_to_the_final_reply(relay: LiveStack, relay_front: str) -> None:
    """ref: relayed-deltas.1, relayed-deltas.3, redis-reads-and-recovery.1, delta-fields.1, delta-fields.2,
    delta-fields.3, delta-fields.6, model-and-fingerprint.7, pacing.2, final-reply-reconciliation.4,
    buffered-stream-events.12, buffered-stream-events.13"""
    result = stream_chat(
        relay_front,
        relay.devhorde_control,
        watch=3,
        model="relay/plain-7b",
        max_tokens=200,
        stream_options={"include_usage": True},
    )
    assert result.error is None
    status = native_status(relay.horde_url, result.request_id)
    generation = status["generations"][0]
    assert status["stream_progress"] is True
    assert native_request(relay.devhorde_control, result.request_id)["payload"]["stream"] is True
    # The text arrived while the worker was still generating, in several chunks, and adds up to the final reply.
    assert result.states_at_content == ["processing", "processing", "processing"]
    assert len(result.contents()) >= 3
    assert result.content() == generation["message"]["content"]
    texts = [entry["text"] for entry in entries_of(result.request_id) if "ended" not in entry]
    assert "".join(texts) == generation["message"]["content"]
    kinds = result.kinds()
    assert kinds[0] == "role"
    assert kinds[-2:] == ["finish:stop", "usage"]
    assert set(kinds[1:-2]) == {"content"}
    assert {chunk.model for chunk in result.chunks} == {"relay/plain-7b"}
    assert {chunk.system_fingerprint for chunk in result.chunks} == {fingerprint(PLAIN_ID, "relay/plain-7b")}
    assert {chunk.id for chunk in result.chunks} == {f"chatcmpl-{result.request_id}"}
    assert result.chunks[-1].usage.completion_tokens == generation["completion_tokens"]


@pytest.mark.asyncio
async def test_async_sdk_reads_the_same_relay(relay: LiveStack, relay_front: str) -> None:
    """ref: delta-fields.2, delta-fields.3, final-reply-reconciliation.4"""
    client = openai.AsyncOpenAI(base_url=f"{relay_front}/v1", api_key=API_KEY, max_retries=0, timeout=60)
    stream = await client.chat.completions.create(model="relay/plain-7b", messages=PROMPT, stream=True)
    chunks = [chunk async for chunk in stream]
    contents = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    request_id = chunks[0].id.removeprefix("chatcmpl-")
    assert len(contents) >= 3
    assert "".join(contents) == native_status(relay.horde_url, request_id)["generations"][0]["message"]["content"]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_reasoning_is_relayed_before_the_text(relay: LiveStack, relay_front: str) -> None:
    """ref: delta-fields.3, final-reply-reconciliation.1, final-reply-reconciliation.2, pacing.8"""
    result = stream_chat(relay_front, model="relay/reasoner-8b", max_tokens=400)
    message = native_status(relay.horde_url, result.request_id)["generations"][0]["message"]
    assert message["reasoning_content"]
    assert len(result.reasonings()) >= 2
    assert result.reasoning() == message["reasoning_content"]
    assert result.content() == message["content"]
    kinds = result.kinds()
    assert kinds[0] == "role" and kinds[-1] == "finish:stop"
    assert kinds.index("content") > max(i for i, kind in enumerate(kinds) if kind == "reasoning")


def test_hidden_reasoning_is_discarded_and_the_text_is_still_relayed(relay: LiveStack, relay_front: str) -> None:
    """Reasoning-only posts advance the sequence: the text after them is relayed, never the reasoning.

    ref: delta-fields.4, delta-fields.5, delta-fields.2"""
    result = stream_chat(
        relay_front, model="relay/reasoner-8b", max_tokens=400, extra_body={"horde": {"include_reasoning": False}}
    )
    message = native_status(relay.horde_url, result.request_id)["generations"][0]["message"]
    assert message["reasoning_content"]
    entries = entries_of(result.request_id)
    assert entries[0]["reasoning"] and not entries[0]["text"]
    assert result.reasonings() == []
    assert len(result.contents()) >= 2
    assert result.content() == message["content"]
    assert set(result.kinds()) == {"role", "content", "finish:stop"}


def test_a_restart_before_exposure_is_dropped_and_the_next_attempt_is_relayed(
    relay: LiveStack, relay_front: str
) -> None:
    """The first attempt posts hidden reasoning only, then restarts; the second attempt's first delta pins again.

    ref: final-reply-reconciliation.6, final-reply-reconciliation.7, delta-fields.1, delta-fields.4"""
    result = stream_chat(
        relay_front, model="relay/rethink-8b", max_tokens=400, extra_body={"horde": {"include_reasoning": False}}
    )
    assert result.error is None
    native = native_request(relay.devhorde_control, result.request_id)
    assert [attempt["ended"] for attempt in native["attempts"]] == ["restarted", "completed"]
    first_gen = native["attempts"][0]["gen"]
    first = [entry for entry in entries_of(result.request_id) if entry["gen"] == first_gen]
    assert [entry.get("ended") for entry in first] == [None, None, "1"]
    assert all(not entry.get("text") for entry in first)
    message = native_status(relay.horde_url, result.request_id)["generations"][0]["message"]
    assert len(result.contents()) >= 2
    assert result.content() == message["content"]
    assert result.reasonings() == []


def test_a_restart_after_exposure_is_not_appended_and_the_final_reply_completes_the_text(
    relay: LiveStack, relay_front: str
) -> None:
    """The second attempt posts the same text again from its start; the client still reads it exactly once.

    ref: final-reply-reconciliation.5, final-reply-reconciliation.4"""
    result = stream_chat(relay_front, model="relay/restart-7b", max_tokens=200)
    assert result.error is None
    native = native_request(relay.devhorde_control, result.request_id)
    assert [attempt["ended"] for attempt in native["attempts"]] == ["restarted", "completed"]
    final = native_status(relay.horde_url, result.request_id)["generations"][0]["message"]["content"]
    relayed = "".join(entry["text"] for entry in entries_of(result.request_id) if "ended" not in entry)
    assert relayed != final and relayed.endswith(final)  # both attempts' text is in the stream
    assert result.content() == final
    assert result.kinds()[-1] == "finish:stop"


def test_a_restart_after_exposure_onto_a_different_reply_is_chatstreamdiverged(
    relay: LiveStack, relay_front: str
) -> None:
    """The serving worker leaves mid-stream; another worker answers differently. The SDK raises APIError.

    ref: final-reply-reconciliation.5, final-reply-reconciliation.8"""

    def leave(seen: int) -> None:
        if seen == 2:
            httpx.post(
                f"{relay.devhorde_control}/workers/leaving-1", json={"online": False}, timeout=5
            ).raise_for_status()

    result = stream_chat(relay_front, model="relay/leave-7b", max_tokens=200, on_content=leave)
    assert result.error is not None
    request_id = result.request_id
    assert result.error.code == "ChatStreamDiverged"
    assert result.error.type == "api_error"
    assert result.error.body == {
        "message": result.error.message,
        "type": "api_error",
        "param": None,
        "code": "ChatStreamDiverged",
        "metadata": {"request_id": request_id},
    }
    native = native_request(relay.devhorde_control, request_id)
    assert [attempt["worker_name"] for attempt in native["attempts"]] == ["leaving-1", "fixed-1"]
    assert native_status(relay.horde_url, request_id)["generations"][0]["message"]["content"] == FIXED_REPLY
    first_gen = native["attempts"][0]["gen"]
    first_text = "".join(
        entry["text"] for entry in entries_of(request_id) if entry["gen"] == first_gen and "ended" not in entry
    )
    assert len(result.contents()) >= 2
    assert first_text.startswith(result.content())
    assert FIXED_REPLY not in result.content()


def test_a_gap_after_exposure_stops_the_relay_and_the_final_reply_fills_in(relay: LiveStack, relay_front: str) -> None:
    """ref: final-reply-reconciliation.5, redis-reads-and-recovery.6, delta-fields.1"""
    result = stream_chat(relay_front, model="relay/gap-7b", max_tokens=200)
    assert result.error is None
    seqs = [int(entry["seq"]) for entry in entries_of(result.request_id) if "ended" not in entry]
    assert seqs[:3] == [1, 2, 4]
    final = native_status(relay.horde_url, result.request_id)["generations"][0]["message"]["content"]
    assert len(result.contents()) >= 2
    assert result.content() == final
    assert result.kinds()[-1] == "finish:stop"


def test_model_less_deltas_take_the_first_listed_model_for_every_chunk(relay: LiveStack, relay_front: str) -> None:
    """The worker serves the second listed model, but its entries carry no model.

    ref: delta-fields.6, delta-fields.7, model-and-fingerprint.7"""
    result = stream_chat(
        relay_front, model=openai.omit, max_tokens=200, extra_body={"models": ["relay/first-listed", "relay/anon-7b"]}
    )
    assert result.error is None
    generation = native_status(relay.horde_url, result.request_id)["generations"][0]
    assert generation["model"] == "relay/anon-7b"
    assert all("model" not in entry for entry in entries_of(result.request_id))
    assert len(result.contents()) >= 2
    assert result.content() == generation["message"]["content"]
    assert {chunk.model for chunk in result.chunks} == {"relay/first-listed"}
    assert {chunk.system_fingerprint for chunk in result.chunks} == {fingerprint(ANON_ID, "relay/first-listed")}


def test_a_worker_that_posts_no_progress_is_delivered_whole(relay: LiveStack, relay_front: str) -> None:
    """ref: relayed-deltas.4, buffered-stream-events.3, buffered-stream-events.7, buffered-stream-events.11"""
    result = stream_chat(relay_front, model="relay/silent-7b", max_tokens=200)
    status = native_status(relay.horde_url, result.request_id)
    assert status["stream_progress"] is False
    assert native_request(relay.devhorde_control, result.request_id)["payload"]["stream"] is True
    assert entries_of(result.request_id) == []
    assert result.kinds() == ["role", "content", "finish:stop"]
    assert result.content() == status["generations"][0]["message"]["content"]


def raw_sse_chunks(base_url: str, body: dict[str, Any]) -> list[Any]:
    """POST a streamed request with httpx and return every ``data:`` payload as sent: each chunk as the raw JSON
    object (no SDK model in between), then ``"[DONE]"``."""
    response = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    return [payload if payload == "[DONE]" else json.loads(payload) for payload in payloads]


@pytest.mark.parametrize(
    ("model", "relayed"),
    [("relay/plain-7b", True), ("relay/silent-7b", False)],
    ids=["relayed", "delivered-whole"],
)
@pytest.mark.parametrize("include_usage", [True, False])
def test_raw_chunks_carry_openais_null_fields(
    relay: LiveStack, relay_front: str, model: str, relayed: bool, include_usage: bool
) -> None:
    """Read as raw JSON, as a client without the SDK reads it: every chunk choice carries ``logprobs: null``; with
    ``stream_options.include_usage: true`` every chunk that has a choice carries ``usage: null`` and the last chunk
    before ``[DONE]`` has ``choices: []`` and the counts; without it no chunk has a ``usage`` key. Relayed (live
    pieces from Redis) and delivered whole alike.

    ref: buffered-stream-events.5, buffered-stream-events.12, buffered-stream-events.13, relayed-deltas.3,
    relayed-deltas.4"""
    events = raw_sse_chunks(
        relay_front,
        {"model": model, "messages": PROMPT, "max_tokens": 200, "stream_options": {"include_usage": include_usage}},
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    request_id = chunks[0]["id"].removeprefix("chatcmpl-")
    assert native_request(relay.devhorde_control, request_id)["payload"].get("stream") is True
    assert native_status(relay.horde_url, request_id)["stream_progress"] is relayed
    with_choices = [chunk for chunk in chunks if chunk["choices"]]
    contents = [chunk for chunk in with_choices if chunk["choices"][0]["delta"].get("content")]
    assert len(contents) >= 3 if relayed else len(contents) == 1
    assert with_choices[-1]["choices"][0]["finish_reason"] == "stop"
    for chunk in with_choices:
        assert chunk["choices"][0]["logprobs"] is None
        assert ("usage" in chunk, chunk.get("usage")) == (include_usage, None), chunk
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
        assert len(with_choices) == len(chunks) - 1
    else:
        assert len(with_choices) == len(chunks)
