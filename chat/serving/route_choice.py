"""Which Horde path a request takes, on a Horde with or without the native chat routes, or its refusal at once.

The native chat route (``POST /v2/generate/chat/async``) is the path of a Horde that serves chat workers; a model
with text workers and no chat worker goes through the text generation API (chat.serving.text_route,
``HORDE_OAI_TEXT_API_FALLBACK``). The public AI Horde has no chat routes at all: its model list has no ``chat``
entry and the chat route answers Flask's HTML 404 without an ``rc``. On such a Horde (:func:`find_route`):

- a request naming at least one model the text path serves (online workers, ``count`` > 0) takes the text path,
  with every model it names (the Horde accepts any name; a worker serving one of them takes it);
- a request naming none is answered at once, without a submit: 503 ``no_eligible_worker`` with ``Retry-After: 30``
  and ``x-should-retry: false`` (the reference's rule for a model without an online worker, stage ``submit``;
  :func:`no_worker_serving_error`). Not OpenAI's 404 ``model_not_found``: the Horde accepts any model name, its
  list holds only the models with a worker that checked in within 300 s, and a worker may come online serving it.

A Horde "has no chat routes" when its model list has no ``chat`` entry (under ``auto`` or ``on``), or when the chat
route answered 404 without an ``rc`` while the Horde answers ``GET /v2/status/heartbeat``
(:func:`native_route_failure`): that verdict is remembered for :data:`NO_CHAT_ROUTES_VERDICT_SECONDS` per
``HORDE_URL``, and the request is chosen again. Only when the heartbeat fails too is the 404 the API root looking
wrong (502 ``HordeUnavailable``, chat.errors.horde_api_root_wrong). Under ``off`` a Horde without chat routes is 502
``HordeUnavailable`` saying so (:func:`no_chat_routes_error`): the text path is switched off.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from chat import errors
from chat.errors import OpenAIError
from chat.horde.native import HordeApiRootWrong, HordeRefusal, HordeUnreachable
from chat.serving import text_route

NO_CHAT_ROUTES_VERDICT_SECONDS: Final[float] = text_route.NATIVE_HORDE_VERDICT_SECONDS
"""How long a Horde whose chat route answered 404 without an ``rc`` beside a live heartbeat is taken as a Horde
without chat routes (a Horde gains or loses them with a deploy, not per request); as long as the opposite verdict,
chat.serving.text_route.NATIVE_HORDE_VERDICT_SECONDS. Within it, no request tries the chat route and no heartbeat is
read."""

_no_chat_routes: dict[str, float] = {}
"""When each ``HORDE_URL`` was last found without chat routes (``time.monotonic()``)."""

NO_WORKER_SERVING_MESSAGE: Final[str] = (
    "No worker is currently serving the model '{model}'. Retry later. GET /v1/models lists the models served now."
)
"""The message of :func:`no_worker_serving_error` for ``model`` (the native Horde's ``NoEligibleWorker`` message,
then where the served models are listed)."""

NO_WORKER_SERVING_LISTED_MESSAGE: Final[str] = (
    "No worker is currently serving any of the listed models ({models}). Retry later. GET /v1/models lists the "
    "models served now."
)
"""The same under ``models`` (``{models}`` is each id quoted, comma separated)."""

NO_CHAT_ROUTES_MESSAGE: Final[str] = (
    "The Horde at {horde_url} has no native chat routes (POST /v2/generate/chat/async answered 404 while its "
    "heartbeat answers), and HORDE_OAI_TEXT_API_FALLBACK is off. Set it to auto to serve its models through the "
    "Horde's text generation API."
)
"""The message of :func:`no_chat_routes_error`."""


def chat_routes_missing(horde_url: str, *, now: float | None = None) -> bool:
    """Whether ``horde_url`` was found without chat routes within :data:`NO_CHAT_ROUTES_VERDICT_SECONDS`."""
    seen = _no_chat_routes.get(horde_url)
    current = time.monotonic() if now is None else now
    return seen is not None and current - seen < NO_CHAT_ROUTES_VERDICT_SECONDS


def remember_no_chat_routes(horde_url: str) -> None:
    """Record that ``horde_url`` has no chat routes (now)."""
    _no_chat_routes[horde_url] = time.monotonic()


def forget_verdicts() -> None:
    """Drop every remembered verdict (tests; a deploy that added chat routes is seen after the verdict's time)."""
    _no_chat_routes.clear()


def no_worker_serving_error(models: Sequence[str], *, listed: bool) -> OpenAIError:
    """503 ``no_eligible_worker`` (``Retry-After: 30``, ``x-should-retry: false``, chat.errors.no_eligible_worker)
    for a request no online worker serves, answered before any submit (reference: Model availability).
    """
    if listed and len(models) > 1:
        message = NO_WORKER_SERVING_LISTED_MESSAGE.format(models=", ".join(f"'{model}'" for model in models))
    else:
        message = NO_WORKER_SERVING_MESSAGE.format(model=models[0] if models else "")
    return errors.no_eligible_worker(message)


def no_chat_routes_error(horde_url: str) -> OpenAIError:
    """502 ``HordeUnavailable``: the Horde has no chat routes and the text path is off
    (:data:`NO_CHAT_ROUTES_MESSAGE`).
    """
    return errors.failure(errors.HORDE_UNAVAILABLE, NO_CHAT_ROUTES_MESSAGE.format(horde_url=horde_url))


def _has_chat_entry(entries: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(entry.get("chat"), Mapping) for entry in entries)


async def find_route(runtime: Any, models: Sequence[str], *, listed: bool = False) -> bool:
    """Whether a request naming ``models`` takes the text path (True) or the native chat route (False).

    On a Horde without chat routes (module docstring) a request naming no model the text path serves is refused;
    on any other Horde this is chat.serving.text_route.find_text_route's choice (every model a text path model).
    Under ``off`` the native route, unless the Horde is known to have no chat routes. When the model list cannot be
    read, the text path on a Horde known to have no chat routes (the Horde decides), else the native route.
    ``listed``: the client sent ``models`` (the refusal's wording).

    Raises:
        OpenAIError: 503 ``no_eligible_worker`` (:func:`no_worker_serving_error`); 502 ``HordeUnavailable`` under
            ``off`` on a Horde known to have no chat routes (:func:`no_chat_routes_error`).
    """
    mode: text_route.TextApiFallback = runtime.settings.text_api_fallback
    horde_url: str = runtime.horde.base_url
    missing = chat_routes_missing(horde_url)
    if mode == "off":
        if missing:
            raise no_chat_routes_error(horde_url)
        return False
    if not models:
        return False
    if not missing and mode == "auto" and text_route.native_verdict_fresh():
        return False
    try:
        entries = await text_route.cached_text_models(runtime)
    except (HordeRefusal, HordeUnreachable):
        return missing
    text_route.note_model_list(entries)
    if missing or not _has_chat_entry(entries):
        served = text_route.text_path_models(entries, "on")
        if any(model in served for model in models):
            return True
        raise no_worker_serving_error(models, listed=listed)
    served = text_route.text_path_models(entries, mode)
    return all(model in served for model in models)


async def native_route_failure(runtime: Any, failure: HordeUnreachable) -> OpenAIError | None:
    """The error a failed native chat submit answers, or None when the request should be chosen again.

    A 404 without an ``rc`` (:class:`chat.horde.native.HordeApiRootWrong`) is checked against the heartbeat: when
    the heartbeat answers, the Horde has no chat routes, which is remembered (:func:`remember_no_chat_routes`), and
    the result is None (under ``off``: :func:`no_chat_routes_error`); when it fails too, the API root looks wrong.
    Any other failure is its own error (``failure.to_error()``).
    """
    if not isinstance(failure, HordeApiRootWrong):
        return failure.to_error()
    try:
        await runtime.horde.heartbeat()
    except (HordeRefusal, HordeUnreachable):
        return failure.to_error()
    remember_no_chat_routes(runtime.horde.base_url)
    if runtime.settings.text_api_fallback == "off":
        return no_chat_routes_error(runtime.horde.base_url)
    return None
