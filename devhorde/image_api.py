"""The Horde's image API, simulated (real-horde.md "Images"; ``../shared/realhorde/README.md``, "Images").

The routes, limits and answers of the real server, with simulated image workers from the scenario's ``images``
section (:class:`ImageApiSpec`):

- ``POST /v2/generate/async``: 202 ``{"id", "kudos"}`` (``kudos`` for one image), plus ``warnings:
  [{"code": "NoAvailableWorker", ...}]`` when no online worker can serve it (it then waits with ``is_possible:
  false``); ``dry_run`` answers ``{"kudos"}``; 403 ``KudosUpfront`` for more pixels than the free size or more steps
  than the free steps without kudos (``allow_downgrade`` shrinks it instead); 400 for a payload out of the Horde's
  bounds. Limits: 2 a second and 90 a minute per address, 2 a second per key (60 anonymous).
- ``GET /v2/generate/check/{id}``: the progress, 10 a second per address and path.
- ``GET`` / ``DELETE /v2/generate/status/{id}``: with ``generations``; **10 a minute** per address, method and id.
  A cancel while waiting ends it ``done`` with no image; a job in progress still finishes (and is charged).
- A worker's ``state`` makes its images ``ok`` (a solid-colour WebP of the asked size, its colour from the seed),
  ``censored`` (black, ``censored: true``, ``gen_metadata`` censorship, ``state`` still ``ok``) or ``faulted`` (no
  image: the request ends ``done`` with fewer images than ``n``); ``faulted_images`` faults only that many of each
  request's images.
- ``r2: true`` (the Horde's default) gives each image as a link to ``/_devhorde/r2/{id}.webp`` on this server.

``GET /_devhorde/images`` counts the calls per route (the front's Horde calls per image request).
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from devhorde.aihorde import (
    SUBMIT_ANONYMOUS_PER_SECOND,
    SUBMIT_PER_IP_PER_MINUTE,
    SUBMIT_PER_IP_PER_SECOND,
    SUBMIT_PER_KEY_PER_SECOND,
    Limit,
    RateLimiter,
)
from devhorde.limits import ANONYMOUS_API_KEY

CHECK_PER_IP_PATH_PER_SECOND: Final[int] = 10
"""``GET /v2/generate/check/{id}``: 10 a second per address and path (``horde/apis/v2/stable.py:588``)."""

STATUS_PER_IP_METHOD_PATH_PER_MINUTE: Final[int] = 10
"""``GET`` / ``DELETE /v2/generate/status/{id}``: 10 a minute per address, method and path (``stable.py:472``)."""

FAULTS_TO_END: Final[int] = 2
"""A faulted job is requeued until the faulted jobs count as finished: with n=1 the second fault ends it,
``restarted: 2`` (real-horde.md)."""

KUDOS_UPFRONT_MESSAGE: Final[str] = (
    "Due to heavy demand, for requests over {side}x{side} or over 50 steps (25 for k_heun and k_dpm_2*), "
    "the client needs to already have the required kudos. This request requires {kudos} kudos to fulfil."
)
"""The real server's ``KudosUpfront`` message (``stable/waiting_prompt.py``)."""

NO_WORKER_WARNING: Final[str] = (
    "Warning: No available workers can fulfill this request. It will expire in 20 minutes unless a worker appears. "
    "Please consider reducing its size of the request or choosing a different model."
)

REQUEST_EXPIRY_SECONDS: Final[float] = 1200.0
"""A request is forgotten this long after submit (the Horde's 20 minutes)."""

R2_KEEP: Final[int] = 256
"""How many ``r2`` images the devhorde keeps to serve."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageWorkerSpec(_Strict):
    """One simulated image worker (``../shared/realhorde/image_worker.py``'s options)."""

    name: str = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    """The image models it serves."""
    max_pixels: int = Field(default=1048576, ge=1)
    """The most pixels (width x height) of a job it takes."""
    nsfw: bool = False
    """Whether it takes ``nsfw: true`` requests (the Horde's default ``nsfw`` is true)."""
    trusted: bool = True
    online: bool = True
    threads: int = Field(default=1, ge=1)
    seconds_per_image: float = Field(default=0.2, ge=0)
    """How long one image takes, from pop to submit."""
    state: Literal["ok", "censored", "faulted"] = "ok"
    faulted_images: int | None = Field(default=None, ge=0)
    """With ``state: faulted``: how many of each request's images fault (None: all)."""


class ImageApiSpec(_Strict):
    """The scenario's image API: its workers, the models the Horde knows and its upfront kudos rules."""

    workers: list[ImageWorkerSpec] = Field(default_factory=list)
    known_models: list[str] = Field(default_factory=list)
    """Models the Horde knows besides the workers' (listed only while a worker serves them)."""
    free_side: int = Field(default=1024, ge=64)
    """Requests over ``free_side`` squared pixels need kudos upfront (the real ``max_res`` ceiling)."""
    free_steps: int = Field(default=40, ge=1)
    """Requests over this many steps need kudos upfront (the model's ``max_steps``)."""
    kudos_api_keys: list[str] = Field(default_factory=list)
    """API keys that hold enough kudos for any upfront request."""


def kudos_estimate(width: int, height: int, steps: int) -> int:
    """The kudos of one image, about the real server's (6 for 512x512x20, 24 for 1024x1024x30)."""
    return round(3.6 * width * height * steps / (512 * 512 * 20) + 2.4)


def webp_image(width: int, height: int, seed: str, *, black: bool = False) -> bytes:
    """A solid-colour lossy WebP (the Horde re-encodes every image as WebP) of ``width`` x ``height``."""
    digest = hashlib.sha256(seed.encode()).digest()
    colour = (0, 0, 0) if black else (digest[0], digest[1], digest[2])
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "WEBP", quality=95)
    return out.getvalue()


@dataclass
class ImageJob:
    """One image request at the simulated Horde."""

    id: str
    payload: dict[str, Any]
    created: float
    n: int
    width: int
    height: int
    steps: int
    kudos: int
    worker: ImageWorkerSpec | None
    r2: bool
    cancelled_at: float | None = None
    generations: list[dict[str, Any]] | None = None
    charged: float = 0.0

    def finish_time(self) -> float:
        """When its last image is in (its worker's speed and threads)."""
        if self.worker is None:
            return math.inf
        rounds = math.ceil(self.n / self.worker.threads)
        return self.created + rounds * self.worker.seconds_per_image


@dataclass
class ImageSim:
    """The image requests of one devhorde; the spec is read from the scenario on every call.

    Args:
        spec: Returns the scenario's :class:`ImageApiSpec` (None: no image workers, nothing known).
        clock: ``time.monotonic``-like.
    """

    spec: Callable[[], ImageApiSpec | None]
    clock: Callable[[], float] = time.monotonic
    jobs: dict[str, ImageJob] = field(default_factory=dict)
    r2_images: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    calls: Counter[str] = field(default_factory=Counter)
    limiter: RateLimiter = field(default_factory=RateLimiter)

    def current(self) -> ImageApiSpec:
        """The scenario's image spec (an empty one without it)."""
        return self.spec() or ImageApiSpec()

    def eligible(self, payload: dict[str, Any], width: int, height: int) -> ImageWorkerSpec | None:
        """The first online worker that can serve it: model, size, ``nsfw``, ``trusted_workers``, ``workers``."""
        models = payload.get("models") or []
        listed = payload.get("workers") or []
        for worker in self.current().workers:
            if not worker.online or worker.max_pixels < width * height:
                continue
            if models and not set(models) & set(worker.models):
                continue
            if payload.get("nsfw", True) and not worker.nsfw:
                continue
            if payload.get("trusted_workers") and not worker.trusted:
                continue
            if listed and (worker.name in listed) == bool(payload.get("worker_blacklist")):
                continue
            return worker
        return None

    def known(self, model: str) -> bool:
        """Whether the Horde knows ``model`` (a worker serves it, or the spec lists it)."""
        spec = self.current()
        return model in spec.known_models or any(model in worker.models for worker in spec.workers)

    def submit(self, payload: Any, apikey: str | None) -> tuple[int, dict[str, Any]]:
        """``POST /v2/generate/async``: ``(status, body)``."""
        if not isinstance(payload, dict) or not isinstance(payload.get("prompt"), str) or not payload["prompt"]:
            return 400, {"message": "Input payload validation failed", "errors": {"prompt": "'prompt' is required"}}
        params = payload.get("params") or {}
        errors = bounds_errors(params)
        if errors:
            return 400, {"message": "Input payload validation failed", "errors": errors}
        width, height = int(params.get("width", 512)), int(params.get("height", 512))
        steps, n = int(params.get("steps", 30)), int(params.get("n", 1))
        spec = self.current()
        over_size = width * height > spec.free_side**2
        over_steps = steps > spec.free_steps
        needs_upfront = over_size or over_steps or payload.get("slow_workers") is False
        if needs_upfront and (apikey or ANONYMOUS_API_KEY) not in spec.kudos_api_keys:
            if payload.get("allow_downgrade") and payload.get("slow_workers") is not False:
                width, height, steps = downgraded(width, height, steps, spec.free_side)
            else:
                kudos = round(kudos_estimate(width, height, steps) * n * 1.3, 2)
                message = KUDOS_UPFRONT_MESSAGE.format(side=spec.free_side, kudos=kudos)
                return 403, {"message": message, "rc": "KudosUpfront"}
        kudos = kudos_estimate(width, height, steps)
        if payload.get("dry_run"):
            return 200, {"kudos": kudos}
        worker = self.eligible(payload, width, height)
        job = ImageJob(
            id=str(uuid.uuid4()),
            payload=payload,
            created=self.clock(),
            n=n,
            width=width,
            height=height,
            steps=steps,
            kudos=kudos,
            worker=worker,
            r2=bool(payload.get("r2", True)),
        )
        self.jobs[job.id] = job
        self._forget_expired()
        body: dict[str, Any] = {"id": job.id, "kudos": kudos}
        if worker is None:
            body["message"] = NO_WORKER_WARNING
            body["warnings"] = [{"code": "NoAvailableWorker", "message": NO_WORKER_WARNING}]
        return 202, body

    def _forget_expired(self) -> None:
        now = self.clock()
        for job_id in [job_id for job_id, job in self.jobs.items() if now - job.created > REQUEST_EXPIRY_SECONDS]:
            del self.jobs[job_id]

    def progress(self, job: ImageJob) -> dict[str, Any]:
        """The check's fields of ``job`` now. A job no worker serves waits (``is_possible: false``) until cancelled,
        then ends ``done`` with nothing; a served job is processing until its last image, a cancel or not.
        """
        now = self.clock()
        worker = job.worker
        if worker is None:
            cancelled = job.cancelled_at is not None
            return {
                "finished": 0,
                "processing": 0,
                "restarted": 0,
                "waiting": 0 if cancelled else job.n,
                "done": cancelled,
                "faulted": False,
                "wait_time": 0,
                "queue_position": 0 if cancelled else 1,
                "kudos": 0.0,
                "is_possible": cancelled,
            }
        done_at = job.finish_time()
        done = now >= done_at
        per_round = worker.seconds_per_image
        rounds = job.n if per_round <= 0 else int((now - job.created) / per_round)
        finished = job.n if done else min(job.n, rounds * worker.threads)
        faults = self.faults(job) if done else 0
        return {
            "finished": finished - faults,
            "processing": 0 if done else job.n - finished,
            "restarted": FAULTS_TO_END * faults,
            "waiting": 0,
            "done": done,
            "faulted": False,
            "wait_time": 0 if done else max(0, math.ceil(done_at - now)),
            "queue_position": 0,
            "kudos": float(3 + (job.kudos + 1) * (job.n - faults) if done else 3),
            "is_possible": True,
        }

    def faults(self, job: ImageJob) -> int:
        """How many of ``job``'s images its worker faults."""
        worker = job.worker
        if worker is None or worker.state != "faulted":
            return 0
        return job.n if worker.faulted_images is None else min(job.n, worker.faulted_images)

    def status(self, job: ImageJob, base_url: str) -> dict[str, Any]:
        """The full status of ``job``: the check's fields, ``shared`` and ``generations`` once done."""
        body = self.progress(job)
        body["shared"] = False
        if not body["done"] or job.worker is None:
            body["generations"] = []
            return body
        if job.generations is None:
            job.generations = self.make_generations(job, job.worker, base_url)
        body["generations"] = job.generations
        return body

    def make_generations(self, job: ImageJob, worker: ImageWorkerSpec, base_url: str) -> list[dict[str, Any]]:
        """The images of a finished ``job``: inline base64 WebP, or ``r2`` links served by this devhorde."""
        generations = []
        for index in range(job.n - self.faults(job)):
            seed = str(job.payload.get("params", {}).get("seed") or f"{job.id}-{index}")
            censored = worker.state == "censored"
            image = webp_image(job.width, job.height, seed, black=censored)
            gen_id = str(uuid.uuid4())
            if job.r2:
                self.r2_images[gen_id] = image
                while len(self.r2_images) > R2_KEEP:
                    self.r2_images.popitem(last=False)
                img = f"{base_url}_devhorde/r2/{gen_id}.webp"
            else:
                img = base64.b64encode(image).decode("ascii")
            generations.append(
                {
                    "img": img,
                    "seed": seed,
                    "id": gen_id,
                    "censored": censored,
                    "gen_metadata": [{"type": "censorship", "value": "nsfw"}] if censored else [],
                    "worker_id": hashlib.sha256(worker.name.encode()).hexdigest()[:32],
                    "worker_name": worker.name,
                    "model": next(iter(set(job.payload.get("models") or worker.models) & set(worker.models))),
                    "state": "ok",
                }
            )
        return generations

    def cancel(self, job: ImageJob, base_url: str) -> dict[str, Any]:
        """``DELETE``: the status from before the cancel; a waiting job then ends with no image."""
        body = self.status(job, base_url)
        if job.cancelled_at is None:
            job.cancelled_at = self.clock()
        return body

    def workers_status(self) -> list[dict[str, Any]]:
        """``GET /v2/workers?type=image``: each online image worker with the real server's fields (``id``, ``name``,
        ``type``, ``online``, ``models``, ``threads``, ``max_pixels``, ``nsfw``, ``trusted``, ``maintenance_mode``,
        ``img2img``, ``painting``, ``lora``, ...; ``horde/classes/stable/worker.py`` ``get_details``).
        """
        return [
            {
                "id": hashlib.sha256(worker.name.encode()).hexdigest()[:32],
                "name": worker.name,
                "type": "image",
                "online": True,
                "maintenance_mode": False,
                "models": list(worker.models),
                "threads": worker.threads,
                "max_pixels": worker.max_pixels,
                "nsfw": worker.nsfw,
                "trusted": worker.trusted,
                "img2img": False,
                "painting": False,
                "post-processing": False,
                "controlnet": False,
                "sdxl_controlnet": False,
                "lora": False,
                "bridge_agent": "devhorde simulated image worker",
            }
            for worker in self.current().workers
            if worker.online
        ]

    def models_status(self) -> list[dict[str, Any]]:
        """``GET /v2/status/models?type=image``: each model an online worker serves."""
        counts: Counter[str] = Counter()
        for worker in self.current().workers:
            if worker.online:
                counts.update(worker.models)
        waiting = [job for job in self.jobs.values() if not self.progress(job)["done"]]
        return [
            {
                "name": model,
                "count": count,
                "performance": 1000000.0,
                "queued": sum(
                    job.width * job.height * job.steps * job.n
                    for job in waiting
                    if model in job.payload.get("models", [])
                ),
                "jobs": float(sum(job.n for job in waiting if model in job.payload.get("models", []))),
                "eta": 0,
                "type": "image",
            }
            for model, count in sorted(counts.items())
        ]


def bounds_errors(params: Any) -> dict[str, str]:
    """The real server's payload bounds (``stable_v2.py``): width and height 64-3072 multiples of 64, steps 1-500,
    n 1-20, cfg_scale 0-100.
    """
    if not isinstance(params, dict):
        return {"params": f"{params!r} is not of type 'object'"}
    errors: dict[str, str] = {}
    for key in ("width", "height"):
        value = params.get(key, 512)
        if not isinstance(value, int) or not 64 <= value <= 3072 or value % 64:
            errors[f"params.{key}"] = f"{value} is not a multiple of 64 between 64 and 3072"
    for key, low, high in (("steps", 1, 500), ("n", 1, 20), ("cfg_scale", 0, 100)):
        value = params.get(key)
        if value is not None and (not isinstance(value, int | float) or not low <= value <= high):
            errors[f"params.{key}"] = f"{value} is out of the range {low} to {high}"
    return errors


def downgraded(width: int, height: int, steps: int, side: int) -> tuple[int, int, int]:
    """``allow_downgrade``: the size shrunk to about ``side`` squared pixels (multiples of 64), steps at most 30."""
    scale = math.sqrt(side * side / (width * height))
    if scale < 1:
        width = max(64, int(width * scale) // 64 * 64)
        height = max(64, int(height * scale) // 64 * 64)
    return width, height, min(steps, 30)


def _sim(request: Request) -> ImageSim:
    sim: ImageSim = request.app.state.images
    return sim


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else "127.0.0.1"


def _limited(sim: ImageSim, limits: list[Limit]) -> Response | None:
    breached, headers = sim.limiter.hit(limits)
    if breached is None:
        return None
    return JSONResponse({"message": breached.message}, status_code=429, headers=headers)


async def image_submit(request: Request) -> Response:
    """``POST /v2/generate/async``."""
    sim = _sim(request)
    sim.calls["submit"] += 1
    apikey = request.headers.get("apikey")
    key = apikey or ANONYMOUS_API_KEY
    scope = f"{_address(request)}@POST@{request.url.path}"
    refused = _limited(
        sim,
        [
            Limit(SUBMIT_PER_IP_PER_SECOND, 1, scope),
            Limit(
                SUBMIT_ANONYMOUS_PER_SECOND if key == ANONYMOUS_API_KEY else SUBMIT_PER_KEY_PER_SECOND,
                1,
                hashlib.sha256(key.encode()).hexdigest(),
            ),
            Limit(SUBMIT_PER_IP_PER_MINUTE, 60, scope),
        ],
    )
    if refused is not None:
        return refused
    try:
        payload = await request.json()
    except ValueError:
        return JSONResponse({"message": "Input payload validation failed"}, status_code=400)
    status, body = sim.submit(payload, apikey)
    return JSONResponse(body, status_code=status)


def _job(sim: ImageSim, request: Request) -> ImageJob | Response:
    job = sim.jobs.get(request.path_params["request_id"])
    if job is None:
        return JSONResponse({"message": "Request not found", "rc": "RequestNotFound"}, status_code=404)
    return job


async def image_check(request: Request) -> Response:
    """``GET /v2/generate/check/{id}``."""
    sim = _sim(request)
    sim.calls["check"] += 1
    refused = _limited(sim, [Limit(CHECK_PER_IP_PATH_PER_SECOND, 1, f"{_address(request)}@GET@{request.url.path}")])
    if refused is not None:
        return refused
    job = _job(sim, request)
    return job if isinstance(job, Response) else JSONResponse(sim.progress(job))


async def image_status(request: Request) -> Response:
    """``GET`` / ``DELETE /v2/generate/status/{id}``."""
    sim = _sim(request)
    cancel = request.method == "DELETE"
    sim.calls["cancel" if cancel else "status"] += 1
    scope = f"{_address(request)}@{request.method}@{request.url.path}"
    refused = _limited(sim, [Limit(STATUS_PER_IP_METHOD_PATH_PER_MINUTE, 60, scope)])
    if refused is not None:
        return refused
    job = _job(sim, request)
    if isinstance(job, Response):
        return job
    base_url = str(request.base_url)
    return JSONResponse(sim.cancel(job, base_url) if cancel else sim.status(job, base_url))


async def r2_image(request: Request) -> Response:
    """``GET /_devhorde/r2/{id}.webp``: an ``r2`` image (the Horde's bucket's stand-in)."""
    image = _sim(request).r2_images.get(request.path_params["gen_id"])
    if image is None:
        return Response(b"", status_code=404)
    return Response(image, media_type="image/webp")


async def image_calls(request: Request) -> Response:
    """``GET /_devhorde/images``: the image calls per route, and the requests with their ids and cancel times."""
    sim = _sim(request)
    return JSONResponse(
        {
            "calls": dict(sim.calls),
            "requests": [
                {
                    "id": job.id,
                    "cancelled": job.cancelled_at is not None,
                    "n": job.n,
                    "models": job.payload.get("models"),
                }
                for job in sim.jobs.values()
            ],
        }
    )


IMAGE_ROUTES: Final[list[Route]] = [
    Route("/v2/generate/async", image_submit, methods=["POST"]),
    Route("/v2/generate/check/{request_id}", image_check, methods=["GET"]),
    Route("/v2/generate/status/{request_id}", image_status, methods=["GET", "DELETE"]),
]
"""The image routes under the API root."""

IMAGE_CONTROL_ROUTES: Final[list[Route]] = [
    Route("/r2/{gen_id}.webp", r2_image, methods=["GET"]),
    Route("/images", image_calls, methods=["GET"]),
]
"""Under ``/_devhorde``: the ``r2`` images and the call counts."""
