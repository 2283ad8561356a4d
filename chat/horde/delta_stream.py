"""The Redis side of a relayed stream: the per-process delta reader and the signal listener.

:class:`DeltaStreamReader` reads every registered request's progress stream ``horde:chat:stream:<request id>`` with
one blocking ``XREAD`` and queues each entry, parsed into a :class:`DeltaEntry`, on its request (reference, "Redis
reads and recovery"; native contract, "Progress stream (Redis)"). :class:`SignalListener` reads the
``horde:chat:signals`` channel and wakes the request's waiter (native contract, "Signals (Redis pub/sub)").

Each runs as one background task per process, started lazily by the first :meth:`register` (which must be called
from the running event loop) and stopped with ``aclose()``. Neither task ever ends on a Redis or parsing error: it
logs, waits and reads again. Both take the Redis URL as a constructor argument (``HORDE_OAI_REDIS_URL``; the reader
also ``HORDE_OAI_STREAM_REDIS_DB``), so the module needs no Django settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from loguru import logger
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Tracer
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.typing import KeyT, StreamIdT

STREAM_KEY_PREFIX: Final = "horde:chat:stream:"
"""The progress stream of a request is ``horde:chat:stream:<request id>`` (native contract, "Progress stream")."""

SIGNAL_CHANNEL: Final = "horde:chat:signals"
"""The pub/sub channel of the Horde's ``{"id", "event"}`` signals (native contract, "Signals")."""

DELTA_READ_BLOCK_MILLISECONDS: Final = 250
"""The ``BLOCK`` of each ``XREAD`` (``redis-reads-and-recovery.1``)."""

DELTA_READ_TIMEOUT_SECONDS: float = 5
"""A read (connecting included) taking longer is abandoned and made again on a fresh connection
(``redis-reads-and-recovery.2``). Read at each read, so tests may patch it."""

DELTA_READ_RETRY_SECONDS: float = 2
"""The wait before a failed read is made again (``redis-reads-and-recovery.4``). Read at each failure."""

RESUBSCRIBED_EVENT: Final = "resubscribed"
"""Put on every registered request's queue when the listener subscribes again after a failure: signals published
while it was not subscribed are lost, so each waiter re-reads at once instead of at its backed-off timer."""

SIGNAL_RETRY_SECONDS: float = 2
"""The wait before the signal listener reconnects after a failure. Read at each failure."""

SIGNAL_POLL_SECONDS: float = 1
"""How long the signal listener waits for one message before checking its connection's liveness."""

SIGNAL_PONG_TIMEOUT_SECONDS: float = 5
"""How long the signal listener waits for the answer to its liveness ``PING`` before reconnecting."""

SIGNAL_CONNECT_TIMEOUT_SECONDS: float = 5
"""How long the signal listener waits for its ``SUBSCRIBE`` to be answered before reconnecting."""

DELTA_READ_SPAN: Final = "horde.oai.delta_read"
"""The span recorded for each non-empty read (``delta-read-attributes.1``)."""

_CLOSE_TIMEOUT_SECONDS: Final = 1.0
_tracer = trace.get_tracer(__name__)


async def _stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task that is still running and wait until it has stopped."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def redis_on_database(client: Redis, db: int) -> Redis:
    """Return ``client`` set to use database ``db`` for every connection it opens.

    redis-py's ``from_url`` lets a database in the URL's path or query (``redis://host:6379/0``) override its ``db``
    argument; the progress streams live on ``HORDE_OAI_STREAM_REDIS_DB`` whatever database the URL names, so the
    pool's connection arguments are set before the first connection is made.
    """
    client.connection_pool.connection_kwargs["db"] = db
    return client


def unretried_redis(url: str, client_name: str | None, connect_timeout: float, **options: Any) -> Redis:
    """A Redis client on ``url`` with no health-check PING, no retries of its own and no read timeout: the reader's
    loop owns timeouts and retries. ``connect_timeout`` is in seconds; ``options`` go to ``Redis.from_url``.
    """
    return Redis.from_url(
        url,
        client_name=client_name,
        health_check_interval=0,
        retry=Retry(NoBackoff(), 0),
        socket_timeout=None,
        socket_connect_timeout=connect_timeout,
        **options,
    )


def stream_key(request_id: str) -> str:
    """Return the Redis key of a request's progress stream."""
    return f"{STREAM_KEY_PREFIX}{request_id}"


@dataclass(frozen=True, slots=True)
class DeltaEntry:
    """One entry of a progress stream, as written by the Horde (native contract, "Progress stream (Redis)").

    ``seq`` is 0 when the entry has none (an ended marker may leave it out) or it is not an integer; a delta with
    seq 0 never follows another, so the streaming layer sees it as a gap. ``ms`` is the millisecond time of
    ``stream_id``, the input of the pacing window (``pacing.5``).
    """

    stream_id: str
    """The Redis stream id, ``"<ms>-<n>"``."""
    ms: int
    """The ``<ms>`` part of :attr:`stream_id`."""
    gen: str
    """The generation attempt's id; a restarted attempt gets a new one."""
    seq: int
    """The 1-based count of the attempt's posts; a missing number is a gap."""
    text: str
    """The content delta, possibly empty."""
    reasoning: str
    """The reasoning delta, possibly empty."""
    model: str | None
    """The model serving the attempt, when the entry has it."""
    worker: str | None
    """The worker id serving the attempt, when the entry has it."""
    ended: bool
    """Whether this is the marker written when the attempt ended (``ended`` is ``"1"``)."""
    reason: str | None
    """The ended marker's reason (completed, restarted, faulted, ...), when it has one."""

    @classmethod
    def from_fields(cls, stream_id: str | bytes, fields: Mapping[str | bytes, str | bytes]) -> DeltaEntry:
        """Parse an entry's id and field map (bytes or str; undecodable bytes are replaced). ``ValueError`` if the id
        is malformed. Unknown fields are ignored.
        """
        values = {_text(key): _text(value) for key, value in fields.items()}
        identifier = _text(stream_id)
        try:
            seq = int(values.get("seq", ""))
        except ValueError:
            seq = 0
        return cls(
            stream_id=identifier,
            ms=stream_id_ms(identifier),
            gen=values.get("gen", ""),
            seq=seq,
            text=values.get("text", ""),
            reasoning=values.get("reasoning", ""),
            model=values.get("model") or None,
            worker=values.get("worker") or None,
            ended=values.get("ended") == "1",
            reason=values.get("reason") or None,
        )


@dataclass(frozen=True, slots=True)
class ReaderStats:
    """Counters of a :class:`DeltaStreamReader` since it was created."""

    reads: int
    """Reads answered (empty or not)."""
    entries: int
    """Entries queued."""
    timeouts: int
    """Reads abandoned after ``DELTA_READ_TIMEOUT_SECONDS``."""
    failures: int
    """Reads that failed with an error."""


class _Subscription:
    __slots__ = ("key", "last_id", "queue")

    def __init__(self, request_id: str) -> None:
        self.key = stream_key(request_id).encode()
        self.last_id = b"0-0"
        self.queue: asyncio.Queue[DeltaEntry] = asyncio.Queue()


class DeltaStreamReader:
    """One background task reading every registered request's progress stream (``redis-reads-and-recovery.1``).

    Each read is one ``XREAD BLOCK 250`` over all registered streams, each from the last id read (``0-0``, the
    stream's start, for a new registration), and each entry is queued on its request as a :class:`DeltaEntry`, in
    stream order. A stream registered during a read joins the next one, within 250 ms.

    Recovery (``redis-reads-and-recovery.2``-``.5``):

    - a read, connecting included, that takes longer than ``DELTA_READ_TIMEOUT_SECONDS`` (5 s) is abandoned and made
      again at once on a fresh connection;
    - no ``PING`` is sent: the client has no health checks and no retries of its own;
    - a failed read is made again after ``DELTA_READ_RETRY_SECONDS`` (2 s) on a fresh connection, from the last id
      read of each stream, so no entry is skipped or repeated;
    - a deleted or expired stream, or one recreated with ids at or below the last id read, yields nothing and no
      error: its deltas just stop.

    Each non-empty read records one root span ``horde.oai.delta_read`` with ``horde.streams`` (streams read),
    ``horde.streams_with_entries`` and ``horde.entries``; an empty read records none (``delta-read-attributes``).

    The client connects to ``redis_url`` and always reads database ``stream_redis_db`` (``HORDE_OAI_STREAM_REDIS_DB``),
    even when the URL names another database (:func:`redis_on_database`). ``client_name`` is
    the connection's ``CLIENT SETNAME``. ``tracer`` defaults to this module's tracer.
    """

    def __init__(
        self,
        redis_url: str,
        stream_redis_db: int = 0,
        *,
        client_name: str | None = "horde-oai-delta-reader",
        tracer: Tracer | None = None,
    ) -> None:
        self._url = redis_url
        self._db = stream_redis_db
        self._client_name = client_name
        self._tracer = tracer or _tracer
        self._subscriptions: dict[str, _Subscription] = {}
        self._task: asyncio.Task[None] | None = None
        self._client: Redis | None = None
        self._wakeup = asyncio.Event()
        self._reads = self._entries = self._timeouts = self._failures = 0
        self._failing = False

    def register(self, request_id: str) -> asyncio.Queue[DeltaEntry]:
        """Start reading ``horde:chat:stream:<request_id>`` from its start and return the queue its entries go to.

        Starts the reader task when it is not running; call it from the event loop. Raises ``ValueError`` when the
        request is already registered.
        """
        if request_id in self._subscriptions:
            raise ValueError(f"request {request_id!r} is already registered")
        self._ensure_running()
        subscription = _Subscription(request_id)
        self._subscriptions[request_id] = subscription
        self._wakeup.set()
        return subscription.queue

    def unregister(self, request_id: str) -> None:
        """Stop reading the request's stream; entries of a read in flight are discarded. Unknown ids are ignored."""
        self._subscriptions.pop(request_id, None)

    @property
    def registered(self) -> frozenset[str]:
        """The request ids being read."""
        return frozenset(self._subscriptions)

    @property
    def stats(self) -> ReaderStats:
        """The reader's counters."""
        return ReaderStats(self._reads, self._entries, self._timeouts, self._failures)

    async def aclose(self) -> None:
        """Stop the reader task and close its connection. Registrations stay; a later :meth:`register` restarts it."""
        task, self._task = self._task, None
        await _stop_task(task)
        await self._drop_client()

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._task.get_loop() is loop:
            return
        self._client = None
        self._wakeup = asyncio.Event()
        # A fresh context: the reader is a process-wide task, not part of the request that happened to start it.
        self._task = loop.create_task(self._run(), name="horde-oai-delta-reader", context=contextvars.Context())

    def _new_client(self) -> Redis:
        return redis_on_database(
            unretried_redis(self._url, self._client_name, DELTA_READ_TIMEOUT_SECONDS, single_connection_client=True),
            self._db,
        )

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), _CLOSE_TIMEOUT_SECONDS)

    async def _run(self) -> None:
        while True:
            if not self._subscriptions:
                self._wakeup.clear()
                await self._drop_client()  # an idle connection may be closed by the server meanwhile
                if not self._subscriptions:  # a register() during the close has set the event again
                    await self._wakeup.wait()
                continue
            try:
                await self._read_once()
            except Exception:  # noqa: BLE001 - a bug in handling one reply must not stop every relay
                logger.exception("Delta reader error; reading again in {}s", DELTA_READ_RETRY_SECONDS)
                await asyncio.sleep(DELTA_READ_RETRY_SECONDS)

    async def _read_once(self) -> None:
        batch = dict(self._subscriptions)
        streams: dict[KeyT, StreamIdT] = {subscription.key: subscription.last_id for subscription in batch.values()}
        if self._client is None:
            self._client = self._new_client()
        started_ns = time.time_ns()
        try:
            reply = await asyncio.wait_for(
                self._client.xread(streams, block=DELTA_READ_BLOCK_MILLISECONDS), DELTA_READ_TIMEOUT_SECONDS
            )
        except TimeoutError:
            self._timeouts += 1
            self._log_trouble(
                "Delta read over {} streams took longer than {}s; reading again on a fresh connection",
                len(streams),
                DELTA_READ_TIMEOUT_SECONDS,
            )
            await self._drop_client()
            return
        except Exception as error:  # noqa: BLE001 - the process-wide reader must survive any read failure
            self._failures += 1
            self._log_trouble("Delta read failed ({!r}); reading again in {}s", error, DELTA_READ_RETRY_SECONDS)
            await self._drop_client()
            await asyncio.sleep(DELTA_READ_RETRY_SECONDS)
            return
        if self._failing:
            logger.info("Delta reads recovered")
            self._failing = False
        self._reads += 1
        if reply:
            self._deliver(reply, batch, len(streams), started_ns)

    def _log_trouble(self, message: str, *args: object) -> None:
        # A warning for the first failed read of a run, debug lines for the rest until a read succeeds.
        (logger.debug if self._failing else logger.warning)(message, *args)
        self._failing = True

    def _deliver(self, reply: Any, batch: dict[str, _Subscription], stream_count: int, started_ns: int) -> None:
        by_key = {subscription.key: (request_id, subscription) for request_id, subscription in batch.items()}
        if isinstance(reply, Mapping):  # RESP3: {key: [[(id, fields), ...]]}
            items = [(key, value[0] if value else []) for key, value in reply.items()]
        else:  # RESP2: [[key, [(id, fields), ...]], ...]
            items = reply
        streams_with_entries = entry_count = 0
        for raw_key, raw_entries in items:
            key = raw_key if isinstance(raw_key, bytes) else str(raw_key).encode()
            found = by_key.get(key)
            if found is None or not raw_entries:
                continue
            request_id, subscription = found
            current = self._subscriptions.get(request_id) is subscription
            streams_with_entries += 1
            for raw_id, fields in raw_entries:
                entry_id = raw_id if isinstance(raw_id, bytes) else str(raw_id).encode()
                subscription.last_id = entry_id
                entry_count += 1
                if not current:
                    continue
                try:
                    entry = DeltaEntry.from_fields(entry_id, fields or {})
                except (ValueError, AttributeError) as error:
                    logger.warning("Skipping malformed entry {} of {}: {!r}", entry_id, request_id, error)
                    continue
                subscription.queue.put_nowait(entry)
                self._entries += 1
        if entry_count:
            span = self._tracer.start_span(DELTA_READ_SPAN, context=Context(), start_time=started_ns)
            span.set_attribute("horde.streams", stream_count)
            span.set_attribute("horde.streams_with_entries", streams_with_entries)
            span.set_attribute("horde.entries", entry_count)
            span.end()


class SignalListener:
    """One background task subscribed to ``horde:chat:signals``, waking the waiter of each signalled request.

    The Horde publishes ``{"id": "<request id>", "event": "<event>"}`` (``processing``, ``done``, ``faulted``,
    ``cancelled``) (native contract, "Signals (Redis pub/sub)"). Each message whose ``id`` is registered puts its
    ``event`` on that request's queue; other ids, bad JSON and other shapes are ignored (logged at debug level).

    After a failure it reconnects and subscribes again after ``SIGNAL_RETRY_SECONDS`` (2 s); signals published
    meanwhile are lost, so once subscribed again it puts :data:`RESUBSCRIBED_EVENT` on every registered queue and
    each waiter re-reads at once (its timer may have backed off far beyond ``signal_recheck_seconds``). When nothing
    was heard for ``liveness_interval_seconds`` it sends a pub/sub ``PING`` and reconnects when no answer comes within
    ``SIGNAL_PONG_TIMEOUT_SECONDS``, so a connection left unresponsive by a network fault does not keep it deaf
    (``None`` disables this). Pub/sub ignores the database number.
    """

    def __init__(
        self,
        redis_url: str,
        *,
        channel: str = SIGNAL_CHANNEL,
        client_name: str | None = "horde-oai-signals",
        liveness_interval_seconds: float | None = 30.0,
    ) -> None:
        self._url = redis_url
        self._channel = channel
        self._client_name = client_name
        self._liveness = liveness_interval_seconds
        self._waiters: dict[str, asyncio.Queue[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._failing = False
        self._lost_signals = False
        """Whether the listener was subscribed before: a new subscription may have missed signals."""

    def register(self, request_id: str) -> asyncio.Queue[str]:
        """Return the queue the request's event names go to, starting the listener when it is not running.

        Call it from the event loop, before submitting when the first signal matters (see :meth:`wait_subscribed`).
        Registering an id again returns its existing queue.
        """
        self._ensure_running()
        queue = self._waiters.get(request_id)
        if queue is None:
            queue = self._waiters[request_id] = asyncio.Queue()
        return queue

    def unregister(self, request_id: str) -> None:
        """Stop dispatching the request's signals. Unknown ids are ignored."""
        self._waiters.pop(request_id, None)

    @property
    def subscribed(self) -> bool:
        """Whether the listener is subscribed now."""
        return self._subscribed.is_set()

    @property
    def registered(self) -> int:
        """How many requests are registered for signals now: the process's waiting and relaying requests (the
        waiter's re-read budget, ``signal_recheck_reads_per_second``).
        """
        return len(self._waiters)

    async def wait_subscribed(self, timeout: float | None = None) -> bool:
        """Wait until the listener is subscribed, at most ``timeout`` seconds; return whether it is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), timeout)
        return self._subscribed.is_set()

    async def aclose(self) -> None:
        """Stop the listener task and close its connection. A later :meth:`register` restarts it."""
        task, self._task = self._task, None
        await _stop_task(task)

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._task.get_loop() is loop:
            return
        self._subscribed = asyncio.Event()
        self._task = loop.create_task(self._run(), name="horde-oai-signals", context=contextvars.Context())

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - the process-wide listener must survive any failure
                log = logger.debug if self._failing else logger.warning
                log("Signal subscription failed ({!r}); reconnecting in {}s", error, SIGNAL_RETRY_SECONDS)
                self._failing = True
            finally:
                self._subscribed.clear()
            await asyncio.sleep(SIGNAL_RETRY_SECONDS)

    async def _listen(self) -> None:
        client = unretried_redis(self._url, self._client_name, SIGNAL_CONNECT_TIMEOUT_SECONDS)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await asyncio.wait_for(pubsub.subscribe(self._channel), SIGNAL_CONNECT_TIMEOUT_SECONDS)
            self._subscribed.set()
            if self._failing:
                logger.info("Signal subscription recovered")
                self._failing = False
            if self._lost_signals:
                for queue in self._waiters.values():
                    queue.put_nowait(RESUBSCRIBED_EVENT)
            self._lost_signals = True
            loop = asyncio.get_running_loop()
            last_heard = loop.time()
            ping_sent: float | None = None
            while True:
                message = await pubsub.get_message(timeout=SIGNAL_POLL_SECONDS)
                now = loop.time()
                if message is not None:
                    last_heard, ping_sent = now, None
                    if message.get("type") == "message":
                        self._dispatch(message.get("data"))
                    continue
                if self._liveness is None:
                    continue
                if ping_sent is not None:
                    if now - ping_sent > SIGNAL_PONG_TIMEOUT_SECONDS:
                        raise ConnectionError(f"no answer to PING within {SIGNAL_PONG_TIMEOUT_SECONDS}s")
                elif now - last_heard >= self._liveness:
                    await pubsub.ping()
                    ping_sent = now
        finally:
            with contextlib.suppress(Exception):
                # redis-py leaves PubSub.aclose unannotated (it returns None).
                await asyncio.wait_for(pubsub.aclose(), _CLOSE_TIMEOUT_SECONDS)  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), _CLOSE_TIMEOUT_SECONDS)

    def _dispatch(self, data: Any) -> None:
        try:
            signal = json.loads(data)
            request_id, event = signal["id"], signal["event"]
        except Exception as error:  # noqa: BLE001 - bad JSON or shape never stops the listener
            logger.debug("Ignoring malformed signal {!r}: {!r}", data, error)
            return
        if not isinstance(request_id, str) or not isinstance(event, str):
            logger.debug("Ignoring malformed signal {!r}", data)
            return
        queue = self._waiters.get(request_id)
        if queue is not None:
            queue.put_nowait(event)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def stream_id_ms(stream_id: str | bytes) -> int:
    """Return the millisecond time of a Redis stream id ``"<ms>-<n>"`` (``pacing.5``); ``ValueError`` if malformed."""
    if isinstance(stream_id, bytes):
        stream_id = stream_id.decode("ascii")
    milliseconds, _, _ = stream_id.partition("-")
    return int(milliseconds)
