"""The uvicorn options the front is served with: ``make run`` (bin/run), the Dockerfile, the tests and the benchmarks.

Only uvicorn's documented options, bounding what a bare uvicorn can bound (a public deployment goes behind the edge:
docs/edge.md):

- ``--ws none``: no WebSocket protocol; an upgrade request is an HTTP request, which the admission guards refuse
  with 400 (oaifront.guards);
- ``--backlog 4096``: the listen queue holds a burst of thousands (the kernel's ``somaxconn`` caps it);
- ``--timeout-keep-alive 5``: an idle kept-alive connection is closed after 5 seconds;
- ``--limit-concurrency``: :func:`concurrency_limit`, from the front's in-flight cap.

``python -m oaifront.serve`` prints them for the settings in the environment, one per line (a setting the front
cannot use ends it in one line, as uvicorn would).
"""

from __future__ import annotations

import os
from typing import Final

from chat.settings import FrontSettings

LISTEN_BACKLOG: Final[int] = 4096
"""uvicorn's ``--backlog`` (``backlog=``) for the front."""
KEEP_ALIVE_SECONDS: Final[int] = 5
"""uvicorn's ``--timeout-keep-alive``: seconds an idle kept-alive connection stays open."""

UVICORN_OPTIONS: Final[tuple[str, ...]] = (
    "--ws",
    "none",
    "--backlog",
    str(LISTEN_BACKLOG),
    "--timeout-keep-alive",
    str(KEEP_ALIVE_SECONDS),
)
"""The options above that do not depend on the settings, for ``python -m uvicorn oaifront.asgi:application``."""


def concurrency_limit(settings: FrontSettings) -> int:
    """The ``--limit-concurrency`` of uvicorn for ``settings``: twice ``HORDE_OAI_MAX_IN_FLIGHT``.

    uvicorn counts open connections (idle ones included) and running requests, and past the limit answers its own
    plain-text 503 without calling the application. Twice the cap leaves the guards room to refuse the first excess
    in OpenAI's envelope (503 ``FrontAtCapacity``) and the probes room to answer, while the process still stops
    taking work at a bound.
    """
    return 2 * settings.max_in_flight


def uvicorn_options(settings: FrontSettings) -> tuple[str, ...]:
    """:data:`UVICORN_OPTIONS` and ``--limit-concurrency`` (:func:`concurrency_limit`)."""
    return (*UVICORN_OPTIONS, "--limit-concurrency", str(concurrency_limit(settings)))


def main() -> None:
    """Print :func:`uvicorn_options` for the environment's settings, one per line."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    from chat.settings import front_settings  # noqa: PLC0415 - after DJANGO_SETTINGS_MODULE is set
    from oaifront.startup import one_line_configuration_errors  # noqa: PLC0415 - imports Django

    with one_line_configuration_errors():
        settings = front_settings()
    print("\n".join(uvicorn_options(settings)))


if __name__ == "__main__":
    main()
