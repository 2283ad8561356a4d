"""The front's per-process resources: one pooled Horde client, the cancel queue and, with Redis, one signal listener
and one DeltaStreamReader (reference: Redis reads and recovery); and the front's shutdown work.

They are made on first use inside the server's event loop and closed by the ASGI lifespan shutdown
(oaifront.asgi), which also retries pending cancels once more.

Shutdown, in two steps (a host project's own ASGI wrapper calls the same functions):

1. :func:`stop_open_requests` (safe from a signal handler or another thread; :func:`chain_shutdown_signals` installs
   it ahead of the server's own SIGTERM/SIGINT handler): every open request ends at once. An open stream gets the
   ``FrontShuttingDown`` SSE error event and ``data: [DONE]``; a request waiting before its response gets 503
   ``FrontShuttingDown`` JSON with ``Retry-After``; a request arriving later is refused the same way before submit.
   Each native request is cancelled (the views' usual end), so the server's graceful wait ends within seconds.
2. :func:`close_runtime` (the lifespan shutdown): waits for those cancels, in every cancel queue of the runtime (the
   image route's too, :meth:`FrontRuntime.add_cancel_queue`), retries failed ones once more, stops the Redis tasks and
   closes the HTTP pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Iterable
from types import FrameType
from typing import TypeVar

from chat.errors import front_shutting_down
from chat.horde.budget import HordeBudget
from chat.horde.cancels import CancelQueue
from chat.horde.delta_stream import DeltaStreamReader, SignalListener
from chat.horde.native import HordeClient
from chat.horde.text import TextHordeClient
from chat.settings import FrontSettings, front_settings
from chat.waiting.read_schedule import ReadBudget

T = TypeVar("T")
C = TypeVar("C", bound=HordeClient)

SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""The signals that start the shutdown work (uvicorn's and gunicorn's graceful stop signals)."""


class FrontRuntime:
    """What one front process shares across requests."""

    def __init__(self, settings: FrontSettings) -> None:
        self.settings = settings
        self.budget = HordeBudget.from_settings(settings)
        """The process's budgets at the Horde, shared by both clients (chat.horde.budget)."""
        self.added_cancel_queues: list[CancelQueue] = []
        """The cancel queues other apps keep over this runtime's clients (:meth:`add_cancel_queue`, such as the image
        route's), drained at shutdown with :attr:`cancels` and :attr:`text_cancels` (:meth:`aclose`)."""
        self.horde, self.cancels = self._client_and_cancels(HordeClient)
        # The text generation API (chat.serving.text_route): its own client and cancel queue, the same settings.
        self.text_horde, self.text_cancels = self._client_and_cancels(TextHordeClient)
        self.read_budget = ReadBudget(settings.signal_recheck_reads_per_second)
        """The process's budget of timer status reads (chat.waiting.read_schedule)."""
        self.signals: SignalListener | None = None
        self.deltas: DeltaStreamReader | None = None
        self.stopping = asyncio.Event()
        """Set when the process starts stopping (:meth:`begin_shutdown`): every open request ends."""
        if settings.redis_url:
            self.signals = SignalListener(settings.redis_url)
            self.deltas = DeltaStreamReader(settings.redis_url, settings.stream_redis_db)

    def _client_and_cancels(self, client_type: type[C]) -> tuple[C, CancelQueue]:
        """A Horde client of ``client_type`` on the settings' URL, agent, timeout and pool, sharing :attr:`budget`, and
        the cancel queue that retries its cancels every ``cancel_retry_seconds``.
        """
        settings = self.settings
        client = client_type(
            settings.horde_url,
            settings.client_agent,
            settings.horde_timeout_seconds,
            connections=settings.horde_connections,
            budget=self.budget,
        )
        cancels = CancelQueue(
            client, retry_seconds=settings.cancel_retry_seconds, attempt_timeout=settings.horde_timeout_seconds
        )
        return client, cancels

    def add_cancel_queue(self, queue: CancelQueue) -> CancelQueue:
        """Have :meth:`aclose` drain ``queue`` (its running cancels awaited, its pending ones retried once more) before
        the HTTP pool closes; returns ``queue``.
        """
        self.added_cancel_queues.append(queue)
        return queue

    @property
    def has_redis(self) -> bool:
        """Whether the front has a Redis client (``HORDE_OAI_REDIS_URL``)."""
        return self.deltas is not None

    def begin_shutdown(self) -> None:
        """End every open request now (see the module docstring); idempotent. Call on the runtime's loop."""
        self.stopping.set()

    async def unless_stopping(self, awaitable: Awaitable[T], request_id: str | None) -> T:
        """Await ``awaitable``, unless the process starts stopping first: then cancel it and raise 503
        ``FrontShuttingDown`` (:func:`chat.errors.front_shutting_down`) for ``request_id``.

        Raises:
            OpenAIError: ``FrontShuttingDown``, or what ``awaitable`` raises.
        """
        task = asyncio.ensure_future(awaitable)
        if self.stopping.is_set():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise front_shutting_down(request_id)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            raise front_shutting_down(request_id)
        return task.result()

    async def aclose(self) -> None:
        """Drain every cancel queue (running cancels awaited, pending ones retried once more), stop the Redis tasks,
        close the HTTP pool.
        """
        self.begin_shutdown()
        for queue in (self.cancels, self.text_cancels, *self.added_cancel_queues):
            await queue.aclose()
        for resource in (self.signals, self.deltas):
            if resource is not None:
                await resource.aclose()
        await self.horde.aclose()
        await self.text_horde.aclose()
        await self.budget.aclose()


_runtimes: dict[asyncio.AbstractEventLoop, FrontRuntime] = {}


def get_runtime() -> FrontRuntime:
    """Return the running loop's runtime, making it on first use."""
    loop = asyncio.get_running_loop()
    runtime = _runtimes.get(loop)
    if runtime is None:
        runtime = _runtimes[loop] = FrontRuntime(front_settings())
    return runtime


async def close_runtime() -> None:
    """Close the running loop's runtime, if one was made."""
    runtime = _runtimes.pop(asyncio.get_running_loop(), None)
    if runtime is not None:
        await runtime.aclose()


def stop_open_requests() -> None:
    """Start step 1 of the shutdown (module docstring) on every runtime of this process.

    Safe to call from a signal handler or any thread: each runtime's :meth:`FrontRuntime.begin_shutdown` is scheduled
    on its own loop.
    """
    for loop, runtime in list(_runtimes.items()):
        with contextlib.suppress(RuntimeError):  # that loop is already closed
            loop.call_soon_threadsafe(runtime.begin_shutdown)


def chain_shutdown_signals(signals: Iterable[signal.Signals] = SHUTDOWN_SIGNALS) -> None:
    """Run :func:`stop_open_requests` on each of ``signals``, then the handler installed before (the server's own,
    such as uvicorn's graceful stop), so the server's graceful wait finds every open request ending at once.

    Call it from the main thread once the server has installed its handlers (at ASGI lifespan startup); elsewhere it
    does nothing. A signal whose previous handler is the default one is re-raised with it after the shutdown work.
    """
    try:
        for sig in signals:
            previous = signal.getsignal(sig)

            def handler(signum: int, frame: FrameType | None, previous: object = previous) -> None:
                stop_open_requests()
                if callable(previous):
                    previous(signum, frame)
                elif previous == signal.SIG_DFL:
                    signal.signal(signum, signal.SIG_DFL)
                    signal.raise_signal(signum)

            signal.signal(sig, handler)
    except ValueError:  # not the main thread: the host serves the app its own way
        return
