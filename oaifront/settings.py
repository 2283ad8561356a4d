"""Django settings of the chat front. No database; every front knob comes from the environment (chat.settings)."""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.utils import get_random_secret_key
from pydantic import ValidationError

from chat.cors_settings import *  # noqa: F403 - CORS_ALLOW_ALL_ORIGINS, CORS_ALLOW_HEADERS, ... (documented there)
from chat.settings import FrontSettings, describe_invalid_settings
from front_operations.openapi.page_settings import docs_settings
from oaifront.middleware import SUBSTITUTED_CHECKS


def whole_seconds(variable: str) -> int:
    """The environment's ``variable`` as whole seconds, 0 when unset (off).

    Raises:
        ImproperlyConfigured: One line naming the variable, its value and what is expected (oaifront.startup prints it
            alone and exits 1), such as ``Invalid front configuration: DJANGO_SECURE_HSTS_SECONDS='ten': ...``.
    """
    value = os.environ.get(variable, "").strip()
    if not value:
        return 0
    if not value.isdecimal():
        message = (
            f"Invalid front configuration: {variable}={value!r}: expected a whole number of seconds, 0 (off) or more"
        )
        raise ImproperlyConfigured(message)
    return int(value)


SWITCH_ON: frozenset[str] = frozenset({"1", "true", "yes", "on"})
SWITCH_OFF: frozenset[str] = frozenset({"0", "false", "no", "off"})


def switch(variable: str) -> bool:
    """The environment's ``variable`` as on or off: unset or empty is off; ``1``, ``true``, ``yes``, ``on`` and ``0``,
    ``false``, ``no``, ``off`` in any case.

    Raises:
        ImproperlyConfigured: One line naming the variable, its value and what is expected, for any other value
            (``ture`` must not quietly mean off), such as ``Invalid front configuration: DJANGO_DEBUG='ture': ...``.
    """
    value = os.environ.get(variable, "").strip().lower()
    if value in SWITCH_ON:
        return True
    if not value or value in SWITCH_OFF:
        return False
    message = (
        f"Invalid front configuration: {variable}={os.environ[variable]!r}: expected true or false "
        "(also 1/0, yes/no, on/off), or unset for off"
    )
    raise ImproperlyConfigured(message)


DEBUG = switch("DJANGO_DEBUG")
SECRET_KEY_IS_SET = bool(os.environ.get("DJANGO_SECRET_KEY"))
# The front signs nothing that outlives the process (no sessions, no cookies), so without DJANGO_SECRET_KEY each
# process draws a random key rather than using a public placeholder; `manage.py check --deploy` still requires a real
# one outside debug (chat.checks), as Django's own deployment advice does.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or get_random_secret_key()
ALLOWED_HOSTS = [host for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",") if host]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "corsheaders",
    "chat",
    "images",
    "models_list",
]

MIDDLEWARE = [
    # Django's security, CSRF and clickjacking middleware with their hooks on the event loop (oaifront.middleware).
    "oaifront.middleware.SecurityMiddleware",
    # Serves the Swagger UI and ReDoc assets (drf-spectacular-sidecar) in every mode; WhiteNoise kept async.
    "front_operations.openapi.assets.StaticAssetsMiddleware",
    # Django's HTML 400/404/500 pages (a disallowed Host, DEBUG's technical pages) become JSON envelopes.
    "oaifront.error_pages.JsonErrorPagesMiddleware",
    # Browser access (reference: Browser access) through django-cors-headers, configured by chat.cors_settings.
    "corsheaders.middleware.CorsMiddleware",
    "oaifront.middleware.CommonMiddleware",
    # Every API view is csrf_exempt (bearer keys, no cookies); the middleware guards anything added later.
    "oaifront.middleware.CsrfViewMiddleware",
    "oaifront.middleware.XFrameOptionsMiddleware",
]

# Security headers (SecurityMiddleware). TLS usually ends at the proxy in front of the front, which then owns HTTPS
# redirects and HSTS: both are off unless set, and their deployment warnings are silenced for that reason.
SECURE_SSL_REDIRECT = switch("DJANGO_SECURE_SSL_REDIRECT")
SECURE_HSTS_SECONDS = whole_seconds("DJANGO_SECURE_HSTS_SECONDS")
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if switch("DJANGO_BEHIND_TLS_PROXY") else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# Django's checks that its own security, clickjacking and CSRF middleware are listed (W001-W003): the front lists
# async substitutes running the same hooks (oaifront.middleware.SUBSTITUTES), and oaifront.middleware's deploy check
# runs the checks Django would skip for them.
SILENCED_SYSTEM_CHECKS = ["security.W004", "security.W008", "security.W021", *SUBSTITUTED_CHECKS]

ROOT_URLCONF = "oaifront.urls"
ASGI_APPLICATION = "oaifront.asgi.application"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
# Django sets the process's time zone (TZ) from this: UTC, as the devhorde's and uvicorn's lines are, so the log
# lines of the front and the Horde read on one clock (Django's default is America/Chicago).
TIME_ZONE = "UTC"
APPEND_SLASH = False
STATIC_URL = "/static/"
# Static files (only the docs pages' assets) come straight from the app finders: no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = False
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The front reads request bodies itself; Django's own cap stays out of the way of the front's validation.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

LOGGING_CONFIG = None

# The API description (front_operations.openapi): drf-spectacular serves /openapi.json, /docs and /redoc with settings
# of their own (front_operations.openapi.page_settings, applied by the views), so a host project needs neither of these;
# they make `manage.py spectacular` and DRF's defaults agree with the pages. The front has no users or sessions, so DRF
# authenticates nobody.
REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {**docs_settings(), "SERVE_INCLUDE_SCHEMA": False, "SERVE_AUTHENTICATION": []}

try:
    HORDE_OAI = FrontSettings()
except ValidationError as invalid:
    raise ImproperlyConfigured(describe_invalid_settings(invalid)) from None
"""The front's namespaced settings (see chat.settings.FrontSettings for each variable)."""

if HORDE_OAI.redis_url:
    # Shared by every worker process (the model list cache, models_list.views); a Redis that cannot be reached is
    # skipped, not an error: the list then comes from the Horde.
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": HORDE_OAI.redis_url,
            "KEY_PREFIX": "horde-oai",
            "OPTIONS": {
                "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
                "IGNORE_EXCEPTIONS": True,
                "SOCKET_CONNECT_TIMEOUT": 1,
                "SOCKET_TIMEOUT": 1,
            },
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "horde-oai"}}
