"""ChatEventStream runs ``on_end`` once whether Django closes it or drops it unclosed (chat.streaming)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

from chat.streaming import ChatEventStream


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
