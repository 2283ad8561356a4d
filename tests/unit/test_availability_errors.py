"""The refusals of an unavailable volunteer network: message builders, statuses, params and retry headers.

Reference sections: Declaration gaps, Size limit gaps, Native admission refusals, Model availability, Fail-fast
admission, Stream errors, Error attributes. Table-driven: one row per sentence that states a value.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat import errors
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus
from chat.protocol.chat_request import ChatCompletionRequest
from chat.waiting.availability import (
    NO_ELIGIBLE_THREADS,
    QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS,
    WAIT_EXCEEDS_BUDGET,
    declaration_gap_message,
    grace_error,
    is_size_limit_gap,
    join_names,
    largest_declared_limit,
    queue_refusal_reason,
    queue_retry_after,
    queue_unavailable_error,
    queue_unavailable_message,
    service_gap_error,
    size_limit_gap_message,
    submit_refusal_error,
)
from chat.waiting.status import has_queue_information

REQUEST_ID = "req-1"
REFERENCE_EXAMPLE = (
    "No worker can serve this request: no online worker serving the model declares reasoning_effort. "
    "The request was cancelled."
)
COMPLETION_SENTENCE = (
    "No worker eligible for this request currently declares a completion limit that high. "
    "The largest any online worker for the model declares now is {value}."
)
CONTEXT_SENTENCE = (
    "No worker eligible for this request currently declares a context length that high. "
    "The largest any online worker for the model declares now is {value}."
)
ENTRIES = [
    {"name": "m/a", "type": "text", "chat": {"max_length": 1024, "max_context_length": 8192}},
    {"name": "m/b", "type": "text", "chat": {"max_length": 2048, "max_context_length": 4096}},
    {"name": "m/textonly", "type": "text"},
    {"name": "m/c", "type": "text", "chat": {"max_length": 4096, "max_context_length": 32768}},
]


def gap(missing: list[str] | None = None, exceeded: list[str] | None = None) -> dict[str, Any]:
    return {"kind": "declaration_gap", "missing_declarations": missing or [], "exceeded_limits": exceeded or []}


def envelope_of(error: errors.OpenAIError) -> tuple[int, dict[str, Any], dict[str, str]]:
    response = error.to_response()
    return response.status_code, json.loads(response.content)["error"], dict(response.items())


# --- Declaration gaps -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "joined"),
    [([], ""), (["seed"], "seed"), (["seed", "tools"], "seed and tools"), (["a", "b", "c"], "a, b and c")],
)
def test_join_names(names: list[str], joined: str) -> None:
    assert join_names(names) == joined


@pytest.mark.parametrize(
    ("reason", "listed", "cancelled", "message"),
    [
        (gap(["reasoning_effort"]), False, True, REFERENCE_EXAMPLE),
        (
            gap(["reasoning_effort"]),
            False,
            False,
            "No worker can serve this request: no online worker serving the model declares reasoning_effort.",
        ),
        (
            gap(["seed", "vision"]),
            True,
            True,
            "No worker can serve this request: no online worker serving the listed models declares seed and vision. "
            "The request was cancelled.",
        ),
        (
            gap(["tool_choice_enforced"]),
            False,
            True,
            "No worker can serve this request: no online worker serving the model declares tool_choice_enforced. "
            "tool_choice_enforced is a guarantee, and guarantees are not required under best_effort "
            '(horde.conformance: "best_effort"). The request was cancelled.',
        ),
        (
            gap(["prompt_overflow_refused", "tools", "tool_choice_enforced"]),
            False,
            False,
            "No worker can serve this request: no online worker serving the model declares prompt_overflow_refused, "
            "tools and tool_choice_enforced. prompt_overflow_refused and tool_choice_enforced are guarantees, and "
            'guarantees are not required under best_effort (horde.conformance: "best_effort").',
        ),
        (
            gap([], ["tools_max_temperature"]),
            False,
            True,
            "No worker can serve this request: the request exceeds the tools_max_temperature every online worker "
            "serving the model declares. The request was cancelled.",
        ),
        (
            gap(["tools"], ["max_length"]),
            False,
            True,
            "No worker can serve this request: no online worker serving the model declares tools; the request exceeds "
            "the max_length every online worker serving the model declares. The request was cancelled.",
        ),
        (
            gap([], []),
            False,
            False,
            "No worker can serve this request: the online workers serving the model do not declare what it needs.",
        ),
    ],
)
def test_declaration_gap_message(reason: dict, listed: bool, cancelled: bool, message: str) -> None:
    """ref: declaration-gaps.2, declaration-gaps.4, declaration-gaps.5, native-admission-refusals.3"""
    assert declaration_gap_message(reason, listed_models=listed, cancelled=cancelled) == message


def test_declaration_gap_error_is_the_reference_example() -> None:
    """ref: declaration-gaps.1, declaration-gaps.3, declaration-gaps.4, declaration-gaps.5,
    native-admission-refusals.4"""
    error = service_gap_error(
        gap(["reasoning_effort"]),
        requested_models=["m/a"],
        listed_models=False,
        model_entries=ENTRIES,
        request_id=REQUEST_ID,
    )
    status, body, headers = envelope_of(error)
    assert status == 404
    assert body == {
        "message": REFERENCE_EXAMPLE,
        "type": "not_found_error",
        "param": None,
        "code": "no_worker_supports_features",
        "metadata": {"request_id": REQUEST_ID},
    }
    assert "Retry-After" not in headers
    assert "x-should-retry" not in headers


# --- Size limit gaps --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "size_only"),
    [
        (gap([], ["max_length"]), True),
        (gap([], ["max_context_length"]), True),
        (gap([], ["max_context_length", "max_length"]), True),
        (gap([], ["max_length", "tools_max_temperature"]), False),
        (gap(["seed"], ["max_length"]), False),
        (gap(["seed"]), False),
        (gap([], []), False),
        ({"kind": "declaration_gap"}, False),
    ],
)
def test_is_size_limit_gap(reason: dict, size_only: bool) -> None:
    """ref: size-limit-gaps.1, size-limit-gaps.9"""
    assert is_size_limit_gap(reason) is size_only


@pytest.mark.parametrize(
    ("models", "limit", "largest"),
    [
        (["m/a"], "max_length", 1024),
        (["m/a", "m/b"], "max_length", 2048),
        (["m/a", "m/b"], "max_context_length", 8192),
        (["m/textonly"], "max_length", None),
        (["m/unknown"], "max_length", None),
        (["m/unknown", "m/c"], "max_context_length", 32768),
    ],
)
def test_largest_declared_limit_from_the_model_list(models: list[str], limit: str, largest: int | None) -> None:
    """ref: size-limit-gaps.6, size-limit-gaps.7"""
    assert largest_declared_limit(ENTRIES, models, limit) == largest


@pytest.mark.parametrize(
    ("exceeded", "models", "entries", "param", "message"),
    [
        (["max_length"], ["m/a"], ENTRIES, "max_tokens", COMPLETION_SENTENCE.format(value="1024 tokens")),
        (
            ["max_context_length"],
            ["m/a"],
            ENTRIES,
            "horde.max_context_length",
            CONTEXT_SENTENCE.format(value="8192 tokens"),
        ),
        (
            ["max_context_length", "max_length"],
            ["m/a"],
            ENTRIES,
            "max_tokens",
            COMPLETION_SENTENCE.format(value="1024 tokens") + " " + CONTEXT_SENTENCE.format(value="8192 tokens"),
        ),
        (
            ["max_length"],
            ["m/a", "m/b"],
            ENTRIES,
            "max_tokens",
            COMPLETION_SENTENCE.format(value="2048 tokens").replace("for the model", "for the listed models"),
        ),
        (["max_length"], ["m/unknown"], ENTRIES, "max_tokens", COMPLETION_SENTENCE.format(value="max_length")),
        (
            ["max_context_length"],
            ["m/a"],
            None,
            "horde.max_context_length",
            CONTEXT_SENTENCE.format(value="max_context_length"),
        ),
    ],
)
def test_size_limit_gap_error(
    exceeded: list[str], models: list[str], entries: list | None, param: str, message: str
) -> None:
    """ref: size-limit-gaps.4, size-limit-gaps.5, size-limit-gaps.6, size-limit-gaps.7, size-limit-gaps.8"""
    error = service_gap_error(
        gap([], exceeded),
        requested_models=models,
        listed_models=len(models) > 1,
        model_entries=entries,
        request_id=REQUEST_ID,
    )
    status, body, headers = envelope_of(error)
    assert status == 400
    assert body == {
        "message": message + " The request was cancelled.",
        "type": "invalid_request_error",
        "param": param,
        "code": "no_worker_supports_limit",
        "metadata": {"request_id": REQUEST_ID},
    }
    assert "Retry-After" not in headers and "x-should-retry" not in headers


@pytest.mark.parametrize(
    "reason", [gap([], ["max_length", "tools_max_temperature"]), gap(["seed"], ["max_context_length"])]
)
def test_a_size_limit_beside_another_cause_keeps_the_404(reason: dict) -> None:
    """ref: size-limit-gaps.9"""
    error = service_gap_error(
        reason, requested_models=["m/a"], listed_models=False, model_entries=ENTRIES, request_id=REQUEST_ID
    )
    assert (error.status, error.code, error.param) == (404, "no_worker_supports_features", None)


def test_size_limit_message_without_cancellation() -> None:
    """ref: native-admission-refusals.3"""
    message = size_limit_gap_message(["max_length"], {"max_length": 512}, listed_models=False, cancelled=False)
    assert message == COMPLETION_SENTENCE.format(value="512 tokens")


# --- Native admission refusals ----------------------------------------------------------------------------------


class FakeHorde:
    """Stands in for chat.horde.native.HordeClient's model list."""

    def __init__(self, entries: list[dict[str, Any]] | Exception) -> None:
        self.entries = entries
        self.model_reads = 0

    async def text_models(self) -> list[dict[str, Any]]:
        self.model_reads += 1
        if isinstance(self.entries, Exception):
            raise self.entries
        return self.entries


def chat_request(**extra: Any) -> ChatCompletionRequest:
    body = {"messages": [{"role": "user", "content": "Hi"}], **extra}
    if "models" not in body:
        body.setdefault("model", "m/a")
    return ChatCompletionRequest.model_validate(body)


def refusal(status: int, rc: str | None, message: str, **body: Any) -> HordeRefusal:
    return HordeRefusal(status=status, message=message, rc=rc, body={"message": message, "rc": rc, **body})


NATIVE_MESSAGE = "No worker is currently serving the model 'm/offline'. Retry later."


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("native", "request_extra", "entries", "status", "code", "param", "message", "retry_after", "should_retry"),
    [
        (
            refusal(503, "NoEligibleWorker", NATIVE_MESSAGE),
            {},
            ENTRIES,
            503,
            "no_eligible_worker",
            None,
            NATIVE_MESSAGE,
            "30",
            "false",
        ),
        (
            refusal(403, "NoEligibleWorker", "Refused for kudos."),
            {},
            ENTRIES,
            503,
            "no_eligible_worker",
            None,
            "Refused for kudos.",
            "30",
            "false",
        ),
        (
            refusal(403, "NoEligibleWorker", "Refused for kudos.", impossible_reason={"kind": "mystery"}),
            {},
            ENTRIES,
            503,
            "no_eligible_worker",
            None,
            "Refused for kudos.",
            "30",
            "false",
        ),
        (
            refusal(403, "NoEligibleWorker", "Refused.", impossible_reason=gap(["reasoning_effort"])),
            {},
            ENTRIES,
            404,
            "no_worker_supports_features",
            None,
            "No worker can serve this request: no online worker serving the model declares reasoning_effort.",
            None,
            None,
        ),
        (
            refusal(403, "NoEligibleWorker", "Refused.", impossible_reason=gap([], ["max_length"])),
            {"models": ["m/a", "m/b"]},
            ENTRIES,
            400,
            "no_worker_supports_limit",
            "max_tokens",
            COMPLETION_SENTENCE.format(value="2048 tokens").replace("for the model", "for the listed models"),
            None,
            None,
        ),
        (
            refusal(403, "NoEligibleWorker", "Refused.", impossible_reason=gap([], ["max_context_length"])),
            {},
            HordeUnreachable("down"),
            400,
            "no_worker_supports_limit",
            "horde.max_context_length",
            CONTEXT_SENTENCE.format(value="max_context_length"),
            None,
            None,
        ),
        (refusal(429, None, "Slow down."), {}, ENTRIES, 429, "rate_limit_exceeded", None, "Slow down.", None, None),
        (
            refusal(429, "TooManyPrompts", "Too many."),
            {},
            ENTRIES,
            429,
            "TooManyPrompts",
            None,
            "Too many.",
            None,
            None,
        ),
    ],
)
async def test_submit_refusals(
    native: HordeRefusal,
    request_extra: dict,
    entries: Any,
    status: int,
    code: str,
    param: str | None,
    message: str,
    retry_after: str | None,
    should_retry: str | None,
) -> None:
    """ref: model-availability.1, model-availability.2, model-availability.3, native-admission-refusals.1,
    native-admission-refusals.2, native-admission-refusals.3, native-admission-refusals.4,
    native-admission-refusals.5, error-attributes.1"""
    error = await submit_refusal_error(FakeHorde(entries), native, chat_request(**request_extra))
    got_status, body, headers = envelope_of(error)
    assert (got_status, body["code"], body["param"], body["message"]) == (status, code, param, message)
    assert "metadata" not in body  # the Horde created no request: no request_id
    assert headers.get("Retry-After") == retry_after
    assert headers.get("x-should-retry") == should_retry


@pytest.mark.asyncio
async def test_a_403_size_gap_without_a_model_list_entry_names_the_limit() -> None:
    """ref: native-admission-refusals.2, size-limit-gaps.7"""
    native = refusal(403, "NoEligibleWorker", "Refused.", impossible_reason=gap([], ["max_length"]))
    error = await submit_refusal_error(FakeHorde([]), native, chat_request())
    assert (error.status, error.code, error.param, error.message) == (
        400,
        "no_worker_supports_limit",
        "max_tokens",
        COMPLETION_SENTENCE.format(value="max_length"),
    )


@pytest.mark.asyncio
async def test_the_model_list_is_read_only_for_a_size_limit_gap() -> None:
    horde = FakeHorde(ENTRIES)
    await submit_refusal_error(
        horde, refusal(403, "NoEligibleWorker", "x", impossible_reason=gap(["seed"])), chat_request()
    )
    assert horde.model_reads == 0
    await submit_refusal_error(
        horde, refusal(403, "NoEligibleWorker", "x", impossible_reason=gap([], ["max_length"])), chat_request()
    )
    assert horde.model_reads == 1


# --- Model availability: the grace -------------------------------------------------------------------------------


def test_grace_error_has_retry_after_30_and_should_retry_false() -> None:
    """ref: model-availability.8, native-admission-refusals.5, stream-errors.2, stream-errors.3"""
    status, body, headers = envelope_of(grace_error(1.5, REQUEST_ID))
    assert status == 503
    assert body == {
        "message": "No online worker could serve this request for 1.5 seconds: the workers serving the model went "
        "offline or are busy with other work. The request was cancelled.",
        "type": "api_error",
        "param": None,
        "code": "no_eligible_worker",
        "metadata": {"request_id": REQUEST_ID},
    }
    assert (headers["Retry-After"], headers["x-should-retry"]) == ("30", "false")
    event = grace_error(1.5, REQUEST_ID).stream_event()
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert json.loads(event[len(b"data: ") :])["error"]["metadata"] == {
        "request_id": REQUEST_ID,
        "retry_after": 30,
        "should_retry": False,
    }


# --- Fail-fast admission ----------------------------------------------------------------------------------------


def native_status(**fields: Any) -> NativeStatus:
    return NativeStatus.model_validate({"waiting": 1, **fields})


@pytest.mark.parametrize(
    ("fields", "remaining", "reason"),
    [
        ({"eligible_worker_threads": 0}, 300, NO_ELIGIBLE_THREADS),
        ({"eligible_worker_threads": 0, "wait_time": 900}, 300, NO_ELIGIBLE_THREADS),
        ({"eligible_worker_threads": 3, "wait_time": 301}, 300, WAIT_EXCEEDS_BUDGET),
        ({"eligible_worker_threads": 3, "wait_time": 300}, 300, None),
        ({"eligible_worker_threads": 3, "wait_time": 10}, 300, None),
        ({"wait_time": 10}, 300, None),  # an older Horde: threads unknown, never zero
        ({"wait_time": 400}, 300, WAIT_EXCEEDS_BUDGET),
        ({"eligible_worker_threads": 0, "processing": 1, "waiting": 0}, 300, None),
        ({"eligible_worker_threads": 3, "wait_time": 900, "processing": 1, "waiting": 0}, 300, None),
    ],
)
def test_queue_refusal_reason(fields: dict, remaining: float, reason: str | None) -> None:
    """ref: fail-fast-admission.1, fail-fast-admission.2, fail-fast-admission.7, queue-position-refresh.6"""
    assert queue_refusal_reason(native_status(**fields), remaining) == reason


@pytest.mark.parametrize(
    ("fields", "informative"),
    [
        ({}, False),
        ({"queue_position": 3}, True),
        ({"wait_time": 12}, True),
        ({"processing": 1, "waiting": 0}, True),
        ({"finished": 1, "waiting": 0, "done": True}, True),
    ],
)
def test_has_queue_information(fields: dict, informative: bool) -> None:
    """ref: queue-position-refresh.2, queue-position-refresh.3"""
    assert has_queue_information(native_status(**fields)) is informative


@pytest.mark.parametrize(
    ("wait_time", "retry_after"),
    [(None, QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS), (0, 60), (1, 1), (45, 45), (60, 60), (61, 60), (3600, 60)],
)
def test_queue_retry_after_is_capped(wait_time: int | None, retry_after: int) -> None:
    """ref: fail-fast-admission.3"""
    assert QUEUE_UNAVAILABLE_RETRY_AFTER_CAP_SECONDS == 60
    assert queue_retry_after(wait_time) == retry_after


@pytest.mark.parametrize(
    ("reason", "threads", "wait_time", "remaining", "message"),
    [
        (
            NO_ELIGIBLE_THREADS,
            0,
            0,
            299.7,
            "No eligible worker thread is online for this request (0 eligible worker threads, an estimated wait of 0 "
            'seconds, 299 seconds of budget left) under horde.availability_mode "fail_fast". The request was '
            "cancelled.",
        ),
        (
            WAIT_EXCEEDS_BUDGET,
            1,
            420,
            20,
            "The estimated queue wait exceeds this request's remaining time budget (1 eligible worker thread, an "
            'estimated wait of 420 seconds, 20 seconds of budget left) under horde.availability_mode "fail_fast". '
            "The request was cancelled.",
        ),
        (
            WAIT_EXCEEDS_BUDGET,
            None,
            1,
            0.5,
            "The estimated queue wait exceeds this request's remaining time budget (an unknown number of eligible "
            "worker threads, an estimated wait of 1 second, 0 seconds of budget left) under horde.availability_mode "
            '"fail_fast". The request was cancelled.',
        ),
    ],
)
def test_queue_unavailable_message(
    reason: str, threads: int | None, wait_time: int, remaining: float, message: str
) -> None:
    """ref: fail-fast-admission.5"""
    assert (
        queue_unavailable_message(reason, threads=threads, wait_time=wait_time, remaining_seconds=remaining) == message
    )


@pytest.mark.parametrize(
    ("fields", "reason", "retry_after"),
    [
        ({"eligible_worker_threads": 0}, NO_ELIGIBLE_THREADS, "60"),
        ({"eligible_worker_threads": 2, "wait_time": 45}, WAIT_EXCEEDS_BUDGET, "45"),
        ({"eligible_worker_threads": 2, "wait_time": 900}, WAIT_EXCEEDS_BUDGET, "60"),
    ],
)
def test_queue_unavailable_envelope(fields: dict, reason: str, retry_after: str) -> None:
    """ref: fail-fast-admission.3, fail-fast-admission.4, error-attributes.2"""
    status_read = native_status(**fields)
    status, body, headers = envelope_of(
        queue_unavailable_error(reason, status_read, remaining_seconds=10.2, request_id=REQUEST_ID)
    )
    assert status == 503
    assert (body["type"], body["code"], body["param"]) == ("api_error", "queue_unavailable", "horde.availability_mode")
    assert body["metadata"] == {
        "request_id": REQUEST_ID,
        "reason": reason,
        "eligible_worker_threads": fields["eligible_worker_threads"],
        "wait_time": fields.get("wait_time", 0),
        "remaining_budget_seconds": 10,
    }
    assert headers["Retry-After"] == retry_after
    assert "x-should-retry" not in headers
