"""Driving an ASGI application in process, message by message: a ``send`` that keeps the response, a ``receive`` that
yields a body in pieces and counts what was pulled, an HTTP scope, and a stand-in application that holds its
requests. Shared by tests/unit/test_guards.py and tests/unit/test_hostile_input.py (the admission guards)."""

from __future__ import annotations

import asyncio
import json
from typing import Any


class Recorder:
    """An ASGI ``send`` that keeps the response."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {name.decode(): value.decode() for name, value in self.messages[0]["headers"]}

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(b"".join(m.get("body", b"") for m in self.messages[1:]))


def scope(path: str = "/v1/chat/completions", client: str = "10.0.0.1", headers: list[Any] | None = None) -> Any:
    """An HTTP ``POST`` scope from ``client`` (port 5555)."""
    return {"type": "http", "method": "POST", "path": path, "client": (client, 5555), "headers": headers or []}


class Body:
    """An ASGI ``receive`` that yields ``total`` bytes in ``piece``-byte messages (no ``Content-Length`` unless the
    scope has one: chunked) and counts what was pulled; after ``stall_after`` bytes it sends nothing more."""

    def __init__(self, total: int, piece: int = 64 * 1024, stall_after: int | None = None) -> None:
        self.total = total
        self.piece = piece
        self.stall_after = stall_after
        self.pulled = 0

    async def __call__(self) -> dict[str, Any]:
        if self.stall_after is not None and self.pulled >= self.stall_after:
            await asyncio.sleep(3600)
        size = min(self.piece, self.total - self.pulled)
        self.pulled += size
        return {"type": "http.request", "body": b"x" * size, "more_body": self.pulled < self.total}


class Held:
    """An app that reads its body, then holds its request in flight until :attr:`release` is set; :attr:`entered`
    counts the requests that reached it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        self.entered += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
