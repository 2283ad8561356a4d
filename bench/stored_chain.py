"""Redis bytes after a chain of continuations on one API key (issue 35).

Run: ``.venv/bin/python -m bench.stored_chain [--turns 200] [--first-kib 180]``.

A throwaway ``redis-server`` on a free loopback port is the front's cache (``HORDE_OAI_REDIS_URL``); the store of the
front's settings (chat.serving.stored_responses.response_store) keeps one response whose input is ``--first-kib`` KiB
of text, then ``--turns`` continuations, each ``previous_response_id`` to the one before with a few words of input and
a short answer, as ``POST /v1/responses`` keeps them (the input resolved by ``resolve_stored_input``, then ``save``).
Printed: Redis's ``used_memory`` before and after and its growth, the bytes of the values under the front's key
prefix (``MEMORY USAGE`` summed), the keys, the stores that were refused and the seconds taken. The same script runs
against an older checkout (``save`` without its ``parent`` argument) for the "before" figure.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    """A throwaway redis-server on a free port, without persistence."""
    from devhorde.launch import free_port  # noqa: PLC0415 - before Django is set up

    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="stored-chain-")
    args = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"redis://127.0.0.1:{port}/0"


def turn(index: int) -> dict[str, Any]:
    return {
        "id": f"resp_{index:048x}",
        "object": "response",
        "output": [
            {
                "id": f"msg_{index:048x}",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"Here is answer number {index}, short and plain."}],
            }
        ],
    }


async def chain(turns: int, first_kib: int) -> dict[str, Any]:
    from chat.serving.stored_responses import resolve_stored_input, response_store  # noqa: PLC0415 - after setup

    store = response_store()
    takes_parent = "parent" in inspect.signature(store.save).parameters
    refused = 0
    started = time.monotonic()
    for index in range(turns + 1):
        body: dict[str, Any] = {"model": "m", "input": "x" * (first_kib * 1024) if index == 0 else f"More {index}?"}
        if index:
            body["previous_response_id"] = turn(index - 1)["id"]
        resolved = await resolve_stored_input(store, body, "bench-key")
        items = resolved[1]
        if takes_parent:
            outcome = await store.save("bench-key", turn(index), items, resolved[2])
        else:
            outcome = await store.save("bench-key", turn(index), items)
        refused += outcome not in {True, "stored"}
    return {"refused": refused, "seconds": round(time.monotonic() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--first-kib", type=int, default=180)
    options = parser.parse_args()
    redis, url = start_redis()
    try:
        os.environ["HORDE_OAI_REDIS_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
        import django  # noqa: PLC0415
        import redis as redis_client  # noqa: PLC0415

        django.setup(set_prefix=False)
        client = redis_client.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis_client.ConnectionError:
                time.sleep(0.05)
        before = int(client.info("memory")["used_memory"])
        result = asyncio.run(chain(options.turns, options.first_kib))
        after = int(client.info("memory")["used_memory"])
        keys = list(client.scan_iter("horde-oai:*", count=1000))
        values = sum(int(client.memory_usage(key) or 0) for key in keys)
        print(
            {
                "checkout": os.getcwd(),
                "turns": options.turns,
                "first_kib": options.first_kib,
                "used_memory_mib": [round(before / 2**20, 2), round(after / 2**20, 2)],
                "growth_mib": round((after - before) / 2**20, 2),
                "values_mib": round(values / 2**20, 2),
                "keys": len(keys),
                **result,
            }
        )
    finally:
        redis.terminate()
        redis.wait(10)
    sys.exit(0)


if __name__ == "__main__":
    main()
