"""CONTRIBUTING.md's layout tables (its "Layout" section) are true to the tree: every file they name exists, and every
module of ``oaifront/``, ``front_operations/``, ``chat/`` and ``models_list/`` is named in them.

A row's first cell names paths: from the checkout's root in the first table (``oaifront/``), from ``chat/`` in the table
of chat's layers (``horde/``, ``errors.py``). The files its second cell names (```budget.py```, ```guide.css```) are
in the row's folder or under it (``openapi/``'s modules in the ``front_operations/`` row), or else from the checkout's
root (```chat/settings.py```, ```manage.py```)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
DOCUMENTED_PACKAGES = ("oaifront", "front_operations", "chat", "models_list")
"""Whose every module the tables name (``__init__.py`` aside)."""
FILE_NAME = re.compile(r"[\w./-]+\.(?:py|css|md)|[\w.-]+(?:/[\w.-]+)*/")
"""A code span that names a file (``budget.py``, ``guide.css``, ``bench/README.md``) or a folder (``openapi/``)."""
TABLE_BASES = {"path": ROOT, "layer": ROOT / "chat"}
"""A table's header cell -> the folder its first cells are relative to."""


@dataclass(frozen=True)
class Row:
    """One row of a layout table: its first cell's paths, its folder, and the files and folders its cells name."""

    first_cell: str
    folder: Path
    names: tuple[str, ...]
    base: Path


def layout_rows(text: str) -> list[Row]:
    section = text[text.index("\n## Layout\n") :]
    section = section[: section.index("\n## ", 1)]
    rows: list[Row] = []
    base = ROOT
    for line in section.splitlines():
        if not line.startswith("| "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        header = cells[0].strip()
        if header in TABLE_BASES:
            base = TABLE_BASES[header]
            continue
        first = re.findall(r"`([^`]+)`", cells[0])
        rest = re.findall(r"`([^`]+)`", " | ".join(cells[1:]))
        folders = [name for name in first if name.endswith("/")]
        folder = base / folders[0] if len(folders) == 1 else base
        names = tuple(name for name in [*first, *rest] if FILE_NAME.fullmatch(name))
        rows.append(Row(cells[0], folder, names, base))
    return rows


def resolve(row: Row, name: str) -> list[Path]:
    """The files or folders ``name`` (named in ``row``) can be: in the row's folder, under it, or from the root."""
    direct = [path for path in (row.folder / name, row.base / name) if path.exists()]
    if direct:
        return direct
    if row.folder.is_dir():
        nested = [path for path in row.folder.rglob(name.rstrip("/")) if "__pycache__" not in path.parts]
        if nested:
            return nested
    return [ROOT / name] if (ROOT / name).exists() else []


def documented_modules() -> list[Path]:
    return sorted(
        path
        for package in DOCUMENTED_PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py" and "migrations" not in path.parts
    )


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_file_the_layout_tables_name_exists() -> None:
    missing = [
        f"`{name}` in the row {row.first_cell} (looked for {relative(row.folder / name)})"
        for row in layout_rows(CONTRIBUTING.read_text(encoding="utf-8"))
        for name in row.names
        if not resolve(row, name)
    ]
    assert missing == [], "CONTRIBUTING.md's layout tables name what the tree does not hold: " + "; ".join(missing)


def test_every_module_of_the_apps_and_the_project_is_in_the_layout_tables() -> None:
    named = {
        path
        for row in layout_rows(CONTRIBUTING.read_text(encoding="utf-8"))
        for name in row.names
        for path in resolve(row, name)
    }
    unnamed = [relative(path) for path in documented_modules() if path not in named]
    assert unnamed == [], (
        "CONTRIBUTING.md's layout tables do not name these modules (add each to the row of its folder, "
        "as `name.py`): " + ", ".join(unnamed)
    )


def test_the_tables_are_read_as_written() -> None:
    """The parser itself: the rows it finds, and a module name resolved under its row's folder."""
    rows = layout_rows(CONTRIBUTING.read_text(encoding="utf-8"))
    by_cell = {row.first_cell: row for row in rows}
    assert by_cell["`oaifront/`"].folder == ROOT / "oaifront"
    assert by_cell["`horde/`"].folder == ROOT / "chat" / "horde"
    assert "budget.py" in by_cell["`horde/`"].names
    assert resolve(by_cell["`front_operations/`"], "schemas.py") == [
        ROOT / "front_operations" / "openapi" / "schemas.py"
    ]
    assert resolve(by_cell["`oaifront/`"], "conf.py") == []
