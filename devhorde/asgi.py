"""``uvicorn devhorde.asgi:application``: the development Horde configured from the environment.

``DEVHORDE_SCENARIO`` (a scenario file, or the name of a bundled one such as ``fast``; default ``default``),
``DEVHORDE_REDIS_URL`` (unset: no Redis) and ``DEVHORDE_STREAM_REDIS_DB`` (default 0). A value it cannot use ends the
process as ``python -m devhorde`` does: one line on standard error naming the variable, the value and what is expected
(``Invalid devhorde configuration: DEVHORDE_SCENARIO='buzy': no such scenario file, ...``), status 1, no traceback.
"""

from __future__ import annotations

import sys

from devhorde.app import app_from_env
from devhorde.options import INVALID_CONFIGURATION, InvalidOptionError

try:
    application = app_from_env()
    """The ASGI application; native routes under ``/api``, control routes under ``/_devhorde``."""
except InvalidOptionError as invalid:
    sys.exit(f"{INVALID_CONFIGURATION}{invalid}")
