"""Django settings of the chat front. No database; every front knob comes from the environment (oaifront.conf)."""

from __future__ import annotations

import os

from oaifront.conf import FrontSettings

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "horde-oai-front-has-no-sessions-or-signing")
DEBUG = os.environ.get("DJANGO_DEBUG", "").lower() in {"1", "true", "yes"}
ALLOWED_HOSTS = [host for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",") if host]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.staticfiles",
    "chat",
    "models_list",
]

MIDDLEWARE = [
    "oaifront.middleware.CorsMiddleware",
    "django.middleware.common.CommonMiddleware",
]

ROOT_URLCONF = "oaifront.urls"
ASGI_APPLICATION = "oaifront.asgi.application"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
APPEND_SLASH = False
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The front reads request bodies itself; Django's own cap stays out of the way of the front's validation.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

LOGGING_CONFIG = None

HORDE_OAI = FrontSettings()
"""The front's namespaced settings (see oaifront.conf.FrontSettings for each variable)."""
