"""Serving one image request: the dry run for ``horde.max_kudos``, the submit, the wait on the read schedule, the one
status read at the end, the images converted; every abandoned request cancelled at the Horde (docs/images.md).

The wait reads ``GET /v2/generate/check/{id}`` on the chat path's read schedule (chat.waiting.read_schedule: about
once a second near the head of the queue, less often deeper in it, within the process's read budget) and the status,
with the images, once when the check says ``done`` (the Horde allows 10 status reads a minute per request).
"""

from __future__ import annotations

import asyncio
import base64
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

from loguru import logger

from chat import errors
from chat.errors import OpenAIError
from chat.horde.cancels import CancelQueue
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus, SubmitResult
from chat.horde.real_horde_answers import cancelled_error
from chat.horde.refusals import error_from_refusal
from chat.metrics import STAGE_GRACE, STAGE_SUBMIT, front_metrics, outcome_class_for
from chat.rendering.progress import QueueProgress
from chat.serving.runtime import FrontRuntime
from chat.waiting.read_schedule import ReadSchedule, backoff_ceiling
from chat.waiting.waiter import MAX_CONSECUTIVE_READ_FAILURES
from images.convert import NotAnImage, convert_image
from images.horde import NO_AVAILABLE_WORKER, ImageHorde, ImageStatus, horde_payload
from images.reading import ImagePlan

REPORTED_QUALITIES: Final[frozenset[str]] = frozenset({"low", "medium", "high", "xhigh", "max"})
"""The ``quality`` values OpenAI's ``ImagesResponse`` reports; ``auto``, ``standard`` and ``hd`` are not reported."""

KUDOS_UPFRONT_IMAGE_ADVICE: Final[str] = (
    "The API key sent must already hold those kudos: register an account at the Horde (on the public AI Horde, "
    "https://aihorde.net/register) and send its API key as the bearer key. Or ask a smaller 'size' (at most "
    "1024x1024), at most 40 steps (a lower 'quality' or 'horde.steps'), or set 'horde.allow_downgrade': true."
)
"""The advice after the Horde's ``KudosUpfront`` message on the image route (its triggers: real-horde.md, Images)."""


class ImageRuntime:
    """What the image route shares per front runtime: the image routes over the runtime's client, and a cancel queue
    that retries their cancels (chat.horde.cancels), drained with the chat route's at shutdown
    (chat.serving.runtime.FrontRuntime.add_cancel_queue).
    """

    def __init__(self, runtime: FrontRuntime) -> None:
        self.horde = ImageHorde(runtime.horde)
        settings = runtime.settings
        self.cancels = runtime.add_cancel_queue(
            CancelQueue(
                self.horde, retry_seconds=settings.cancel_retry_seconds, attempt_timeout=settings.horde_timeout_seconds
            )
        )


_image_runtimes: weakref.WeakKeyDictionary[FrontRuntime, ImageRuntime] = weakref.WeakKeyDictionary()


def image_runtime(runtime: FrontRuntime) -> ImageRuntime:
    """The :class:`ImageRuntime` of ``runtime``, made on first use."""
    found = _image_runtimes.get(runtime)
    if found is None:
        found = _image_runtimes[runtime] = ImageRuntime(runtime)
    return found


@dataclass
class ImageOutcome:
    """How one image request ended, for the log line and the metrics: ``code`` empty when served."""

    status: int = 200
    code: str = ""
    stage: str = ""
    request_id: str | None = None
    images: int = 0
    kudos: float | None = None
    checks: int = 0
    progress: QueueProgress | None = None
    """The place the latest check read (chat.rendering.progress): a waiting stream's comment says it."""


def refusal_error(refusal: HordeRefusal) -> OpenAIError:
    """A Horde refusal of an image submit in OpenAI's envelope: ``KudosUpfront`` with the image advice at ``size``,
    everything else as the chat route maps it (chat.horde.refusals.error_from_refusal).
    """
    if refusal.rc == errors.KUDOS_UPFRONT:
        lead = (refusal.message or "The Horde refused this request for kudos.").strip()
        lead = lead if lead.endswith(".") else lead + "."
        return errors.failure(errors.KUDOS_UPFRONT, f"{lead} {KUDOS_UPFRONT_IMAGE_ADVICE}", param="size")
    return error_from_refusal(refusal, requested_model_key="model")


def no_worker_error(plan: ImagePlan, warnings: list[dict[str, Any]]) -> OpenAIError:
    """503 ``no_eligible_worker``: no online worker serves the model (or the size, steps and options) asked."""
    detail = next((str(entry.get("message", "")) for entry in warnings if entry.get("code") == NO_AVAILABLE_WORKER), "")
    message = (
        f"No online image worker of the Horde can serve this request for the model '{plan.model}' at "
        f"{plan.size}. GET /v1/models lists the image models with online workers."
    )
    if detail:
        message += f" The Horde said: {detail}"
    return errors.no_eligible_worker(message)


def incomplete_error(request_id: str, got: int, asked: int) -> OpenAIError:
    """502 ``ImageRequestIncomplete``: the Horde ended the request with ``got`` of ``asked`` images (faulted jobs)."""
    return errors.failure(
        errors.IMAGE_REQUEST_INCOMPLETE,
        f"The Horde finished this request with {got} of the {asked} images asked: the workers failed the rest. "
        "No image is returned; retry the request.",
        metadata={"request_id": request_id, "images": got, "n": asked},
    )


def censored_error(request_id: str, censored: int, asked: int) -> OpenAIError:
    """400 ``content_policy_violation``: a worker's NSFW censor blanked ``censored`` of the images."""
    return errors.failure(
        errors.CONTENT_POLICY_VIOLATION,
        f"Your request was rejected by the Horde worker's safety filter: {censored} of the {asked} images was "
        "censored (blanked) as NSFW. Change the prompt, or allow NSFW images with 'horde.nsfw': true and "
        "'horde.censor_nsfw': false where the Horde's rules allow it.",
        metadata={"request_id": request_id},
    )


def timeout_error(request_id: str, seconds: float) -> OpenAIError:
    """408 ``ChatRequestTimeout`` (``x-should-retry: false``): no images within ``seconds``; cancelled."""
    return errors.failure(
        errors.CHAT_REQUEST_TIMEOUT,
        f"The Horde made no image within {seconds:g} s; the request was cancelled at the Horde.",
        metadata={"request_id": request_id},
    )


def image_entry(plan: ImagePlan, image: str) -> dict[str, str]:
    """One ``data`` entry: ``{"url"}`` (the Horde's link) or ``{"b64_json"}`` in ``plan.output_format``.

    Raises:
        NotAnImage: ``image`` is not a base64 image.
    """
    if plan.response_format == "url":
        return {"url": image}
    converted = convert_image(image, plan.output_format, plan.output_compression)
    return {"b64_json": base64.b64encode(converted).decode("ascii")}


def images_response(plan: ImagePlan, status: ImageStatus, created: int) -> dict[str, Any]:
    """OpenAI's ``ImagesResponse`` of a finished status (every image present and uncensored)."""
    body: dict[str, Any] = {
        "created": created,
        "data": [image_entry(plan, generation.img) for generation in status.generations],
        "background": "transparent" if plan.transparent else "opaque",
        "output_format": plan.output_format,
        "size": plan.size,
    }
    if plan.quality in REPORTED_QUALITIES:
        body["quality"] = plan.quality
    return body


class ImageService:
    """One image request's life at the Horde.

    Args:
        runtime: The front's runtime (settings, read budget).
        images: The image routes and cancel queue (:func:`image_runtime`).
        clock: ``time.monotonic``-like; sleep: ``asyncio.sleep``-like (test seams).
    """

    def __init__(
        self,
        runtime: FrontRuntime,
        images: ImageRuntime,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.horde = images.horde
        self.cancels = images.cancels
        self.clock = clock
        self.sleep = sleep

    async def dry_run(self, plan: ImagePlan, apikey: str | None) -> None:
        """With ``horde.max_kudos``: the Horde's dry run; its ``kudos`` (one image) times ``n`` over the cap is 400
        ``max_kudos_exceeded`` at ``horde.max_kudos``.
        """
        cap = plan.horde.max_kudos
        if cap is None:
            return
        estimate = await self.horde.submit(horde_payload(plan, dry_run=True), apikey)
        if estimate.kudos is None:
            return
        total = estimate.kudos * plan.n
        if total > cap:
            shown = int(total) if float(total).is_integer() else round(total, 2)
            raise errors.failure(
                errors.MAX_KUDOS_EXCEEDED,
                f"The request's kudos estimate at current pricing is {shown}, above its horde.max_kudos of {cap:g}.",
                param="horde.max_kudos",
                metadata={"kudos_estimate": shown, "max_kudos": cap},
            )

    async def generate(self, plan: ImagePlan, apikey: str | None, outcome: ImageOutcome) -> dict[str, Any]:
        """Serve ``plan``: OpenAI's ``ImagesResponse``.

        Raises:
            OpenAIError: every refusal (docs/images.md, "Errors"); a submitted request is cancelled first.
            asyncio.CancelledError: the client left; the request is cancelled at the Horde.
        """
        try:
            await self.dry_run(plan, apikey)
            submitted = await self.submit_shielded(plan, apikey)
        except HordeRefusal as refusal:
            outcome.stage = STAGE_SUBMIT
            raise refusal_error(refusal) from refusal
        except HordeUnreachable as exc:
            raise exc.to_error() from exc
        request_id = outcome.request_id = submitted.id
        submitted_at = self.clock()
        outcome.kudos = submitted.kudos
        if any(entry.get("code") == NO_AVAILABLE_WORKER for entry in submitted.warnings):
            outcome.stage = STAGE_SUBMIT
            self.cancels.cancel_soon(request_id, apikey, submitted_at)
            raise no_worker_error(plan, submitted.warnings)
        try:
            status = await self.wait(request_id, apikey, submitted_at, outcome)
        except BaseException:
            self.cancels.cancel_soon(request_id, apikey, submitted_at)
            raise
        return self.answer(plan, status, request_id, outcome)

    async def submit_shielded(self, plan: ImagePlan, apikey: str | None) -> SubmitResult:
        """The submit, finished even when the client leaves while it is at the Horde: the request it creates is then
        cancelled at once (nothing is left waiting for nobody).
        """
        submit = asyncio.ensure_future(self.horde.submit(horde_payload(plan), apikey))
        try:
            return await asyncio.shield(submit)
        except asyncio.CancelledError:
            submit.add_done_callback(lambda done: self.cancel_created(done, apikey))
            raise

    def cancel_created(self, submit: asyncio.Future[SubmitResult], apikey: str | None) -> None:
        """Cancel the request a submit whose client left created (none when the submit failed)."""
        if not submit.cancelled() and submit.exception() is None and submit.result().id:
            self.cancels.cancel_soon(submit.result().id, apikey, self.clock())

    async def wait(
        self, request_id: str, apikey: str | None, submitted_at: float, outcome: ImageOutcome
    ) -> ImageStatus:
        """Read the check on the read schedule until ``done``, then the status once.

        Raises:
            OpenAIError: 408 at the timeout, 503 ``no_eligible_worker`` after the grace of an impossible request, the
                Horde's refusals and 502 ``HordeUnavailable`` after three failed reads in a row.
        """
        settings = self.settings
        schedule = ReadSchedule(settings, self.runtime.read_budget, self.clock)
        deadline = submitted_at + settings.nonstream_timeout_seconds
        impossible_since: float | None = None
        failures = 0
        try:
            check: NativeStatus | None = None
            while True:
                try:
                    check = await self.horde.check(request_id, apikey)
                    failures = 0
                except HordeRefusal as refusal:
                    if refusal.status == 404:
                        raise cancelled_error(request_id) from refusal
                    raise error_from_refusal(refusal, requested_model_key="model") from refusal
                except HordeUnreachable as exc:
                    failures += 1
                    check = None
                    if failures >= MAX_CONSECUTIVE_READ_FAILURES:
                        raise errors.horde_unavailable(exc.detail, reached=exc.reached, request_id=request_id) from exc
                outcome.checks += 1
                if check is not None:
                    outcome.progress = QueueProgress.of(check)
                now = self.clock()
                if check is not None and check.done:
                    break
                if check is not None and not check.is_possible:
                    impossible_since = now if impossible_since is None else impossible_since
                    if now - impossible_since >= settings.fail_fast_grace_seconds:
                        outcome.stage = STAGE_GRACE
                        raise errors.no_eligible_worker(
                            f"No online image worker took this request within {settings.fail_fast_grace_seconds:g} s "
                            "of the Horde reporting that none can serve it; the request was cancelled.",
                            metadata={"request_id": request_id},
                        )
                else:
                    impossible_since = None
                if now >= deadline:
                    raise timeout_error(request_id, settings.nonstream_timeout_seconds)
                ceiling = backoff_ceiling(settings, self.runtime.read_budget.waiting)
                delay = schedule.next_delay(check, ceiling=ceiling, cut=deadline - now)
                await self.sleep(delay)
        finally:
            schedule.close()
        try:
            return await self.horde.status(request_id, apikey)
        except HordeRefusal as refusal:
            raise error_from_refusal(refusal, requested_model_key="model") from refusal
        except HordeUnreachable as exc:
            raise errors.horde_unavailable(exc.detail, reached=exc.reached, request_id=request_id) from exc

    def answer(self, plan: ImagePlan, status: ImageStatus, request_id: str, outcome: ImageOutcome) -> dict[str, Any]:
        """The response of a finished status: every image, uncensored and readable, or the refusal that says why not."""
        outcome.images = len(status.generations)
        outcome.kudos = status.kudos
        censored = sum(generation.is_censored for generation in status.generations)
        if censored:
            raise censored_error(request_id, censored, plan.n)
        if len(status.generations) < plan.n:
            raise incomplete_error(request_id, len(status.generations), plan.n)
        try:
            return images_response(plan, status, int(time.time()))
        except NotAnImage as exc:
            raise errors.horde_unavailable(f"an image that is not a readable image ({exc})", reached=True) from exc


STREAM_QUALITIES: Final[frozenset[str]] = frozenset({"low", "medium", "high", "xhigh", "max", "auto"})
"""The ``quality`` values of OpenAI's ``image_generation.completed`` event; ``standard`` and ``hd`` are ``auto``."""

DONE_EVENT: Final[bytes] = b"data: [DONE]\n\n"
KEEPALIVE_COMMENT: Final[bytes] = b": keepalive\n\n"


def completed_event(plan: ImagePlan, entry: dict[str, str], created: int) -> bytes:
    """One ``image_generation.completed`` server-sent event (OpenAI's ``ImageGenCompletedEvent``, without ``usage``:
    the Horde counts kudos, not tokens).
    """
    event = {
        "type": "image_generation.completed",
        "b64_json": entry["b64_json"],
        "created_at": created,
        "size": plan.size,
        "quality": plan.quality if plan.quality in STREAM_QUALITIES else "auto",
        "background": "transparent" if plan.transparent else "opaque",
        "output_format": plan.output_format,
    }
    return b"data: " + errors.dumps(event) + b"\n\n"


async def image_events(
    task: asyncio.Future[dict[str, Any]],
    plan: ImagePlan,
    keepalive_seconds: float,
    on_done: Callable[[OpenAIError | None], None],
    progress: Callable[[], QueueProgress | None] = lambda: None,
) -> AsyncIterator[bytes]:
    """The streamed form: a comment every ``keepalive_seconds`` while ``task`` (the request's
    :meth:`ImageService.generate`) waits, the request's place at the Horde (``progress()``, the latest check: ``: queue
    position 3, estimated wait 12 s``, ``: processing``; chat.rendering.progress) or ``: keepalive`` before the first
    check, then one ``image_generation.completed`` event per image, or the error as one ``data: {"error": ...}`` event,
    then ``data: [DONE]``. No partial images: the Horde sends none. ``on_done`` gets the error (None when served); a
    client that leaves cancels ``task``, which cancels the request at the Horde.
    """
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=keepalive_seconds)
            if not task.done():
                place = progress()
                yield KEEPALIVE_COMMENT if place is None else place.comment()
        try:
            body = task.result()
        except OpenAIError as error:
            on_done(error)
            yield error.stream_event()
            yield DONE_EVENT
            return
        on_done(None)
        for entry in body["data"]:
            yield completed_event(plan, entry, body["created"])
        yield DONE_EVENT
    finally:
        if not task.done():
            task.cancel()


def record_image_request(plan: ImagePlan | None, outcome: ImageOutcome, started: float) -> None:
    """The finished line (no prompt, key or image) and the duration metric with its outcome class (``horde.streamed``
    true for ``stream: true``).
    """
    seconds = time.monotonic() - started
    outcome_class = outcome_class_for(outcome.code, outcome.stage)
    front_metrics().request_duration.record(
        seconds,
        {
            "horde.status": outcome.status,
            "horde.outcome_class": outcome_class,
            "horde.streamed": bool(plan is not None and plan.stream),
        },
    )
    logger.bind(
        route="images", status=outcome.status, code=outcome.code, outcome_class=outcome_class, checks=outcome.checks
    ).info(
        "Image request finished: status={} code={} outcome_class={} model={} n={} size={} images={} kudos={} "
        "checks={} seconds={:.2f}",
        outcome.status,
        outcome.code or "-",
        outcome_class,
        plan.model if plan else "-",
        plan.n if plan else "-",
        plan.size if plan else "-",
        outcome.images,
        "-" if outcome.kudos is None else f"{outcome.kudos:g}",
        outcome.checks,
        seconds,
    )
