"""The front's ASGI application: Django behind the admission guards, with the ASGI lifespan running the front's
shutdown work.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde. Start-up
configures the log sink (oaifront.logconfig) and, when enabled, telemetry (oaifront.telemetry) before the
application is built. The admission guards (oaifront.guards) refuse a request over the in-flight caps, a body over the
size limit or one that arrives too slowly before Django reads it.
At lifespan startup it chains :func:`chat.runtime.stop_open_requests` ahead of the server's SIGTERM/SIGINT handler,
so a stop ends every open request at once (streams with an error event and ``data: [DONE]``, waiting requests with a
503 and ``Retry-After``, each native request cancelled); at lifespan shutdown it retries pending cancels once more,
stops the Redis tasks and closes the HTTP pool (:func:`chat.runtime.close_runtime`).
"""

from __future__ import annotations

import os
from typing import cast

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

import django

django.setup(set_prefix=False)

from django.core.handlers.asgi import ASGIHandler  # noqa: E402 - after django.setup()

from oaifront.conf import front_settings  # noqa: E402 - after django.setup()
from oaifront.guards import AdmissionGuards, ASGIApp, Receive, Scope, Send  # noqa: E402 - after django.setup()
from oaifront.logconfig import configure_logging  # noqa: E402 - after django.setup()
from oaifront.telemetry import configure_telemetry, instrument_app  # noqa: E402 - after django.setup()

settings = front_settings()
configure_logging(settings)
telemetry_configured = configure_telemetry(settings)

django_application = ASGIHandler()
guarded_application = AdmissionGuards(cast("ASGIApp", django_application), settings)
served_application = instrument_app(guarded_application) if telemetry_configured else guarded_application


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """Lifespan events are handled here; everything else goes through the guards to Django."""
    if scope["type"] != "lifespan":
        await served_application(scope, receive, send)
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
