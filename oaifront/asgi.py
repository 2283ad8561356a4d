"""The front's ASGI application: Django wrapped by :func:`chat.asgi.with_front_lifespan`, the same call a host
project uses, so the ASGI lifespan runs the front's startup and shutdown work.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde.
At lifespan startup it logs the Redis in use and chains :func:`chat.runtime.stop_open_requests` ahead of the server's
SIGTERM/SIGINT handler, so a stop ends every open request at once (streams with an error event and ``data: [DONE]``,
waiting requests with a 503 and ``Retry-After``, each native request cancelled); at lifespan shutdown it retries
pending cancels once more, stops the Redis tasks and closes the HTTP pool (:func:`chat.runtime.close_runtime`).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

from django.core.asgi import get_asgi_application

from chat.asgi import with_front_lifespan

django_application = get_asgi_application()

application = with_front_lifespan(django_application)
