"""Queue progress a client can see, live (issues 25 and 26), on a devhorde whose one single-thread worker makes a
queue: two requests go first (one processing, one waiting), so the request under test reads queue position 2, then
1, then processing.

The front of this module has ``HORDE_OAI_PROGRESS_CHUNK_SECONDS=2`` (the default is 60 s, for LangChain's 120 s
chunk timeout), so a progress chunk goes out after 2 s without a data event; the queue makes the request wait about
three first-token times (:data:`FIRST_TOKEN_SECONDS` each), several times that. LangChain's ``ChatOpenAI.astream``
(which gives up when no chunk comes within ``stream_chunk_timeout``) runs over it with :data:`CHUNK_TIMEOUT_SECONDS`,
and its rule is applied to the official SDK's async stream too; a front with the default 60 s progress chunk serves
LangChain's default 120 s chunk timeout over a queue of :data:`LONG_QUEUE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from tests.conftest import ROOT, LiveStack, running_stack

if TYPE_CHECKING:
    from langchain_core.messages import AIMessageChunk
    from langchain_openai import ChatOpenAI

pytestmark = [pytest.mark.integration, pytest.mark.starts_first]

JS_DIR = ROOT / "tests" / "js"

MODEL = "progress/slow-8b"
FIRST_TOKEN_SECONDS = 4.0
"""The worker's time to first token: each request ahead holds the one thread about this long."""
TOKENS_PER_SECOND = 16
MAX_TOKENS = 64
"""Every request's ``max_tokens``: the devhorde's wait estimate is the queued ``max_length`` over the throughput, so
position 2 reads ``(64 + 64) / 16 = 8`` s and position 1 ``64 / 16 = 4`` s."""
PROGRESS_CHUNK_SECONDS = 2.0
CHUNK_TIMEOUT_SECONDS = 5.0
"""The simulated client's chunk timeout: the progress chunk time plus a keepalive interval (0.5 s) and a margin of
2.5 s for a busy machine, well under the request's wait before its first text (about 3 * 4 s)."""

SCENARIO: dict[str, Any] = {
    "name": "progress",
    "description": "One single-thread worker with a slow first token: requests queue (tests/integration).",
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "slow-1",
            "model": MODEL,
            "features": ["seed", "prompt_overflow_refused"],
            "max_context_length": 8192,
            "max_length": 1024,
            "threads": 1,
            "time_to_first_token_seconds": FIRST_TOKEN_SECONDS,
            "tokens_per_second": TOKENS_PER_SECOND,
            "post_interval_seconds": 0.05,
            "reply_words": 5,
        }
    ],
}


@pytest.fixture(scope="module")
def queue_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    front_env = {
        "HORDE_OAI_PROGRESS_CHUNK_SECONDS": str(PROGRESS_CHUNK_SECONDS),
        "HORDE_OAI_STREAM_TIMEOUT_SECONDS": "90",
        "HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": "90",
        "HORDE_OAI_LOG_LEVEL": "DEBUG",
    }
    with running_stack(tmp_path_factory.mktemp("progress"), front_env=front_env) as stack:
        stack.put_scenario(SCENARIO)
        yield stack


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": "Tell me about lighthouses."}],
        **extra,
    }


def wait_for_states(stack: LiveStack, states: list[str]) -> None:
    """Until the devhorde's requests are in ``states``, in submit order (a bound far above the scenario's times)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = [request["state"] for request in stack.native_requests()]
        if seen == states:
            return
        time.sleep(0.05)
    pytest.fail(f"the devhorde's requests never reached {states}: {seen}")


@pytest.fixture
def two_ahead(queue_stack: LiveStack) -> Iterator[LiveStack]:
    """Two requests ahead of the test's: the first processing, the second waiting (queue position 1)."""
    queue_stack.reset()
    threads = []
    for states in (["processing"], ["processing", "waiting"]):
        thread = threading.Thread(
            target=httpx.post,
            args=(f"{queue_stack.openai_base_url}/chat/completions",),
            kwargs={"json": body(), "headers": {"Authorization": "Bearer 0000000000"}, "timeout": 90},
        )
        thread.start()
        threads.append(thread)
        wait_for_states(queue_stack, states)
    try:
        yield queue_stack
    finally:
        for thread in threads:
            thread.join(90)


def read_sse(text: str) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    for line in text.splitlines():
        if line.startswith(":"):
            events.append(("comment", line[1:].strip()))
        elif line.startswith("data: "):
            payload = line.removeprefix("data: ")
            events.append(("done", None) if payload == "[DONE]" else ("data", json.loads(payload)))
    return events


def distinct(values: list[str]) -> list[str]:
    """``values`` without consecutive repeats."""
    return [value for index, value in enumerate(values) if index == 0 or values[index - 1] != value]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_sees_the_place_in_the_headers_comments_and_progress_chunks(two_ahead: LiveStack) -> None:
    """What ``curl -N`` shows of a stream that waits: the first read's place in the headers, each read's place as
    the keepalive comment (position 2, then 1, then processing), progress chunks (``choices: []``) while nothing
    else comes, then the reference's chunks unchanged, and the front's DEBUG line for each change."""
    completed = subprocess.run(
        [
            "curl",
            "-sN",
            "-D",
            "-",
            f"{two_ahead.openai_base_url}/chat/completions",
            "-H",
            "Authorization: Bearer 0000000000",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body(stream=True)),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=90,
    )
    head, _, stream = completed.stdout.partition("\n\n")  # text=True reads "\r\n" as "\n"
    headers = dict(line.lower().split(": ", 1) for line in head.splitlines()[1:])
    assert headers["x-horde-queue-position"] == "2"
    assert headers["x-horde-wait-time"] == "8"
    events = read_sse(stream)
    comments = [text for kind, text in events if kind == "comment"]
    assert distinct(comments) == [
        "queue position 2, estimated wait 8 s",
        "queue position 1, estimated wait 4 s",
        "processing",
    ]
    chunks = [payload for kind, payload in events if kind == "data"]
    progress = [chunk for chunk in chunks if chunk["choices"] == []]
    replies = [chunk for chunk in chunks if chunk["choices"]]
    assert progress, "no progress chunk during a wait of several PROGRESS_CHUNK_SECONDS"
    assert chunks.index(replies[0]) == len(progress), "progress chunks come only before the reply"
    assert {chunk["object"] for chunk in progress} == {"chat.completion.chunk"}
    assert {chunk["id"] for chunk in progress} == {replies[0]["id"]}
    states = distinct([chunk["x_horde"]["queue"]["state"] for chunk in progress])
    assert states in (["waiting"], ["waiting", "processing"])
    first_queue = progress[0]["x_horde"]["queue"]
    assert first_queue["queue_position"] in (1, 2)
    assert first_queue["wait_time"] == 4 * first_queue["queue_position"]
    assert replies[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert replies[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1] == ("done", None)
    request_id = replies[0]["id"].removeprefix("chatcmpl-")
    log = two_ahead.front.log()
    assert f"Chat request {request_id} queue progress: queue position 2, estimated wait 8 s" in log
    assert f"Chat request {request_id} queue progress: queue position 1, estimated wait 4 s" in log
    assert f"Chat request {request_id} queue progress: processing" in log


async def stream_with_chunk_timeout(stack: LiveStack, **extra: Any) -> list[Any]:
    """LangChain's ``astream`` rule on the official SDK: each chunk must come within :data:`CHUNK_TIMEOUT_SECONDS`
    (``asyncio.TimeoutError`` otherwise); returns the chunks."""
    client = openai.AsyncOpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=90)
    chunks = []
    async with client:
        stream = await client.chat.completions.create(**body(stream=True, **extra))
        iterator = aiter(stream)
        while True:
            try:
                chunk = await asyncio.wait_for(anext(iterator), CHUNK_TIMEOUT_SECONDS)
            except StopAsyncIteration:
                return chunks
            chunks.append(chunk)


def test_a_chunk_timeout_client_outlives_the_queue(two_ahead: LiveStack) -> None:
    """issue 26: a client that gives up after a time without a chunk completes over a queue longer than that time;
    the progress chunks are SDK chunks with no choice and ``x_horde.queue``."""
    chunks = asyncio.run(stream_with_chunk_timeout(two_ahead))
    progress = [chunk for chunk in chunks if not chunk.choices]
    assert progress
    assert all(chunk.model_extra and chunk.model_extra["x_horde"]["queue"]["state"] for chunk in progress)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_without_progress_the_same_client_gives_up(two_ahead: LiveStack) -> None:
    """``horde.progress: false`` keeps the bare keepalives of the reference: the same client times out in the queue
    (why the progress chunk exists)."""
    with pytest.raises(TimeoutError):
        asyncio.run(stream_with_chunk_timeout(two_ahead, extra_body={"horde": {"progress": False}}))


def test_a_non_streamed_reply_names_its_last_place_in_headers(two_ahead: LiveStack) -> None:
    """Through the official SDK: the completion's headers carry the last place read before a worker took it."""
    client = openai.OpenAI(base_url=two_ahead.openai_base_url, api_key="0000000000", max_retries=0, timeout=90)
    raw = client.chat.completions.with_raw_response.create(**body())
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert raw.headers["x-horde-queue-position"] == "1"
    assert raw.headers["x-horde-wait-time"] == "4"


def test_a_responses_stream_repeats_in_progress_while_it_waits(two_ahead: LiveStack) -> None:
    """Through the official SDK's Responses stream: the progress is a repeated ``response.in_progress`` carrying
    ``x_horde.queue``, which the SDK parses as it parses the first; the stream completes as usual."""
    client = openai.OpenAI(base_url=two_ahead.openai_base_url, api_key="0000000000", max_retries=0, timeout=90)
    stream = client.responses.create(
        model=MODEL, input="Tell me about lighthouses.", max_output_tokens=MAX_TOKENS, stream=True
    )
    events = list(stream)
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    repeats = [event for event in events[2:] if event.type == "response.in_progress"]
    assert repeats
    assert all(event.model_extra and event.model_extra["x_horde"]["queue"]["state"] for event in repeats)
    assert all(event.response.status == "in_progress" for event in repeats)
    assert types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert re.search(r"\w", events[-1].response.output_text)


@pytest.mark.parametrize("scenario", ["stream", "chat-stream"])
def test_the_vercel_ai_sdk_streams_through_the_progress(two_ahead: LiveStack, scenario: str) -> None:
    """The Vercel AI SDK's ``streamText`` over the queue, on the Responses API (repeated ``response.in_progress``)
    and on chat completions (progress chunks): the same parts as a stream that does not wait, no error."""
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "@ai-sdk" / "openai").is_dir():
        pytest.fail("Node.js and tests/js/node_modules are needed: run `make test` (it runs `npm ci` in tests/js).")
    completed = subprocess.run(
        [node, "ai_sdk_client.mjs", scenario],
        cwd=JS_DIR,
        env={**os.environ, "FRONT_BASE_URL": two_ahead.openai_base_url, "TEXT_MODEL": MODEL, "TOOL_MODEL": MODEL},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert "error" not in result, result
    assert result["text"].strip()
    assert result["finishReason"] == "stop"
    parts = [part for index, part in enumerate(result["parts"]) if index == 0 or result["parts"][index - 1] != part]
    assert parts == ["start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish"]


def chat_openai(**options: Any) -> ChatOpenAI:
    """LangChain's ``ChatOpenAI`` with ``options``. LangChain is imported here, by the tests that drive it: every
    pytest-xdist worker imports this file to collect it and one runs it, and LangChain takes over a second of CPU to
    import."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(**options)


async def langchain_astream(base_url: str, model: str, **options: Any) -> list[AIMessageChunk]:
    """LangChain's ``ChatOpenAI.astream`` on the front: every chunk it yields (its own chunk-timeout rule applies)."""
    chat = chat_openai(base_url=base_url, api_key="0000000000", model=model, max_retries=0, **options)
    return [chunk async for chunk in chat.astream("Tell me about lighthouses.")]


def test_langchain_astream_outlives_the_queue_on_progress_chunks(two_ahead: LiveStack) -> None:
    """issue 26, item 4: LangChain's ``astream`` with a chunk timeout shorter than the wait completes, counting the
    progress chunks (no choice) as chunks and joining the text of the others."""
    chunks = asyncio.run(
        langchain_astream(
            two_ahead.openai_base_url, MODEL, max_tokens=MAX_TOKENS, stream_chunk_timeout=CHUNK_TIMEOUT_SECONDS
        )
    )
    progress = [chunk for chunk in chunks if not chunk.content and not chunk.response_metadata.get("finish_reason")]
    assert progress, "no progress chunk reached LangChain"
    message = functools.reduce(operator.add, chunks)
    assert str(message.content).strip()
    assert message.response_metadata["finish_reason"] == "stop"


LONG_QUEUE_SECONDS = 130.0
"""The long-queue worker's time to first token: longer than LangChain's default ``stream_chunk_timeout`` (120 s)."""

LONG_QUEUE_MODEL = "progress/patient-8b"


@pytest.fixture(scope="module")
def long_queue_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """A front with the default progress chunk time (60 s) and stream timeout (600 s; the suite's fronts have 20 s)
    before a worker that starts after 130 s."""
    front_env = {"HORDE_OAI_STREAM_TIMEOUT_SECONDS": "600", "HORDE_OAI_PROGRESS_CHUNK_SECONDS": "60"}
    with running_stack(tmp_path_factory.mktemp("long-queue"), front_env=front_env) as stack:
        worker = {
            **SCENARIO["workers"][0],
            "name": "patient-1",
            "model": LONG_QUEUE_MODEL,
            "time_to_first_token_seconds": LONG_QUEUE_SECONDS,
        }
        stack.put_scenario({**SCENARIO, "name": "long-queue", "workers": [worker]})
        yield stack


def test_langchain_astream_with_its_defaults_completes_over_a_queue_longer_than_120_seconds(
    long_queue_stack: LiveStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 26, done when: LangChain's ``astream`` with its default 120 s chunk timeout (no setting changed on
    either side) completes over a 130 s wait: the front's progress chunk at 60 s without a data event restarts
    LangChain's timer, where keepalive comments would not. LangChain's own override of the default is cleared, and the
    default it then applies is checked."""
    monkeypatch.delenv("LANGCHAIN_OPENAI_STREAM_CHUNK_TIMEOUT_S", raising=False)
    assert chat_openai(api_key="0000000000", model=LONG_QUEUE_MODEL).stream_chunk_timeout == 120.0
    chunks = asyncio.run(langchain_astream(long_queue_stack.openai_base_url, LONG_QUEUE_MODEL, max_tokens=16))
    message = functools.reduce(operator.add, chunks)
    assert str(message.content).strip()
    assert message.response_metadata["finish_reason"] in {"stop", "length"}
    [native] = long_queue_stack.native_requests()
    assert native["state"] == "done", native
