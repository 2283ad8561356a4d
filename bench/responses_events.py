"""The CPU cost of serving a stream as Responses events instead of chat completion chunks.

Run: ``.venv/bin/python -m bench.responses_events [--streams 200] [--deltas 100] [--json]``.

In process, no network: ``--streams`` relayed-style chat streams (a role chunk, ``--deltas`` content deltas of 8
characters, the finish and usage chunks, ``data: [DONE]``), framed as ``chat.rendering.sse.data_event`` frames them, are
rewritten by ``chat.rendering.responses_events.response_events`` (parse each ``data:`` line, ``ResponseEventWriter``,
frame each event) and, as the baseline, framed as the chat path sends them. The figure is the extra CPU per chat chunk
and the bytes on the wire per chunk, both ways. Bounded: 200 x 100 chunks by default (about 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

import django

django.setup()

from chat.reading.responses import read_responses_request  # noqa: E402
from chat.rendering.responses_events import ResponseEventWriter, response_events  # noqa: E402
from chat.rendering.sse import DONE_EVENT, data_event  # noqa: E402


def chat_chunks(deltas: int) -> list[dict[str, Any]]:
    """A relayed-style chat stream's chunks."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench/model-7b",
            "system_fingerprint": "fp_0123456789",
            "choices": choices,
            **extra,
        }

    chunks = [chunk([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])]
    chunks += [
        chunk([{"index": 0, "delta": {"content": f"word{index:03d} "}, "finish_reason": None}])
        for index in range(deltas)
    ]
    chunks.append(
        chunk([{"index": 0, "delta": {}, "finish_reason": "stop", "native_finish_reason": "eos", "x_horde": {}}])
    )
    chunks.append(chunk([], usage={"prompt_tokens": 5, "completion_tokens": deltas, "total_tokens": deltas + 5}))
    return chunks


async def frames(items: list[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def run(streams: int, deltas: int) -> dict[str, Any]:
    request, _, sources = read_responses_request(
        json.dumps({"model": "bench/model-7b", "input": "Hi", "stream": True}).encode()
    )
    chunks = chat_chunks(deltas)
    chat_bytes = 0
    started = time.process_time()
    for _ in range(streams):
        chat_bytes += sum(len(data_event(chunk)) for chunk in chunks) + len(DONE_EVENT)
    chat_cpu = time.process_time() - started
    framed = [data_event(chunk) for chunk in chunks] + [DONE_EVENT]
    responses_bytes = 0
    started = time.process_time()
    for _ in range(streams):
        writer = ResponseEventWriter(request, "bench", 1, request.model)
        async for item in response_events(writer, frames(framed), sources, time.time):
            responses_bytes += len(item)
    responses_cpu = time.process_time() - started
    count = streams * len(chunks)
    return {
        "streams": streams,
        "chunks": count,
        "chat_us_per_chunk": round(chat_cpu / count * 1e6, 2),
        "responses_us_per_chunk": round(responses_cpu / count * 1e6, 2),
        "extra_us_per_chunk": round((responses_cpu - chat_cpu) / count * 1e6, 2),
        "chat_bytes_per_chunk": round(chat_bytes / count, 1),
        "responses_bytes_per_chunk": round(responses_bytes / count, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.streams, args.deltas))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
