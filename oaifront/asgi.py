"""The front's ASGI application: Django wrapped by :func:`chat.asgi.with_front_lifespan`, so the ASGI lifespan
logs the Redis in use at startup and closes the per-process resources at shutdown.

Serve it with ``uvicorn oaifront.asgi:application``. Without ``HORDE_URL`` it talks to the public Horde.
At shutdown it retries pending cancels once more, stops the Redis tasks and closes the HTTP pool.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")

from django.core.asgi import get_asgi_application

from chat.asgi import with_front_lifespan

django_application = get_asgi_application()

application = with_front_lifespan(django_application)
