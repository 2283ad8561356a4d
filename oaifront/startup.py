"""The project's entry points refuse a bad configuration in one line, never a traceback.

``uvicorn oaifront.asgi:application``, ``manage.py`` and ``make run`` (``python -m oaifront.preflight``) each set
Django up inside :func:`one_line_configuration_errors`: a setting the front cannot use (``HORDE_URL`` that is not an
http(s) URL, ``HORDE_OAI_KEEPALIVE_SECONDS=ten``, ``HORDE_OAI_REDIS_URL=127.0.0.1:6379``, ...) raises Django's
``ImproperlyConfigured`` with one line naming the variable, its value and what is expected (chat.settings), and the
process prints that line alone on standard error and exits with status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured


@contextmanager
def one_line_configuration_errors(prefix: str = "") -> Iterator[None]:
    """Turn an ``ImproperlyConfigured`` raised inside into ``prefix`` + its message on standard error and exit 1."""
    try:
        yield
    except ImproperlyConfigured as invalid:
        sys.exit(f"{prefix}{invalid}")
