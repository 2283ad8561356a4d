"""The apps need an ASGI server: ``manage.py runserver`` (Django's WSGI server) is a check warning naming the command
that serves the project, and a WSGI server's first request logs one warning line (chat.checks, chat.apps)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from loguru import logger

from chat.apps import WSGI_WARNING, warn_once_under_wsgi
from chat.checks import runserver_warning


def test_runserver_is_a_warning_naming_the_asgi_command() -> None:
    [warning] = runserver_warning(["manage.py", "runserver", "8000"])
    assert (warning.id, warning.msg, warning.hint) == (
        "horde_oai.W009",
        "runserver serves WSGI: the chat apps need an ASGI server, and every stream: true request would end at once "
        "with FrontShuttingDown.",
        "Serve the project with uvicorn <project>.asgi:application --host 127.0.0.1 --port 8000.",
    )
    assert runserver_warning(["manage.py", "check"]) == []
    assert runserver_warning(["uvicorn", "oaifront.asgi:application"]) == []


def test_runserver_with_an_asgi_runserver_app_is_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daphne (not installed here) replaces runserver with an ASGI one; an installed app stands in for it."""
    from chat import checks

    assert checks.ASGI_RUNSERVER_APPS == ("daphne",)
    monkeypatch.setattr(checks, "ASGI_RUNSERVER_APPS", ("models_list",))
    assert runserver_warning(["manage.py", "runserver"]) == []


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="WARNING")
    yield lines
    logger.remove(sink)
    signals.request_started.disconnect(warn_once_under_wsgi)


def test_the_first_request_of_a_wsgi_handler_logs_one_warning(warnings_logged: list[str]) -> None:
    signals.request_started.connect(warn_once_under_wsgi)
    signals.request_started.send(sender=WSGIHandler, environ={})
    signals.request_started.send(sender=WSGIHandler, environ={})
    assert warnings_logged == [WSGI_WARNING]


def test_an_asgi_handler_logs_nothing_and_the_receiver_leaves(warnings_logged: list[str]) -> None:
    signals.request_started.connect(warn_once_under_wsgi)
    signals.request_started.send(sender=ASGIHandler, scope={})
    assert warnings_logged == []
    assert not signals.request_started.disconnect(warn_once_under_wsgi)
