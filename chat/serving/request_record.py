"""The end of one chat request: the reference's log lines and the metrics recorded when a request ends.

Reference sections: "Finished-request log line", "No-visible-text log line", "Error attributes", "Completion
attributes", "Completion limit source", "Outcome class". (The "Refused parameter log line" is written where the
refusal is made, chat.reading.parameters.log_refused_parameter.)

:class:`RequestRecord` is the one object the view fills in as a request goes (submit, first read, reply or error) and
ends once (:meth:`RequestRecord.finish`): it writes the no-visible-text line (when it applies) and the finished line,
each one Loguru INFO record with its values bound to ``extra``, and records the request's metrics. Neither line holds
the API key, the messages, the reply, the client's title or address, or the operation key.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from loguru import logger

from chat import errors
from chat.errors import OpenAIError
from chat.horde.native import NativeStatus
from chat.horde.tokens import completion_limit
from chat.metrics import (
    CLIENT_DISCONNECTED,
    CLIENT_ERROR,
    STAGE_GRACE,
    STAGE_SUBMIT,
    front_metrics,
    max_tokens_bucket,
    outcome_class_for,
)
from chat.protocol.chat_request import ChatCompletionRequest
from chat.reading.parameters import refusal_parameter_label
from chat.rendering.completion import (
    effective_completion_limit,
    lowered_completion_limit,
    no_visible_text_content,
    reply_reasoning,
    reply_text,
)

CLIENT_SOURCE: Final = "client"
"""``max_tokens_source`` when the client sent ``max_tokens`` or ``max_completion_tokens``."""
DEFAULT_SOURCE: Final = "default"
"""``max_tokens_source`` when the client sent neither (the native default of 512)."""
LOWERED_SOURCE: Final = "lowered"
"""``max_tokens_source`` when the Horde lowered the limit (a ``worker_max_length`` context adjustment), or the front
did on the text path (``worker_max_length`` or ``kudos_upfront``, chat.serving.text_limits)."""


def max_tokens_source(request: ChatCompletionRequest, status: NativeStatus | None) -> str:
    """``lowered``, ``client`` or ``default`` (reference: Completion limit source). The Horde reports a lowered limit
    only in a status, so ``status`` None (no status read) gives ``client`` or ``default``.
    """
    if lowered_completion_limit(status) is not None:
        return LOWERED_SOURCE
    return CLIENT_SOURCE if completion_limit(request) is not None else DEFAULT_SOURCE


def _word(value: object) -> str:
    """A value as one word of a log line: text with no whitespace or control character as is, else its repr, so a
    client-chosen model id cannot split or stretch the line.
    """
    text = str(value)
    if text and text.isprintable() and not any(character.isspace() for character in text):
        return text
    return repr(text)


def _or_none(value: object, *, digits: int | None = None) -> str:
    if value is None:
        return "none"
    if digits is not None and isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _effort(effort: object) -> str | None:
    """``reasoning_effort`` as sent (an enum's value), or None when omitted."""
    return None if effort is None else str(getattr(effort, "value", effort))


def refusal_label(error: OpenAIError) -> str:
    """``horde.parameter`` of a refusal: the label of its param for ``UnsupportedChatParameter``, else empty."""
    if error.code == errors.UNSUPPORTED_CHAT_PARAMETER and error.param:
        return refusal_parameter_label(error.param)
    return ""


def record_refusal(error: OpenAIError, started: float, *, streamed: bool = False) -> None:
    """Count one admission or validation refusal on ``horde.oai.requests.refused`` (reference: Refusal attributes)
    and record its time since ``started`` (``time.monotonic()`` when the request arrived) on
    ``horde.oai.request.duration`` with its status and outcome class (reference: Outcome class): every finished
    request is on the duration histogram, ``front_at_capacity`` and the other refusals included. ``streamed`` is
    whether the refused request asked for a stream, False when it was refused before its body was read.
    """
    code = error.code or ""
    front_metrics().requests_refused.add(
        1,
        {
            "horde.status": error.status,
            "horde.code": code,
            "horde.parameter": refusal_label(error),
            "horde.outcome_class": outcome_class_for(code),
        },
    )
    record_refused_duration(error.status, code, started, streamed=streamed)


def record_refused_duration(status: int, code: str, started: float, *, streamed: bool = False) -> None:
    """Record a refusal's time since ``started`` (``time.monotonic()`` when the request arrived) on
    ``horde.oai.request.duration`` with its status and outcome class (reference: Outcome class: every finished request
    is on the duration histogram). :func:`record_refusal` calls it for the refusals it also counts; called alone for
    those outside ``horde.oai.requests.refused``'s list (the reference's admission and validation refusals: 413, 408,
    400, 404, 401 and FrontAtCapacity): the 405 of another method (``client_error``) and 503 ``FrontShuttingDown``
    before a submit (``front_shutdown``).
    """
    front_metrics().request_duration.record(
        time.monotonic() - started,
        {"horde.status": status, "horde.outcome_class": outcome_class_for(code), "horde.streamed": streamed},
    )


@dataclass
class RequestRecord:
    """What the finished line and the metrics need of one admitted request; the view fills it in.

    Attributes:
        request: The validated request.
        started: ``time.monotonic()`` when the request arrived (``horde.oai.request.duration``).
        submitted_at: Unix seconds of the submit (of the refused attempt for a request refused at submit).
        request_id: The native request id; None until (and unless) the Horde accepted the submit.
        waiter: The request's chat.waiting.waiter.ChatWaiter once submitted (wakes, first and last status).
        error: The refusal the request ended with, if any.
        stage: ``submit`` or ``grace`` for a ``no_eligible_worker``, else empty.
        after_headers: The error went out as a stream's error event, after the 200 headers.
        disconnected: The client left before the reply ended.
        completion: The delivered ``chat.completion`` (for a stream: the reply's completion, built at its end).
        relayed: The stream relayed at least one delta (:meth:`content_sent`); False for a stream that asked for
            progress but went out whole.
        completed_at: Unix seconds when a non-streamed completion was ready (its first content reaches the client
            with it; ``horde.oai.request.first_content``).
        first_content_at: Unix seconds when a stream's first reply content went out, relayed or whole
            (``horde.oai.request.first_content``).
        prompted_output: On the text path, ``tools`` or ``json`` when the reply was read for tool calls or JSON
            (chat.serving.text_replies), else None.
        repair_attempts: The repair submits made for it (``HORDE_OAI_TEXT_REPAIR_ATTEMPTS``).
    """

    request: ChatCompletionRequest
    started: float = field(default_factory=time.monotonic)
    submitted_at: float | None = None
    request_id: str | None = None
    waiter: Any = None
    error: OpenAIError | None = None
    stage: str = ""
    after_headers: bool = False
    disconnected: bool = False
    completion: dict[str, Any] | None = None
    relayed: bool = False
    completed_at: float | None = None
    first_content_at: float | None = None
    prompted_output: str | None = None
    repair_attempts: int = 0
    ended: bool = False

    # --- what the view reports --------------------------------------------------------------------------------

    def failed(self, error: OpenAIError, *, stage: str = "", after_headers: bool = False) -> None:
        """The request ends with ``error``; ``stage`` for a ``no_eligible_worker`` (``submit`` or ``grace``)."""
        self.error = error
        self.after_headers = after_headers
        if error.code == errors.NO_ELIGIBLE_WORKER:
            self.stage = stage or (STAGE_SUBMIT if self.request_id is None else STAGE_GRACE)

    def stream_failed(self, error: OpenAIError) -> None:
        """A stream ended with ``error`` as its error event (after the 200 headers)."""
        self.failed(error, after_headers=True)

    def content_sent(self, relayed: bool) -> None:
        """Reply content of a stream goes out: relayed deltas (``relayed``) or the reply delivered whole."""
        if self.first_content_at is None:
            self.first_content_at = time.time()
        self.relayed = self.relayed or relayed

    # --- derived values ---------------------------------------------------------------------------------------

    @property
    def last_status(self) -> NativeStatus | None:
        """The waiter's latest status read, None before any (or for a request refused at submit)."""
        return self.waiter.last_status if self.waiter is not None else None

    @property
    def code(self) -> str | None:
        """The code the request ended with: the error's, ``ClientDisconnected``, or None when served."""
        if self.error is not None:
            return self.error.code
        if self.disconnected and self.completion is None:
            return CLIENT_DISCONNECTED
        return None

    @property
    def http_status(self) -> int:
        """The status the client got: the error's before any header, else 200 (a stream error goes after the 200)."""
        if self.error is not None and not self.after_headers:
            return self.error.status
        return 200

    @property
    def max_tokens(self) -> int:
        """The effective completion limit (chat.rendering.completion.effective_completion_limit)."""
        return effective_completion_limit(self.request, self.last_status)

    @property
    def max_tokens_source(self) -> str:
        """``client``, ``default`` or ``lowered`` (:func:`max_tokens_source`)."""
        return max_tokens_source(self.request, self.last_status)

    def finished_values(self) -> dict[str, Any]:
        """The finished line's values in their order, as bound to the record's ``extra``."""
        waiter = self.waiter
        woke_at: float | None = getattr(waiter, "woke_at", None)
        waited = woke_at - self.submitted_at if woke_at is not None and self.submitted_at is not None else None
        completion = self.completion
        x_horde = (completion or {}).get("x_horde") or {}
        values: dict[str, Any] = {
            "request_id": self.request_id,
            "streamed": self.request.is_stream,
            "submitted_at": self.submitted_at,
            "woke_at": woke_at,
            "woke_by": getattr(waiter, "woke_by", None),
            "waited": waited,
            "status": self.http_status,
            "code": self.code,
            "wakes": getattr(waiter, "wakes", 0),
            "estimated_usage": bool(x_horde.get("estimated_usage")) if completion is not None else None,
            "done_without_generation_reads": getattr(waiter, "done_without_generation_reads", 0),
            "requested_model": ",".join(self.request.requested_models),
            "served_model": completion.get("model") if completion is not None else None,
            "retry_after": self.error.retry_after if self.error is not None else None,
        }
        if self.error is not None and self.error.code == errors.QUEUE_UNAVAILABLE:
            metadata = self.error.metadata or {}
            values["queue_reason"] = metadata.get("reason")
            values["wait_time"] = metadata.get("wait_time")
            values["eligible_worker_threads"] = metadata.get("eligible_worker_threads")
        first = getattr(waiter, "first_status", None)
        values["first_read_wait_time"] = first.wait_time if first is not None else None
        values["first_read_eligible_worker_threads"] = first.eligible_worker_threads if first is not None else None
        values["max_tokens"] = self.max_tokens
        values["max_tokens_source"] = self.max_tokens_source
        if self.prompted_output is not None:
            values["prompted_output"] = self.prompted_output
            values["repair_attempts"] = self.repair_attempts
        return values

    # --- the end ----------------------------------------------------------------------------------------------

    def finish(self) -> None:
        """Write the request's log lines and record its metrics, once."""
        if self.ended:
            return
        self.ended = True
        values = self.finished_values()
        if self.completion is not None and self.error is None:
            self._log_no_visible_text()
        logger.bind(**values).info(finished_message(values))
        self._record_metrics(values)

    def _log_no_visible_text(self) -> None:
        status = self.last_status
        generation = status.finished_generation if status is not None else None
        if generation is None or self.completion is None:
            return
        content = no_visible_text_content(generation)
        if content is None:
            return
        usage = self.completion.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        values = {
            "request_id": self.request_id,
            "content": content,
            "model": self.completion.get("model"),
            "max_tokens": self.max_tokens,
            "max_tokens_source": self.max_tokens_source,
            "reasoning_effort": _effort(self.request.reasoning_effort),
            "reasoning_tokens": details.get("reasoning_tokens"),
            "finish_reason": self.completion["choices"][0].get("finish_reason"),
        }
        logger.bind(**values).info(no_visible_text_message(values))

    def _record_metrics(self, values: Mapping[str, Any]) -> None:
        instruments = front_metrics()
        code = self.code or ""
        outcome_class = outcome_class_for(code, self.stage)
        streamed = self.request.is_stream
        refused = self.error is not None and not self.after_headers and outcome_class == CLIENT_ERROR
        if self.error is not None and not self.after_headers:
            if refused:
                record_refusal(self.error, self.started, streamed=streamed)  # its duration too
            else:
                metadata = self.error.metadata or {}
                instruments.requests_errors.add(
                    1,
                    {
                        "horde.status": self.error.status,
                        "horde.code": code,
                        "horde.reason": str(metadata.get("reason") or "") if code == errors.QUEUE_UNAVAILABLE else "",
                        "horde.stage": self.stage,
                        "horde.max_tokens_bucket": max_tokens_bucket(self.max_tokens),
                        "horde.outcome_class": outcome_class,
                        "horde.streamed": streamed,
                    },
                )
        elif self.error is not None or (streamed and self.disconnected and self.completion is None):
            instruments.stream_failures.add(
                1, {"horde.code": code, "horde.outcome_class": outcome_class, "horde.relayed": self.relayed}
            )
        if self.request_id is not None:
            instruments.request_max_tokens.record(self.max_tokens, {"horde.source": self.max_tokens_source})
            started_seen_at = getattr(self.waiter, "started_seen_at", None)
            if started_seen_at is not None and self.submitted_at is not None:
                instruments.queue_wait.record(started_seen_at - self.submitted_at, {"horde.streamed": streamed})
            first_content_at = self.first_content_at if streamed else self.completed_at
            if first_content_at is not None and self.submitted_at is not None:
                instruments.first_content.record(first_content_at - self.submitted_at, {"horde.streamed": streamed})
        if self.completion is not None and self.error is None:
            self._record_completion(streamed)
        if self.prompted_output is not None and self.request_id is not None:
            if self.error is not None:
                reply_outcome = "invalid" if code == errors.MODEL_REPLY_INVALID else "unread"
            else:
                reply_outcome = "valid" if self.completion is not None else "abandoned"
            instruments.prompted_replies.add(
                1,
                {
                    "horde.prompted_output": self.prompted_output,
                    "horde.repair_attempts": self.repair_attempts,
                    "horde.outcome": reply_outcome,
                },
            )
        if refused:
            return
        instruments.request_duration.record(
            time.monotonic() - self.started,
            {"horde.status": values["status"], "horde.outcome_class": outcome_class, "horde.streamed": streamed},
        )

    def _record_completion(self, streamed: bool) -> None:
        status = self.last_status
        generation = status.finished_generation if status is not None else None
        completion = self.completion or {}
        model = str(completion.get("model") or "")
        choice = (completion.get("choices") or [{}])[0]
        if generation is not None:
            content = no_visible_text_content(generation) or (
                "tool_calls" if (choice.get("message") or {}).get("tool_calls") else "text"
            )
            reasoning = len(reply_reasoning(generation))
            total = reasoning + len(reply_text(generation))
            if total:
                front_metrics().reasoning_share.record(reasoning / total, {"horde.model": model})
        else:
            content = "text"
        front_metrics().completions.add(
            1,
            {
                "horde.model": model,
                "horde.finish_reason": str(choice.get("finish_reason") or ""),
                "horde.content": content,
                "horde.max_tokens_source": self.max_tokens_source,
                "horde.streamed": streamed,
            },
        )


def finished_message(values: Mapping[str, Any]) -> str:
    """The finished-request line (reference: Finished-request log line), from :meth:`RequestRecord.finished_values`.

    ``Chat request <id> finished: streamed=<bool> submitted_at=<unix> woke_at=<unix|none> woke_by=<source|None>
    waited=<seconds|none>s status=<status> code=<code> wakes=<count> estimated_usage=<bool|None>
    done_without_generation_reads=<count> requested_model=<models> served_model=<model|none>
    retry_after=<seconds|none>``, then for ``queue_unavailable`` ``queue_reason=<reason> wait_time=<seconds|none>
    eligible_worker_threads=<count|none>``, then ``first_read_wait_time=<seconds|none>
    first_read_eligible_worker_threads=<count|none> max_tokens=<limit> max_tokens_source=<client|default|lowered>``,
    then on the text path for a reply read for tools or JSON ``prompted_output=<tools|json> repair_attempts=<count>``.
    A request refused at submit has no id: ``Unsubmitted chat request finished: ...``.
    """
    request_id = values["request_id"]
    lead = "Unsubmitted chat request finished:" if request_id is None else f"Chat request {request_id} finished:"
    parts = [
        lead,
        f"streamed={values['streamed']}",
        f"submitted_at={_or_none(values['submitted_at'], digits=3)}",
        f"woke_at={_or_none(values['woke_at'], digits=3)}",
        f"woke_by={values['woke_by']}",
        f"waited={_or_none(values['waited'], digits=3)}s",
        f"status={values['status']}",
        f"code={_word(values['code']) if values['code'] is not None else None}",
        f"wakes={values['wakes']}",
        f"estimated_usage={values['estimated_usage']}",
        f"done_without_generation_reads={values['done_without_generation_reads']}",
        f"requested_model={_word(values['requested_model'])}",
        f"served_model={_word(values['served_model']) if values['served_model'] is not None else 'none'}",
        f"retry_after={_or_none(values['retry_after'])}",
    ]
    if "queue_reason" in values:
        parts += [
            f"queue_reason={values['queue_reason']}",
            f"wait_time={_or_none(values['wait_time'])}",
            f"eligible_worker_threads={_or_none(values['eligible_worker_threads'])}",
        ]
    parts += [
        f"first_read_wait_time={_or_none(values['first_read_wait_time'])}",
        f"first_read_eligible_worker_threads={_or_none(values['first_read_eligible_worker_threads'])}",
        f"max_tokens={values['max_tokens']}",
        f"max_tokens_source={values['max_tokens_source']}",
    ]
    if "prompted_output" in values:
        parts += [f"prompted_output={values['prompted_output']}", f"repair_attempts={values['repair_attempts']}"]
    return " ".join(parts)


def no_visible_text_message(values: Mapping[str, Any]) -> str:
    """The no-visible-text line (reference: No-visible-text log line): ``Chat request <id> returned no visible text:
    content=<reasoning_only|empty> model=<model> max_tokens=<limit> max_tokens_source=<client|default|lowered>
    reasoning_effort=<effort|omitted> reasoning_tokens=<count|none> finish_reason=<reason>``.
    """
    effort = values["reasoning_effort"]
    return (
        f"Chat request {values['request_id']} returned no visible text: content={values['content']} "
        f"model={_word(values['model'])} max_tokens={values['max_tokens']} "
        f"max_tokens_source={values['max_tokens_source']} "
        f"reasoning_effort={'omitted' if effort is None else effort} "
        f"reasoning_tokens={_or_none(values['reasoning_tokens'])} finish_reason={values['finish_reason']}"
    )
