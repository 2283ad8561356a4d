"""A stop (SIGTERM, or Ctrl-C's SIGINT under ``make run``) is a stop: what the client and the log read says the front
is stopping, never "restarting" (issue 25; a Ctrl-C printed "The front is restarting").

The wording lives in ``chat/errors.py`` (``FRONT_SHUTTING_DOWN_MESSAGE``, which the finished-request log line's
``FrontShuttingDown`` answer carries to the client) and ``front_operations/openapi/error_table.py`` (the documented
error).
"""

from __future__ import annotations

from chat.errors import front_shutting_down
from front_operations.openapi.error_table import CHAT_COMPLETION_ERRORS


def test_the_shutdown_answer_says_the_front_is_stopping() -> None:
    error = front_shutting_down("0f1e2d3c")
    assert error.code == "FrontShuttingDown"
    assert error.message == (
        "The front is stopping, so it gave up waiting for this request and cancelled it at the Horde. "
        "Retry in a few seconds."
    )
    assert "restart" not in error.message


def test_the_documented_shutdown_error_says_the_front_is_stopping() -> None:
    documented = {entry.code: entry.when for entry in CHAT_COMPLETION_ERRORS[503]}
    assert documented["FrontShuttingDown"].startswith("The front is stopping: it gave up waiting for the request")
    assert "restart" not in documented["FrontShuttingDown"]
