"""What a native chat status says for the wait: started, terminal, done without a generation, positioned, or refused
by a declaration gap (reference: Declaration gaps, Completion without a generation).
"""

from __future__ import annotations

from typing import Any, Final

from horde_sdk.generation_parameters.text.chat_policy import ChatServiceGapKind

from chat.horde.native import NativeStatus

DECLARATION_GAP: Final[str] = ChatServiceGapKind.DECLARATION_GAP.value
"""The ``impossible_reason.kind`` of a request no online worker's declarations can serve (reference: Declaration
gaps). Any other kind is ignored, so the grace applies (reference: Stream errors)."""


def has_started(status: NativeStatus) -> bool:
    """Whether the request has a processing or finished generation."""
    return status.processing > 0 or status.finished > 0 or bool(status.generations)


def is_terminal(status: NativeStatus) -> bool:
    """Whether the request needs no cancel: faulted, or done with a finished generation."""
    return status.faulted or (status.done and status.finished_generation is not None)


def is_done_without_generation(status: NativeStatus) -> bool:
    """Done, not faulted, no finished generation and no job waiting or processing (reference: Completion without a
    generation). A done status that still reports a job waiting or processing is unfinished.
    """
    return (
        status.done
        and not status.faulted
        and status.finished_generation is None
        and status.waiting == 0
        and status.processing == 0
    )


def has_queue_information(status: NativeStatus) -> bool:
    """A positive ``queue_position`` or ``wait_time``, or a processing or finished generation (reference: Queue
    position refresh): a newly submitted request may read 0 for both until the Horde refreshes its cache.
    """
    return status.queue_position > 0 or status.wait_time > 0 or has_started(status)


def declaration_gap(status: NativeStatus) -> dict[str, Any] | None:
    """The status's ``impossible_reason`` when it is a declaration gap of a request not yet started, else None.

    An ``impossible_reason`` of another kind, or not an object, is ignored (reference: Stream errors).
    """
    reason = status.impossible_reason
    if has_started(status) or not isinstance(reason, dict) or reason.get("kind") != DECLARATION_GAP:
        return None
    return reason


# --- messages ----------------------------------------------------------------------------------------------------
