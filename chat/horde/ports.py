"""The ports between the front's parts: what a view, the waiter, the relayed stream and the cancel queue may call.

The process's :class:`chat.serving.runtime.FrontRuntime` satisfies these protocols with the real Horde client
(:class:`chat.horde.native.HordeClient`) and Redis readers (:mod:`chat.horde.delta_stream`); a test passes a
smaller object with the same methods instead of patching. Attributes are read-only properties, so a runtime
holding a concrete ``HordeClient`` is a ``WaiterRuntime`` whose ``horde`` is a :class:`HordeApi`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from chat.horde.delta_stream import DeltaEntry
from chat.horde.native import NativeStatus, SubmitResult
from chat.settings import FrontSettings


class HordeCanceller(Protocol):
    """The one native call the cancel queue makes: ``DELETE /v2/generate/chat/status/{id}``."""

    async def cancel(self, request_id: str, apikey: str | None) -> NativeStatus:
        """Cancel a native request; raises ``HordeRefusal`` or ``HordeUnreachable``."""
        ...


class HordeApi(HordeCanceller, Protocol):
    """The native chat routes the views and the waiter call (native-horde-chat.md).

    Every call raises :class:`chat.horde.native.HordeRefusal` for a native refusal and
    :class:`chat.horde.native.HordeUnreachable` when the Horde cannot be reached or answers outside its contract.
    """

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """``POST /v2/generate/chat/async`` with the native payload; the new request's id (and kudos)."""
        ...

    async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
        """``GET /v2/generate/chat/status/{id}``: the request's queue state and finished generations."""
        ...

    async def text_models(self) -> list[dict[str, Any]]:
        """``GET /v2/status/models?type=text``: the native model list, entries as decoded JSON."""
        ...


class SignalSource(Protocol):
    """The Redis signal listener (:class:`chat.horde.delta_stream.SignalListener`): per-request queues of signal
    events.
    """

    def register(self, request_id: str) -> asyncio.Queue[str]:
        """Start queueing the request's signal events (``progress``, ``done``, ...)."""
        ...

    def unregister(self, request_id: str) -> None:
        """Stop queueing the request's events."""
        ...

    @property
    def subscribed(self) -> bool:
        """Whether the listener is subscribed now (signals may be lost while it is not)."""
        ...

    @property
    def registered(self) -> int:
        """How many requests are registered now (the waiters' re-read budget, chat.waiting.waiter)."""
        ...


class DeltaSource(Protocol):
    """The progress stream reader (:class:`chat.horde.delta_stream.DeltaStreamReader`): per-request queues of relayed
    deltas.
    """

    def register(self, request_id: str) -> asyncio.Queue[DeltaEntry]:
        """Start reading the request's progress stream; ``ValueError`` if it is already registered."""
        ...

    def unregister(self, request_id: str) -> None:
        """Stop reading the request's progress stream."""
        ...


class WaitedRequest(Protocol):
    """What the waiter and the view's wait read from a validated request: a chat completions request
    (:class:`chat.protocol.chat_request.ChatCompletionRequest`) or a legacy completions one (chat.views.completions).
    """

    @property
    def is_stream(self) -> bool:
        """Whether the client asked for an event stream."""
        ...

    @property
    def requested_models(self) -> list[str]:
        """The model ids asked for."""
        ...

    @property
    def models(self) -> Sequence[str] | None:
        """The client's fallback list, or None."""
        ...

    @property
    def availability_mode(self) -> str:
        """``wait`` or ``fail_fast``."""
        ...

    @property
    def progress_option(self) -> bool | None:
        """``horde.progress``: the queue progress a stream sends (chat.streaming.progress)."""
        ...


class WaiterRuntime(Protocol):
    """What a :class:`chat.waiting.waiter.ChatWaiter` reads from the process: settings, the Horde, the signals."""

    @property
    def settings(self) -> FrontSettings:
        """The front's settings."""
        ...

    @property
    def horde(self) -> HordeApi:
        """The native client."""
        ...

    @property
    def signals(self) -> SignalSource | None:
        """The signal listener, or None without Redis."""
        ...


class RelayRuntime(WaiterRuntime, Protocol):
    """What a relayed stream reads besides the waiter's: the progress stream reader."""

    @property
    def deltas(self) -> DeltaSource | None:
        """The progress stream reader, or None without Redis."""
        ...
