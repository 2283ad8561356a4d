"""``GET /v1/models`` and ``GET /v1/models/{model}``."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from chat import errors
from chat.errors import OpenAIError, json_response, method_not_allowed
from chat.horde import refusals
from chat.horde.native import HordeRefusal, HordeUnreachable
from chat.horde.worker_limits import directory_for
from chat.serving import text_route
from chat.serving.runtime import get_runtime
from models_list.cards import model_list
from models_list.image_cards import served_image_cards

MODELS_CACHE_KEY = text_route.MODELS_CACHE_KEY
"""The key of the native model list in Django's ``default`` cache (chat.serving.text_route's, shared with its
detection)."""


async def native_text_models() -> list[dict[str, Any]]:
    """The native text model list, reused for ``HORDE_OAI_MODELS_CACHE_SECONDS`` through Django's ``default`` cache
    (:func:`chat.serving.text_route.cached_text_models`, which the text API detection reads too).
    """
    return await text_route.cached_text_models(get_runtime())


async def served_model_list() -> dict[str, Any]:
    """The model list (``{"object": "list", "data": [card, ...]}``) built from :func:`native_text_models`.

    Raises:
        OpenAIError: The Horde's refusal mapped by ``chat.horde.refusals.error_from_refusal`` (429
        ``rate_limit_exceeded``
            or its rc, 503 ``MaintenanceMode``, ...), or 502 ``HordeUnavailable`` when it cannot be reached.
    """
    try:
        entries = await native_text_models()
    except HordeRefusal as refusal:
        raise refusals.error_from_refusal(refusal) from refusal
    except HordeUnreachable as exc:
        raise exc.to_error() from exc
    runtime = get_runtime()
    mode = runtime.settings.text_api_fallback
    workers = None
    if text_route.text_path_models(entries, mode):
        # The text API's list entries declare no limits: the worker list has them (chat.horde.worker_limits).
        workers = await directory_for(runtime.text_horde).snapshot()
    listed = model_list(entries, mode, workers)
    listed["data"] = sorted([*listed["data"], *await served_image_cards(runtime)], key=lambda card: card["id"])
    return listed


def model_not_found(model: str) -> OpenAIError:
    """404 ``not_found_error`` ``model_not_found`` with param null, in OpenAI's wording (OpenAI's models retrieve)."""
    return errors.failure(
        errors.MODEL_NOT_FOUND, f"The model `{errors.clip(model)}` does not exist or you do not have access to it."
    )


async def list_models(request: HttpRequest) -> HttpResponse:
    """OpenAI's model list, each text model with an online chat worker as an OpenRouter-shaped card."""
    if request.method != "GET":
        return method_not_allowed("GET")
    try:
        return json_response(await served_model_list())
    except OpenAIError as error:
        return error.to_response()


async def retrieve_model(request: HttpRequest, model: str) -> HttpResponse:
    """OpenAI's model retrieve: the card ``GET /v1/models`` lists for ``model`` (an id such as ``org/name``, slashes
    included), or 404 :func:`model_not_found` when the list does not hold it (unknown to the Horde, or no online chat
    worker). Horde failures map as for ``GET /v1/models``; other methods are 405.
    """
    if request.method != "GET":
        return method_not_allowed("GET")
    try:
        served = await served_model_list()
    except OpenAIError as error:
        return error.to_response()
    for card in served["data"]:
        if card["id"] == model:
            return json_response(card)
    return model_not_found(model).to_response()
