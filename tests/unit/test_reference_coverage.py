"""The tests name at least 95 % of the reference's sentences (``ref: <section>.<n>`` in their docstrings).

The numbered index (``reference-index.md``) is kept with the team's shared specs beside the checkout
(``../shared/spec/``); without it the count cannot be made and the test skips, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT.parent / "shared" / "spec" / "reference-index.md"
MINIMUM_NAMED_SHARE = 0.95
SENTENCE_ID = re.compile(r"^- `(?P<id>[a-z0-9-]+\.\d+)` ", re.MULTILINE)


def named_ids() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        found.update(re.findall(r"\b[a-z][a-z0-9-]*\.\d+\b", path.read_text(encoding="utf-8")))
    return found


def test_at_least_95_percent_of_the_reference_sentences_are_named_by_a_test() -> None:
    if not INDEX.is_file():
        pytest.skip(f"no reference index at {INDEX}: the shared specs are not beside this checkout")
    sentences = SENTENCE_ID.findall(INDEX.read_text(encoding="utf-8"))
    assert len(sentences) > 250  # the index was read, not an empty or foreign file
    unnamed = sorted(set(sentences) - named_ids())
    share = 1 - len(unnamed) / len(set(sentences))
    assert share >= MINIMUM_NAMED_SHARE, f"{share:.1%} named; unnamed: {', '.join(unnamed)}"
