"""The host project's ASGI application, wrapped once so the front's startup line and shutdown work run."""

import os

from django.core.asgi import get_asgi_application

from chat.asgi import with_front_lifespan

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.hostproject.settings")

application = with_front_lifespan(get_asgi_application())
