"""The front's ASGI application: Django behind the admission guards, wrapped by
:func:`chat.asgi.with_front_lifespan` (the same call a host project uses), so the ASGI lifespan runs the front's
startup and shutdown work.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde. Start-up
configures the log sink (oaifront.logconfig) and, when enabled, telemetry (oaifront.telemetry) before the
application is built; a setting it cannot use ends the process with one line naming it (oaifront.startup). The
layers, outermost first:

1. :func:`chat.asgi.with_front_lifespan` answers the lifespan events itself: at startup it logs the Redis in use and
   chains :func:`chat.serving.runtime.stop_open_requests` ahead of the server's SIGTERM/SIGINT handler, so a stop ends
   every open request at once (streams with an error event and ``data: [DONE]``, waiting requests with a 503 and
   ``Retry-After``, each native request cancelled); at shutdown it retries pending cancels once more, stops the
   Redis tasks and closes the HTTP pool (:func:`chat.serving.runtime.close_runtime`); it serves each HTTP request
   with a thread for Django's thread-sensitive work borrowed from a pool (:class:`chat.asgi.RequestThreads`), as in
   a host project.
2. The OpenTelemetry ASGI instrumentation, when telemetry is configured (server spans).
3. The admission guards (oaifront.guards) refuse a request over the in-flight caps, a body over the size limit or one
   that arrives too slowly, before Django reads it.
4. Django's ASGI handler (``django.core.asgi.get_asgi_application``).
"""

from __future__ import annotations

import os
from typing import cast

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

import django

from oaifront.startup import one_line_configuration_errors

with one_line_configuration_errors():
    django.setup(set_prefix=False)

# The rest after django.setup().
from django.core.asgi import get_asgi_application
from django.urls import get_resolver

from chat.asgi import ASGIApplication, with_front_lifespan
from chat.settings import front_settings
from oaifront.guards import AdmissionGuards, ASGIApp
from oaifront.logconfig import configure_logging
from oaifront.telemetry import configure_telemetry, flush_telemetry, instrument_app

settings = front_settings()
configure_logging(settings)
with one_line_configuration_errors():
    telemetry_configured = configure_telemetry(settings)

# The URLconf, and with it every view module, imported now rather than by the first request: Django resolves it
# lazily, and that import (about half a second of the loop here) held every request that came with the first one,
# refusals included, behind it (bench/README.md, the burst).
get_resolver().url_patterns  # noqa: B018 - the access is the import
django_application = get_asgi_application()
guarded_application = AdmissionGuards(cast("ASGIApp", django_application), settings)
served_application = instrument_app(guarded_application) if telemetry_configured else guarded_application

application = with_front_lifespan(
    cast("ASGIApplication", served_application),
    at_shutdown=[flush_telemetry] if telemetry_configured else [],
)
