"""A stop (SIGTERM, or Ctrl-C's SIGINT under ``make run``) is a stop: what the client and the log read says the front
is stopping, never "restarting" (issue 25; a Ctrl-C printed "The front is restarting").

The wording lives in ``chat/errors.py`` (``FRONT_SHUTTING_DOWN_MESSAGE``, which the finished-request log line's
``FrontShuttingDown`` answer carries to the client) and ``oaifront/openapi.py`` (the documented error), both being
moved by other work at the time this test was written; it is marked as an expected failure until they say
"stopping", and fails (strict) as soon as they do, so the marker is removed then.
"""

from __future__ import annotations

import pytest

from chat.errors import front_shutting_down


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="chat/errors.py still says 'The front is restarting' (issue 25; chat/ is being restructured)",
)
def test_the_shutdown_answer_says_the_front_is_stopping() -> None:
    error = front_shutting_down("0f1e2d3c")
    assert error.code == "FrontShuttingDown"
    assert error.message.startswith("The front is stopping"), error.message
    assert "restart" not in error.message
