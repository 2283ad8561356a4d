"""Fixtures of the conformance suite: real clients' default bodies sent end to end.

One front and one devhorde serve the whole suite (the session's ``live_stack`` from tests/conftest.py); each module
puts :data:`tests.conformance.cases.CONFORMANCE_SCENARIO` on the devhorde for its tests and puts the default scenario
back after them.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.cases import CONFORMANCE_SCENARIO
from tests.conftest import LiveStack


@pytest.fixture(scope="module")
def conformance(live_stack: LiveStack) -> Iterator[LiveStack]:
    """The session's front and devhorde serving :data:`CONFORMANCE_SCENARIO` for one module."""
    live_stack.put_scenario(CONFORMANCE_SCENARIO)
    live_stack.reset()
    try:
        yield live_stack
    finally:
        live_stack.put_scenario(live_stack.default_scenario)  # type: ignore[attr-defined]


@pytest.fixture
def front(conformance: LiveStack) -> Iterator[httpx.Client]:
    """An HTTP client for the front's ``/v1`` routes (the devhorde's request log reset before each test)."""
    conformance.reset()
    with httpx.Client(base_url=conformance.openai_base_url, timeout=30) as client:
        yield client
