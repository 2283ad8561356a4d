"""The Horde's text generation API behind the native ports: the client, the prepared request and the status mapping.

A request on the text path (chat.serving.text_route chose it and prepared it) is submitted to
``POST /v2/generate/text/async`` by :class:`TextHordeClient`; :class:`TextRoutes` reads its text status back as a native
status, so the waiter, the buffered stream, the cancels and every availability rule are the native path's own: the
generation's ``text`` is cut at the first stop sequence and, for chat, stripped of leading whitespace;
``finish_reason`` is ``stop`` when a stop sequence ended it or its estimated tokens are under ``max_length``, else
``length``, and ``content_filter`` (with the Horde's ``state`` as ``native_finish_reason``) for a generation whose
``state`` is ``censored`` or ``csam``, its text as the Horde sent it; ``prompt_tokens`` is the rendered prompt's
estimate. A status the Horde emptied (a cancel sets ``n`` to 0) ends the wait with 502 ``ChatRequestCancelled``
(chat.horde.real_horde_answers). ``horde.max_kudos`` is checked with the text API's
dry run before submit (:func:`check_max_kudos`: 400 ``max_kudos_exceeded`` as on the native path). Each status
carries the front's changes to the client's limits (``context_adjustments``, chat.serving.text_limits) and, with the
worker list (chat.horde.worker_limits), the live workers' threads as ``eligible_worker_threads``; it reads as
impossible when every worker of the models has stopped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Final

from horde_sdk.ai_horde_api.endpoints import AI_HORDE_API_ENDPOINT_SUBPATH
from pydantic import ValidationError

from chat import errors
from chat.horde import real_horde_answers, refusals
from chat.horde.native import HordeClient, HordeRefusal, HordeUnreachable, NativeGeneration, NativeStatus, SubmitResult
from chat.horde.native_payload import estimate_tokens
from chat.horde.worker_limits import WorkerDirectory, apply_liveness

TEXT_ASYNC_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_text_async.value
TEXT_STATUS_PATH: Final[str] = AI_HORDE_API_ENDPOINT_SUBPATH.v2_generate_text_status.value


STATUS_KEYS: Final[tuple[str, ...]] = (
    "done",
    "faulted",
    "waiting",
    "processing",
    "finished",
    "restarted",
    "queue_position",
    "wait_time",
    "kudos",
    "is_possible",
    "eligible_workers",
    "eligible_worker_threads",
    "might_stall",
)
"""The keys a text status shares with a native one; others are dropped (an absent key stays unknown)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedTextRequest:
    """A request ready for ``POST /v2/generate/text/async``.

    Attributes:
        payload: The text API body (``TextGenerateAsyncRequest`` fields, only those set).
        stop_sequences: Every stop sequence sent; the reply is cut at the first one found.
        max_length: The completion limit sent.
        estimated_prompt_tokens: The prompt's estimated tokens (the completion's ``prompt_tokens``).
        strip_leading_whitespace: Whether the reply's leading whitespace is removed (chat: the template's generation
            prompt ends where the worker's reply starts, often before a space).
        x_horde: The keys added to the reply's ``x_horde``.
        context_adjustments: The front's changes to the client's limits (chat.serving.text_limits), which every
            status of the request carries as ``context_adjustments``.
    """

    payload: dict[str, Any]
    stop_sequences: tuple[str, ...]
    max_length: int
    estimated_prompt_tokens: int
    strip_leading_whitespace: bool
    x_horde: dict[str, Any] = field(default_factory=dict)
    context_adjustments: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TextBounds:
    """The limits a text request is sent with (chat.serving.text_limits; chat.serving.text_route prepares with them).

    Attributes:
        max_length: The completion limit to send.
        max_context_length: The context limit to send.
        adjustments: The lowerings made (``{"kind", "requested", "applied"}``), reported in every status.
    """

    max_length: int
    max_context_length: int
    adjustments: tuple[dict[str, Any], ...] = ()


RefusalResubmit = Callable[[PreparedTextRequest, HordeRefusal], Awaitable[PreparedTextRequest | None]]
"""``(prepared, refusal) -> request to submit instead, or None``: :class:`TextRoutes`' answer to a submit refusal."""


def format_kudos(value: float) -> str:
    """A kudos amount as the Horde's messages write it: the shortest exact decimal, no exponent (``215``, ``1.5``)."""
    return format(Decimal(repr(float(value))).normalize(), "f")


class TextHordeClient(HordeClient):
    """The text generation routes, over their own pooled client (same base URL, agent and timeout)."""

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """``POST /v2/generate/text/async``; 202 ``{"id", "kudos"}``. Raises HordeRefusal or HordeUnreachable."""
        body = await self._call("POST", TEXT_ASYNC_PATH, apikey, payload=payload)
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise HordeUnreachable("the text submit without a request id", reached=True)
        return SubmitResult(id=body["id"], kudos=body.get("kudos"), warnings=list(body.get("warnings") or []))

    async def dry_run_kudos(self, payload: dict[str, Any], apikey: str | None) -> float:
        """The kudos estimate of ``payload`` from the text API's dry run (``dry_run: true``, 200 ``{"kudos"}``), sent
        with ``allow_downgrade: true``: the Horde checks the upfront kudos before a dry run too, and an estimate is
        wanted, not the refusal the submit may get and answer by submitting again.
        """
        dry_run = {**payload, "dry_run": True, "allow_downgrade": True}
        body = await self._call("POST", TEXT_ASYNC_PATH, apikey, payload=dry_run)
        kudos = body.get("kudos") if isinstance(body, dict) else None
        if not isinstance(kudos, int | float) or isinstance(kudos, bool):
            raise HordeUnreachable("the text dry run without kudos", reached=True)
        return float(kudos)

    async def status_body(self, request_id: str, apikey: str | None) -> dict[str, Any]:
        """``GET /v2/generate/text/status/{id}`` as JSON."""
        body = await self._call("GET", TEXT_STATUS_PATH.format(id=request_id), apikey)
        if not isinstance(body, dict):
            raise HordeUnreachable("a text status that is not an object", reached=True)
        return body

    async def cancel(self, request_id: str, apikey: str | None) -> Any:
        """``DELETE /v2/generate/text/status/{id}``; the answer is not read (the cancel queue needs no status)."""
        return await self._call("DELETE", TEXT_STATUS_PATH.format(id=request_id), apikey)


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first stop sequence it contains, and whether one was found."""
    cuts = [text.find(stop) for stop in stops if stop and stop in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


def native_status(body: Mapping[str, Any], prepared: PreparedTextRequest) -> NativeStatus:
    """A text status read as a native one: its progress keys, and each ``GenerationKobold`` as a generation whose
    message content is the cleaned text (see the module docstring).

    Raises:
        HordeUnreachable: The answer does not match the text status shape.
    """
    generations = []
    for item in body.get("generations") or []:
        if not isinstance(item, Mapping):
            continue
        text, stopped = cut_at_stop(str(item.get("text") or ""), prepared.stop_sequences)
        if prepared.strip_leading_whitespace:
            text = text.lstrip()
        filtered = real_horde_answers.filtered_finish_reason(item)
        finish = filtered or ("stop" if stopped or estimate_tokens(text) < prepared.max_length else "length")
        generations.append(
            {
                "id": item.get("id"),
                "worker_id": item.get("worker_id"),
                "worker_name": item.get("worker_name"),
                "model": item.get("model"),
                "message": {"content": text},
                "finish_reason": finish,
                "native_finish_reason": item.get("state") if filtered else None,
                "prompt_tokens": prepared.estimated_prompt_tokens,
            }
        )
    fields = {key: body[key] for key in STATUS_KEYS if key in body}
    if prepared.context_adjustments:
        fields["context_adjustments"] = [dict(adjustment) for adjustment in prepared.context_adjustments]
    try:
        status = NativeStatus.model_validate(
            {**fields, "generations": [NativeGeneration.model_validate(g) for g in generations]}
        )
    except ValidationError as exc:
        raise HordeUnreachable(
            f"a text status that does not match the text contract ({exc.error_count()} errors)", reached=True
        ) from exc
    status.front_x_horde.update(prepared.x_horde)
    return status


class TextRoutes:
    """One text request's view of the Horde with the native client's methods (``submit``, ``status``, ``cancel``,
    ``text_models``), so chat.serving.service and chat.waiting.waiter serve it as a native request. With
    ``workers`` (the worker list, chat.horde.worker_limits), each status also says whether the models' workers still
    run (chat.horde.worker_limits.apply_liveness).
    """

    publishes_signals: ClassVar[bool] = False
    """The text API publishes no Redis signals (``horde:chat:signals`` carries native chat requests only), so the
    waiter of a text request does not register for them and re-reads every ``signal_recheck_seconds`` instead of
    backing off (chat.waiting.waiter); the read cap (chat.horde.budget) spaces those reads to 1.05 s."""

    def __init__(
        self,
        client: TextHordeClient,
        prepared: PreparedTextRequest,
        workers: WorkerDirectory | None = None,
        *,
        resubmit: RefusalResubmit | None = None,
    ) -> None:
        self.client = client
        self.prepared = prepared
        self.workers = workers
        self.resubmit = resubmit
        """Turns a submit refusal into the request to submit instead, or None to answer the refusal
        (chat.serving.text_limits.resubmit_after_downgrade_refusal)."""
        self.abandoned = False
        """The client left while the submit ran (:meth:`abandon`): a refusal is not followed by another submit."""
        self.emptied_reads = 0
        """Status reads in a row that found the request emptied (chat.horde.real_horde_answers.is_emptied)."""

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        """Submit ``payload`` (:attr:`prepared`'s) to the text API. A refusal that :attr:`resubmit` turns into another
        request (made from :attr:`prepared`) is followed by one submit of that request, which then is :attr:`prepared`
        (its limits and adjustments are the statuses'). Raises HordeRefusal (the last refusal) or HordeUnreachable.
        """
        try:
            return await self.client.submit(payload, apikey)
        except HordeRefusal as refusal:
            changed = None
            if self.resubmit is not None and not self.abandoned:
                changed = await self.resubmit(self.prepared, refusal)
            if changed is None or self.abandoned:
                raise
        self.prepared = changed
        return await self.client.submit(changed.payload, apikey)

    def abandon(self) -> None:
        """The client left while the submit runs (chat.serving.service.submit_shielded): a request the first submit
        creates is cancelled as ever, but a refusal is no longer submitted again.
        """
        self.abandoned = True

    async def status(self, request_id: str, apikey: str | None) -> NativeStatus:
        """The text status as a native status (:func:`native_status`). Raises 502 ``ChatRequestCancelled`` for a
        request the Horde cancelled or emptied (chat.horde.real_horde_answers ``is_emptied`` and
        ``emptied_reads_to_end``). With the worker list, also the workers' liveness
        (chat.horde.worker_limits.apply_liveness).
        """
        body = await self.client.status_body(request_id, apikey)
        self.emptied_reads = self.emptied_reads + 1 if real_horde_answers.is_emptied(body) else 0
        if self.emptied_reads and self.emptied_reads >= real_horde_answers.emptied_reads_to_end(body):
            raise real_horde_answers.cancelled_error(request_id)
        status = native_status(body, self.prepared)
        snapshot = await self.workers.snapshot() if self.workers is not None else None
        if snapshot is not None:
            apply_liveness(status, snapshot.for_models(self.prepared.payload.get("models") or []))
        return status

    async def cancel(self, request_id: str, apikey: str | None) -> Any:
        """Cancel at the text API."""
        return await self.client.cancel(request_id, apikey)

    async def text_models(self) -> list[dict[str, Any]]:
        """The native model list."""
        return await self.client.text_models()


async def check_max_kudos(client: TextHordeClient, payload: dict[str, Any], apikey: str | None, cap: float) -> None:
    """Refuse a request whose dry-run kudos estimate exceeds ``horde.max_kudos`` (400 ``max_kudos_exceeded``, the
    native path's error and wording). A dry run the Horde refuses is that refusal, mapped as at submit.

    Raises:
        OpenAIError: The refusal.
        HordeUnreachable: The dry run could not be made.
    """
    try:
        estimate = await client.dry_run_kudos(payload, apikey)
    except HordeRefusal as refusal:
        raise refusals.error_from_refusal(refusal) from None
    if estimate > cap:
        raise errors.kudos_cap_error(
            f"The request's kudos estimate at current pricing is {format_kudos(estimate)}, above its horde.max_kudos "
            f"of {format_kudos(cap)}. The estimate assumes the full max_tokens is generated."
        )
