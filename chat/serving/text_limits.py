"""The completion and context limits a text path request is sent with, and the adjustments it reports.

Before submit, in this order:

1. ``max_length`` (the client's limit, else the default of 512) above the largest ``max_length`` an online worker
   for the models declares (chat.horde.worker_limits) is lowered to it: a ``worker_max_length`` adjustment, as the
   native Horde reports it.
2. ``max_length`` above the Horde's upfront kudos ceiling, for a user who cannot hold the kudos
   (chat.horde.upfront_kudos), is lowered to the ceiling: a ``kudos_upfront`` adjustment.
3. ``max_context_length`` (``horde.max_context_length``, else the default of 2048) above the largest one an online
   worker declares is lowered to it; a ``worker_max_context_length`` adjustment when the client set it.

Each adjustment is ``{"kind", "requested", "applied"}`` and reaches the reply's ``x_horde.context_adjustments`` through
the text status (chat.horde.text.native_status); the lowered completion limit is the one usage is capped at and
``max_tokens_source`` is ``lowered`` (chat.rendering.completion.effective_completion_limit,
chat.serving.request_record). A read that fails bounds nothing.

At submit (:func:`resubmit_after_downgrade_refusal`): a request sent with ``allow_downgrade: false``
(chat.horde.upfront_kudos.asks_free_ceiling) that the Horde refuses 403 ``KudosUpfront`` "for requests over N
tokens" is submitted once more at N with ``allow_downgrade: true``, a ``kudos_upfront`` adjustment from the client's
limit (one entry: a ceiling the front foresaw is replaced by the Horde's); a 403 ``SharedKeyInsufficientKudos`` or
``SharedKeyEmpty`` is submitted once more as it was, with ``allow_downgrade: true`` (the Horde then serves it at the
anonymous priority, as before).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final, Protocol

from loguru import logger

from chat.horde.native import HordeRefusal
from chat.horde.text import PreparedTextRequest, TextBounds
from chat.horde.tokens import completion_limit
from chat.horde.upfront_kudos import (
    DOWNGRADE_REFUSALS,
    KudosSource,
    forget_ceiling,
    refused_ceiling,
    upfront_ceiling,
)
from chat.horde.worker_limits import WorkersSource, directory_for
from chat.limits import DEFAULT_CHAT_MAX_TOKENS
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.legacy_completion import CompletionRequest
from chat.rendering.completion import KUDOS_UPFRONT_ADJUSTMENT, WORKER_MAX_LENGTH_ADJUSTMENT
from chat.serving.text_route import DEFAULT_TEXT_MAX_CONTEXT_LENGTH, MIN_TEXT_MAX_LENGTH

WORKER_MAX_CONTEXT_LENGTH_ADJUSTMENT: Final[str] = "worker_max_context_length"
"""The adjustment kind of a ``horde.max_context_length`` lowered to the largest one an online worker declares."""


class LimitsSource(WorkersSource, KudosSource, Protocol):
    """The Horde client's reads this module makes (chat.horde.native.HordeClient)."""


def _adjustment(kind: str, requested: int, applied: int) -> dict[str, Any]:
    return {"kind": kind, "requested": requested, "applied": applied}


async def text_bounds(  # noqa: PLR0913 - keyword-only limits of one request, each caller names what it bounds
    source: LimitsSource,
    models: Sequence[str],
    *,
    max_length: int,
    max_context_length: int,
    context_requested: bool,
    apikey: str | None,
    slow_workers: bool = True,
    smallest_max_length: int = 16,
) -> TextBounds:
    """The bounds of a request for ``models`` asking ``max_length`` and ``max_context_length`` (see the module
    docstring). ``context_requested``: the client set ``horde.max_context_length``. A declared limit or a ceiling
    below ``smallest_max_length`` (the text API's smallest; a ceiling that low only under ``slow_workers: false``)
    lowers nothing.
    """
    adjustments: list[dict[str, Any]] = []
    snapshot = await directory_for(source).snapshot()
    workers = snapshot.for_models(models) if snapshot is not None else None
    declared_length = workers.max_length if workers is not None else None
    if declared_length is not None and smallest_max_length <= declared_length < max_length:
        adjustments.append(_adjustment(WORKER_MAX_LENGTH_ADJUSTMENT, max_length, declared_length))
        max_length = declared_length
    ceiling = await upfront_ceiling(source, max_length=max_length, apikey=apikey, slow_workers=slow_workers)
    if ceiling is not None and smallest_max_length <= ceiling < max_length:
        adjustments.append(_adjustment(KUDOS_UPFRONT_ADJUSTMENT, max_length, ceiling))
        max_length = ceiling
    declared_context = workers.max_context_length if workers is not None else None
    if declared_context is not None and max_context_length > declared_context:
        if context_requested:
            adjustments.append(_adjustment(WORKER_MAX_CONTEXT_LENGTH_ADJUSTMENT, max_context_length, declared_context))
        max_context_length = declared_context
    return TextBounds(max_length=max_length, max_context_length=max_context_length, adjustments=tuple(adjustments))


async def chat_text_bounds(source: LimitsSource, request: ChatCompletionRequest, apikey: str | None) -> TextBounds:
    """:func:`text_bounds` of a validated chat request: its completion limit (else the default of 512), its
    ``horde.max_context_length`` (else the text API's default of 2048) and its ``horde.slow_workers``.
    """
    limit = completion_limit(request)
    horde = request.horde
    context = horde.max_context_length if horde is not None else None
    slow_workers = horde.slow_workers if horde is not None and horde.slow_workers is not None else True
    return await text_bounds(
        source,
        request.requested_models,
        max_length=limit if limit is not None else DEFAULT_CHAT_MAX_TOKENS,
        max_context_length=context if context is not None else DEFAULT_TEXT_MAX_CONTEXT_LENGTH,
        context_requested=context is not None,
        apikey=apikey,
        slow_workers=slow_workers,
        smallest_max_length=MIN_TEXT_MAX_LENGTH,
    )


async def completion_text_bounds(source: LimitsSource, request: CompletionRequest, apikey: str | None) -> TextBounds:
    """:func:`text_bounds` of a validated legacy completion: its ``max_tokens`` (else the default of 512) under the
    text API's default context length, which it never sets.
    """
    return await text_bounds(
        source,
        request.requested_models,
        max_length=request.max_tokens if request.max_tokens is not None else DEFAULT_CHAT_MAX_TOKENS,
        max_context_length=DEFAULT_TEXT_MAX_CONTEXT_LENGTH,
        context_requested=False,
        apikey=apikey,
        smallest_max_length=MIN_TEXT_MAX_LENGTH,
    )


def lowered_to_ceiling(prepared: PreparedTextRequest, ceiling: int) -> PreparedTextRequest:
    """``prepared`` with ``max_length`` lowered to the Horde's ``ceiling``: ``params.max_length`` sent, the limit
    usage and ``finish_reason`` are judged by, and one ``kudos_upfront`` adjustment from the client's limit (a
    ``kudos_upfront`` entry the front made before submit is replaced, keeping its ``requested``).
    """
    requested = prepared.max_length
    kept: list[dict[str, Any]] = []
    for adjustment in prepared.context_adjustments:
        if adjustment.get("kind") == KUDOS_UPFRONT_ADJUSTMENT:
            requested = adjustment["requested"]
        else:
            kept.append(adjustment)
    params = {**prepared.payload.get("params", {}), "max_length": ceiling}
    return dataclasses.replace(
        prepared,
        payload={**prepared.payload, "params": params, "allow_downgrade": True},
        max_length=ceiling,
        context_adjustments=(*kept, _adjustment(KUDOS_UPFRONT_ADJUSTMENT, requested, ceiling)),
    )


async def resubmit_after_downgrade_refusal(
    source: KudosSource, prepared: PreparedTextRequest, refusal: HordeRefusal
) -> PreparedTextRequest | None:
    """The request to submit after ``refusal`` of ``prepared`` (see the module docstring), or None to answer the
    refusal: it was sent with ``allow_downgrade: true`` already, or ``refusal`` is not one of
    chat.horde.upfront_kudos.DOWNGRADE_REFUSALS. A ``KudosUpfront`` ceiling the front did not foresee also drops its
    shared performance read (chat.horde.upfront_kudos.forget_ceiling); one that names no usable ceiling (none, under
    the text API's smallest ``max_length``, or not below the limit sent) is submitted again as it was, with
    ``allow_downgrade: true``, for the Horde to lower.
    """
    if prepared.payload.get("allow_downgrade") is not False or refusal.rc not in DOWNGRADE_REFUSALS:
        return None
    ceiling = refused_ceiling(refusal)
    if ceiling is not None:
        await forget_ceiling(source)
        if MIN_TEXT_MAX_LENGTH <= ceiling < prepared.max_length:
            logger.info(
                "The Horde's upfront kudos ceiling is {} tokens: submitting again at it (was {})",
                ceiling,
                prepared.max_length,
            )
            return lowered_to_ceiling(prepared, ceiling)
    return dataclasses.replace(prepared, payload={**prepared.payload, "allow_downgrade": True})
