"""When a waiting request reads its status next: the wait's whole sleep policy (chat.waiting.waiter asks it).

**With a subscribed signal listener** the signals carry every state change, so the timer only backs off:
:meth:`ReadSchedule.recheck_delay` doubles it after each re-read the timer brought, from ``signal_recheck_seconds`` up
to the ceiling (:func:`backoff_ceiling`: ``signal_recheck_max_seconds``, raised with many requests registered so the
process's timer re-reads stay within ``signal_recheck_reads_per_second``); a signal, a failed read or the listener not
being subscribed brings it back to ``signal_recheck_seconds`` (:meth:`ReadSchedule.note_wake`).

**Without signals** (no Redis, a listener not subscribed, or the text API, which publishes none) the front learns of
every change from its own status reads, and the Horde allows one read a second per request
(``../shared/spec/real-horde.md``). Reading every waiting request every ``signal_recheck_seconds`` costs the Horde one
read a second per waiting request and the front a core at 1,000 waiting (bench/README.md, row 3), so the read follows
where the request stands in the queue (:func:`wanted_delay`):

- processing, finished, at the head of the queue (``queue_position`` 1), without queue information yet (position 0),
  reported impossible, or after a failed read: ``signal_recheck_seconds`` after the previous read began (about once
  a second);
- deeper in the queue: when :data:`QUEUE_FRACTION` of its estimated wait has passed (its position may have changed
  enough to matter by then; the reads come closer together as it nears the head), never less than
  ``signal_recheck_seconds`` and never more than the ceiling (:meth:`ReadSchedule.ceiling`: :func:`backoff_ceiling` of
  the requests waiting in the process over :data:`CEILING_SHARE`). The estimate is the status's ``wait_time``; where
  the Horde reports none (the real AI Horde's text status: its queue divides the text queue's tokens by the image
  divisor, ``horde/database/threads.py:124``, so a queued text request reads ``wait_time`` 0 at any position), the
  places ahead of it over the queue's advance (:class:`QueueAdvance`: the positions per second the process's requests
  of the same queue were seen to gain), or over the request's own since its first queued read when that is faster (a
  request of higher priority passes others), at least :data:`MIN_QUEUE_ADVANCE`, and never more than
  :data:`MAX_POSITIONED_DELAY_SECONDS`; until either pace is known, once a second.

One process-wide :class:`ReadBudget` then books every timer read in a calendar of one-second slots holding
``signal_recheck_reads_per_second`` reads each: a read of a request deep in the queue takes the first slot at or after
its wanted time with room left, put off by at most its own delay (so a read nearing the head is moved less than one
deep in the queue, and none waits more than twice its wanted delay); an urgent read (the once-a-second ones above)
takes its own time whatever the slot holds. The ceiling keeps the reads at the ceiling within the budget, and the
reads nearer the head add only the logarithm of the queue's depth, so the process's reads stay within the budget plus
the urgent reads however many requests wait. The timed rules of chat.waiting.waiter (the read when the grace ends,
the positioned reads of ``fail_fast``, the full recheck of a completion without a generation) keep their own times:
the waiter passes the time left to them as ``cut``, which shortens the delay before it is booked.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Final

from chat.horde.native import NativeStatus
from chat.settings import FrontSettings
from chat.waiting.status import has_started

QUEUE_FRACTION: Final[float] = 0.5
"""The share of a queued request's estimated wait after which its status is read again."""

HEAD_POSITION: Final[int] = 1
"""The ``queue_position`` of the next request a worker picks up (0: no queue information yet)."""

CEILING_SHARE: Final[float] = 0.25
"""The share of ``signal_recheck_reads_per_second`` the reads at the ceiling may take: without signals the ceiling is
at least the waiting count over this share of the budget (1,000 waiting at 25 a second: 160 s), leaving the rest to
the reads of requests nearer the head (with 1,000 in the devhorde's ``deep-queue``: about 8 a second for the 4
processing and the 4 at the head, 15 for the rest of the first 640; bench/README.md row 7)."""

SLOT_SECONDS: Final[float] = 1.0
"""The length of one slot of :class:`ReadBudget`'s calendar."""

MIN_QUEUE_ADVANCE: Final[float] = 0.2
"""Positions a second a queue is taken to advance at least when a request's wait comes from its position: a request
without a ``wait_time`` is read at least every ``QUEUE_FRACTION x (queue_position - 1) / 0.2`` seconds (2.5 s a place
ahead), however still the queue was seen to stand."""

MAX_POSITIONED_DELAY_SECONDS: Final[float] = 4.0
"""The longest delay of a read placed by position alone (no ``wait_time``): the Horde's workers take requests out of
position order (the positions rank every model's requests by priority; a worker takes the first it can serve), so a
request may be taken at any place; read at least every 4 s, one taken just after a read is still read while its
reply is generated (bench/README.md, "Issue 37, second stop")."""

ADVANCE_WINDOW_SECONDS: Final[float] = 30.0
"""How far back :class:`QueueAdvance` measures a queue's advance: the reads of the last 30 s."""

ADVANCE_MIN_SECONDS: Final[float] = 3.0
"""The request-seconds of queue a window must hold (summed over the intervals between two queued reads of one
request) before its advance is known."""


def backoff_ceiling(settings: FrontSettings, registered: int) -> float:
    """Seconds: the most a backed-off timer waits between re-reads with ``registered`` requests registered for
    signals in the process: ``signal_recheck_max_seconds`` (never below ``signal_recheck_seconds``), raised to
    ``registered / signal_recheck_reads_per_second``, so once the timers have backed off the process's timer re-reads
    stay within that rate however many requests wait (5,000 waiting at 25 a second: 200 s). Timers still ramping up
    (a new request, one a signal reset) re-read more often, and a change no signal carries (a worker going offline,
    which starts the ``fail_fast_grace_seconds`` grace) is seen up to one ceiling late.
    """
    return max(
        settings.signal_recheck_seconds,
        settings.signal_recheck_max_seconds,
        registered / settings.signal_recheck_reads_per_second,
    )


def is_urgent(status: NativeStatus | None, advance: float | None = None) -> bool:
    """Whether a request in this status (None: the last read failed) is read every ``signal_recheck_seconds``:
    processing or finished, at the head of the queue or without queue information, reported impossible, or queued
    without a ``wait_time`` while its queue's ``advance`` (positions a second, :class:`QueueAdvance`) is unknown.
    """
    if (
        status is None
        or has_started(status)
        or status.done
        or not status.is_possible
        or status.queue_position <= HEAD_POSITION
    ):
        return True
    return status.wait_time <= 0 and advance is None


def wanted_delay(
    settings: FrontSettings, status: NativeStatus | None, ceiling: float, advance: float | None = None
) -> float:
    """Seconds until the next read of a request in ``status``, before the budget: ``signal_recheck_seconds`` when
    :func:`is_urgent`, else :data:`QUEUE_FRACTION` of its estimated wait within ``[signal_recheck_seconds,
    ceiling]``. The estimate is ``wait_time``, or without one the places ahead over the queue's ``advance``
    (positions a second, at least :data:`MIN_QUEUE_ADVANCE`).
    """
    base = settings.signal_recheck_seconds
    if status is None or is_urgent(status, advance):
        return base
    if status.wait_time > 0:
        estimate = float(status.wait_time)
    else:
        ahead = status.queue_position - HEAD_POSITION
        estimate = ahead / max(MIN_QUEUE_ADVANCE, advance or 0.0)
        ceiling = min(ceiling, MAX_POSITIONED_DELAY_SECONDS)
    return max(base, min(ceiling, QUEUE_FRACTION * estimate))


class QueueAdvance:
    """How fast one of the Horde's queues moves toward its head: the positions a second its waiting requests were
    seen to gain between two reads, over the reads of the last :data:`ADVANCE_WINDOW_SECONDS` (every request of the
    process in that queue adds its own).
    """

    def __init__(self) -> None:
        self._seen: deque[tuple[float, int, float]] = deque()
        self._moved = 0
        self._seconds = 0.0

    def observe(self, at: float, moved: int, seconds: float) -> None:
        """One request went ``moved`` places toward the head (negative: away) in the ``seconds`` up to ``at`` (the
        waiters' clock).
        """
        if seconds <= 0:
            return
        self._seen.append((at, moved, seconds))
        self._moved += moved
        self._seconds += seconds

    def per_second(self, now: float) -> float | None:
        """Positions a second over the window before ``now`` (never below 0), or None while it holds less than
        :data:`ADVANCE_MIN_SECONDS` of observation.
        """
        while self._seen and self._seen[0][0] < now - ADVANCE_WINDOW_SECONDS:
            _, moved, seconds = self._seen.popleft()
            self._moved -= moved
            self._seconds -= seconds
        if not self._seen or self._seconds < ADVANCE_MIN_SECONDS:
            return None
        return max(0.0, self._moved / self._seconds)


class ReadBudget:
    """The process's calendar of timer status reads: ``reads_per_second`` per one-second slot, and its
    :class:`QueueAdvance` of each queue.

    Args:
        reads_per_second: ``signal_recheck_reads_per_second``.
    """

    def __init__(self, reads_per_second: float) -> None:
        self.capacity = reads_per_second * SLOT_SECONDS
        self.waiting = 0
        """Requests waiting in the process (registered by each :class:`ReadSchedule` until it closes)."""
        self.advances: dict[str, QueueAdvance] = {}
        """Each queue's advance, by the name its schedules give (``text``: the text API's; ``chat``: native chat)."""
        self._booked: dict[int, int] = {}
        self._oldest = 0

    def advance(self, queue: str) -> QueueAdvance:
        """The advance of ``queue``."""
        return self.advances.setdefault(queue, QueueAdvance())

    def booked(self, slot: int) -> int:
        """Reads booked in ``slot`` (the seconds ``[slot, slot + 1)`` of the waiters' clock)."""
        return self._booked.get(slot, 0)

    def book(self, now: float, at: float, *, urgent: bool, slack: float = math.inf) -> float:
        """Book one read wanted at ``at`` (seconds on the waiters' clock, ``now`` being the present) and return when it
        comes: ``at`` when ``urgent`` or its slot has room, else the start of the first later slot with room, moved by
        at most ``slack`` seconds (past that, the least booked of those slots, even full: a read is never put off
        indefinitely).
        """
        self._forget_before(math.floor(now))
        slot = math.floor(at / SLOT_SECONDS)
        if not urgent:
            last = slot + max(0, math.floor(slack / SLOT_SECONDS)) if math.isfinite(slack) else None
            least = slot
            while self._booked.get(slot, 0) >= self.capacity:
                if last is not None and slot >= last:
                    slot = least
                    break
                slot += 1
                if self._booked.get(slot, 0) < self._booked.get(least, 0):
                    least = slot
            at = max(at, slot * SLOT_SECONDS)
        self._booked[slot] = self._booked.get(slot, 0) + 1
        return at

    def release(self, at: float) -> None:
        """Give back the read booked at ``at`` (its request left before reading)."""
        slot = math.floor(at / SLOT_SECONDS)
        count = self._booked.get(slot, 0)
        if count > 1:
            self._booked[slot] = count - 1
        elif count == 1:
            del self._booked[slot]

    def _forget_before(self, slot: int) -> None:
        if slot <= self._oldest:
            return
        if slot - self._oldest > len(self._booked):
            for past in [booked for booked in self._booked if booked < slot]:
                del self._booked[past]
        else:
            for past in range(self._oldest, slot):
                self._booked.pop(past, None)
        self._oldest = slot


class ReadSchedule:
    """One waiting request's sleeps between status reads: the backoff timer with signals, else :func:`wanted_delay`
    booked in the process's :class:`ReadBudget`.

    Args:
        settings: The front's settings.
        budget: The process's budget (chat.serving.runtime.FrontRuntime.read_budget).
        clock: The waiter's ``time.monotonic``-like clock.
        queue: The Horde's queue the request waits in (``text``, ``chat``): its reads teach and use that queue's
            :class:`QueueAdvance`; None (the image checks) uses ``wait_time`` alone.
    """

    def __init__(
        self, settings: FrontSettings, budget: ReadBudget, clock: Callable[[], float], *, queue: str | None = None
    ) -> None:
        self.settings = settings
        self.budget = budget
        self.clock = clock
        self.queue = queue
        self.timer_delay: float = settings.signal_recheck_seconds
        """The backoff timer's next delay while the signal listener is subscribed (:meth:`note_wake`)."""
        self._booked_at: float | None = None
        self._seen: NativeStatus | None = None
        self._queued_at: tuple[float, int] | None = None
        self._first_queued: tuple[float, int] | None = None
        self._open = True
        budget.waiting += 1

    def ceiling(self, registered: int | None) -> float:
        """The most the timer waits between re-reads now: :func:`backoff_ceiling` of ``registered`` (the requests
        registered for signals in the process), or without signals (None) of the requests waiting in it over
        :data:`CEILING_SHARE` (the reads at the ceiling take at most that share of the budget).
        """
        if registered is not None:
            return backoff_ceiling(self.settings, registered)
        return backoff_ceiling(self.settings, math.ceil(self.budget.waiting / CEILING_SHARE))

    def recheck_delay(  # noqa: PLR0913 - keyword-only: the read, the listener's state, the timed rule's cut
        self,
        status: NativeStatus | None,
        *,
        backoff: bool,
        subscribed: bool,
        ceiling: float,
        cut: float | None = None,
        elapsed: float = 0.0,
    ) -> float:
        """Seconds until the next timer re-read of a request whose last read gave ``status`` (None: it failed),
        never past ``cut`` (the time left to a timed rule, such as the end of the grace).

        ``signal_recheck_seconds`` when ``backoff`` is false (the positioned re-reads of "Queue position refresh");
        with a ``subscribed`` signal listener :attr:`timer_delay`; without one :meth:`next_delay` (the queue's
        schedule, counted from the last read's start, ``elapsed`` seconds ago).
        """
        if backoff and not subscribed:
            return self.next_delay(status, ceiling=ceiling, cut=cut, elapsed=elapsed)
        delay = self.settings.signal_recheck_seconds
        if backoff:
            delay = max(delay, self.timer_delay)
        return delay if cut is None else min(delay, cut)

    def note_wake(self, status: NativeStatus | None, *, by_timer: bool, subscribed: bool, ceiling: float) -> None:
        """Set the backoff timer after a wake and its read: doubled (up to ``ceiling``) after a timer wake whose read
        succeeded with the listener subscribed; ``signal_recheck_seconds`` after a signal, a failed read, or while
        the listener is not subscribed.
        """
        base = self.settings.signal_recheck_seconds
        if status is None or not by_timer or not subscribed:
            self.timer_delay = base
            return
        self.timer_delay = min(ceiling, max(base, self.timer_delay * 2))

    def next_delay(
        self, status: NativeStatus | None, *, ceiling: float, cut: float | None = None, elapsed: float = 0.0
    ) -> float:
        """Seconds from now to the next read of a request whose last read gave ``status`` (None: it failed), booked
        in the budget: :func:`wanted_delay` less the ``elapsed`` seconds since that read began. ``cut`` (the time
        left to a timed rule, such as the end of the grace) shortens the delay before booking and makes the read
        urgent.
        """
        now = self.clock()
        advance = self._advance(status, now)
        delay = max(0.0, wanted_delay(self.settings, status, ceiling, advance) - elapsed)
        urgent = is_urgent(status, advance)
        if cut is not None and cut <= delay:
            delay, urgent = max(0.0, cut), True
        self._booked_at = self.budget.book(now, now + delay, urgent=urgent, slack=delay)
        return self._booked_at - now

    def _advance(self, status: NativeStatus | None, now: float) -> float | None:
        """Teach the queue's :class:`QueueAdvance` the places gained since this request's previous queued read (once
        a status; a request passed by others of higher priority counts none lost, so the advance stays the pace of
        the requests that move), and return the larger of its advance and this request's own since its first queued
        read (a request of higher priority moves faster than the queue's average).
        """
        if self.queue is None:
            return None
        advance = self.budget.advance(self.queue)
        if status is not None and status is not self._seen:
            self._seen = status
            queued = status.queue_position >= HEAD_POSITION and not has_started(status) and not status.done
            if queued and self._queued_at is not None:
                at, position = self._queued_at
                advance.observe(now, max(0, position - status.queue_position), now - at)
            self._queued_at = (now, status.queue_position) if queued else None
            if not queued:
                self._first_queued = None
            elif self._first_queued is None:
                self._first_queued = (now, status.queue_position)
        pace = advance.per_second(now)
        if self._first_queued is not None and status is not None:
            at, position = self._first_queued
            if now - at >= self.settings.signal_recheck_seconds and position > status.queue_position:
                own = (position - status.queue_position) / (now - at)
                pace = own if pace is None else max(pace, own)
        return pace

    def close(self) -> None:
        """The request stops waiting: give back its booked read if it is still to come, and leave the waiting count."""
        if not self._open:
            return
        self._open = False
        self.budget.waiting -= 1
        if self._booked_at is not None and self._booked_at > self.clock():
            self.budget.release(self._booked_at)
            self._booked_at = None
