"""The admission guards through uvicorn: body size, body read timeout and the in-flight caps on a real socket.

Reference: Refusal attributes (413, 408 ``RequestBodyTimeout``, 503 ``FrontAtCapacity``). The front runs with a small
body limit (64 KiB), a 1-second body timeout and two requests in flight per client address; raw sockets send the
bodies so the test controls every byte and counts what it sent before the refusal arrived.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Process, start_devhorde, start_front

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
LIMIT = 64 * 1024
PIECE = 64 * 1024
STUCK = {"time_to_first_token_seconds": 600, "tokens_per_second": 1, "post_interval_seconds": 1}
FAST = {"time_to_first_token_seconds": 0.01, "tokens_per_second": 2000, "post_interval_seconds": 0.01}
STRICT = "prompt_overflow_refused"
GUARD_SCENARIO: dict[str, Any] = {
    "name": "guards",
    "description": "A stuck model to hold requests in flight, a fast one (tests/integration/test_guards_live.py).",
    "queue_position_delay_seconds": 0,
    "workers": [
        {"name": "stuck-1", "model": "guard/stuck-2b", "features": [STRICT], "threads": 4, **STUCK},
        {"name": "fast-1", "model": "guard/fast-2b", "features": [STRICT], "threads": 4, **FAST},
    ],
}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Process]]:
    tmp = tmp_path_factory.mktemp("guards")
    devhorde, horde_url = start_devhorde(tmp, redis=False, scenario=None)
    try:
        httpx.put(
            horde_url.removesuffix("/api") + "/_devhorde/scenario", json=GUARD_SCENARIO, timeout=5
        ).raise_for_status()
        front, url = start_front(
            tmp,
            horde_url,
            redis=False,
            env={
                "HORDE_OAI_MAX_BODY_BYTES": str(LIMIT),
                "HORDE_OAI_BODY_TIMEOUT_SECONDS": "1",
                "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": "2",
                "HORDE_OAI_CAPACITY_RETRY_AFTER_SECONDS": "3",
            },
        )
    except Exception:
        devhorde.stop()
        raise
    try:
        yield url, int(url.rsplit(":", 1)[1]), front
    finally:
        front.stop()
        devhorde.stop()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP response (headers and a Content-Length body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def send_until_answered(
    port: int, head: bytes, pieces: Iterator[bytes]
) -> tuple[int, tuple[int, dict[str, str], bytes]]:
    """Send ``head``, then ``pieces`` one at a time, checking for an answer before each; return the body bytes sent
    before the answer arrived and the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIECE)
    sent = 0
    try:
        sock.sendall(head)
        for piece in pieces:
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                break
            try:
                sock.sendall(piece)
            except OSError:  # the server closed the connection after answering
                break
            sent += len(piece)
        return sent, read_response(sock)
    finally:
        sock.close()


def request_head(port: int, extra: str) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{extra}\r\n"
    ).encode()


def test_a_64_mib_content_length_is_refused_with_413_before_the_body_is_sent(guarded: tuple[str, int, Process]) -> None:
    """ref: refusal-attributes.1"""
    _, port, _ = guarded
    total = 64 * MIB
    pieces = (b"x" * PIECE for _ in range(total // PIECE))
    sent, (status, headers, body) = send_until_answered(
        port, request_head(port, f"Content-Length: {total}\r\n"), pieces
    )
    assert status == 413
    assert sent < MIB
    assert json.loads(body)["error"]["code"] == "RequestTooLarge"
    assert headers["content-type"] == "application/json"


def test_a_chunked_64_mib_body_is_refused_once_it_passes_the_limit(guarded: tuple[str, int, Process]) -> None:
    """ref: refusal-attributes.1"""
    _, port, _ = guarded
    total = 64 * MIB
    framed = b"%x\r\n" % PIECE + b"x" * PIECE + b"\r\n"
    pieces = (framed for _ in range(total // PIECE))
    sent, (status, _, body) = send_until_answered(port, request_head(port, "Transfer-Encoding: chunked\r\n"), pieces)
    assert status == 413
    assert LIMIT < sent < MIB
    assert json.loads(body)["error"] == {
        "message": f"The request body is larger than this front's limit of {LIMIT} bytes.",
        "type": "invalid_request_error",
        "param": None,
        "code": "RequestTooLarge",
    }


def test_a_body_that_does_not_arrive_in_time_is_408(guarded: tuple[str, int, Process]) -> None:
    """ref: refusal-attributes.1"""
    _, port, _ = guarded
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(request_head(port, "Content-Length: 1000\r\n") + b'{"model": ')
        status, _, body = read_response(sock)
    assert status == 408
    assert json.loads(body)["error"] == {
        "message": "The request body was not received within 1 seconds.",
        "type": "timeout_error",
        "param": None,
        "code": "RequestBodyTimeout",
    }


def test_the_per_client_cap_is_503_front_at_capacity_and_frees_up(guarded: tuple[str, int, Process]) -> None:
    """ref: outcome-class.11"""
    url, _, _ = guarded
    body = {"model": "guard/stuck-2b", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    opened = [threading.Event(), threading.Event()]
    release = threading.Event()

    def hold(index: int) -> None:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            opened[index].set()
            release.wait(30)

    holders = [threading.Thread(target=hold, args=(index,)) for index in range(2)]
    for thread in holders:
        thread.start()
    try:
        for event in opened:
            assert event.wait(20)
        fast = {"model": "guard/fast-2b", "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(f"{url}/v1/chat/completions", json=fast, timeout=10)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "3"
        assert refused.json()["error"]["code"] == "FrontAtCapacity"
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    finally:
        release.set()
        for thread in holders:
            thread.join(30)
    served = httpx.post(f"{url}/v1/chat/completions", json=fast, timeout=20)
    assert served.status_code == 200
