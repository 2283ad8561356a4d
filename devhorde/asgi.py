"""``uvicorn devhorde.asgi:application``: the development Horde configured from the environment.

``DEVHORDE_SCENARIO`` (a scenario file, or the name of a bundled one such as ``fast``; default ``default``),
``DEVHORDE_REDIS_URL`` (unset: no Redis) and ``DEVHORDE_STREAM_REDIS_DB`` (default 0).
"""

from __future__ import annotations

from devhorde.app import app_from_env

application = app_from_env()
"""The ASGI application; native routes under ``/api``, control routes under ``/_devhorde``."""
