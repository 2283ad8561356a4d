"""``GET /v1/models``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.http import HttpRequest, HttpResponse

from chat import errors
from chat.errors import json_response
from chat.horde_client import HordeRefusal, HordeUnreachable
from chat.runtime import get_runtime
from chat.views import method_not_allowed
from models_list.cards import model_list

_cache: dict[asyncio.AbstractEventLoop, tuple[float, list[dict[str, Any]]]] = {}


async def native_text_models() -> list[dict[str, Any]]:
    """The native text model list, reused for ``HORDE_OAI_MODELS_CACHE_SECONDS``."""
    runtime = get_runtime()
    loop = asyncio.get_running_loop()
    cached = _cache.get(loop)
    now = time.monotonic()
    if cached is not None and now - cached[0] < runtime.settings.models_cache_seconds:
        return cached[1]
    entries = await runtime.horde.text_models()
    _cache[loop] = (now, entries)
    return entries


async def list_models(request: HttpRequest) -> HttpResponse:
    """OpenAI's model list, each text model with an online chat worker as an OpenRouter-shaped card."""
    if request.method != "GET":
        return method_not_allowed("GET")
    try:
        entries = await native_text_models()
    except HordeRefusal as refusal:
        return errors.error_from_refusal(refusal).to_response()
    except HordeUnreachable as exc:
        return errors.horde_unavailable(str(exc)).to_response()
    return json_response(model_list(entries))
