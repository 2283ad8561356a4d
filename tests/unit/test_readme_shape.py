"""The README a newcomer reads in five minutes (issue 38, finding 7): short, the quick start on its first screen, and,
like every guide of ``docs/``, no source line numbers of other projects and no issue history (the history is in the
commit messages and ``bench/README.md``)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
FIRST_SCREEN = 40
"""The lines a terminal or a repository page shows before any scrolling, about."""

SOURCE_LINE = re.compile(r"[\w/-]+\.(?:py|js|ts|go|rs):\d+|#L\d+")
"""A reference to a line of a source file (``horde/r2.py:49``, ``...#L120``)."""
ISSUE_HISTORY = re.compile(r"\b[Ii]ssues? \d+")


def test_the_readme_is_short() -> None:
    assert len(README) <= 150, len(README)


def test_the_first_screen_holds_the_quick_start() -> None:
    first_screen = README[:FIRST_SCREEN]
    assert "## Two commands" in first_screen
    assert any(line.startswith("make run ") for line in first_screen)
    assert "## A first request" in first_screen
    assert "curl -s http://127.0.0.1:8000/readyz" in first_screen


@pytest.mark.parametrize("path", ["README.md", *sorted(path.name for path in (ROOT / "docs").glob("*.md"))])
def test_no_user_document_cites_source_lines_or_issue_history(path: str) -> None:
    text = (ROOT / path if path == "README.md" else ROOT / "docs" / path).read_text(encoding="utf-8")
    assert SOURCE_LINE.findall(text) == []
    assert ISSUE_HISTORY.findall(text) == []
