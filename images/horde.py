"""The Horde's image API (real-horde.md, "Images"): the payload of an :class:`~images.reading.ImagePlan`, and the
calls, each through the chat path's pooled client, so they are paced, proxied and timed like the chat calls
(chat.horde.budget: the submit at 2 a second per key and address, a check at most once a second, the status at most
9 a minute per request).

- ``POST /v2/generate/async`` -> 202 ``{"id", "kudos", "warnings"?}``
- ``GET /v2/generate/check/{id}`` -> the progress without images (read on the read schedule)
- ``GET /v2/generate/status/{id}`` -> with ``generations`` (read once, at the end: 10 a minute per request)
- ``DELETE /v2/generate/status/{id}`` -> cancel
- ``GET /v2/status/models?type=image`` -> the image models with an online worker
- ``GET /v2/workers?type=image`` -> the online image workers (``max_pixels``: the image cards' max size)

and the image model reference the Horde reads (``HORDE_OAI_IMAGE_MODEL_REFERENCE_URL``: each model's baseline and
``max_steps``), which the Horde's API does not serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx
from horde_sdk.ai_horde_api.endpoints import AI_HORDE_API_ENDPOINT_SUBPATH
from pydantic import Field, ValidationError

from chat.horde.native import HordeClient, HordeUnreachable, NativeModel, NativeStatus, SubmitResult
from images.reading import ImagePlan

SUBMIT_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_async.value
CHECK_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_check.value
STATUS_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_status.value

NO_AVAILABLE_WORKER: Final[str] = "NoAvailableWorker"
"""The warning code of a submit no online worker can serve (an unknown model, a size no worker takes)."""

PARAMS_KEYS: Final[tuple[str, ...]] = (
    "cfg_scale",
    "sampler_name",
    "seed",
    "seed_variation",
    "karras",
    "clip_skip",
    "hires_fix",
    "tiling",
    "post_processing",
    "facefixer_strength",
    "loras",
    "tis",
)
"""``horde`` options that go into the payload's ``params`` (when set)."""

REQUEST_KEYS: Final[tuple[str, ...]] = (
    "trusted_workers",
    "slow_workers",
    "extra_slow_workers",
    "workers",
    "worker_blacklist",
    "allow_downgrade",
    "shared",
    "replacement_filter",
)
"""``horde`` options that go at the payload's top level (when set); ``nsfw`` and ``censor_nsfw`` always do."""


def horde_payload(plan: ImagePlan, *, dry_run: bool = False) -> dict[str, Any]:
    """The ``POST /v2/generate/async`` body of ``plan``: ``r2`` true only for ``response_format: url`` (the Horde's
    link), ``nsfw`` and ``censor_nsfw`` explicit (the parser's default ``nsfw`` is true).
    """
    options = plan.horde.model_dump(exclude_none=True, mode="json")
    params: dict[str, Any] = {"width": plan.width, "height": plan.height, "steps": plan.steps, "n": plan.n}
    params.update({key: options[key] for key in PARAMS_KEYS if key in options})
    if plan.transparent:
        params["transparent"] = True
    payload: dict[str, Any] = {
        "prompt": plan.prompt,
        "models": [plan.model],
        "params": params,
        "nsfw": plan.horde.nsfw,
        "censor_nsfw": plan.horde.censor_nsfw,
        "r2": plan.response_format == "url",
    }
    payload.update({key: options[key] for key in REQUEST_KEYS if key in options})
    if dry_run:
        payload["dry_run"] = True
    return payload


class ImageGeneration(NativeModel):
    """One image of an image status: ``img`` is base64 WebP (``r2: false``) or the Horde's URL (``r2: true``)."""

    img: str = ""
    seed: str | None = None
    id: str | None = None
    censored: bool = False
    gen_metadata: list[dict[str, Any]] = Field(default_factory=list)
    worker_id: str | None = None
    worker_name: str | None = None
    model: str | None = None
    state: str | None = None

    @property
    def is_censored(self) -> bool:
        """Whether a censor blanked it: ``censored``, or a ``censorship`` entry in ``gen_metadata`` (``state`` stays
        ``ok`` for a censored image, real-horde.md).
        """
        return self.censored or any(entry.get("type") == "censorship" for entry in self.gen_metadata)


class ImageStatus(NativeModel):
    """``GET /v2/generate/status/{id}``: the check's fields and the images."""

    done: bool = False
    faulted: bool = False
    finished: int = 0
    processing: int = 0
    waiting: int = 0
    restarted: int = 0
    kudos: float = 0
    generations: list[ImageGeneration] = Field(default_factory=list)


def _object(body: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise HordeUnreachable(f"{what} that is not an object", reached=True)
    return body


def outside_contract(what: str, invalid: ValidationError) -> HordeUnreachable:
    """The Horde answered ``what`` that does not match the image API."""
    return HordeUnreachable(f"{what} outside the image API ({invalid.error_count()} errors)", reached=True)


class ImageHorde:
    """The image routes over the chat path's :class:`~chat.horde.native.HordeClient` (its pool, budget and metrics).

    Every call raises :class:`~chat.horde.native.HordeRefusal` or :class:`~chat.horde.native.HordeUnreachable`.
    """

    def __init__(self, client: HordeClient) -> None:
        self.client = client

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """``POST /v2/generate/async`` (a dry run answers ``{"kudos"}`` only: its id is ``""``)."""
        body = _object(await self.client.call("POST", SUBMIT_PATH, apikey, payload=payload), "a submit answer")
        request_id = body.get("id")
        if not isinstance(request_id, str) and not payload.get("dry_run"):
            raise HordeUnreachable("the submit without a request id", reached=True)
        kudos = body.get("kudos")
        return SubmitResult(
            id=request_id if isinstance(request_id, str) else "",
            kudos=float(kudos) if isinstance(kudos, int | float) else None,
            warnings=[entry for entry in body.get("warnings") or [] if isinstance(entry, dict)],
        )

    async def _read[M: NativeModel](self, method: str, path: str, apikey: str | None, what: str, model: type[M]) -> M:
        """One ``method`` ``path`` call whose answer must be ``model``; anything else is ``HordeUnreachable``
        (:func:`outside_contract`).
        """
        body = await self.client.call(method, path, apikey)
        try:
            return model.model_validate(_object(body, what))
        except ValidationError as exc:
            raise outside_contract(what, exc) from exc

    async def check(self, request_id: str, apikey: str | None) -> NativeStatus:
        """``GET /v2/generate/check/{id}`` as a :class:`NativeStatus` (the read schedule's input)."""
        return await self._read("GET", CHECK_PATH.format(id=request_id), apikey, "a check", NativeStatus)

    async def status(self, request_id: str, apikey: str | None) -> ImageStatus:
        """``GET /v2/generate/status/{id}`` with the images."""
        return await self._read("GET", STATUS_PATH.format(id=request_id), apikey, "a status", ImageStatus)

    async def cancel(self, request_id: str, apikey: str | None) -> NativeStatus:
        """``DELETE /v2/generate/status/{id}`` (chat.horde.ports.HordeCanceller, for the cancel queue)."""
        return await self._read("DELETE", STATUS_PATH.format(id=request_id), apikey, "a cancel answer", NativeStatus)

    async def image_models(self) -> list[dict[str, Any]]:
        """``GET /v2/status/models?type=image``: entries ``{"name", "count", "queued", "eta", "performance", ...}``."""
        body = await self.client.call("GET", "/v2/status/models", None, params={"type": "image"})
        if not isinstance(body, list):
            raise HordeUnreachable("a model list that is not a list", reached=True)
        return [entry for entry in body if isinstance(entry, dict) and isinstance(entry.get("name"), str)]

    async def image_workers(self) -> list[dict[str, Any]]:
        """``GET /v2/workers?type=image``: the online image workers, entries ``{"id", "models", "max_pixels", "online",
        "maintenance_mode", ...}`` (the real server's worker details, ``horde/classes/stable/worker.py``).
        """
        body = await self.client.call("GET", "/v2/workers", None, params={"type": "image"})
        if not isinstance(body, list):
            raise HordeUnreachable("a worker list that is not a list", reached=True)
        return [entry for entry in body if isinstance(entry, dict)]


async def read_model_reference(
    url: str, timeout: float, transport: httpx.AsyncBaseTransport | None = None
) -> dict[str, dict[str, Any]]:
    """The image model reference the Horde reads (its ``HORDE_IMAGE_COMPVIS_REFERENCE``, ``stable_diffusion.json`` of
    Haidra-Org/AI-Horde-image-model-reference): ``{model: {"baseline", "requirements": {"max_steps", ...}, ...}}``, the
    entries that are objects.

    Raises:
        HordeUnreachable: it cannot be fetched, or is not a JSON object.
    """
    async with httpx.AsyncClient(timeout=timeout, transport=transport) as client:
        try:
            response = await client.get(url)
            response.raise_for_status()
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise HordeUnreachable(f"the image model reference: {type(exc).__name__}") from exc
    if not isinstance(body, dict):
        raise HordeUnreachable("an image model reference that is not an object", reached=True)
    return {name: entry for name, entry in body.items() if isinstance(entry, dict)}
