"""The front's ASGI application: Django behind the admission guards, wrapped by
:func:`chat.asgi.with_front_lifespan` (the same call a host project uses), so the ASGI lifespan runs the front's
startup and shutdown work.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde. Start-up
configures the log sink (oaifront.logconfig) and, when enabled, telemetry (oaifront.telemetry) before the
application is built. The layers, outermost first:

1. :func:`chat.asgi.with_front_lifespan` answers the lifespan events itself: at startup it logs the Redis in use and
   chains :func:`chat.serving.runtime.stop_open_requests` ahead of the server's SIGTERM/SIGINT handler, so a stop ends
   every open request at once (streams with an error event and ``data: [DONE]``, waiting requests with a 503 and
   ``Retry-After``, each native request cancelled); at shutdown it retries pending cancels once more, stops the
   Redis tasks and closes the HTTP pool (:func:`chat.serving.runtime.close_runtime`).
2. The OpenTelemetry ASGI instrumentation, when telemetry is configured (server spans).
3. The admission guards (oaifront.guards) refuse a request over the in-flight caps, a body over the size limit or one
   that arrives too slowly, before Django reads it.
4. Django's ASGI handler (oaifront.handler.FrontASGIHandler: no thread started and stopped per request).
"""

from __future__ import annotations

import os
from typing import cast

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

import django

django.setup(set_prefix=False)

from chat.asgi import ASGIApplication, with_front_lifespan  # noqa: E402 - after django.setup()
from chat.settings import front_settings  # noqa: E402 - after django.setup()
from oaifront.guards import AdmissionGuards, ASGIApp  # noqa: E402 - after django.setup()
from oaifront.handler import FrontASGIHandler  # noqa: E402 - after django.setup()
from oaifront.logconfig import configure_logging  # noqa: E402 - after django.setup()
from oaifront.telemetry import configure_telemetry, instrument_app  # noqa: E402 - after django.setup()

settings = front_settings()
configure_logging(settings)
telemetry_configured = configure_telemetry(settings)

django_application = FrontASGIHandler()
guarded_application = AdmissionGuards(cast("ASGIApp", django_application), settings)
served_application = instrument_app(guarded_application) if telemetry_configured else guarded_application

application = with_front_lifespan(cast("ASGIApplication", served_application))
