"""oaifront.handler.FrontASGIHandler: Django's ASGI handler without a thread started and stopped per request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler

from oaifront.handler import FrontASGIHandler

pytestmark = pytest.mark.asyncio


async def serve(handler: ASGIHandler, path: str) -> tuple[int, bytes]:
    """One GET through ``handler`` as an ASGI server would make it; the status and body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[Mapping[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio_forever()
        return {"type": "http.disconnect"}

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    await handler(scope, receive, send)
    status = next(message["status"] for message in sent if message["type"] == "http.response.start")
    body = b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")
    return status, body


async def asyncio_forever() -> None:
    await asyncio.Event().wait()


async def thread_starts(handler: ASGIHandler, path: str, requests: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads started while ``handler`` serves ``requests`` requests, one after another."""
    started: list[str] = []
    original = threading.Thread.start

    def recording(self: threading.Thread) -> None:
        started.append(self.name)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", recording)
    for _ in range(requests):
        status, _ = await serve(handler, path)
        assert status in {200, 405}
    monkeypatch.undo()
    return started


async def count_thread_starts(handler: ASGIHandler, path: str, requests: int, monkeypatch: pytest.MonkeyPatch) -> int:
    return len(await thread_starts(handler, path, requests, monkeypatch))


def own_threads(names: list[str]) -> list[str]:
    """The threads a request starts for itself: not the event loop's default executor's (``asyncio_<n>``), which
    Django's 405 logging uses and which may add a worker when a call is submitted before the previous one's worker
    is idle again (a race of ``ThreadPoolExecutor``, not a thread per request)."""
    return [name for name in names if not name.startswith("asyncio_")]


async def test_api_requests_start_no_thread_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Django's handler starts two threads for every request (an executor's, to close the response in, and one that
    joins it at the request's end); the front's closes every API response in asgiref's one shared thread, so ten
    requests start at most that one thread, once per process. (GET is answered 405, which Django logs in its
    default executor, the loop's: its workers are not counted, see :func:`own_threads`.)"""
    assert len(own_threads(await thread_starts(ASGIHandler(), "/v1/chat/completions", 10, monkeypatch))) == 20
    assert len(own_threads(await thread_starts(FrontASGIHandler(), "/v1/chat/completions", 10, monkeypatch))) <= 1
    assert own_threads(await thread_starts(FrontASGIHandler(), "/v1/chat/completions", 10, monkeypatch)) == []


async def test_other_paths_keep_djangos_context_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the API (a synchronous view such as /openapi.json may run there), each request keeps a
    thread-sensitive context of its own, so a slow synchronous view never holds up the API's closes."""
    assert await count_thread_starts(FrontASGIHandler(), "/healthz", 10, monkeypatch) == 20


async def test_a_scope_that_is_not_http_is_refused_as_django_refuses_it() -> None:
    async def nothing(*args: object) -> Any:
        return None

    with pytest.raises(ValueError, match=r"^Django can only handle ASGI/HTTP connections, not websocket\.$"):
        await FrontASGIHandler()({"type": "websocket"}, nothing, nothing)
