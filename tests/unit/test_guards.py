"""The admission guards in process (oaifront.guards): body size, body read timeout and in-flight caps.

Reference: Refusal attributes (413, 408 ``RequestBodyTimeout``, 503 ``FrontAtCapacity``), Outcome class. The guard
wraps a stand-in ASGI app here, so each test counts exactly how many body bytes the guard pulled and when the app ran.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loguru import logger

from chat.errors import CORS_HEADERS
from chat.settings import DEFAULT_MAX_BODY_BYTES, FrontSettings
from oaifront.guards import AdmissionGuards, Slot
from tests.asgi_driver import Body, Held, Recorder, scope

MIB = 1024 * 1024


def settings(**changes: Any) -> FrontSettings:
    return FrontSettings(**changes)


async def echo_app(scope: Any, receive: Any, send: Any) -> None:
    message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(message["body"])).encode()})


def test_default_limit_fits_the_largest_legal_request() -> None:
    """A 20 MB image as a base64 data URL with 1 MiB of text fits; 64 MiB does not."""
    assert 20_000_000 * 4 / 3 + MIB < DEFAULT_MAX_BODY_BYTES < 64 * MIB


@pytest.mark.asyncio
async def test_content_length_over_the_limit_is_413_before_any_byte_is_read() -> None:
    """ref: refusal-attributes.1"""
    guards = AdmissionGuards(echo_app, settings(max_body_bytes=MIB))
    body = Body(64 * MIB)
    send = Recorder()
    await guards(scope(headers=[(b"content-length", str(64 * MIB).encode())]), body, send)
    assert body.pulled == 0
    assert send.status == 413
    assert send.body == {
        "error": {
            "message": f"The request body is larger than this front's limit of {MIB} bytes.",
            "type": "invalid_request_error",
            "param": None,
            "code": "RequestTooLarge",
        }
    }
    assert send.headers["access-control-allow-origin"] == "*"


@pytest.mark.asyncio
async def test_a_streamed_64_mib_body_is_refused_before_1_mib_is_read() -> None:
    """ref: refusal-attributes.1"""
    guards = AdmissionGuards(echo_app, settings(max_body_bytes=512 * 1024))
    body = Body(64 * MIB)
    send = Recorder()
    await guards(scope(), body, send)
    assert send.status == 413
    assert 512 * 1024 < body.pulled < MIB


@pytest.mark.asyncio
async def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    guards = AdmissionGuards(echo_app, settings(max_body_bytes=MIB))
    send = Recorder()
    await guards(scope(), Body(MIB), send)
    assert (send.status, send.messages[1]["body"]) == (200, str(MIB).encode())


@pytest.mark.asyncio
async def test_a_slow_body_is_408_request_body_timeout() -> None:
    """ref: refusal-attributes.1"""
    guards = AdmissionGuards(echo_app, settings(body_timeout_seconds=0.2))
    send = Recorder()
    await asyncio.wait_for(guards(scope(), Body(MIB, stall_after=128 * 1024), send), 10)
    assert send.status == 408
    assert send.body["error"] == {
        "message": "The request body was not received within 0.2 seconds.",
        "type": "timeout_error",
        "param": None,
        "code": "RequestBodyTimeout",
    }


async def refused(guards: AdmissionGuards, request_scope: Any) -> Recorder:
    send = Recorder()
    await asyncio.wait_for(guards(request_scope, Body(10), send), 5)
    return send


@pytest.mark.asyncio
async def test_the_caps_give_503_front_at_capacity_and_free_up_when_requests_end() -> None:
    """ref: outcome-class.11"""
    held = Held()
    guards = AdmissionGuards(
        held, settings(max_in_flight=3, max_in_flight_per_client=2, capacity_retry_after_seconds=2)
    )
    tasks = [asyncio.ensure_future(guards(scope(client="10.0.0.1"), Body(10), Recorder())) for _ in range(2)]
    while held.entered < 2:
        await asyncio.sleep(0.01)
    per_client = await refused(guards, scope(client="10.0.0.1"))
    assert per_client.status == 503
    assert per_client.headers["retry-after"] == "2"
    assert per_client.body["error"] == {
        "message": "The front is serving as many requests from your address as it accepts at once. Retry shortly.",
        "type": "api_error",
        "param": None,
        "code": "FrontAtCapacity",
    }
    tasks.append(asyncio.ensure_future(guards(scope(client="10.0.0.2"), Body(10), Recorder())))
    while held.entered < 3:
        await asyncio.sleep(0.01)
    total = await refused(guards, scope(client="10.0.0.3"))
    assert (total.status, total.body["error"]["code"]) == (503, "FrontAtCapacity")
    assert "in total" in total.body["error"]["message"]
    held.release.set()
    await asyncio.gather(*tasks)
    assert (guards.in_flight, dict(guards.in_flight_by_client)) == (0, {})
    held.release = asyncio.Event()
    again = asyncio.ensure_future(guards(scope(client="10.0.0.1"), Body(10), Recorder()))
    while held.entered < 4:
        await asyncio.sleep(0.01)
    held.release.set()
    await again


@pytest.mark.asyncio
async def test_probes_are_never_capped() -> None:
    guards = AdmissionGuards(echo_app, settings(max_in_flight=1, max_in_flight_per_client=1))
    guards.in_flight = 1
    guards.in_flight_by_client["10.0.0.1"] = 1
    assert (await refused(guards, scope())).status == 503
    for path in ("/healthz", "/readyz"):
        assert (await refused(guards, scope(path))).status == 200, path


@pytest.mark.parametrize("trusted", [False, True])
def test_the_client_address_comes_from_the_trusted_header_only_when_configured(trusted: bool) -> None:
    header = "X-Forwarded-For" if trusted else None
    guards = AdmissionGuards(echo_app, settings(client_address_header=header))
    forwarded = scope(client="127.0.0.1", headers=[(b"x-forwarded-for", b"203.0.113.7, 10.0.0.9")])
    assert guards.client_address(forwarded) == ("203.0.113.7" if trusted else "127.0.0.1")


@pytest.mark.asyncio
async def test_every_capacity_refusal_sends_the_same_whole_answer() -> None:
    """The FrontAtCapacity answer is built once (issue 23: a refusal under a burst must be cheap): each refusal sends
    the same status, headers and body, with a Content-Length that matches it and ``Connection: close``."""
    guards = AdmissionGuards(echo_app, settings(max_in_flight=1, max_in_flight_per_client=1))
    guards.in_flight_by_client["10.0.0.1"] = 1
    first, second = await refused(guards, scope()), await refused(guards, scope())
    assert first.messages == second.messages
    body = first.messages[1]["body"]
    assert first.headers == {
        "content-type": "application/json",
        "retry-after": first.headers["retry-after"],
        "x-should-retry": "true",
        **{name.lower(): value for name, value in CORS_HEADERS.items()},
        "content-length": str(len(body)),
        "connection": "close",
    }
    assert first.headers["retry-after"] == str(guards.retry_after)
    assert first.body["error"]["code"] == "FrontAtCapacity"


class SlowToReturn:
    """An app that sends its whole response, then goes on working (Django's request-finished work) until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.sent = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        await send({"type": "http.response.body", "body": b"end"})
        self.sent += 1
        await self.release.wait()


@pytest.mark.asyncio
async def test_a_slot_is_freed_when_the_last_body_message_is_sent_not_when_the_app_returns() -> None:
    """ref: outcome-class.11"""
    app = SlowToReturn()
    guards = AdmissionGuards(app, settings(max_in_flight=1, max_in_flight_per_client=1))
    first = asyncio.ensure_future(guards(scope(), Body(10), Recorder()))
    while app.sent < 1:
        await asyncio.sleep(0.01)
    assert (guards.in_flight, dict(guards.in_flight_by_client)) == (0, {})
    second = Recorder()
    task = asyncio.ensure_future(guards(scope(), Body(10), second))
    while app.sent < 2:
        await asyncio.sleep(0.01)
    assert (second.status, [m.get("body") for m in second.messages[1:]]) == (200, [b"part", b"end"])
    app.release.set()
    await asyncio.gather(first, task)
    assert (guards.in_flight, dict(guards.in_flight_by_client)) == (0, {})


@pytest.mark.asyncio
async def test_a_slot_is_held_while_the_body_is_still_being_sent() -> None:
    """ref: outcome-class.11"""
    held = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        await held.wait()
        await send({"type": "http.response.body", "body": b""})

    guards = AdmissionGuards(app, settings(max_in_flight=1, max_in_flight_per_client=1))
    task = asyncio.ensure_future(guards(scope(), Body(10), Recorder()))
    while guards.in_flight == 0:
        await asyncio.sleep(0.01)
    assert (await refused(guards, scope(client="10.0.0.9"))).status == 503
    held.set()
    await task
    assert guards.in_flight == 0


def test_refusal_for_decides_without_taking_a_slot() -> None:
    guards = AdmissionGuards(echo_app, settings(max_in_flight_per_client=1))
    assert guards.refusal_for(scope(), 0.0) is None
    assert guards.in_flight == 0
    slot = guards.admit(scope(), 0.0)
    assert isinstance(slot, Slot)
    assert (guards.in_flight, dict(guards.in_flight_by_client)) == (1, {"10.0.0.1": 1})
    slot.release()
    slot.release()  # once only
    assert (guards.in_flight, dict(guards.in_flight_by_client)) == (0, {})
    assert guards.admit(scope("/healthz"), 0.0) is None  # uncapped: no slot
    assert guards.in_flight == 0


UPGRADE_REFUSED = {
    "error": {
        "message": "This front serves HTTP requests only; it does not accept WebSocket connections.",
        "type": "invalid_request_error",
        "param": None,
        "code": "BadRequest",
    }
}


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/healthz", "/nowhere"])
async def test_a_websocket_upgrade_is_400_on_any_route_without_reaching_the_application(path: str) -> None:
    """An HTTP request asking ``Upgrade: websocket`` (uvicorn passes it as HTTP with ``--ws none``)."""
    entered: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        entered.append(scope["path"])

    guards = AdmissionGuards(app, settings())
    send = Recorder()
    headers = [(b"connection", b"Upgrade"), (b"upgrade", b"WebSocket"), (b"sec-websocket-version", b"13")]
    await guards(scope(path, headers=headers), Body(0), send)
    assert (send.status, send.body, entered) == (400, UPGRADE_REFUSED, [])
    assert send.headers["connection"] == "close"


@pytest.mark.asyncio
async def test_a_websocket_scope_is_closed_before_it_is_accepted() -> None:
    """A server that speaks WebSocket gives a ``websocket`` scope: closed at its connect (the server answers 403),
    never handed to Django, whose handler raises on it."""
    entered: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        entered.append(scope["type"])

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    send = Recorder()
    await AdmissionGuards(app, settings())({"type": "websocket", "path": "/v1/chat/completions"}, receive, send)
    assert (send.messages, entered) == ([{"type": "websocket.close", "code": 1008}], [])


@pytest.mark.asyncio
async def test_every_refusal_has_its_log_line_without_path_or_address() -> None:
    lines: list[str] = []
    sink = logger.add(lines.append, level="INFO", format="{message}")
    try:
        app = Held()
        guards = AdmissionGuards(app, settings(max_in_flight_per_client=1, max_body_bytes=10))
        held = asyncio.ensure_future(guards(scope("/v1/responses/resp_secret"), Body(1), Recorder()))
        await asyncio.sleep(0.05)
        await guards(scope("/v1/responses/resp_secret"), Body(1), Recorder())
        await guards(scope("/healthz", headers=[(b"content-length", b"11")]), Body(11), Recorder())
        await guards(scope("/healthz"), Body(11), Recorder())
        app.release.set()
        await held
    finally:
        logger.remove(sink)
    assert [line.strip() for line in lines] == [
        "Request refused by the admission guards: method=POST status=503 code=FrontAtCapacity retry_after=1",
        "Request refused by the admission guards: method=POST status=413 code=RequestTooLarge retry_after=None",
        "Request refused by the admission guards: method=POST status=413 code=RequestTooLarge retry_after=None",
    ]
