"""ChatEventStream runs ``on_end`` once whether Django closes it or drops it unclosed (chat.streaming.buffered)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

from chat.views.event_stream import ChatEventStream


async def events() -> AsyncIterator[bytes]:
    yield b"data: [DONE]\n\n"


@pytest.mark.asyncio
async def test_a_closed_stream_runs_on_end_once() -> None:
    ended: list[str] = []
    stream = ChatEventStream(events(), on_end=lambda: ended.append("end"), loop=asyncio.get_running_loop())
    stream.close()
    del stream
    gc.collect()
    await asyncio.sleep(0)
    assert ended == ["end"]


@pytest.mark.asyncio
async def test_a_stream_dropped_without_close_still_runs_on_end() -> None:
    """The client left while the response was still in the middleware: Django never got it to close it."""
    ended: list[str] = []
    stream = ChatEventStream(events(), on_end=lambda: ended.append("end"), loop=asyncio.get_running_loop())
    assert ended == []
    del stream
    gc.collect()
    await asyncio.sleep(0)
    assert ended == ["end"]


def test_a_stream_dropped_after_its_loop_closed_raises_nothing() -> None:
    loop = asyncio.new_event_loop()
    ended: list[str] = []
    stream = ChatEventStream(events(), on_end=lambda: ended.append("end"), loop=loop)
    loop.close()
    del stream
    gc.collect()
    assert ended == []


@pytest.mark.asyncio
async def test_a_stream_dropped_in_a_reference_cycle_ends_when_its_request_call_returns() -> None:
    """A response dropped inside a reference cycle is collected only by a later gen-2 collection (a lost cancel for
    about a minute in test_chaos); served through chat.asgi.with_front_lifespan its ``on_end`` runs as soon as the
    request's ASGI call returns, without any collection. ref: cancel-outcomes.1"""
    from chat.asgi import with_front_lifespan

    ended: list[str] = []
    kept: list[object] = []

    async def django_like(scope: dict[str, object], receive: object, send: object) -> None:
        async def view() -> None:  # a task copying the context, as Django's handler runs the view
            stream = ChatEventStream(events(), on_end=lambda: ended.append("end"), loop=asyncio.get_running_loop())
            cycle: list[object] = [stream]
            cycle.append(cycle)  # only a cycle collection would free it
            kept.append(cycle)

        await asyncio.get_running_loop().create_task(view())

    gc.disable()
    try:
        await with_front_lifespan(django_like)({"type": "http"}, None, None)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert ended == ["end"]
        kept.clear()
        gc.collect()
        await asyncio.sleep(0)
        assert ended == ["end"]  # the finalizer ran once, not again at collection
    finally:
        gc.enable()
