"""Pacing of relayed deltas: piece cutting, the window estimate, piece planning and the pacer's schedule."""

from __future__ import annotations

import asyncio
import math
import time
from fractions import Fraction

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.horde.delta_stream import stream_id_ms
from chat.streaming.pacing import (
    MIN_WINDOW_SECONDS,
    DeltaPacer,
    Piece,
    PostGapEstimator,
    cut_pieces,
    graphemes,
    piece_budget,
    plan_pieces,
)

# --- strategies ---------------------------------------------------------------------------------------------------

ZWJ = "\u200d"
EMOJI_BASES = ["👨", "👩", "👧", "👦", "🧑", "❤\ufe0f", "🔥", "🏳\ufe0f", "🌈", "💻", "🚀", "👁\ufe0f", "🗨\ufe0f"]
SKIN_TONES = [chr(code) for code in range(0x1F3FB, 0x1F400)]
REGIONAL_INDICATORS = [chr(code) for code in range(0x1F1E6, 0x1F200)]
COMBINING_MARKS = [chr(code) for code in range(0x0300, 0x0370)]
DEVANAGARI_CONSONANTS = [chr(code) for code in range(0x0915, 0x093A)]
DEVANAGARI_VOWEL_SIGNS = [chr(code) for code in range(0x093E, 0x094D)]
KEYCAP_BASES = list("0123456789#*")


@st.composite
def zwj_sequences(draw: st.DrawFn) -> str:
    """An emoji ZWJ sequence of 2 to 5 emoji, each with an optional skin tone."""
    parts = draw(st.lists(st.sampled_from(EMOJI_BASES), min_size=2, max_size=5))
    toned = [part + draw(st.sampled_from(["", *SKIN_TONES])) if part in "👨👩👧👦🧑" else part for part in parts]
    return ZWJ.join(toned)


flags = st.tuples(st.sampled_from(REGIONAL_INDICATORS), st.sampled_from(REGIONAL_INDICATORS)).map("".join)
combining = st.tuples(
    st.sampled_from("aeiouyncAEIOUZ"), st.lists(st.sampled_from(COMBINING_MARKS), min_size=1, max_size=3)
).map(lambda pair: pair[0] + "".join(pair[1]))
indic = st.tuples(st.sampled_from(DEVANAGARI_CONSONANTS), st.sampled_from(DEVANAGARI_VOWEL_SIGNS)).map("".join)
keycaps = st.sampled_from(KEYCAP_BASES).map(lambda base: base + "\ufe0f\u20e3")
variation = st.sampled_from(["❤\ufe0f", "☺\ufe0e", "✌\ufe0f", "⚠\ufe0f", "↔\ufe0f"])
skin_toned = st.tuples(st.sampled_from(["👍", "👋", "✋", "👏"]), st.sampled_from(SKIN_TONES)).map("".join)
hangul = st.sampled_from(["\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "한", "글"])
plain = st.sampled_from([*"abcdefgh xyz", "\n", "\r\n", "\t", ".", ","])
atoms = st.one_of(zwj_sequences(), flags, combining, indic, keycaps, variation, skin_toned, hangul, plain)
"""Each atom is one user-perceived character (or plain ASCII/whitespace); a cut must never fall inside one."""


def cut_offsets(pieces: list[str]) -> list[int]:
    """Code point offsets of the cuts between ``pieces``."""
    offsets, position = [], 0
    for piece in pieces[:-1]:
        position += len(piece)
        offsets.append(position)
    return offsets


def cluster_boundaries(text: str) -> set[int]:
    return {0} | {match.end() for match in regex.finditer(r"\X", text)}


# --- cut_pieces: properties ---------------------------------------------------------------------------------------


@given(text=st.text(), count=st.integers(min_value=1, max_value=60))
def test_cut_round_trips_any_text_at_cluster_boundaries(text: str, count: int) -> None:
    """Any Unicode text: pieces join back to the text, no cut splits a ``\\X`` cluster, and the piece count is
    ``count`` unless the text has fewer clusters. ref: pacing.3, pacing.11, pacing.12, pacing.13"""
    pieces = cut_pieces(text, count)
    assert "".join(pieces) == text
    assert all(pieces)
    assert len(pieces) == min(count, len(graphemes(text)))
    assert set(cut_offsets(pieces)) <= cluster_boundaries(text)


@given(parts=st.lists(atoms, min_size=1, max_size=40), count=st.integers(min_value=1, max_value=40))
@settings(max_examples=300)
def test_cut_never_splits_emoji_flags_marks_vowel_signs_or_keycaps(parts: list[str], count: int) -> None:
    """Text built from ZWJ sequences, flags, combining marks, Indic vowel signs, keycaps, variation selectors and
    skin-tone modifiers: no cut falls inside any of them. ref: pacing.12, pacing.13"""
    text = "".join(parts)
    inside: set[int] = set()
    position = 0
    for part in parts:
        inside.update(range(position + 1, position + len(part)))
        position += len(part)
    pieces = cut_pieces(text, count)
    assert "".join(pieces) == text
    assert not set(cut_offsets(pieces)) & inside
    assert len(pieces) == min(count, len(graphemes(text)))


@given(
    words=st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=12), min_size=1, max_size=30),
    count=st.integers(min_value=1, max_value=30),
)
def test_cut_is_at_whitespace_when_one_is_within_half_a_piece(words: list[str], count: int) -> None:
    """When whitespace lies within half a piece of the even offset, the cut follows the nearest such whitespace;
    otherwise it is at the next offset at or after the even offset. ref: pacing.10, pacing.11"""
    text = " ".join(words)
    pieces = cut_pieces(text, count)
    total = len(text)  # ASCII: code points are clusters
    count = min(count, total)
    size = Fraction(total, count)
    previous = 0
    for k, cut in enumerate(cut_offsets(pieces), start=1):
        target = k * size
        candidates = [
            offset
            for offset in range(previous + 1, total - (count - k) + 1)
            if text[offset - 1] == " " and abs(offset - target) <= size / 2
        ]
        if candidates:
            assert text[cut - 1] == " "
            assert abs(cut - target) == min(abs(offset - target) for offset in candidates)
        else:
            assert cut == min(max(math.ceil(target), previous + 1), total - (count - k))
        previous = cut


# --- cut_pieces: exact values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "expected"),
    [
        ("one two three four", 2, ["one two ", "three four"]),  # space after "two" is 1 from the even offset 9
        ("aaaa bbbbbbbbb", 2, ["aaaa ", "bbbbbbbbb"]),  # 2 from the even offset 7, within 3.5
        ("a bcdefghijklmno", 2, ["a bcdefg", "hijklmno"]),  # the only space is 6 from 8: more than half a piece
        ("abc d fghi", 2, ["abc ", "d fghi"]),  # spaces at 4 and 6 tie around 5: the earlier one
        ("line one\nline two", 2, ["line one\n", "line two"]),  # a newline is whitespace
        ("ab\r\ncd", 2, ["ab\r\n", "cd"]),  # CRLF is one whitespace cluster
        ("abcdefgh", 4, ["ab", "cd", "ef", "gh"]),  # no whitespace: even offsets
        ("abcdefghij", 3, ["abcd", "efg", "hij"]),  # 3.33 and 6.67: the next offsets 4 and 7
        ("say hi", 1, ["say hi"]),
    ],
)
def test_cut_whitespace_and_even_offsets(text: str, count: int, expected: list[str]) -> None:
    """Exact cuts: the nearest whitespace within half a piece, else the next offset. ref: pacing.10, pacing.11"""
    assert cut_pieces(text, count) == expected


@pytest.mark.parametrize(
    ("text", "count", "expected"),
    [
        ("👍🏽👍🏽👍🏽👍🏽", 2, ["👍🏽👍🏽", "👍🏽👍🏽"]),  # skin-tone modifiers stay on their emoji
        ("🇺🇸🇫🇷🇩🇪🇯🇵", 4, ["🇺🇸", "🇫🇷", "🇩🇪", "🇯🇵"]),  # flags stay whole
        ("1️⃣2️⃣3️⃣", 2, ["1️⃣2️⃣", "3️⃣"]),  # keycaps stay whole; 1.5 rounds up to 2 clusters
        ("किकिकि", 3, ["कि", "कि", "कि"]),  # Devanagari vowel sign stays with its consonant
        ("e\u0301e\u0301", 2, ["e\u0301", "e\u0301"]),  # combining accent stays with its letter
        ("👨\u200d👩\u200d👧x", 2, ["👨\u200d👩\u200d👧", "x"]),  # ZWJ sequence is one character
        ("❤\ufe0f❤\ufe0f", 2, ["❤\ufe0f", "❤\ufe0f"]),  # variation selector stays
    ],
)
def test_cut_keeps_grapheme_clusters_whole(text: str, count: int, expected: list[str]) -> None:
    """Offsets count user-perceived characters, and no cut separates a mark, selector, modifier, ZWJ sequence or
    flag from its character. ref: pacing.11, pacing.12, pacing.13"""
    assert cut_pieces(text, count) == expected


def test_cut_returns_fewer_pieces_only_for_fewer_clusters() -> None:
    """A text with fewer clusters than ``count`` gives one piece per cluster; empty text gives none. ref: pacing.7"""
    assert cut_pieces("e\u0301", 3) == ["e\u0301"]
    assert cut_pieces("ab", 5) == ["a", "b"]
    assert cut_pieces("", 3) == []


def test_cut_refuses_a_count_below_one() -> None:
    """``count`` must be at least 1. ref: pacing.3"""
    with pytest.raises(ValueError, match="count must be at least 1, got 0"):
        cut_pieces("text", 0)


# --- window estimate ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("times_ms", "max_window", "expected"),
    [
        ([0, 1000, 1200], 2.0, 0.6),  # gaps 1.0 then 0.2: 0.5 * 0.2 + 0.5 * 1.0
        ([0, 1000, 1200, 1600], 2.0, 0.5),  # then 0.4: 0.5 * 0.4 + 0.5 * 0.6
        ([0, 700], 2.0, 0.7),  # the first gap starts the average
        ([0, 10], 2.0, MIN_WINDOW_SECONDS),  # 0.01 s is raised to 0.05 s
        ([0, 10_000], 2.0, 2.0),  # 10 s is lowered to the maximum
        ([0, 1000, 900], 2.0, 0.5),  # an earlier time counts as a gap of 0
        ([0, 1000], 0.03, 0.03),  # a maximum below 0.05 s is the window
        ([0, 1000], 0.0, 0.0),  # a maximum of 0: no pacing
        ([5000], 2.0, 2.0),  # no gap yet: the maximum
        ([], 1.5, 1.5),
    ],
)
def test_window_is_the_clamped_moving_average_of_post_gaps(
    times_ms: list[int], max_window: float, expected: float
) -> None:
    """The window is an EMA of the stream id time gaps, weight 0.5 on the newest, kept in [0.05 s, max].
    ref: pacing.4, pacing.5, pacing.6, pacing.18"""
    estimator = PostGapEstimator(max_window)
    for milliseconds in times_ms:
        estimator.observe(milliseconds)
    assert estimator.window == pytest.approx(expected)


def test_stream_id_time_is_the_milliseconds_part() -> None:
    """The post time is the ``<ms>`` part of the ``<ms>-<n>`` stream id. ref: pacing.5"""
    assert stream_id_ms("1700000000123-4") == 1700000000123
    assert stream_id_ms(b"42-0") == 42
    with pytest.raises(ValueError, match="invalid literal for int"):
        stream_id_ms("not-an-id")


# --- planning -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "per_second", "expected"),
    [(0.5, 20, 10), (2.0, 20, 40), (0.05, 20, 1), (0.15, 20, 3), (0.29, 100, 29), (0.01, 20, 1), (1.0, 0, 1)],
)
def test_piece_budget_is_the_per_second_cap_over_the_window(window: float, per_second: float, expected: int) -> None:
    """A window holds at most max_chunks_per_second pieces per second, at least 1. ref: pacing.7"""
    assert piece_budget(window, per_second) == expected


def test_plan_caps_pieces_per_second_and_by_character_count() -> None:
    """The piece count is the per-second budget, at most the character count. ref: pacing.7"""
    assert len(plan_pieces("", "a" * 100, 0.5, 20)) == 10
    assert plan_pieces("", "abc", 2.0, 20) == [Piece("content", "a"), Piece("content", "b"), Piece("content", "c")]
    assert len(plan_pieces("", "🇺🇸🇫🇷", 2.0, 20)) == 2  # two characters, eight code points
    assert plan_pieces("", "", 1.0, 20) == []


def test_plan_divides_pieces_by_length_with_reasoning_first() -> None:
    """Pieces are divided between reasoning and content by length, every reasoning piece first.
    ref: pacing.8, pacing.9"""
    pieces = plan_pieces("r" * 30, "c" * 90, 0.4, 20)  # budget 8: 30/120 of 8 is 2
    assert [piece.field for piece in pieces] == ["reasoning"] * 2 + ["content"] * 6
    assert "".join(piece.text for piece in pieces) == "r" * 30 + "c" * 90


def test_plan_gives_each_field_with_text_a_piece() -> None:
    """At least one piece for each field that has text, even over a budget of 1 or a tiny share. ref: pacing.9"""
    assert plan_pieces("why", "because", 0.05, 20) == [Piece("reasoning", "why"), Piece("content", "because")]
    pieces = plan_pieces("r", "c" * 200, 1.0, 10)
    assert pieces[0] == Piece("reasoning", "r")
    assert len(pieces) == 10


@given(
    reasoning=st.text(max_size=80),
    content=st.text(max_size=80),
    window=st.floats(min_value=0.05, max_value=3.0),
    per_second=st.floats(min_value=0.0, max_value=60.0),
)
def test_plan_properties(reasoning: str, content: str, window: float, per_second: float) -> None:
    """For any delta: fields round-trip, reasoning precedes content, each field with text has a piece, and the count
    is within the budget and the character count. ref: pacing.7, pacing.8, pacing.9"""
    pieces = plan_pieces(reasoning, content, window, per_second)
    fields = [piece.field for piece in pieces]
    assert fields == sorted(fields, key=lambda field: field != "reasoning")
    assert "".join(piece.text for piece in pieces if piece.field == "reasoning") == reasoning
    assert "".join(piece.text for piece in pieces if piece.field == "content") == content
    assert ("reasoning" in fields) == bool(reasoning)
    assert ("content" in fields) == bool(content)
    with_text = bool(reasoning) + bool(content)
    assert len(pieces) <= max(with_text, piece_budget(window, per_second))
    assert len(pieces) <= len(graphemes(reasoning)) + len(graphemes(content))


# --- the pacer ----------------------------------------------------------------------------------------------------


def test_first_exposed_delta_is_sent_whole_at_once() -> None:
    """The first delta with text or reasoning is due whole at its arrival, reasoning first. ref: pacing.1, pacing.8"""
    pacer = DeltaPacer(2.0, 20)
    pacer.add_delta("", "", 1000, now=0.0)  # nothing to send: not exposed, but its time counts
    assert not pacer.exposed and not pacer.pending
    pacer.add_delta("let me think about it", "Hello there, friend", 2000, now=1.0)
    assert pacer.take_due(1.0) == [Piece("reasoning", "let me think about it"), Piece("content", "Hello there, friend")]
    assert pacer.exposed
    assert pacer.next_due() is None


def test_later_delta_is_spread_evenly_over_the_window() -> None:
    """A later delta is cut and its pieces are due evenly over the window from its arrival. ref: pacing.2, pacing.3"""
    pacer = DeltaPacer(2.0, 4)
    pacer.add_delta("", "Hi", 0, now=0.0)
    pacer.take_due(0.0)
    pacer.add_delta("", "alpha beta", 500, now=10.0)  # window 0.5 s, budget 4 * 0.5 = 2 pieces
    assert pacer.take_due(10.0) == [Piece("content", "alpha ")]
    assert pacer.seconds_until_due(10.0) == pytest.approx(0.25)
    assert pacer.take_due(10.2) == []
    assert pacer.take_due(10.25) == [Piece("content", "beta")]
    assert not pacer.pending


def test_paced_reasoning_precedes_content() -> None:
    """Within one delta every reasoning piece is due before the first content piece. ref: pacing.8"""
    pacer = DeltaPacer(2.0, 20)
    pacer.add_delta("", "x", 0, now=0.0)
    pacer.take_due(0.0)
    pacer.add_delta("thinking it over", "the answer is forty-two", 1000, now=1.0)
    times, pieces = [], []
    while (due := pacer.next_due()) is not None:
        times.append(due)
        pieces.extend(pacer.take_due(due))
    fields = [piece.field for piece in pieces]
    assert fields == sorted(fields, key=lambda field: field != "reasoning")
    assert len(pieces) == 20  # budget 20 * 1.0
    assert times[-1] < 1.0 + 1.0


def test_delta_arriving_while_pieces_are_pending_is_merged_over_a_new_window() -> None:
    """Every pending piece, even one already due but not taken yet, merges with the new delta, field by field, over a
    window starting at its arrival: only the merged plan's first piece is due then. ref: pacing.3, pacing.14,
    pacing.15"""
    pacer = DeltaPacer(2.0, 4)
    pacer.add_delta("", "start ", 0, now=0.0)
    pacer.take_due(0.0)
    pacer.add_delta("", "aaaa bbbb cccc dddd ", 1000, now=1.0)  # window 1.0: 4 pieces at 1.0, 1.25, 1.5, 1.75
    assert pacer.take_due(1.0) == [Piece("content", "aaaa ")]
    # 0.3 s later: window 0.5 * 0.3 + 0.5 * 1.0 = 0.65, budget 2. "bbbb " was due at 1.25 but not taken: it merges.
    pacer.add_delta("", "eeee ffff", 1300, now=1.3)
    assert pacer.take_due(1.3) == [Piece("content", "bbbb cccc ")]
    assert pacer.next_due() == pytest.approx(1.3 + 0.65 / 2)
    assert pacer.take_due(1.3 + 0.65) == [Piece("content", "dddd eeee ffff")]
    assert not pacer.pending


def test_a_read_batch_of_six_posts_is_spread_over_one_window_not_sent_as_a_burst() -> None:
    """Six deltas added at one ``now`` (one read batch, as after a slow read) are merged into one plan over the window:
    one piece is due at once and the rest evenly after it, within the per-second cap, instead of one piece per delta
    at once. ref: pacing.3, pacing.7, pacing.14, pacing.15"""
    pacer = DeltaPacer(2.0, 20)
    pacer.add_delta("", "Once ", 0, now=0.0)
    assert pacer.take_due(0.0) == [Piece("content", "Once ")]
    posts = [f"post {index} says a few words here, " for index in range(1, 7)]
    for index, post in enumerate(posts, start=1):
        pacer.add_delta("", post, index * 2000, now=12.0)  # posts 2 s apart: window 2 s, budget 20 * 2 = 40 pieces
    plan = plan_pieces("", "".join(posts), 2.0, 20)
    assert len(plan) == 40
    assert pacer.take_due(12.0) == [plan[0]]
    schedule = []
    while (due := pacer.next_due()) is not None:
        schedule.extend((due, piece) for piece in pacer.take_due(due))
    assert [piece for _, piece in schedule] == plan[1:]
    assert [due for due, _ in schedule] == pytest.approx([12.0 + index * 2.0 / 40 for index in range(1, 40)])


def test_a_read_batch_of_ten_quick_posts_leaves_one_piece_due_at_once() -> None:
    """Posts 0.1 s apart at 20 pieces per second give a budget of 2 per window: a batch of the first exposed delta
    and ten more, added at one ``now``, has the first delta whole and the merged plan's first piece due at once and
    its second piece half a window later. ref: pacing.1, pacing.7, pacing.14, pacing.15"""
    pacer = DeltaPacer(2.0, 20)
    for index in range(11):
        pacer.add_delta("", f"w{index} ", index * 100, now=5.0)
    assert pacer.estimator.window == pytest.approx(0.1)
    later = "".join(f"w{index} " for index in range(1, 11))
    plan = plan_pieces("", later, 0.1, 20)
    assert len(plan) == 2
    assert pacer.take_due(5.0) == [Piece("content", "w0 "), plan[0]]
    assert pacer.next_due() == pytest.approx(5.05)
    assert pacer.take_due(5.05) == [plan[1]]
    assert not pacer.pending


def test_the_first_exposed_delta_stays_whole_when_another_delta_arrives_before_it_is_taken() -> None:
    """The first exposed delta's pieces are never merged: a second delta at the same ``now`` is paced after them.
    ref: pacing.1, pacing.2"""
    pacer = DeltaPacer(1.0, 4)
    pacer.add_delta("mull it", "First words", 0, now=3.0)
    pacer.add_delta("", "then more words", 1000, now=3.0)
    plan = plan_pieces("", "then more words", 1.0, 4)
    assert pacer.take_due(3.0) == [Piece("reasoning", "mull it"), Piece("content", "First words"), plan[0]]
    assert pacer.flush() == [Piece("content", "".join(piece.text for piece in plan[1:]))]


@given(
    first=st.tuples(st.text(max_size=20), st.text(min_size=1, max_size=20)),
    batch=st.lists(st.tuples(st.text(max_size=30), st.text(max_size=30)), min_size=1, max_size=12),
    gap_ms=st.integers(min_value=0, max_value=3000),
    max_window=st.sampled_from([0.05, 0.5, 2.0]),
    per_second=st.sampled_from([1.0, 4.0, 20.0, 50.0]),
    exposed_before=st.booleans(),
)
def test_deltas_added_at_one_now_leave_at_most_one_window_budget_due_and_lose_nothing(
    first: tuple[str, str],
    batch: list[tuple[str, str]],
    gap_ms: int,
    max_window: float,
    per_second: float,
    exposed_before: bool,
) -> None:
    """k deltas added at one ``now`` leave at most ``piece_budget(window) + 1`` pieces due at ``now`` (the merged
    plan's first piece; with a first exposed delta of reasoning and content in the same batch, its two whole pieces),
    and everything sent, taken as due and then flushed, is exactly everything added, per field, in order.
    ref: pacing.1, pacing.3, pacing.7, pacing.14, pacing.15, pacing.16"""
    pacer = DeltaPacer(max_window, per_second)
    sent = {"reasoning": "", "content": ""}
    added = {"reasoning": "", "content": ""}
    now = 100.0
    deltas = [first, *batch]
    ms = 0
    if exposed_before:  # the first delta went out alone earlier; the batch arrives later
        pacer.add_delta(first[0], first[1], ms, now=now - 10)
        for piece in pacer.take_due(now - 10):
            sent[piece.field] += piece.text
        added["reasoning"], added["content"] = first
        deltas = batch
    for reasoning, content in deltas:
        ms += gap_ms
        pacer.add_delta(reasoning, content, ms, now=now)
        added["reasoning"] += reasoning
        added["content"] += content
    due_now = pacer.take_due(now)
    whole_first = 0 if exposed_before else len([text for text in first if text])
    assert len(due_now) <= whole_first + 1
    if whole_first <= 1:
        assert len(due_now) <= piece_budget(pacer.estimator.window, per_second) + 1
    for piece in due_now:
        sent[piece.field] += piece.text
    for piece in pacer.flush():
        sent[piece.field] += piece.text
    assert sent == added


def test_merge_keeps_reasoning_with_reasoning_and_bounds_latency() -> None:
    """Merged reasoning and content stay in their fields, reasoning first, and everything is due within one window
    of the latest arrival. ref: pacing.8, pacing.14, pacing.15"""
    pacer = DeltaPacer(1.0, 10)
    pacer.add_delta("", "go", 0, now=0.0)
    pacer.take_due(0.0)
    pacer.add_delta("first thought ", "first words ", 1000, now=1.0)
    pacer.take_due(1.0)
    pacer.add_delta("second thought", "second words", 1200, now=1.2)
    window = pacer.estimator.window
    assert window == pytest.approx(0.6)
    schedule = []
    while (due := pacer.next_due()) is not None:
        schedule.extend((due, piece) for piece in pacer.take_due(due))
    assert all(due <= 1.2 + window for due, _ in schedule)
    pieces = [piece for _, piece in schedule]
    fields = [piece.field for piece in pieces]
    assert fields == sorted(fields, key=lambda field: field != "reasoning")
    assert "".join(piece.text for piece in pieces if piece.field == "reasoning").endswith("second thought")
    assert "".join(piece.text for piece in pieces if piece.field == "content").endswith("first words second words")


def test_flush_returns_every_pending_piece_at_once() -> None:
    """On finish or a relay break the pending pieces are handed over at once, joined by field. ref: pacing.16"""
    pacer = DeltaPacer(2.0, 20)
    pacer.add_delta("", "a", 0, now=0.0)
    pacer.take_due(0.0)
    pacer.add_delta("some reasoning here", "and some content here", 1000, now=1.0)
    first = pacer.take_due(1.0)
    assert first and first[0].field == "reasoning"
    flushed = pacer.flush()
    assert [piece.field for piece in flushed] == ["reasoning", "content"]
    assert first[0].text + flushed[0].text == "some reasoning here"
    assert flushed[1].text == "and some content here"
    assert not pacer.pending and pacer.flush() == []


def test_drop_discards_pending_pieces() -> None:
    """On client disconnect the pending pieces are dropped. ref: pacing.17"""
    pacer = DeltaPacer(2.0, 20)
    pacer.add_delta("", "a", 0, now=0.0)
    pacer.add_delta("", "b c d e f g", 1000, now=1.0)
    pacer.drop()
    assert not pacer.pending
    assert pacer.take_due(100.0) == []
    assert pacer.next_due() is None and pacer.seconds_until_due(100.0) is None


def test_max_window_zero_sends_each_delta_as_it_arrives() -> None:
    """A maximum window of 0 makes every delta due whole at its arrival. ref: pacing.18"""
    pacer = DeltaPacer(0.0, 20)
    for index, now in enumerate([0.0, 0.5, 0.7]):
        pacer.add_delta("why " * index, f"delta number {index} ", index * 500, now=now)
        assert pacer.seconds_until_due(now) == 0
        due = pacer.take_due(now)
        assert due[-1] == Piece("content", f"delta number {index} ")
        assert len(due) == (2 if index else 1)
        assert not pacer.pending


@given(
    deltas=st.lists(
        st.tuples(st.text(max_size=30), st.text(max_size=30), st.floats(min_value=0.0, max_value=1.5)),
        min_size=1,
        max_size=12,
    ),
    max_window=st.sampled_from([0.0, 0.5, 2.0]),
    take_fraction=st.floats(min_value=0.0, max_value=1.0),
)
def test_pacer_neither_loses_nor_repeats_text(
    deltas: list[tuple[str, str, float]], max_window: float, take_fraction: float
) -> None:
    """Across merges, taking and a final flush, each field's text arrives exactly once, in order, and nothing is due
    later than one window after the latest arrival. ref: pacing.3, pacing.14, pacing.15, pacing.16"""
    pacer = DeltaPacer(max_window, 20)
    sent = {"reasoning": "", "content": ""}
    now = 0.0
    for reasoning, content, gap in deltas:
        now += gap
        pacer.add_delta(reasoning, content, round(now * 1000), now=now)
        for piece in pacer.take_due(now + gap * take_fraction):
            sent[piece.field] += piece.text
    last = pacer.next_due()
    while pacer.pending:
        scheduled = pacer.next_due()
        assert scheduled is not None and scheduled <= now + max_window + 1e-9
        for piece in pacer.take_due(scheduled):
            sent[piece.field] += piece.text
    for piece in pacer.flush():
        sent[piece.field] += piece.text
    assert sent["reasoning"] == "".join(reasoning for reasoning, _, _ in deltas)
    assert sent["content"] == "".join(content for _, content, _ in deltas)
    assert last is None or last <= now + max_window + 1e-9


@pytest.mark.asyncio
async def test_streaming_loop_awaits_the_next_piece_or_delta() -> None:
    """A loop awaiting the next due piece or a new delta, whichever comes first, receives the paced text in order
    over about one window per delta. ref: pacing.1, pacing.3, pacing.15"""
    deltas: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue()
    pacer = DeltaPacer(0.2, 50)
    received: list[tuple[float, Piece]] = []
    started = time.monotonic()

    async def produce() -> None:
        for index, text in enumerate(["Hello ", "there, this is a paced delta ", "and the last one."]):
            await deltas.put((text, index * 200))
            await asyncio.sleep(0.2)
        await deltas.put(None)

    async def consume() -> None:
        finished = False
        while not finished or pacer.pending:
            timeout = pacer.seconds_until_due()
            if finished:
                await asyncio.sleep(timeout or 0)
            else:
                try:
                    item = await asyncio.wait_for(deltas.get(), timeout)
                except TimeoutError:
                    item = ("", -1)
                if item is None:
                    finished = True
                elif item[1] >= 0:
                    pacer.add_delta("", item[0], item[1])
            received.extend((time.monotonic() - started, piece) for piece in pacer.take_due())

    await asyncio.wait_for(asyncio.gather(produce(), consume()), 5)
    assert "".join(piece.text for _, piece in received) == "Hello there, this is a paced delta and the last one."
    assert received[0][1] == Piece("content", "Hello ")
    assert len(received) > 3
    assert received[-1][0] < 0.6 + 0.2 + 0.2
