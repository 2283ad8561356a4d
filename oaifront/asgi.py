"""The front's ASGI application: Django, wrapped so the ASGI lifespan runs the front's shutdown work.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde.
At lifespan startup it chains :func:`chat.runtime.stop_open_requests` ahead of the server's SIGTERM/SIGINT handler,
so a stop ends every open request at once (streams with an error event and ``data: [DONE]``, waiting requests with a
503 and ``Retry-After``, each native request cancelled); at lifespan shutdown it retries pending cancels once more,
stops the Redis tasks and closes the HTTP pool (:func:`chat.runtime.close_runtime`).
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

from django.core.asgi import get_asgi_application

django_application = get_asgi_application()


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Lifespan events are handled here; everything else goes to Django."""
    if scope["type"] != "lifespan":
        await django_application(scope, receive, send)
        return
    from chat.runtime import chain_shutdown_signals, close_runtime  # noqa: PLC0415 - the apps load only once Django is set up above

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            chain_shutdown_signals()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await close_runtime()
            await send({"type": "lifespan.shutdown.complete"})
            return
