"""The bare pass-through: the practical floor of a front that submits and polls (``bench.front_cost``).

A minimal ASGI app, no framework: ``POST`` any path forwards the body as is to the native
``POST /v2/generate/chat/async``, then reads ``GET /v2/generate/chat/status/{id}`` back to back until the status is
done (at most :data:`MAX_POLLS` reads) and answers the last status body as is. No validation, no mapping, no
signals: what any front of the native API must at least do per request. Serve it with
``HORDE_URL=... python -m uvicorn bench.passthrough:app``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

MAX_POLLS = 10_000
"""Bound on the status reads of one request."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_clients: dict[str, httpx.AsyncClient] = {}


def _http() -> httpx.AsyncClient:
    client = _clients.get("horde")
    if client is None:
        client = _clients["horde"] = httpx.AsyncClient(
            base_url=os.environ["HORDE_URL"],
            headers={"Client-Agent": "bench-passthrough:0:none", "Content-Type": "application/json"},
            timeout=30,
        )
    return client


async def _reply(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Forward, poll, answer. Lifespan closes the HTTP client."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for client in _clients.values():
                    await client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    apikey = "0000000000"
    for name, value in scope["headers"]:
        if name == b"authorization":
            apikey = value.decode().partition(" ")[2] or apikey
    http = _http()
    submitted = await http.post("/v2/generate/chat/async", content=body, headers={"apikey": apikey})
    if submitted.status_code != 202:
        await _reply(send, submitted.status_code, submitted.content)
        return
    request_id = json.loads(submitted.content)["id"]
    status = None
    for _ in range(MAX_POLLS):
        status = await http.get(f"/v2/generate/chat/status/{request_id}", headers={"apikey": apikey})
        if json.loads(status.content).get("done"):
            break
    assert status is not None
    await _reply(send, status.status_code, status.content)
