"""A WebSocket upgrade on any route answers 4xx, never a 500 with a traceback (issue 34), from a real uvicorn.

Served as ``make run`` serves the front (oaifront.serve: ``--ws none``), the upgrade is an HTTP request the admission
guards refuse with 400 in OpenAI's envelope; under a bare ``uvicorn oaifront.asgi:application`` (uvicorn's default
``--ws auto`` with the ``websockets`` package installed) it is a ``websocket`` scope the guards close, which uvicorn
answers with 403.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import UNREACHABLE_HORDE_URL, Process, free_port, start_front, start_process, wait_started

pytestmark = pytest.mark.integration

ROUTES = ["/v1/chat/completions", "/healthz", "/nowhere"]


def upgrade(base: str, path: str) -> tuple[str, dict[str, str], bytes]:
    """Send a raw WebSocket handshake to ``path``; return the status line, the headers and the body."""
    host, port = base.removeprefix("http://").split(":")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode())
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return status, headers, body


@pytest.fixture(scope="module")
def served_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, str]]:
    process, base = start_front(tmp_path_factory.mktemp("ws-none"), UNREACHABLE_HORDE_URL, redis=False)
    try:
        yield process, base
    finally:
        process.stop()


@pytest.fixture(scope="module")
def bare_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, str]]:
    tmp: Path = tmp_path_factory.mktemp("ws-auto")
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "oaifront.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    process = start_process(args, {"HORDE_URL": UNREACHABLE_HORDE_URL}, tmp / "front.log")
    base = f"http://127.0.0.1:{port}"
    wait_started(process, f"{base}/healthz")
    try:
        yield process, base
    finally:
        process.stop()


@pytest.mark.parametrize("path", ROUTES)
def test_served_as_make_run_an_upgrade_is_400_in_openais_envelope(served_front: tuple[Process, str], path: str) -> None:
    process, base = served_front
    status, headers, body = upgrade(base, path)
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "error": {
            "message": "This front serves HTTP requests only; it does not accept WebSocket connections.",
            "type": "invalid_request_error",
            "param": None,
            "code": "BadRequest",
        }
    }
    assert "Traceback" not in process.log()


@pytest.mark.parametrize("path", ROUTES)
def test_under_a_bare_uvicorn_an_upgrade_is_403_without_a_traceback(bare_front: tuple[Process, str], path: str) -> None:
    process, base = bare_front
    status, _, _ = upgrade(base, path)
    assert status == "HTTP/1.1 403 Forbidden"
    assert "Traceback" not in process.log()
    assert "Django can only handle ASGI/HTTP connections" not in process.log()
