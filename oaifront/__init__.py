"""The Django project of the OpenAI-compatible chat front of the AI Horde."""

import os

from loguru import logger

# Logfire (a dependency for telemetry) registers a pydantic plugin that pydantic would import, with all of Logfire,
# the first time a model is built: about a second of start-up for a plugin the front never configures. Telemetry is
# configured explicitly (oaifront.telemetry), so the plugin stays off unless the environment says otherwise.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "logfire-plugin")

# A bad HORDE_URL is refused by `chat` when it is imported (chat.horde_url), before horde-sdk reads it; this package
# imports nothing of `chat`, so the entry points (oaifront.startup) can turn that refusal into one line.

# horde-sdk's model reference logs its configuration at DEBUG on import; those lines are not the front's.
logger.disable("horde_model_reference")
logger.disable("horde_sdk")
