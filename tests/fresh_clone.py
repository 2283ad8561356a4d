"""A fresh clone of this checkout in a temporary directory, as a newcomer gets it with ``git clone``.

The clone is of ``HEAD`` with the checkout's uncommitted changes to tracked files applied on top (``git diff HEAD``),
so a test run before a commit exercises the files as they are; untracked files are not part of it, as they would not
be part of a clone.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import ROOT


def fresh_clone(destination: Path) -> Path:
    """Clone the checkout into ``destination`` (which must not exist yet) and return it."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(destination)], check=True, timeout=120)
    changes = subprocess.run(
        ["git", "diff", "HEAD", "--binary"], cwd=ROOT, check=True, capture_output=True, timeout=60
    ).stdout
    if changes:
        subprocess.run(["git", "apply", "--whitespace=nowarn"], cwd=destination, input=changes, check=True, timeout=60)
    return destination
