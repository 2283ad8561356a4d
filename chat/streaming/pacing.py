r"""Pacing of relayed deltas: cutting text into pieces at grapheme boundaries and spreading them over a window.

A worker posts its progress every second or so, so a relayed stream would otherwise arrive in bursts. The front
spreads each delta's text over the estimated interval until the next post (reference, "Pacing"):

- :func:`cut_pieces` cuts one field's text into pieces, preferring whitespace near even offsets and never splitting a
  user-perceived character, an extended grapheme cluster (``\X`` of the ``regex`` module) (``pacing.10``-``.13``);
- :class:`PostGapEstimator` estimates the interval between posts from their stream ids (``pacing.4``-``pacing.6``);
- :func:`plan_pieces` decides how many pieces one delta gets and divides them between reasoning and content
  (``pacing.7``-``pacing.9``);
- :class:`DeltaPacer` schedules the pieces of successive deltas, merges a delta into pending pieces, and flushes or
  drops them (``pacing.1``-``pacing.3``, ``pacing.14``-``pacing.18``).

Nothing here reads settings or Redis: the streaming layer passes ``delta_pacing_max_window_seconds``,
``delta_pacing_max_chunks_per_second`` and each entry's stream id time, so the module is testable without Django.

Three histograms of chat.metrics are recorded here, where their values exist (reference: Histogram buckets):
``horde.oai.stream.post_gap`` (each gap :class:`PostGapEstimator` observes, in seconds),
``horde.oai.stream.pieces_per_post`` (the pieces each paced plan of :meth:`DeltaPacer.add_delta` cuts a delta, merged
pending text included, into) and ``horde.oai.stream.pacing_lag`` (how many seconds after its due time
:meth:`DeltaPacer.take_due` hands over each paced piece).

Offsets, lengths and the "character count" are measured in extended grapheme clusters (what a reader sees as one
character), not in code points: a family emoji or a flag counts once.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Final, Literal, NamedTuple

import regex

from chat.metrics import front_metrics

MIN_WINDOW_SECONDS: Final = 0.05
"""The smallest pacing window, in seconds (``pacing.6``)."""

NEWEST_GAP_WEIGHT: Final = 0.5
"""The weight of the newest gap in the moving average of the gaps between posts (``pacing.5``)."""

REASONING: Final = "reasoning"
CONTENT: Final = "content"

Field = Literal["reasoning", "content"]
"""The delta field a piece belongs to: ``"reasoning"`` (sent as ``delta.reasoning_content``) or ``"content"``."""

_GRAPHEME: Final = regex.compile(r"\X")


class Piece(NamedTuple):
    """One paced piece: the field it belongs to and its text. Unpacks as ``(field, text)``."""

    field: Field
    text: str


def graphemes(text: str) -> list[str]:
    r"""Return ``text`` split into extended grapheme clusters (``regex``'s ``\X``); ``"".join`` gives ``text`` back."""
    return _GRAPHEME.findall(text)


def cut_pieces(text: str, count: int) -> list[str]:
    """Cut ``text`` into ``count`` non-empty pieces whose concatenation is exactly ``text``.

    Offsets count extended grapheme clusters, so a cut never falls inside one: a base character stays with its
    combining marks, Indic vowel signs, keycap, variation selector and skin-tone modifier, and a zero-width joiner
    sequence or a regional-indicator flag stays whole (``pacing.12``, ``pacing.13``). With ``C`` clusters and
    ``size = C / count``, the k-th cut aims at the even offset ``k * size``:

    - it is after a whitespace cluster within ``size / 2`` of that offset, the nearest such one, the earlier on a tie
      (``pacing.10``);
    - without one, it is at the next cluster boundary at or after the offset (``pacing.11``).

    A cut always lands after the previous one and leaves at least one cluster for each later piece.

    Returns fewer pieces only when the text has fewer than ``count`` clusters (one piece per cluster then), and
    ``[]`` for the empty string. Raises ``ValueError`` when ``count`` is below 1.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    clusters = graphemes(text)
    total = len(clusters)
    count = min(count, total)
    if count <= 1:
        return [text] if text else []
    # A cut at offset p (1 <= p <= total - 1) falls between clusters[p - 1] and clusters[p]. The even offset is
    # k * total / count and half a piece is total / (2 * count); integer arithmetic keeps the bounds exact.
    spaces = [offset for offset in range(1, total) if clusters[offset - 1].isspace()]
    cuts: list[int] = []
    previous = 0
    for k in range(1, count):
        lowest = previous + 1  # after the previous cut
        highest = total - (count - k)  # one cluster left for each later piece
        near_low = -(-(2 * k - 1) * total // (2 * count))  # ceil((k - 1/2) * total / count)
        near_high = (2 * k + 1) * total // (2 * count)  # floor((k + 1/2) * total / count)
        start = bisect_left(spaces, max(lowest, near_low))
        stop = bisect_right(spaces, min(highest, near_high))
        cut = min(spaces[start:stop], key=lambda offset: (abs(offset * count - k * total), offset), default=None)
        if cut is None:
            cut = min(max(-(-k * total // count), lowest), highest)  # ceil(k * total / count)
        cuts.append(cut)
        previous = cut
    bounds = [0, *cuts, total]
    return ["".join(clusters[begin:end]) for begin, end in pairwise(bounds)]


def piece_budget(window_seconds: float, max_chunks_per_second: float) -> int:
    """Return the most pieces one window may hold: ``floor(max_chunks_per_second * window_seconds)``, at least 1.

    ``pacing.7``. A float product such as ``20 * 0.15`` is not rounded down below its intended integer.
    """
    return max(1, math.floor(max_chunks_per_second * window_seconds + 1e-9))


def plan_pieces(reasoning: str, content: str, window: float, max_chunks_per_second: float) -> list[Piece]:
    """Return the pieces of one delta, every reasoning piece before the first content piece (``pacing.8``).

    ``window`` is the pacing window in seconds and ``max_chunks_per_second`` the
    ``HORDE_OAI_DELTA_PACING_MAX_CHUNKS_PER_SECOND`` setting. The piece count is
    :func:`piece_budget` of them, at most the delta's character count (grapheme clusters) (``pacing.7``), and at least
    one per field that has text, which takes precedence when the budget is 1 and both fields have text. It is divided
    between reasoning and content in proportion to their lengths, rounded, with at least one piece for each field that
    has text (``pacing.9``). Each field is cut with :func:`cut_pieces`.

    Returns ``[]`` when both fields are empty.
    """
    named: tuple[tuple[Field, str], ...] = ((REASONING, reasoning), (CONTENT, content))
    fields = [(name, text, len(graphemes(text))) for name, text in named if text]
    if not fields:
        return []
    characters = sum(length for _, _, length in fields)
    total = max(len(fields), min(piece_budget(window, max_chunks_per_second), characters))
    if len(fields) == 1:
        counts = [total]
    else:
        first = min(max(round(total * fields[0][2] / characters), 1), total - 1)
        counts = [first, total - first]
    return [
        Piece(name, piece)
        for (name, text, _), count in zip(fields, counts, strict=True)
        for piece in cut_pieces(text, count)
    ]


class PostGapEstimator:
    """The pacing window: the estimated interval between a generation's posts, in seconds.

    Each :meth:`observe` takes a post's stream id time (the ``<ms>`` of ``<ms>-<n>``). The estimate is an exponential
    moving average of the gaps between consecutive posts, with weight 0.5 on the newest gap (the first gap starts
    it) (``pacing.5``). :attr:`window` keeps it between 0.05 s and ``max_window_seconds``
    (``HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS``) (``pacing.6``); a ``max_window_seconds`` of 0 (or below) means no
    pacing and the window is 0 (``pacing.18``). A maximum below 0.05 s is the window itself.
    """

    def __init__(self, max_window_seconds: float) -> None:
        self.max_window_seconds = max(0.0, max_window_seconds)
        self._last_ms: int | None = None
        self._average: float | None = None

    def observe(self, stream_id_ms: int) -> None:
        """Record a post at ``stream_id_ms`` (milliseconds). A time before the latest one counts as a gap of 0.

        Each gap is recorded on ``horde.oai.stream.post_gap`` (seconds).
        """
        if self._last_ms is not None:
            gap = max(0, stream_id_ms - self._last_ms) / 1000
            front_metrics().post_gap.record(gap)
            if self._average is None:
                self._average = gap
            else:
                self._average = NEWEST_GAP_WEIGHT * gap + (1 - NEWEST_GAP_WEIGHT) * self._average
            self._last_ms = max(self._last_ms, stream_id_ms)
        else:
            self._last_ms = stream_id_ms

    @property
    def average_gap(self) -> float | None:
        """The unclamped moving average in seconds, or ``None`` before two posts were observed."""
        return self._average

    @property
    def window(self) -> float:
        """The pacing window in seconds: the clamped average; ``max_window_seconds`` before any gap; 0 unpaced."""
        if self.max_window_seconds <= 0:
            return 0.0
        if self._average is None:
            return self.max_window_seconds
        return min(max(self._average, MIN_WINDOW_SECONDS), self.max_window_seconds)


class _Slot(NamedTuple):
    """A scheduled piece: due at ``when`` (clock seconds); ``paced`` pieces merge with a later delta."""

    when: float
    piece: Piece
    paced: bool


class DeltaPacer:
    """Schedules the pieces of one request's relayed deltas; owns no task and never sleeps.

    ``max_window_seconds`` and ``max_chunks_per_second`` are the ``HORDE_OAI_DELTA_PACING_*`` settings; ``clock`` (in
    seconds, ``time.monotonic`` by default) is the time base of every ``now`` argument and of :meth:`next_due`.

    - The first delta with text or reasoning (the first exposed delta) is due whole at its arrival (``pacing.1``).
    - Each later delta is cut by :func:`plan_pieces` over the current window of :attr:`estimator` and its pieces are
      due evenly over that window from its arrival: piece ``i`` of ``n`` at ``arrival + i * window / n``, so the first
      piece goes at once and the next delta is expected when the last piece's slot ends (``pacing.2``, ``pacing.3``).
    - A delta arriving while paced pieces are pending (not taken yet, whether due or not) is merged with them,
      reasoning with reasoning and content with content, and the merged text is planned over a new window starting at
      its arrival (``pacing.14``, ``pacing.15``). So several deltas added at one ``now`` (one read batch) leave one
      paced piece due at ``now``, never one per delta; only the first exposed delta's whole pieces (and unpaced ones)
      are never merged, they are due as they were (``pacing.1``, ``pacing.18``).
    - :meth:`flush` hands over everything pending at once (the request finished or the relay broke, before the
      reconciliation) (``pacing.16``); :meth:`drop` discards it (the client disconnected) (``pacing.17``).
    - With ``max_window_seconds`` 0 every delta is due whole at its arrival (``pacing.18``).

    Every delta, including one with neither text nor reasoning, should be passed to :meth:`add_delta` with its stream
    id time so the window estimate sees every post. A streaming loop awaits the next due piece or the next delta,
    whichever comes first (capping the wait with its keepalive and status-check timers)::

        while not finished:
            timeout = pacer.seconds_until_due()          # None: nothing pending, wait for a delta only
            try:
                entry = await asyncio.wait_for(deltas.get(), timeout)
            except TimeoutError:
                entry = None
            if entry is not None:
                pacer.add_delta(entry.reasoning, entry.text, entry.ms)
            for field, text in pacer.take_due():
                ...  # send a delta.reasoning_content or delta.content chunk
        for field, text in pacer.flush():                # then reconcile with the final reply
            ...
    """

    def __init__(
        self,
        max_window_seconds: float,
        max_chunks_per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_window_seconds = max(0.0, max_window_seconds)
        self.max_chunks_per_second = max_chunks_per_second
        self.estimator = PostGapEstimator(self.max_window_seconds)
        self._clock = clock
        self._scheduled: deque[_Slot] = deque()
        self._exposed = False

    @property
    def exposed(self) -> bool:
        """Whether a delta with text or reasoning was added, so the next one is paced (``pacing.1``)."""
        return self._exposed

    @property
    def pending(self) -> bool:
        """Whether any piece has not been taken yet."""
        return bool(self._scheduled)

    def add_delta(
        self, reasoning: str, content: str, stream_id_ms: int | None = None, now: float | None = None
    ) -> None:
        """Schedule one delta's ``reasoning`` and ``content`` (either may be empty) arriving at ``now``.

        ``stream_id_ms`` is the entry's stream id time in milliseconds, fed to the window estimate (``None`` skips
        it). ``now`` defaults to the clock. Take the pieces with :meth:`take_due`; the first exposed delta and every
        delta without pacing are due at ``now``.
        """
        if now is None:
            now = self._clock()
        if stream_id_ms is not None:
            self.estimator.observe(stream_id_ms)
        if not reasoning and not content:
            return
        if not self._exposed or self.max_window_seconds <= 0:
            self._exposed = True
            self._scheduled.extend(_Slot(now, piece, paced=False) for piece in _whole(reasoning, content))
            return
        # Every paced piece not taken yet, due or not, merges with the new delta (pacing.14); whole pieces stay as
        # they are. They come first in the schedule, so keeping them ahead of the new plan keeps the text's order.
        kept: list[_Slot] = []
        merged: dict[str, list[str]] = {REASONING: [], CONTENT: []}
        for slot in self._scheduled:
            if slot.paced:
                merged[slot.piece.field].append(slot.piece.text)
            else:
                kept.append(slot)
        window = self.estimator.window
        pieces = plan_pieces(
            "".join(merged[REASONING]) + reasoning,
            "".join(merged[CONTENT]) + content,
            window,
            self.max_chunks_per_second,
        )
        front_metrics().pieces_per_post.record(len(pieces))
        step = window / len(pieces)
        self._scheduled = deque(kept)
        self._scheduled.extend(_Slot(now + index * step, piece, paced=True) for index, piece in enumerate(pieces))

    def next_due(self) -> float | None:
        """Return the clock time at which the next piece is due, or ``None`` when nothing is pending."""
        return self._scheduled[0].when if self._scheduled else None

    def seconds_until_due(self, now: float | None = None) -> float | None:
        """Return the seconds until the next piece is due (0 when one is due now), ``None`` when nothing is pending."""
        due = self.next_due()
        if due is None:
            return None
        if now is None:
            now = self._clock()
        return max(0.0, due - now)

    def take_due(self, now: float | None = None) -> list[Piece]:
        """Remove and return, in order, every piece due at or before ``now`` (default: the clock).

        Each paced piece's lateness (``now`` minus its due time, in seconds) is recorded on
        ``horde.oai.stream.pacing_lag``.
        """
        if now is None:
            now = self._clock()
        taken: list[Piece] = []
        while self._scheduled and self._scheduled[0].when <= now:
            slot = self._scheduled.popleft()
            if slot.paced:
                front_metrics().pacing_lag.record(now - slot.when)
            taken.append(slot.piece)
        return taken

    def flush(self) -> list[Piece]:
        """Remove and return every pending piece at once, consecutive pieces of one field joined (``pacing.16``)."""
        pieces = _coalesce(slot.piece for slot in self._scheduled)
        self._scheduled.clear()
        return pieces

    def drop(self) -> None:
        """Discard every pending piece (``pacing.17``)."""
        self._scheduled.clear()


def _whole(reasoning: str, content: str) -> list[Piece]:
    pieces = []
    if reasoning:
        pieces.append(Piece(REASONING, reasoning))
    if content:
        pieces.append(Piece(CONTENT, content))
    return pieces


def _coalesce(pieces: Iterable[Piece]) -> list[Piece]:
    joined: list[Piece] = []
    for piece in pieces:
        if joined and joined[-1].field == piece.field:
            joined[-1] = Piece(piece.field, joined[-1].text + piece.text)
        else:
            joined.append(piece)
    return joined
