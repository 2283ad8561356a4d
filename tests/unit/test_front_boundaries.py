"""What the front's code may import: nothing of the Horde's Flask application.

Reference: Chat front reference (the front "does not import anything from the Flask application").
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("chat", "images", "models_list", "front_operations", "oaifront")
FLASK_APPLICATION = ("flask", "horde")
"""Top-level packages of the Horde's server (``horde`` is its Flask application, ``flask`` its framework)."""


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_front_imports_nothing_of_the_flask_application() -> None:
    """ref: chat-front-reference.3"""
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_top_levels(path) & set(FLASK_APPLICATION))
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if imported_top_levels(path) & set(FLASK_APPLICATION)
    }
    assert offenders == {}
    assert imported_top_levels(ROOT / "chat" / "errors.py")  # the walk reads real imports (not an empty set)
