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
impossible when every worker of the models has stopped. A request that asked for tool calls or JSON has its finished
reply read (:class:`ReplyReader`, chat.serving.text_replies) into ``content`` and ``tool_calls``; an invalid reply is
asked again, a submit of its own, at most ``repair_attempts`` times (:meth:`TextRoutes.read_replies`), then 502
``ModelReplyInvalid``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Final, Protocol

from horde_sdk.ai_horde_api.endpoints import AI_HORDE_API_ENDPOINT_SUBPATH
from pydantic import ValidationError

from chat import errors
from chat.errors import OpenAIError
from chat.horde import real_horde_answers, refusals
from chat.horde.cancels import CancelQueue
from chat.horde.native import HordeClient, HordeRefusal, HordeUnreachable, NativeGeneration, NativeStatus, SubmitResult
from chat.horde.tokens import estimate_tokens
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
class ReadReply:
    """A text reply read for tools or structured output (chat.serving.text_replies).

    Attributes:
        content: The message ``content`` (None when the reply is only calls).
        tool_calls: OpenAI ``tool_calls`` entries (``{"id", "type": "function", "function": {"name", "arguments"}}``).
        error: What the model returned wrong (for the repair turn and ``ModelReplyInvalid``), None when it is valid.
    """

    content: str | None
    tool_calls: tuple[dict[str, Any], ...] = ()
    error: str | None = None


class ReplyReader(Protocol):
    """Reads a text reply into OpenAI's shape and writes the prompt that asks again (chat.serving.text_replies)."""

    def read(self, reply: str, *, truncated: bool) -> ReadReply:
        """The reply read; ``truncated``: the worker stopped at the completion limit."""
        ...

    def repair_prompt(self, reply: str, error: str) -> str | None:
        """The prompt with the model's reply and the repair turn, or None when it cannot fit the context."""
        ...


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
    reply_reader: ReplyReader | None = None
    """Reads the finished reply for tools or structured output (:meth:`TextRoutes.status`); None for plain text."""
    repair_attempts: int = 0
    """How many times an invalid reply is asked again (``HORDE_OAI_TEXT_REPAIR_ATTEMPTS``)."""
    max_kudos: float | None = None
    """``horde.max_kudos``: the repairs' dry-run estimates count in it with the first submit's."""


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
    waiter of a text request does not register for them and its reads follow the queue instead of backing off
    (chat.waiting.read_schedule); the read cap (chat.horde.budget) spaces those reads to 1.05 s."""

    status_queue: ClassVar[str] = "text"
    """The Horde's queue a text request waits in: its reads teach and follow the text queue's advance
    (chat.waiting.read_schedule.QueueAdvance; the real Horde's text status reads ``wait_time`` 0 while queued)."""

    def __init__(
        self,
        client: TextHordeClient,
        prepared: PreparedTextRequest,
        workers: WorkerDirectory | None = None,
        *,
        resubmit: RefusalResubmit | None = None,
        cancels: CancelQueue | None = None,
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
        self.cancels = cancels
        """Where a repair submit made for a client that left is cancelled."""
        self.repairs = 0
        """Repair submits made (the first submit is not one)."""
        self.kudos_estimate = 0.0
        """The dry-run kudos estimates of the submits so far (set by the caller's ``horde.max_kudos`` check)."""
        self.repair_skipped: str | None = None
        """Why a repair that attempts remained for was not made (:data:`REPAIR_DOES_NOT_FIT`,
        :data:`REPAIR_OVER_MAX_KUDOS`), for the error's message."""
        self.current_ids: dict[str, str] = {}
        """The first submit's request id -> the request now answering for it (the last repair submit's)."""

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
        (chat.horde.worker_limits.apply_liveness). With a reply reader, a finished reply is read for tool calls or
        JSON (:meth:`read_replies`): an invalid one is asked again and the repair's status is returned instead
        (``request_id`` stays the first submit's; :meth:`current_id` names the request reading it now).
        """
        current = self.current_id(request_id)
        body = await self.client.status_body(current, apikey)
        self.emptied_reads = self.emptied_reads + 1 if real_horde_answers.is_emptied(body) else 0
        if self.emptied_reads and self.emptied_reads >= real_horde_answers.emptied_reads_to_end(body):
            raise real_horde_answers.cancelled_error(current)
        status = native_status(body, self.prepared)
        read_again = self.prepared.reply_reader is not None and status.done
        if read_again and await self.read_replies(request_id, status, apikey):
            return await self.status(request_id, apikey)
        snapshot = await self.workers.snapshot() if self.workers is not None else None
        if snapshot is not None:
            apply_liveness(status, snapshot.for_models(self.prepared.payload.get("models") or []))
        return status

    async def cancel(self, request_id: str, apikey: str | None) -> Any:
        """Cancel at the text API."""
        return await self.client.cancel(request_id, apikey)

    def current_id(self, request_id: str) -> str:
        """The request now answering for the first submit's ``request_id`` (its last repair's, else itself)."""
        return self.current_ids.get(request_id, request_id)

    async def read_replies(self, request_id: str, status: NativeStatus, apikey: str | None) -> bool:
        """Read each finished generation with :attr:`PreparedTextRequest.reply_reader`: a valid one becomes its
        ``content`` and ``tool_calls`` (``finish_reason: "tool_calls"`` when it calls); an invalid one is asked
        again (True: a repair was submitted) while ``repair_attempts`` remain, the repair prompt fits and its
        dry-run estimate keeps the request within ``horde.max_kudos``.

        Raises:
            OpenAIError: 502 ``ModelReplyInvalid`` for an invalid reply that is not asked again; the Horde's refusal
                of the repair's dry run or submit, mapped with its headers (chat.horde.refusals.error_from_refusal:
                a 429's ``Retry-After``, 403 ``KudosUpfront``).
        """
        reader = self.prepared.reply_reader
        if reader is None:
            return False
        if self.repairs:
            status.front_x_horde["repair_attempts"] = self.repairs
        for generation in status.generations:
            if generation.finish_reason == "content_filter":
                continue
            text = str(generation.message.get("content") or "")
            read = reader.read(text, truncated=generation.finish_reason == "length")
            if read.error is not None:
                if await self.submit_repair(request_id, reader, text, read.error, apikey):
                    return True
                raise model_reply_invalid_error(read.error, self.repairs, self.repair_skipped)
            message: dict[str, Any] = {"content": read.content}
            if read.tool_calls:
                message["tool_calls"] = [dict(call) for call in read.tool_calls]
                generation.finish_reason = "tool_calls"
            generation.message = message
        return False

    async def submit_repair(
        self, request_id: str, reader: ReplyReader, reply: str, error: str, apikey: str | None
    ) -> bool:
        """Submit the repair turn for ``reply`` (see :meth:`read_replies`); False when none is made. A repair
        submit the client left during is cancelled once the Horde answers it.
        """
        if self.repairs >= self.prepared.repair_attempts or self.abandoned:
            return False
        prompt = reader.repair_prompt(reply, error)
        if prompt is None:
            self.repair_skipped = REPAIR_DOES_NOT_FIT
            return False
        payload = {**self.prepared.payload, "prompt": prompt}
        if self.prepared.max_kudos is not None:
            try:
                estimate = await self.client.dry_run_kudos(payload, apikey)
            except HordeRefusal as refusal:
                raise refusals.error_from_refusal(refusal) from None
            except HordeUnreachable:
                self.repair_skipped = REPAIR_HORDE_UNREACHABLE
                return False
            if self.kudos_estimate + estimate > self.prepared.max_kudos:
                self.repair_skipped = REPAIR_OVER_MAX_KUDOS
                return False
            self.kudos_estimate += estimate
        task = asyncio.ensure_future(self.client.submit(payload, apikey))
        try:
            submitted = await asyncio.shield(task)
        except asyncio.CancelledError:
            cancels, submitted_at = self.cancels, time.time()
            if cancels is not None:
                task.add_done_callback(
                    lambda done: (
                        None
                        if done.cancelled() or done.exception() is not None
                        else cancels.cancel_soon(done.result().id, apikey, submitted_at)
                    )
                )
            raise
        except HordeRefusal as refusal:
            raise refusals.error_from_refusal(refusal) from None
        except HordeUnreachable:
            self.repair_skipped = REPAIR_HORDE_UNREACHABLE
            return False
        self.repairs += 1
        self.current_ids[request_id] = submitted.id
        self.prepared = dataclasses.replace(
            self.prepared,
            payload=payload,
            estimated_prompt_tokens=estimate_tokens(prompt),
            x_horde={**self.prepared.x_horde, "repair_attempts": self.repairs},
        )
        return True

    async def text_models(self) -> list[dict[str, Any]]:
        """The native model list."""
        return await self.client.text_models()


REPAIR_DOES_NOT_FIT: Final[str] = "the repair turn does not fit the model's context"
REPAIR_OVER_MAX_KUDOS: Final[str] = "its kudos estimate would take the request over its horde.max_kudos"
REPAIR_HORDE_UNREACHABLE: Final[str] = "the Horde could not be reached to submit the repair"


def model_reply_invalid_error(error: str, repairs: int, skipped: str | None = None) -> OpenAIError:
    """502 ``ModelReplyInvalid``: what the model returned wrong, after ``repairs`` repair turns, and why no further
    repair was asked when attempts remained (``skipped``).
    """
    asked = f" after {repairs} repair attempt{'s' if repairs != 1 else ''}" if repairs else ""
    unasked = f" It was not asked again: {skipped}." if skipped else ""
    return errors.failure(
        errors.MODEL_REPLY_INVALID,
        f"The model's reply is not valid{asked}: {error}.{unasked} The model was asked for tool calls or JSON in its "
        "prompt (the text generation API has no constrained output); send the request again, or use another model.",
    )


async def check_max_kudos(client: TextHordeClient, payload: dict[str, Any], apikey: str | None, cap: float) -> float:
    """Refuse a request whose dry-run kudos estimate exceeds ``horde.max_kudos`` (400 ``max_kudos_exceeded``, the
    native path's error and wording), else return the estimate. A dry run the Horde refuses is that refusal, mapped
    as at submit.

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
    return estimate
