"""The documentation pages' assets, served by this process: Swagger UI's and ReDoc's files from
drf-spectacular-sidecar (:class:`StaticAssetsMiddleware`), the ReDoc bundle without its remote logo
(:func:`redoc_bundle`) and the favicon.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cache
from pathlib import Path
from typing import Any, Final

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware

REDOC_BUNDLE: Final = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
"""The sidecar's ReDoc bundle (a static file path)."""

REDOC_CDN_LOGO: Final = "https://cdn.redoc.ly/redoc/logo-mini.svg"
"""The one remote asset the ReDoc bundle names: the logo beside "API docs by Redocly" in its sidebar."""

EMPTY_IMAGE: Final = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='0' height='0'/%3E"
"""An empty SVG, put in the logo's place: the page requests nothing remote and the CSP refuses nothing."""

FAVICON: Final = "drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png"
"""The icon served at ``/favicon.ico`` (Swagger UI's, a PNG; browsers take the type from the response)."""

ASSET_CACHE_CONTROL: Final = "public, max-age=86400"
"""How long a browser may keep the docs' assets served by the views below."""


@cache
def _static_bytes(path: str) -> bytes:
    found = finders.find(path)
    if not isinstance(found, str):
        raise FileNotFoundError(path)
    return Path(found).read_bytes()


@cache
def redoc_bundle_source() -> bytes:
    """The sidecar's ReDoc bundle with :data:`REDOC_CDN_LOGO` replaced by :data:`EMPTY_IMAGE`.

    Raises:
        ValueError: The bundle does not name the logo (a new ReDoc): the replacement needs a look.
    """
    source = _static_bytes(REDOC_BUNDLE)
    if REDOC_CDN_LOGO.encode() not in source:
        raise ValueError(f"{REDOC_BUNDLE} no longer names {REDOC_CDN_LOGO}")
    return source.replace(REDOC_CDN_LOGO.encode(), EMPTY_IMAGE.encode())


async def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """``/docs/assets/redoc.standalone.js``: ReDoc without its remote logo (:func:`redoc_bundle_source`)."""
    source = await asyncio.to_thread(redoc_bundle_source)
    response = HttpResponse(source, content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = ASSET_CACHE_CONTROL
    return response


async def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: Swagger UI's icon, so a browser's automatic request for it (ReDoc's page declares no icon)
    does not end in a 404.
    """
    response = HttpResponse(await asyncio.to_thread(_static_bytes, FAVICON), content_type="image/png")
    response["Cache-Control"] = ASSET_CACHE_CONTROL
    return response


class StaticAssetsMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, usable by the front's async middleware chain: serves the Swagger UI and ReDoc assets of
    drf-spectacular-sidecar under ``STATIC_URL`` in every mode, ``DEBUG`` or not.

    WhiteNoise's own middleware is synchronous; in an async chain Django would run it in a thread and call the rest of
    the chain (the async views) from there, which costs a thread per request and keeps a client's disconnect from
    cancelling the view. This subclass stays async: a static path is answered from WhiteNoise's file table with the file
    read in a worker thread, and any other request goes straight on. With ``WHITENOISE_USE_FINDERS`` the files come
    from the app finders, so no ``collectstatic`` step is needed.
    """

    async_capable = True
    sync_capable = True

    BLOCK_SIZE: Final = 64 * 1024
    """Bytes read per chunk of a static file."""

    def __init__(self, get_response: Any = None, **kwargs: Any) -> None:
        super().__init__(get_response, **kwargs)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        """Answer a static path, else pass the request on (awaitable in an async chain)."""
        if self.is_async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is None:
            passed_on: HttpResponseBase = await self.get_response(request)
            return passed_on
        served = await asyncio.to_thread(static_file.get_response, request.method, request.META)
        response = StreamingHttpResponse(self._chunks(served.file), status=int(served.status))
        del response["Content-Type"]
        for name, value in served.headers:
            response[name] = value
        return response

    async def _chunks(self, file: Any) -> AsyncIterator[bytes]:
        if file is None:
            return
        try:
            while chunk := await asyncio.to_thread(file.read, self.BLOCK_SIZE):
                yield chunk
        finally:
            await asyncio.to_thread(file.close)
