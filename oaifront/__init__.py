"""The Django project of the OpenAI-compatible chat front of the AI Horde."""

from loguru import logger

# horde-sdk's model reference logs its configuration at DEBUG on import; those lines are not the front's.
logger.disable("horde_model_reference")
logger.disable("horde_sdk")
