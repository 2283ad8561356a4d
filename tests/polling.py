"""Polling a condition in tests, bounded: shared by the integration tests and the real-Horde lane (which sees none of
the suite's fixtures, so this is a module, not a fixture)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def eventually[T](
    probe: Callable[[], T | None], *, timeout: float = 15.0, interval: float = 0.05, what: str = "condition"
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns a truthy value, and return that value; after
    ``timeout`` seconds fail the test with ``timed out after <timeout> s waiting for <what>``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
