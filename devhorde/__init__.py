"""The development Horde: a faithful simulator of the AI Horde's native chat routes (``native-horde-chat.md``).

Run it with ``python -m devhorde --host 127.0.0.1 --port 7001`` (API root ``http://127.0.0.1:7001/api``) or
``uvicorn devhorde.asgi:application``; build it in-process with :func:`devhorde.app.create_app`. ``README.md`` beside
this file documents the scenario format and the ``/_devhorde/`` control routes.
"""

from loguru import logger

# horde-sdk's model reference logs its configuration at DEBUG on import; those lines are not the devhorde's.
logger.disable("horde_model_reference")
logger.disable("horde_sdk")
