"""The uvicorn options the front is served with: ``make run`` (bin/run), the Dockerfile, the tests and the benchmarks.

- ``--http oaifront.door:DoorProtocol``: the admission guards decide each connection's first request as its head is
  parsed, a refusal written at once (oaifront.door);
- ``--loop oaifront.accept_loop:AcceptLoop``: uvloop, with servers that accept the connections waiting together, not
  one per loop iteration (oaifront.accept_loop);
- ``--backlog 4096``: the listen queue holds a burst of thousands (uvicorn's 2,048 drops the connects beyond it, and
  a dropped connect is retried by the client's kernel only a second later; the kernel's ``somaxconn`` caps it, 4,096
  on most Linux systems).

Plain ``uvicorn oaifront.asgi:application`` serves the same answers; under a burst its refusals wait behind the admitted
requests' work (bench/README.md, row 8).
"""

from __future__ import annotations

from typing import Final

HTTP_PROTOCOL: Final[str] = "oaifront.door:DoorProtocol"
"""uvicorn's ``--http`` (``http=`` of ``uvicorn.run``) for the front."""
EVENT_LOOP: Final[str] = "oaifront.accept_loop:AcceptLoop"
"""uvicorn's ``--loop`` (``loop=``) for the front."""
LISTEN_BACKLOG: Final[int] = 4096
"""uvicorn's ``--backlog`` (``backlog=``) for the front."""

UVICORN_OPTIONS: Final[tuple[str, ...]] = (
    "--http",
    HTTP_PROTOCOL,
    "--loop",
    EVENT_LOOP,
    "--backlog",
    str(LISTEN_BACKLOG),
)
"""The options above, for ``python -m uvicorn oaifront.asgi:application``."""
