"""The development Horde's ASGI application (Starlette).

Native routes (contract ``native-horde-chat.md``), under the API root ``/api``:

- ``POST /api/v2/generate/chat/async``: submit; reads the ``apikey`` and ``Client-Agent`` headers.
- ``GET /api/v2/generate/chat/status/{id}``: status.
- ``DELETE /api/v2/generate/chat/status/{id}``: cancel.
- ``GET /api/v2/status/models?type=text``: the model list with ``chat`` entries.
- ``POST /api/v2/generate/text/async``, ``GET`` / ``DELETE /api/v2/generate/text/status/{id}``: the text generation
  API (devhorde.text_api), with horde_sdk's ``TextGenerateAsyncRequest`` / ``TextGenerateStatusResponse`` shapes.
- ``GET /api/v2/workers?type=text`` (and ``type=image``): the workers counted online, with their declared limits.
- ``GET /api/v2/status/performance`` and ``GET /api/v2/find_user`` (``aihorde`` only): the Horde's totals and the
  key's user (its ``kudos``).
- ``GET /api/v2/status/heartbeat``: ``{"message": "OK"}``, for readiness checks.

On an ``aihorde`` scenario (the public AI Horde, devhorde.aihorde) the chat routes answer Flask's HTML 404 and the
others carry its rate limits and their headers.

Control routes, for the tests and the demo only, under ``/_devhorde`` (also reachable as ``/api/_devhorde``):

- ``GET /_devhorde/scenario`` / ``PUT /_devhorde/scenario``: read or replace the whole scenario (400 with
  ``errors`` when invalid).
- ``POST /_devhorde/workers/{name}``: merge a JSON object into one worker, such as ``{"online": false}``
  (404 unknown worker, 400 invalid).
- ``GET /_devhorde/requests``: every request with ``id``, ``state``, ``cancelled``, ``payload``, ``apikey``, ...
- ``GET /_devhorde/submits``: the latest submits received (chat and text), accepted or refused, with ``status``, ``rc``,
  ``id`` and ``payload``.
- ``GET /_devhorde/calls``: how many calls each Horde route answered, by ``"<METHOD> <handler>"``.
- ``POST /_devhorde/reset``: forget every request and submit, and the call counts.

Every body is JSON. A body that is not JSON (or holds NaN or Infinity) answers 400 with a ``message``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from devhorde.aihorde import FLASK_NOT_FOUND_HTML, RateLimiter, route_limits
from devhorde.answers import HordeReply
from devhorde.horde import DevHorde
from devhorde.image_api import IMAGE_CONTROL_ROUTES, IMAGE_ROUTES, ImageSim
from devhorde.options import redis_url_option, scenario_option, whole_number
from devhorde.scenario import Scenario, load_scenario

BAD_JSON_MESSAGE = "The browser (or proxy) sent a request that this server could not understand."
"""The Horde's message for a body that is not JSON."""

ENV_SCENARIO = "DEVHORDE_SCENARIO"
ENV_REDIS_URL = "DEVHORDE_REDIS_URL"
ENV_STREAM_REDIS_DB = "DEVHORDE_STREAM_REDIS_DB"


class _BadJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _BadJson(name)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as error:
        raise _BadJson(str(error)) from error


def _respond(reply: HordeReply) -> Response:
    return JSONResponse(reply.body, status_code=reply.status, headers=dict(reply.headers))


def _bad_json() -> Response:
    return JSONResponse({"message": BAD_JSON_MESSAGE}, status_code=400)


def _horde(request: Request) -> DevHorde:
    horde: DevHorde = request.app.state.horde
    return horde


Endpoint = Callable[[Request], Awaitable[Response]]


def public_horde(endpoint: Endpoint) -> Endpoint:
    """On an ``aihorde`` scenario, apply the public AI Horde's rate limits to a route: a 429 ``{"message": "2 per 1
    second"}`` (no ``rc``) past a limit, and ``Retry-After`` with ``X-RateLimit-*`` on every answer. The limited
    address is ``Proxied-For`` when ``Proxy-Authorization`` holds the scenario's passkey, else the client's.
    """

    async def limited(request: Request) -> Response:
        request.app.state.calls[f"{request.method} {endpoint.__name__}"] += 1
        spec = _horde(request).scenario.aihorde
        if spec is None or not spec.rate_limits:
            return await endpoint(request)
        client = request.client.host if request.client is not None else "127.0.0.1"
        address = client
        passkey = request.headers.get("proxy-authorization")
        if passkey is not None and spec.proxy_passkey is not None and passkey == spec.proxy_passkey:
            address = request.headers.get("proxied-for", client)
        limiter: RateLimiter = request.app.state.limiter
        limits = route_limits(
            request.method,
            request.url.path,
            client_address=client,
            limited_address=address,
            apikey=request.headers.get("apikey"),
        )
        breached, headers = limiter.hit(limits)
        if breached is not None:
            return JSONResponse({"message": breached.message}, status_code=429, headers=headers)
        response = await endpoint(request)
        response.headers.update(headers)
        return response

    limited.__doc__ = endpoint.__doc__
    return limited


def no_chat_route(endpoint: Endpoint) -> Endpoint:
    """On an ``aihorde`` scenario, a native chat route does not exist: Flask's HTML 404, no ``rc``, no limit
    headers (the public Horde has no ``/v2/generate/chat/...``).
    """

    async def native(request: Request) -> Response:
        if _horde(request).scenario.aihorde is not None:
            return HTMLResponse(FLASK_NOT_FOUND_HTML, status_code=404)
        return await endpoint(request)

    native.__doc__ = endpoint.__doc__
    return native


async def submit(request: Request) -> Response:
    """``POST /v2/generate/chat/async`` (contract: Submit): 202 ``{"id", "kudos"[, "warnings"]}`` or a refusal."""
    horde = _horde(request)
    await horde.start()
    try:
        payload = await _json_body(request)
    except _BadJson:
        return _bad_json()
    return _respond(horde.submit(payload, request.headers.get("apikey"), request.headers.get("client-agent")))


async def status(request: Request) -> Response:
    """``GET /v2/generate/chat/status/{id}`` (contract: Status); 404 ``RequestNotFound``."""
    horde = _horde(request)
    await horde.start()
    return _respond(horde.status(request.path_params["request_id"]))


async def cancel(request: Request) -> Response:
    """``DELETE /v2/generate/chat/status/{id}`` (contract: Cancel); 404 ``RequestNotFound``."""
    horde = _horde(request)
    await horde.start()
    return _respond(horde.cancel(request.path_params["request_id"]))


async def text_submit(request: Request) -> Response:
    """``POST /v2/generate/text/async``: 202 ``{"id", "kudos"}``, 200 ``{"kudos"}`` for a dry run, or a refusal."""
    horde = _horde(request)
    await horde.start()
    try:
        payload = await _json_body(request)
    except _BadJson:
        return _bad_json()
    return _respond(horde.record_submit(payload, horde.text.submit(payload, request.headers.get("apikey"))))


async def text_status(request: Request) -> Response:
    """``GET /v2/generate/text/status/{id}``; 404 ``RequestNotFound``."""
    horde = _horde(request)
    await horde.start()
    return _respond(horde.text.status(request.path_params["request_id"], request.url.path))


async def text_cancel(request: Request) -> Response:
    """``DELETE /v2/generate/text/status/{id}``: cancel; 404 ``RequestNotFound``."""
    horde = _horde(request)
    await horde.start()
    return _respond(horde.text.cancel(request.path_params["request_id"], request.url.path))


async def models(request: Request) -> Response:
    """``GET /v2/status/models?type=text`` (contract: Models): a JSON list of model entries."""
    horde = _horde(request)
    await horde.start()
    if request.query_params.get("type") == "image":
        return JSONResponse(request.app.state.images.models_status())
    return JSONResponse(horde.models_status(request.query_params.get("type", "text")))


async def workers(request: Request) -> Response:
    """``GET /v2/workers?type=text`` (or ``type=image``): the workers the Horde counts online, with their limits."""
    horde = _horde(request)
    await horde.start()
    if request.query_params.get("type") == "image":
        return JSONResponse(request.app.state.images.workers_status())
    if request.query_params.get("type", "text") not in ("text", "all", ""):
        return JSONResponse([])
    return JSONResponse(horde.text.workers_status())


async def performance(request: Request) -> Response:
    """``GET /v2/status/performance`` on an ``aihorde`` scenario: the Horde's totals; other scenarios lack it (404)."""
    horde = _horde(request)
    await horde.start()
    if horde.scenario.aihorde is None:
        return PlainTextResponse("Not Found", status_code=404)
    return _respond(horde.text.performance())


async def find_user(request: Request) -> Response:
    """``GET /v2/find_user`` on an ``aihorde`` scenario: the user of the ``apikey`` header; other scenarios lack it
    (404).
    """
    horde = _horde(request)
    await horde.start()
    if horde.scenario.aihorde is None:
        return PlainTextResponse("Not Found", status_code=404)
    return _respond(horde.text.find_user(request.headers.get("apikey")))


async def heartbeat(request: Request) -> Response:
    """``GET /v2/status/heartbeat``: ``{"message": "OK", "version": "devhorde"}``."""
    return JSONResponse({"message": "OK", "version": "devhorde"})


async def get_scenario(request: Request) -> Response:
    """``GET /_devhorde/scenario``: the current scenario, every key with its value."""
    return JSONResponse(_horde(request).scenario.model_dump(mode="json"))


def _validation_errors(error: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(part) for part in item["loc"]), "msg": item["msg"]}
        for item in error.errors(include_url=False, include_context=False, include_input=False)
    ]


async def put_scenario(request: Request) -> Response:
    """``PUT /_devhorde/scenario``: replace the whole scenario; 400 ``{"message", "errors"}`` when invalid."""
    horde = _horde(request)
    await horde.start()
    try:
        document = await _json_body(request)
        scenario = Scenario.model_validate(document)
    except _BadJson:
        return _bad_json()
    except ValidationError as error:
        return JSONResponse({"message": "Invalid scenario", "errors": _validation_errors(error)}, status_code=400)
    horde.replace_scenario(scenario)
    return JSONResponse(horde.scenario.model_dump(mode="json"))


async def patch_worker(request: Request) -> Response:
    """``POST /_devhorde/workers/{name}``: merge a JSON object into one worker; returns the worker."""
    horde = _horde(request)
    await horde.start()
    try:
        patch = await _json_body(request)
    except _BadJson:
        return _bad_json()
    if not isinstance(patch, dict):
        return JSONResponse({"message": "The body must be a JSON object."}, status_code=400)
    try:
        worker = horde.patch_worker(request.path_params["name"], patch)
    except KeyError:
        return JSONResponse({"message": f"No worker named {request.path_params['name']!r}."}, status_code=404)
    except ValidationError as error:
        return JSONResponse({"message": "Invalid worker", "errors": _validation_errors(error)}, status_code=400)
    return JSONResponse(worker.model_dump(mode="json"))


async def list_requests(request: Request) -> Response:
    """``GET /_devhorde/requests``: a JSON list of every request (see ``DevHorde.describe_requests``)."""
    horde = _horde(request)
    await horde.start()
    return JSONResponse(horde.describe_requests())


async def list_submits(request: Request) -> Response:
    """``GET /_devhorde/submits``: a JSON list of the latest submits, oldest first (see ``DevHorde.submit``)."""
    return JSONResponse(list(_horde(request).submits))


async def list_calls(request: Request) -> Response:
    """``GET /_devhorde/calls``: how many calls each Horde route answered, by ``"<METHOD> <handler>"`` (such as
    ``"GET performance"``, ``"POST text_submit"``), since the start or the last reset.
    """
    return JSONResponse(dict(request.app.state.calls))


async def reset(request: Request) -> Response:
    """``POST /_devhorde/reset``: forget every request, every rate limit window and the call counts;
    ``{"forgotten": n}``.
    """
    request.app.state.limiter.clear()
    request.app.state.calls.clear()
    return JSONResponse({"forgotten": _horde(request).reset()})


NATIVE_ROUTES = [
    Route("/v2/generate/chat/async", no_chat_route(submit), methods=["POST"]),
    Route("/v2/generate/chat/status/{request_id}", no_chat_route(status), methods=["GET"]),
    Route("/v2/generate/chat/status/{request_id}", no_chat_route(cancel), methods=["DELETE"]),
    Route("/v2/generate/text/async", public_horde(text_submit), methods=["POST"]),
    Route("/v2/generate/text/status/{request_id}", public_horde(text_status), methods=["GET"]),
    Route("/v2/generate/text/status/{request_id}", public_horde(text_cancel), methods=["DELETE"]),
    Route("/v2/status/models", public_horde(models), methods=["GET"]),
    Route("/v2/workers", public_horde(workers), methods=["GET"]),
    Route("/v2/status/performance", public_horde(performance), methods=["GET"]),
    Route("/v2/find_user", public_horde(find_user), methods=["GET"]),
    Route("/v2/status/heartbeat", public_horde(heartbeat), methods=["GET"]),
    *IMAGE_ROUTES,
]

CONTROL_ROUTES = [
    Route("/scenario", get_scenario, methods=["GET"]),
    Route("/scenario", put_scenario, methods=["PUT"]),
    Route("/workers/{name}", patch_worker, methods=["POST"]),
    Route("/requests", list_requests, methods=["GET"]),
    Route("/submits", list_submits, methods=["GET"]),
    Route("/calls", list_calls, methods=["GET"]),
    Route("/reset", reset, methods=["POST"]),
    *IMAGE_CONTROL_ROUTES,
]


def create_app(
    scenario: Scenario | None = None,
    *,
    redis_url: str | None = None,
    stream_redis_db: int = 0,
) -> Starlette:
    """Build the development Horde's ASGI app.

    Args:
        scenario: The scenario to serve; None loads ``scenarios/default.json``.
        redis_url: Redis for the progress streams and signals; None runs without Redis.
        stream_redis_db: The database of the progress streams.

    Returns:
        The Starlette app; ``app.state.horde`` is its :class:`DevHorde`. Its lifespan starts the dispatcher and
        cancels every job on shutdown; without a lifespan (``httpx.ASGITransport``) the first request starts it and
        the caller awaits ``app.state.horde.stop()``.
    """
    horde = DevHorde(scenario if scenario is not None else load_scenario(), redis_url, stream_redis_db)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await horde.start()
        try:
            yield
        finally:
            await horde.stop()

    app = Starlette(
        routes=[
            Mount("/api/_devhorde", routes=CONTROL_ROUTES),
            Mount("/api", routes=NATIVE_ROUTES),
            Mount("/_devhorde", routes=CONTROL_ROUTES),
        ],
        lifespan=lifespan,
    )
    app.state.horde = horde
    app.state.images = ImageSim(lambda: horde.scenario.images)
    """The image API (devhorde.image_api), on the scenario's ``images`` section."""
    app.state.limiter = RateLimiter()
    """The ``aihorde`` scenario's rate limit windows (tests may set its ``clock``)."""
    app.state.calls = Counter()
    """The calls each Horde route answered (``GET /_devhorde/calls``)."""
    return app


def app_from_env() -> Starlette:
    """Build the app from ``DEVHORDE_SCENARIO``, ``DEVHORDE_REDIS_URL`` and ``DEVHORDE_STREAM_REDIS_DB``, each checked
    as ``python -m devhorde`` checks it (devhorde.options).

    Raises:
        InvalidOptionError: A variable the devhorde cannot use; the message names it, its value and what is expected.
    """
    return create_app(
        scenario_option(os.environ.get(ENV_SCENARIO) or None, ENV_SCENARIO),
        redis_url=redis_url_option(os.environ.get(ENV_REDIS_URL) or None, ENV_REDIS_URL),
        stream_redis_db=whole_number(
            os.environ.get(ENV_STREAM_REDIS_DB) or None, ENV_STREAM_REDIS_DB, default=0, lowest=0
        ),
    )


_application: Starlette | None = None


def __getattr__(name: str) -> Any:
    """``devhorde.app.application``: built from the environment on first access (see :func:`app_from_env`)."""
    global _application  # noqa: PLW0603 - a module __getattr__ builds the app lazily, once (PEP 562)
    if name == "application":
        if _application is None:
            _application = app_from_env()
        return _application
    raise AttributeError(name)
