"""The front's shutdown work (chat.serving.runtime): every open request ends at once with 503 ``FrontShuttingDown``.

The process-level behaviour (SIGTERM to a real uvicorn with open streams) is in
tests/integration/test_sigterm_shutdown.py.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from chat.errors import OpenAIError
from chat.serving.runtime import FrontRuntime, chain_shutdown_signals, stop_open_requests
from chat.settings import FrontSettings

MESSAGE = (
    "The front is stopping, so it gave up waiting for this request and cancelled it at the Horde. "
    "Retry in a few seconds."
)


@pytest_asyncio.fixture
async def runtime() -> AsyncIterator[FrontRuntime]:
    made = FrontRuntime(FrontSettings(horde_url="http://127.0.0.1:9/api"))
    yield made
    await made.horde.aclose()


@pytest.mark.asyncio
async def test_a_wait_in_progress_ends_with_503_front_shutting_down(runtime: FrontRuntime) -> None:
    """A request waiting when the process starts stopping gets 503 ``FrontShuttingDown`` with ``Retry-After: 5``,
    no ``x-should-retry`` (the SDK's default retries a 503), and its wait is cancelled.

    ref: cancel-outcomes.1"""
    wait_cancelled = asyncio.Event()

    async def forever() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            wait_cancelled.set()
            raise
        return "never"

    guarded = asyncio.ensure_future(runtime.unless_stopping(forever(), "req-1"))
    await asyncio.sleep(0.01)
    assert not guarded.done()
    runtime.begin_shutdown()
    with pytest.raises(OpenAIError) as caught:
        await asyncio.wait_for(guarded, 5)
    error = caught.value
    assert wait_cancelled.is_set()
    assert (error.status, error.type, error.code, error.param, error.message) == (
        503,
        "api_error",
        "FrontShuttingDown",
        None,
        MESSAGE,
    )
    assert error.metadata == {"request_id": "req-1"}
    assert error.headers() == {"Retry-After": "5"}
    event = json.loads(error.stream_event().removeprefix(b"data: "))
    assert event == {
        "error": {
            "message": MESSAGE,
            "type": "api_error",
            "param": None,
            "code": "FrontShuttingDown",
            "metadata": {"request_id": "req-1", "retry_after": 5},
        }
    }


@pytest.mark.asyncio
async def test_a_wait_that_ends_first_returns_its_result_and_later_waits_stop_at_once(runtime: FrontRuntime) -> None:
    async def quick() -> str:
        return "status"

    assert await runtime.unless_stopping(quick(), "req-1") == "status"
    runtime.begin_shutdown()
    with pytest.raises(OpenAIError) as caught:
        await runtime.unless_stopping(asyncio.sleep(3600), "req-2")
    assert (caught.value.code, caught.value.metadata) == ("FrontShuttingDown", {"request_id": "req-2"})


@pytest.mark.asyncio
async def test_stop_open_requests_reaches_every_runtime_from_a_signal_handler(runtime: FrontRuntime) -> None:
    """:func:`chain_shutdown_signals` runs the shutdown work on SIGTERM, then the handler installed before it."""
    from chat.serving import runtime as runtime_module

    loop = asyncio.get_running_loop()
    runtime_module._runtimes[loop] = runtime
    seen: list[int] = []
    original = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
        chain_shutdown_signals([signal.SIGTERM])
        signal.raise_signal(signal.SIGTERM)
        await asyncio.sleep(0.01)
        assert runtime.stopping.is_set()
        assert seen == [signal.SIGTERM]  # the server's own handler still ran
        stop_open_requests()  # idempotent
        assert runtime.stopping.is_set()
    finally:
        signal.signal(signal.SIGTERM, original)
        runtime_module._runtimes.pop(loop, None)
