"""What one refusal at accept costs the front, in process: ``python -m bench.door_cost [--connections N] [--rounds R]``.

Each round opens ``N`` loopback connections to a listening socket of this process, writes a chat completion request
on each (so its head waits there, as under a burst), accepts them all, then times, connection by connection, what the
accept loop does for each once accepted: make its :class:`oaifront.door.DoorProtocol` (the front's own application,
loaded as uvicorn loads it, with a per-client cap of 1) and offer it the connection (``answer_accepted``: read the
head, decide it, write the 503 ``FrontAtCapacity`` and close). The first connection is admitted and the others
refused. The ``raw`` line is the floor under it: the same connections, only their ``recv``, ``send`` (with the door's
``SEND_WITH_FIN``) and ``close``.
Prints µs of CPU per connection (the ``accept`` itself excluded), the smallest and the median round, as one JSON
object. Bounded: at most 5,000 connections a round, 50 rounds; nothing leaves 127.0.0.1, no Horde is called.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import time
from typing import Any

RAW_ANSWER = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def _pairs(count: int, request: bytes) -> tuple[socket.socket, list[socket.socket], list[tuple[socket.socket, Any]]]:
    """A listening socket, ``count`` clients that each wrote ``request``, and the accepted server ends."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(count + 64)
    port = listening.getsockname()[1]
    clients = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(request)
        clients.append(client)
    accepted = [listening.accept() for _ in range(count)]
    for connection, _ in accepted:
        connection.setblocking(False)
    return listening, clients, accepted


async def rounds(count: int, rounds: int) -> dict[str, Any]:
    """Time ``rounds`` rounds of ``count`` connections through the door, then as many raw (see the module)."""
    import uvicorn  # noqa: PLC0415 - after the environment is set
    from uvicorn.server import ServerState  # noqa: PLC0415

    from bench.burst_client import request_bytes  # noqa: PLC0415
    from bench.front_cost import API_KEY, DEEP_QUEUE_BODY  # noqa: PLC0415
    from oaifront.door import SEND_WITH_FIN, DoorProtocol  # noqa: PLC0415

    config = uvicorn.Config("oaifront.asgi:application", http=DoorProtocol, access_log=False, log_level="warning")
    config.load()
    state = ServerState()
    loop = asyncio.get_running_loop()
    request = request_bytes("/v1/chat/completions", DEEP_QUEUE_BODY, API_KEY)
    per_connection: dict[str, list[float]] = {"door": [], "raw": []}
    for kind in ("door", "raw"):
        for _ in range(rounds):
            listening, clients, accepted = _pairs(count, request)
            kept = []
            started = time.process_time()
            for connection, address in accepted:
                if kind == "raw":
                    connection.recv(65536)
                    connection.send(RAW_ANSWER, SEND_WITH_FIN)
                    connection.close()
                    continue
                protocol = DoorProtocol(config, state, {}, loop)
                if not protocol.answer_accepted(connection, address):
                    kept.append((protocol, connection))
            per_connection[kind].append((time.process_time() - started) / count * 1e6)
            for protocol, connection in kept:  # the admitted one: its place under the cap is given back
                protocol.abandon_accepted()
                connection.close()
            for client in clients:
                client.close()
            listening.close()
            await asyncio.sleep(0.05)
    return {
        "connections": count,
        "rounds": rounds,
        **{
            f"{kind}_us_per_connection": {
                "min": round(min(values), 1),
                "median": round(statistics.median(values), 1),
            }
            for kind, values in per_connection.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.door_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    count, rounds_wanted = min(max(args.connections, 2), 5000), min(max(args.rounds, 1), 50)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    os.environ.setdefault("HORDE_URL", "http://127.0.0.1:9/api")  # never called
    os.environ["HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT"] = "1"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * count + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * count + 256), hard))
    import uvloop  # noqa: PLC0415

    print(json.dumps(uvloop.run(rounds(count, rounds_wanted))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
