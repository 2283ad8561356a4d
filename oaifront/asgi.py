"""The front's ASGI application: Django, wrapped so the ASGI lifespan closes the per-process resources.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde.
At shutdown it retries pending cancels once more, stops the Redis tasks and closes the HTTP pool.
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
    from chat.runtime import close_runtime  # noqa: PLC0415 - the apps load only once Django is set up above

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await close_runtime()
            await send({"type": "lifespan.shutdown.complete"})
            return
