"""The server-sent event sequence of a relayed stream: the worker's text live from Redis, paced, then reconciled.

Reference sections: "Relayed deltas", "Redis reads and recovery", "Delta fields", "Pacing", "Final reply
reconciliation", "Model and fingerprint"; native-horde-chat.md "Progress stream (Redis)".

A request that :func:`chat.horde.native_payload.relays_deltas` selects, on a front with Redis, is submitted with
``stream: true`` and the Horde appends the serving worker's progress posts to ``horde:chat:stream:<request id>``. The
process's
:class:`chat.horde.delta_stream.DeltaStreamReader` queues each entry on the request; :func:`relayed_stream` turns them
into ``chat.completion.chunk`` events while the status wait (:meth:`chat.waiting.waiter.ChatWaiter.wait_done`) runs
beside it, and completes the stream from the final reply when the wait ends. :class:`DeltaRelay` holds the rules and
does no I/O.

Rules, by the entry (one read batch is every entry the queue holds at once, in stream order):

- The first delta with ``seq`` 1 pins its generation id (``gen``) (``delta-fields.1``). The first accepted delta
  with content to send (text, or reasoning unless ``horde.include_reasoning`` is false) emits the role chunk and
  exposes the stream (``delta-fields.2``); its fields are sent whole at once (``pacing.1``), later ones are paced by
  :class:`chat.streaming.pacing.DeltaPacer` (``pacing.2``). Hidden reasoning is discarded, and its delta still advances
  the sequence (``delta-fields.4``, ``delta-fields.5``).
- Before exposure, an ended marker, and a delta read in the same batch as its generation's ended marker, are
  dropped; that marker, or a gap in the pinned gen (``seq`` not the previous one plus 1), unpins it, and the next
  attempt's first delta may pin again (``final-reply-reconciliation.6``, ``.7``). A delta of another gen that is
  not a first delta also unpins (the pinned attempt is gone). A stream never exposed is delivered whole, as the
  buffered stream (:func:`chat.rendering.completion.buffered_chunks`) (``relayed-deltas.4``,
  ``redis-reads-and-recovery.6``).
- After exposure, a restart is never appended (``final-reply-reconciliation.5``): a delta of a new gen, an ended
  marker of the pinned gen whose reason is ``restarted``, or a gap breaks the relay. Its pending pieces are sent at
  once (``pacing.16``) and later entries are ignored; the final reply completes the stream.
- Every chunk has the pinning delta's model (the request's ``model`` or first ``models`` entry when the delta has
  none) and ``build_system_fingerprint(<its worker>, <that model>)``, null without a worker; the final chunks too
  (``delta-fields.6``, ``delta-fields.7``, ``model-and-fingerprint.7``, ``.8``).

Reconciliation with the final reply (after the pending pieces are flushed, ``pacing.16``):

- When the final ``content`` starts with the relayed text: the rest of the final reasoning when it starts with the
  relayed reasoning (else no further reasoning) (``final-reply-reconciliation.1``-``.3``), then the rest of the text,
  then the finish chunk and, with ``stream_options.include_usage``, the usage chunk, then ``data: [DONE]``.
- Otherwise the reply diverged: ``data: {"error": {"message", "type": "api_error", "param": null, "code":
  "ChatStreamDiverged", "metadata": {"request_id"}}}`` then ``data: [DONE]`` (``final-reply-reconciliation.8``).

A stream that stops (deleted, expired, recreated below the last id read, Redis down) just stops the deltas: the
reader retries from the last id read, so no character is lost or repeated, and the final reply fills in the rest
(``redis-reads-and-recovery.4``-``.6``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final

from chat import errors
from chat.errors import OpenAIError
from chat.horde.delta_stream import DeltaEntry
from chat.horde.native import NativeStatus
from chat.horde.ports import RelayRuntime
from chat.protocol.chat_request import ChatCompletionRequest
from chat.rendering.completion import (
    ChunkFactory,
    buffered_chunks,
    build_completion,
    build_system_fingerprint,
    finish_chunk,
    usage_chunk,
)
from chat.rendering.sse import DONE_EVENT, data_event
from chat.streaming.buffered import unless_stopping
from chat.streaming.pacing import CONTENT, DeltaPacer, Piece
from chat.streaming.progress import StreamProgress
from chat.waiting.waiter import ChatWaiter

RESTART_REASONS: Final[frozenset[str]] = frozenset({"restarted"})
"""Ended-marker reasons that mean the attempt starts over (native contract: ``completed``, ``restarted``,
``faulted``; the devhorde also writes ``cancelled`` and ``expired``). After exposure such a marker of the pinned gen
breaks the relay at once; another reason only ends the attempt's deltas and the status decides."""

STREAM_DIVERGED_MESSAGE: Final[str] = (
    "The worker's final reply does not continue the text already streamed (the generation was restarted or "
    "corrected), so the stream cannot be completed. Retry the request."
)
"""The message of the ``ChatStreamDiverged`` stream error (``final-reply-reconciliation.8``)."""


def stream_diverged_error(request_id: str) -> OpenAIError:
    """The ``ChatStreamDiverged`` error of a relayed stream whose final reply does not start with the relayed text.

    Its SSE form (:meth:`chat.errors.OpenAIError.stream_event`) is ``{"error": {"message", "type": "api_error",
    "param": null, "code": "ChatStreamDiverged", "metadata": {"request_id"}}}`` (``final-reply-reconciliation.8``).
    The status (502) is never sent: the stream's 200 headers went out long before.
    """
    return errors.failure(errors.CHAT_STREAM_DIVERGED, STREAM_DIVERGED_MESSAGE, metadata={"request_id": request_id})


class DeltaRelay:
    """The relay rules of one request (see the module docstring); no I/O, no task, no sleep.

    Args:
        request: The validated request (``include_reasoning``, ``include_usage``, ``requested_models``).
        request_id: The native request id (chunk ids ``chatcmpl-<id>``, the error's ``metadata.request_id``).
        created: The chunks' ``created`` (Unix seconds).
        max_window_seconds: ``HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS``; 0 sends each delta as it arrives.
        max_chunks_per_second: ``HORDE_OAI_DELTA_PACING_MAX_CHUNKS_PER_SECOND``.
        clock: Seconds, the time base of every ``now`` (the event loop's ``time`` in :func:`relayed_stream`).

    Methods return chunk dicts (``chat.completion.chunk``); the caller frames them with
    :func:`chat.rendering.sse.data_event`.
    """

    def __init__(  # noqa: PLR0913 - keyword-only pacing settings and the test clock
        self,
        request: ChatCompletionRequest,
        request_id: str,
        created: int,
        *,
        max_window_seconds: float,
        max_chunks_per_second: float,
        clock: Callable[[], float],
    ) -> None:
        self.request = request
        self.request_id = request_id
        self.created = created
        self.max_window_seconds = max_window_seconds
        self.max_chunks_per_second = max_chunks_per_second
        self.clock = clock
        self.pinned_gen: str | None = None
        """The pinned generation id, or None."""
        self.last_seq = 0
        """The ``seq`` of the pinned gen's last accepted delta."""
        self.exposed = False
        """Whether the role chunk went out (``delta-fields.2``); from then on the stream is never delivered whole."""
        self.broken = False
        """Whether the relay broke after exposure (a restart or a gap): later entries are ignored."""
        self.relayed_text = ""
        """Every ``text`` accepted after the pin, in order: what the client has or will have as ``content``."""
        self.relayed_reasoning = ""
        """Every included ``reasoning`` accepted after the pin, in order."""
        self.factory: ChunkFactory | None = None
        """The chunk factory of the pinning delta's model and fingerprint (None before a pin)."""
        self.pacer = self._new_pacer()

    def _new_pacer(self) -> DeltaPacer:
        return DeltaPacer(self.max_window_seconds, self.max_chunks_per_second, clock=self.clock)

    @property
    def listening(self) -> bool:
        """Whether entries still matter (False once the relay broke)."""
        return not self.broken

    # ------------------------------------------------------------------ entries

    def add_batch(self, entries: Iterable[DeltaEntry], now: float | None = None) -> list[dict[str, Any]]:
        """Apply one read batch (entries in stream order) at ``now``; return the chunks to send at once.

        The chunks are the role chunk and the exposing delta's chunks when the batch exposes the stream, and the
        flushed pending pieces when it breaks the relay; paced pieces are taken with :meth:`take_due`. Every accepted
        delta of the batch arrives at the same ``now``, so the pacer merges them, with any piece still pending, into
        one plan over one window from ``now``: one piece is due at once, not one per delta (``pacing.14``,
        ``pacing.15``).
        """
        if now is None:
            now = self.clock()
        batch = list(entries)
        ended_gens = {entry.gen for entry in batch if entry.ended}
        chunks: list[dict[str, Any]] = []
        for entry in batch:
            if self.broken:
                break
            if self.exposed:
                chunks.extend(self._after_exposure(entry, now))
            else:
                chunks.extend(self._before_exposure(entry, ended_gens, now))
        return chunks

    def _pin(self, entry: DeltaEntry) -> None:
        self.pinned_gen = entry.gen
        self.last_seq = entry.seq
        self.relayed_text = self.relayed_reasoning = ""
        self.pacer = self._new_pacer()  # the window is estimated from the pinned attempt's posts only
        model = entry.model or self.request.requested_models[0]
        self.factory = ChunkFactory(
            self.request_id,
            self.created,
            model,
            build_system_fingerprint(entry.worker, model),
            include_usage=self.request.include_usage,
        )

    def _unpin(self) -> None:
        self.pinned_gen = None
        self.last_seq = 0
        self.factory = None

    def _before_exposure(self, entry: DeltaEntry, ended_gens: set[str], now: float) -> list[dict[str, Any]]:
        if entry.ended:
            if entry.gen == self.pinned_gen:
                self._unpin()
            return []
        if entry.gen in ended_gens:
            return []  # read together with its generation's ended marker: dropped (the marker unpins)
        if self.pinned_gen is not None and entry.gen == self.pinned_gen:
            if entry.seq != self.last_seq + 1:
                self._unpin()  # a gap in the pinned gen
                return []
            self.last_seq = entry.seq
        elif entry.seq == 1:
            self._pin(entry)
        else:
            if self.pinned_gen is not None:
                self._unpin()  # another attempt's later delta: the pinned one is gone
            return []
        return self._accept(entry, now)

    def _after_exposure(self, entry: DeltaEntry, now: float) -> list[dict[str, Any]]:
        if entry.gen != self.pinned_gen:
            if entry.ended:
                return []  # an earlier attempt's marker; nothing of it was relayed
            return self._break()  # a new attempt
        if entry.ended:
            return self._break() if entry.reason in RESTART_REASONS else []
        if entry.seq != self.last_seq + 1:
            return self._break()  # a gap
        self.last_seq = entry.seq
        return self._accept(entry, now)

    def _accept(self, entry: DeltaEntry, now: float) -> list[dict[str, Any]]:
        reasoning = entry.reasoning if self.request.include_reasoning else ""
        self.relayed_reasoning += reasoning
        self.relayed_text += entry.text
        self.pacer.add_delta(reasoning, entry.text, entry.ms, now)
        if self.exposed or not (reasoning or entry.text):
            return []
        self.exposed = True
        return [self._factory().delta({"role": "assistant"}), *self._pieces(self.pacer.take_due(now))]

    def _break(self) -> list[dict[str, Any]]:
        self.broken = True
        return self.flush()

    # ------------------------------------------------------------------ pacing

    def seconds_until_due(self, now: float | None = None) -> float | None:
        """Seconds until the next paced piece is due (0: due now), None when nothing is pending."""
        return self.pacer.seconds_until_due(now)

    def take_due(self, now: float | None = None) -> list[dict[str, Any]]:
        """The chunks of every paced piece due at ``now``."""
        return self._pieces(self.pacer.take_due(now))

    def flush(self) -> list[dict[str, Any]]:
        """Every pending piece at once, consecutive pieces of a field joined (``pacing.16``)."""
        return self._pieces(self.pacer.flush())

    def drop(self) -> None:
        """Discard the pending pieces: the client disconnected (``pacing.17``)."""
        self.pacer.drop()

    def _factory(self) -> ChunkFactory:
        assert self.factory is not None, "a delta is accepted only after a pin"
        return self.factory

    def _pieces(self, pieces: Iterable[Piece]) -> list[dict[str, Any]]:
        return [
            self._factory().delta({"content" if field == CONTENT else "reasoning_content": text})
            for field, text in pieces
        ]

    # ------------------------------------------------------------------ final reply

    def reconcile(self, status: NativeStatus) -> list[dict[str, Any]] | OpenAIError:
        """The chunks completing an exposed stream from its finished status, or the ``ChatStreamDiverged`` error.

        Call after :meth:`flush`. The chunks are the rest of the reasoning (only when the final reasoning starts with
        the relayed one), the rest of the text, the finish chunk (``finish_reason``, ``native_finish_reason``,
        ``x_horde`` of :func:`chat.rendering.completion.build_completion`) and the usage chunk when ``include_usage``;
        the caller sends ``data: [DONE]`` after them or after the error's event.
        """
        completion = build_completion(self.request, status, self.request_id, self.created)
        message = completion["choices"][0]["message"]
        final_text = message.get("content") or ""
        final_reasoning = message.get("reasoning_content") or ""
        if not final_text.startswith(self.relayed_text):
            return stream_diverged_error(self.request_id)
        factory = self._factory()
        chunks: list[dict[str, Any]] = []
        if final_reasoning.startswith(self.relayed_reasoning) and len(final_reasoning) > len(self.relayed_reasoning):
            chunks.append(factory.delta({"reasoning_content": final_reasoning[len(self.relayed_reasoning) :]}))
        if len(final_text) > len(self.relayed_text):
            chunks.append(factory.delta({"content": final_text[len(self.relayed_text) :]}))
        chunks.append(finish_chunk(factory, completion))
        if self.request.include_usage:
            chunks.append(usage_chunk(factory, completion))
        return chunks


def _drain(queue: asyncio.Queue[DeltaEntry], first: DeltaEntry) -> list[DeltaEntry]:
    """``first`` and every entry already queued: the reader queues one read's entries at once, so this is a batch."""
    batch = [first]
    while True:
        try:
            batch.append(queue.get_nowait())
        except asyncio.QueueEmpty:
            return batch


async def relayed_stream(  # noqa: PLR0913, PLR0917 - the parts wait_for_outcome hands a stream, and the Redis runtime
    request: ChatCompletionRequest,
    waiter: ChatWaiter,
    first_status: NativeStatus,
    created: int,
    on_end: Callable[[], None],
    runtime: RelayRuntime,
    on_error: Callable[[OpenAIError], None] | None = None,
    on_content: Callable[[bool], None] | None = None,
) -> AsyncIterator[bytes]:
    """The whole event stream of a relayed request: keepalives, relayed deltas (paced), then the final reply.

    Args:
        request: The validated request; :func:`chat.horde.native_payload.relays_deltas` selected it.
        waiter: Its waiter; ``waiter.wait_done(first_status)`` runs concurrently, ``waiter.settings`` gives
            ``keepalive_seconds`` and the ``delta_pacing_*`` settings, ``waiter.request_id`` the stream to read.
        first_status: The first status read, which admitted the stream.
        created: The chunks' ``created`` (Unix seconds).
        on_end: Runs once when the stream ends for any reason (finished, error, client disconnect); the caller
            cancels the native request there when it is not terminal.
        on_error: Told the error of the stream's error event, if it ends with one (chat.serving.request_record).
        on_content: Told, as reply content goes out, whether it is relayed deltas (True) or the reply delivered
            whole (False) (chat.serving.request_record: ``first_content``, ``relayed``).
        runtime: The process's :class:`chat.serving.runtime.FrontRuntime`; ``runtime.deltas`` is its
            :class:`chat.horde.delta_stream.DeltaStreamReader` (the request is registered at start and unregistered at
            the end).

    Yields a keepalive frame after every ``keepalive_seconds`` without an event, while waiting and between deltas
    (``delta-fields.8``): a progress comment, ``: keepalive``, or after a long quiet a progress chunk
    (chat.streaming.progress); the chunks of the module docstring's rules; then either the buffered chunks (never
    exposed), the reconciliation chunks, or an error event (``ChatStreamDiverged``, or the wait's own error such as
    ``ChatRequestFaulted``), and always ``data: [DONE]`` last. A client disconnect (``asyncio.CancelledError``) drops
    the pending pieces (``pacing.17``) and is re-raised.
    """
    settings = waiter.settings
    request_id = waiter.request_id
    deltas = runtime.deltas
    assert deltas is not None, "a relayed stream runs only on a front with Redis (runtime.has_redis)"
    loop = asyncio.get_running_loop()
    relay = DeltaRelay(
        request,
        request_id,
        created,
        max_window_seconds=settings.delta_pacing_max_window_seconds,
        max_chunks_per_second=settings.delta_pacing_max_chunks_per_second,
        clock=loop.time,
    )
    keepalive = settings.keepalive_seconds
    progress = StreamProgress(request, waiter, created, loop.time())
    registered = False
    wait_task: asyncio.Future[NativeStatus] | None = None
    get_task: asyncio.Future[DeltaEntry] | None = None
    try:
        queue: asyncio.Queue[DeltaEntry] = deltas.register(request_id)
        registered = True
        wait_task = asyncio.ensure_future(unless_stopping(waiter, waiter.wait_done(first_status)))
        last_sent = loop.time()
        while not wait_task.done():
            chunks = relay.take_due(loop.time())
            if chunks:
                if on_content is not None:
                    on_content(True)
                for chunk in chunks:
                    yield data_event(chunk)
                last_sent = loop.time()
                progress.sent_data(last_sent)
                continue
            if not relay.listening and registered:
                if get_task is not None:
                    get_task.cancel()
                    get_task = None
                deltas.unregister(request_id)  # later entries would be ignored: stop reading them
                registered = False
            if relay.listening and get_task is None:
                get_task = asyncio.ensure_future(queue.get())
            now = loop.time()
            timeout = max(0.0, last_sent + keepalive - now)
            due = relay.seconds_until_due(now)
            if due is not None:
                timeout = min(timeout, due)
            awaited: set[asyncio.Future[Any]] = {wait_task} if get_task is None else {wait_task, get_task}
            done, _ = await asyncio.wait(awaited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if get_task is not None and get_task in done:
                batch = _drain(queue, get_task.result())
                get_task = None
                chunks = relay.add_batch(batch, loop.time())
                if chunks and on_content is not None:
                    on_content(True)
                for chunk in chunks:
                    yield data_event(chunk)
                if chunks:
                    last_sent = loop.time()
                    progress.sent_data(last_sent)
            elif not done and loop.time() - last_sent >= keepalive:
                yield progress.keepalive(loop.time())
                last_sent = loop.time()

        if get_task is not None:
            get_task.cancel()
            get_task = None
        if registered:
            deltas.unregister(request_id)
            registered = False
        try:
            status = wait_task.result()
        except OpenAIError as error:
            if on_error is not None:
                on_error(error)
            for chunk in relay.flush():
                yield data_event(chunk)
            yield error.stream_event()
            yield DONE_EVENT
            return
        if not relay.exposed:
            if on_content is not None:
                on_content(False)
            for chunk in buffered_chunks(request, status, request_id, created):
                yield data_event(chunk)
            yield DONE_EVENT
            return
        for chunk in relay.flush():
            yield data_event(chunk)
        outcome = relay.reconcile(status)
        if isinstance(outcome, OpenAIError):
            if on_error is not None:
                on_error(outcome)
            yield outcome.stream_event()
        else:
            for chunk in outcome:
                yield data_event(chunk)
        yield DONE_EVENT
    except asyncio.CancelledError:
        relay.drop()
        raise
    finally:
        for task in (get_task, wait_task):
            if task is not None and not task.done():
                task.cancel()
        if registered:
            with contextlib.suppress(Exception):
                deltas.unregister(request_id)
        on_end()
