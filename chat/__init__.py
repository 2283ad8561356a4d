"""The chat completions app: ``POST /v1/chat/completions`` over the Horde's native chat routes."""

from loguru import logger

from chat.horde_url import check_environment

# horde-sdk (imported later) reads HORDE_URL itself and dies in a traceback on a bad value: refuse it first.
check_environment()

# horde-sdk's model reference logs its configuration at DEBUG on import; those lines are not the front's.
logger.disable("horde_model_reference")
logger.disable("horde_sdk")
