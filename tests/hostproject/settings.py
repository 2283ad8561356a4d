"""A host project as a Django team has one: ``django-admin startproject``'s settings (default apps and middleware,
SQLite), plus the front's two apps, the apps its documentation pages need (REST framework, drf-spectacular and its
sidecar) and django-cors-headers configured by :mod:`chat.cors_settings`; the URLs include the operations routes.
A team's own ``REST_FRAMEWORK`` is set to DRF's defaults (its own schema class, a login required), which the pages
must not depend on.

No setting here comes from ``oaifront``; the front's knobs come from the environment (``HORDE_URL``,
``HORDE_OAI_*``), as ``chat.settings.front_settings`` reads them when ``HORDE_OAI`` is not set.
"""

from __future__ import annotations

import os
from pathlib import Path

from chat.cors_settings import *  # noqa: F403 - CORS_ALLOW_ALL_ORIGINS, CORS_ALLOW_HEADERS, CORS_EXPOSE_HEADERS, ...

BASE_DIR = Path(os.environ.get("HOST_PROJECT_DIR", Path(__file__).resolve().parent))
SECRET_KEY = "host-project-test-key-not-for-production-0123456789abcdefghijklmnopqrstuvwxyz"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "chat",
    "models_list",
]

MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tests.hostproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
