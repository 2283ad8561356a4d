"""The burst's client: ``count`` requests opened at once from this one address, on raw non-blocking sockets.

Run by ``bench.front_cost --part burst`` as a process of its own: ``python -m bench.burst_client --port P --count N
[--connect-first]``; prints one JSON object. The client must cost far less than what it measures: an asyncio client
(streams, a task per connection) spent about 100 µs of its own loop on each connection, so a burst's answers were
timed by the client's queue as much as by the front's (bench/README.md, row 8). This one is one ``epoll`` loop:
the sockets' ``connect`` are started one after the other, and between two of them every socket that became writable
gets its request (with ``--connect-first``: only once every socket is connected) and every readable one is read.

Per request: the status, the answer's ``error.code``, and the seconds from its ``connect`` started to its whole answer
and from its request sent to its whole answer. Bounded: every socket is closed after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import select
import socket
import sys
import time
from typing import Any

REQUEST_SECONDS_LIMIT = 300.0


def request_bytes(path: str, body: bytes, api_key: str) -> bytes:
    """One HTTP/1.1 POST of ``body`` as JSON."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def complete(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole response with a ``Content-Length``."""
    end = answer.find(b"\r\n\r\n")
    if end < 0:
        return False
    for line in answer[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(answer) >= end + 4 + int(value)
    return False


def burst(port: int, count: int, request: bytes, *, connect_first: bool, timeout: float) -> list[dict[str, Any]]:
    """Open ``count`` connections to 127.0.0.1:``port`` and send ``request`` on each; one row per request."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count * 2 + 64), hard))
    poller = select.epoll()
    sockets: dict[int, socket.socket] = {}
    began: dict[int, float] = {}
    sent: dict[int, float] = {}
    answered: dict[int, float] = {}
    answers: dict[int, bytearray] = {}
    connecting: set[int] = set()

    def handle(events: list[tuple[int, int]]) -> None:
        for fd, _ in events:
            if fd in connecting:
                connecting.discard(fd)
                if not connect_first:
                    sent[fd] = time.monotonic()
                    try:
                        sockets[fd].send(request)
                    except OSError:  # the connect failed: no answer, counted as such
                        poller.unregister(fd)
                        continue
                poller.modify(fd, select.EPOLLIN)
            else:
                read(fd, sockets, answers, answered, poller)

    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        fd = sock.fileno()
        began[fd] = time.monotonic()
        sock.connect_ex(("127.0.0.1", port))
        sockets[fd], answers[fd] = sock, bytearray()
        connecting.add(fd)
        poller.register(fd, select.EPOLLOUT)
        handle(poller.poll(0))  # the requests of the connections made so far go out now, not after the last connect
    deadline = time.monotonic() + timeout
    while connecting and time.monotonic() < deadline:
        handle(poller.poll(1.0))
    if connect_first:
        for fd, sock in sockets.items():
            sent[fd] = time.monotonic()
            try:
                sock.send(request)
            except OSError:
                poller.unregister(fd)
    while len(answered) < len(sockets) and time.monotonic() < deadline:
        for fd, _ in poller.poll(1.0):
            read(fd, sockets, answers, answered, poller)
    rows = []
    for fd, sock in sockets.items():
        answer = bytes(answers[fd])
        status = int(answer[9:12]) if fd in answered and len(answer) >= 12 else None
        code = None
        if status is not None and status != 200:
            try:
                code = json.loads(answer.partition(b"\r\n\r\n")[2]).get("error", {}).get("code")
            except ValueError:  # not the front's JSON envelope (uvicorn's own 400 is text)
                code = None
        rows.append(
            {
                "status": status,
                "code": code,
                "from_connect": answered[fd] - began[fd] if fd in answered else None,
                "from_send": answered[fd] - sent[fd] if fd in answered and fd in sent else None,
            }
        )
        sock.close()
    return rows


def read(
    fd: int,
    sockets: dict[int, socket.socket],
    answers: dict[int, bytearray],
    answered: dict[int, float],
    poller: select.epoll,
) -> None:
    """Read what ``fd`` has; note the time once its answer is whole (or the front closed it)."""
    try:
        data = sockets[fd].recv(65536)
    except BlockingIOError:
        return
    except ConnectionError:
        data = b""
    answers[fd] += data
    if not data or complete(bytes(answers[fd])):
        answered[fd] = time.monotonic()
        poller.unregister(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.burst_client", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--body", required=True, help="the JSON body of every request")
    parser.add_argument("--api-key", default="0000000000")
    parser.add_argument("--connect-first", action="store_true")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    rows = burst(
        args.port,
        min(args.count, 10_000),
        request_bytes(args.path, args.body.encode(), args.api_key),
        connect_first=args.connect_first,
        timeout=min(args.timeout, REQUEST_SECONDS_LIMIT),
    )
    json.dump(rows, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
