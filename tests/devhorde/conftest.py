"""Fixtures of the development Horde's tests (defined in ``devhorde_helpers.py``, importable by the test modules
whatever pytest's import mode, since this folder is put on ``sys.path`` here)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from devhorde_helpers import make_client, redis_db13  # noqa: E402,F401  (fixtures)
