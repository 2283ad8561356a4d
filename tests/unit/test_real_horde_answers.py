"""chat.horde.real_horde_answers: the real AI Horde's answers the native contract does not describe, and the front's
answer to each: ``Retry-After`` only on "retry later", ``KudosUpfront``, payload validation messages, the server's
4096-token bound, a cancelled (emptied) request, and censored generations. Through Django's test client against
tests/unit/fake_real_horde.py where the route matters."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient

from chat.horde import real_horde_answers
from chat.horde.native import HordeRefusal
from chat.horde.refusals import error_from_refusal
from chat.protocol.chat_request import ChatCompletionRequest
from chat.serving.text_route import MAX_TEXT_MAX_LENGTH, MIN_TEXT_MAX_LENGTH
from tests.unit.fake_real_horde import DONE_STATUS, EMPTIED_STATUS, LIMITER_HEADERS, MODEL, RealHorde, installed

USER = [{"role": "user", "content": "Hi"}]
CHAT = {"model": MODEL, "messages": USER}

KUDOS_MESSAGE = (
    "Due to heavy demand, for requests over 256 tokens, the client needs to already have the required kudos. "
    "This request requires 24.38 kudos to fulfil."
)
KUDOS_ADVICE = (
    "The API key sent must already hold those kudos: register an account at the Horde (on the public AI Horde, "
    "https://aihorde.net/register) and send its API key as the bearer key; kudos are earned by running a worker or "
    "given by other users. Or ask for fewer tokens (a smaller '{param}')."
)
VALIDATION_BODY = {
    "errors": {"params.max_length": "5000 is greater than the maximum of 4096"},
    "message": "Input payload validation failed",
}


def refusal(status: int, rc: str | None, message: str, **body: Any) -> HordeRefusal:
    return HordeRefusal(
        status=status, message=message, rc=rc, body={"message": message, "rc": rc, **body}, headers=LIMITER_HEADERS
    )


# --- Retry-After -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("native", "status", "retry_after"),
    [
        (refusal(401, "InvalidAPIKey", "No user matching sent API Key."), 401, None),
        (refusal(403, "KudosUpfront", KUDOS_MESSAGE), 403, None),
        (refusal(400, None, "Input payload validation failed", errors={"params.top_p": "bad"}), 400, None),
        (refusal(404, "UnknownModel", "'models[0]' is not a known text model."), 404, None),
        (refusal(403, "TooManyNewIPs", "Too many new IPs."), 403, None),
        (refusal(429, None, "2 per 1 second"), 429, 1),
        (refusal(503, "MaintenanceMode", "The Horde is in maintenance."), 503, 1),
    ],
)
def test_retry_after_is_copied_only_onto_retry_later_answers(
    native: HordeRefusal, status: int, retry_after: int | None
) -> None:
    """The real Horde sends ``Retry-After: 1`` on every answer; a permanent refusal must not tell clients to retry
    in a second."""
    error = error_from_refusal(native, request=ChatCompletionRequest.model_validate(CHAT))
    assert (error.status, error.retry_after) == (status, retry_after)
    assert ("Retry-After" in error.headers()) is (retry_after is not None)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7),
        ({"Retry-After": "2.9"}, 2),
        ({"Retry-After": "0"}, 1),
        ({"Retry-After": "0.4"}, 1),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], seconds: int | None) -> None:
    assert real_horde_answers.retry_after_seconds(headers) == seconds
    assert real_horde_answers.retry_later_seconds(503, headers) == seconds
    assert real_horde_answers.retry_later_seconds(401, headers) is None


# --- KudosUpfront ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "max_tokens"),
        ({"max_tokens": 600}, "max_tokens"),
        ({"max_completion_tokens": 600, "max_tokens": 20}, "max_completion_tokens"),
    ],
)
def test_kudos_upfront_is_403_at_the_clients_limit_key_without_retry(body: dict, param: str) -> None:
    request = ChatCompletionRequest.model_validate({**CHAT, **body})
    error = error_from_refusal(refusal(403, "KudosUpfront", KUDOS_MESSAGE), request=request)
    assert error.envelope() == {
        "error": {
            "message": f"{KUDOS_MESSAGE} {KUDOS_ADVICE.format(param=param)}",
            "type": "permission_error",
            "param": param,
            "code": "KudosUpfront",
        }
    }
    assert error.headers() == {"x-should-retry": "false"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": 600}, "max_tokens"),
        ("/v1/responses", {"model": MODEL, "input": "Hi", "max_output_tokens": 600}, "max_output_tokens"),
        ("/v1/responses", {"model": MODEL, "input": "Hi"}, "max_output_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 600}, "max_tokens"),
    ],
)
async def test_kudos_upfront_through_every_route(path: str, body: dict, param: str) -> None:
    horde = RealHorde(submit=(403, {"message": KUDOS_MESSAGE, "rc": "KudosUpfront"}))
    with installed(horde):
        response = await AsyncClient().post(path, body, content_type="application/json")
    assert response.status_code == 403
    assert "Retry-After" not in response
    assert response["x-should-retry"] == "false"
    error = response.json()["error"]
    advice = KUDOS_ADVICE.format(param=param)  # chat.responses writes the quoted chat name as the Responses one
    assert (error["code"], error["param"], error["type"]) == ("KudosUpfront", param, "permission_error")
    assert error["message"] == f"{KUDOS_MESSAGE} {advice}"


# --- validation errors -------------------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": 1000}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 1000}, "max_tokens"),
        ("/v1/responses", {"model": MODEL, "input": "Hi", "max_output_tokens": 1000}, "max_output_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 1000}, "max_tokens"),
    ],
)
async def test_a_horde_validation_error_names_the_openai_param_with_the_fields_message(
    path: str, body: dict, param: str
) -> None:
    """The Horde's 400 without rc names ``params.max_length`` (its message is the mock's; the server bound is checked
    before submit, below): the client's param (``max_tokens`` per NATIVE_FIELD_PARAMETERS, the Responses name on
    ``/v1/responses``), with the field's own message.
    ref: value-and-contract-validation.6, value-and-contract-validation.7"""
    horde = RealHorde(submit=(400, VALIDATION_BODY))
    with installed(horde):
        response = await AsyncClient().post(path, body, content_type="application/json")
    assert response.status_code == 400
    assert "Retry-After" not in response
    assert response.json() == {
        "error": {
            "message": f"Invalid '{param}': 5000 is greater than the maximum of 4096.",
            "type": "invalid_request_error",
            "param": param,
            "code": "BadRequest",
        }
    }


def test_a_validation_error_without_a_field_message_keeps_the_horde_message() -> None:
    native = refusal(400, None, "Input payload validation failed", errors={"params.max_length": ""})
    error = error_from_refusal(native)
    assert (error.param, error.message) == ("max_tokens", "Input payload validation failed")


# --- the server's 4096 bound -------------------------------------------------------------------------------------

BOUND_MESSAGE = (
    "No worker eligible for this request accepts a completion limit of {limit} tokens: the AI Horde's text "
    "generation API generates at most 4096 tokens per request (the server's bound; ask for 4096 or fewer)."
)


def test_the_servers_bound_is_the_stricter_one() -> None:
    assert (MIN_TEXT_MAX_LENGTH, MAX_TEXT_MAX_LENGTH, real_horde_answers.REAL_HORDE_MAX_TEXT_LENGTH) == (
        16,
        16384,
        4096,
    )
    assert real_horde_answers.text_length_refusal(4096, "max_tokens", (16, 16384)) is None
    above = real_horde_answers.text_length_refusal(4097, "max_tokens", (16, 16384))
    assert above is not None and above.message == BOUND_MESSAGE.format(limit=4097)
    # a horde-sdk bound below the server's applies and is cited as the text API's range
    sdk = real_horde_answers.text_length_refusal(3000, "max_tokens", (16, 2048))
    assert sdk is not None and sdk.message == (
        "No worker eligible for this request accepts a completion limit of 3000 tokens: the Horde's text "
        "generation API generates between 16 and 2048 tokens."
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": 5000}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 5000}, "max_completion_tokens"),
        ("/v1/responses", {"model": MODEL, "input": "Hi", "max_output_tokens": 5000}, "max_output_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 5000}, "max_tokens"),
    ],
)
async def test_a_limit_above_the_servers_bound_is_refused_before_submit(path: str, body: dict, param: str) -> None:
    horde = RealHorde()
    with installed(horde):
        response = await AsyncClient().post(path, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": BOUND_MESSAGE.format(limit=5000),
            "type": "invalid_request_error",
            "param": param,
            "code": "no_worker_supports_limit",
        }
    }
    assert horde.submits == 0


# --- a cancelled or emptied request ------------------------------------------------------------------------------

CANCELLED = {
    "message": (
        "The Horde cancelled this request before any worker finished it (its status reads nothing waiting, "
        "processing or finished): someone cancelled it with its id, or the Horde dropped it. Send it again to start "
        "a new request."
    ),
    "type": "api_error",
    "param": None,
    "code": "ChatRequestCancelled",
    "metadata": {"request_id": "text-1"},
}


@pytest.mark.parametrize(
    ("changes", "emptied"),
    [
        ({}, True),
        ({"waiting": 1}, False),
        ({"processing": 1}, False),
        ({"finished": 1}, False),
        ({"is_possible": True}, True),
        ({"done": True}, False),
        ({"faulted": True}, False),
        ({"generations": [{"text": "x"}]}, False),
        ({"waiting": None}, False),
    ],
)
def test_is_emptied(changes: dict, emptied: bool) -> None:
    assert real_horde_answers.is_emptied({**EMPTIED_STATUS, **changes}) is emptied


def test_an_emptied_request_a_worker_could_serve_ends_at_the_second_read() -> None:
    """``is_possible`` is the online workers' verdict alone: true after the cancel of a served model's request."""
    assert real_horde_answers.emptied_reads_to_end(EMPTIED_STATUS) == 1
    assert real_horde_answers.emptied_reads_to_end({**EMPTIED_STATUS, "is_possible": True}) == 2


@pytest.mark.asyncio
async def test_a_cancelled_request_for_a_served_model_ends_at_the_second_read() -> None:
    horde = RealHorde(status={**EMPTIED_STATUS, "is_possible": True})
    with installed(horde, nonstream_timeout_seconds=300):
        response = await AsyncClient().post("/v1/chat/completions", CHAT, content_type="application/json")
    assert (response.status_code, response.json()) == (502, {"error": CANCELLED})
    reads = [call for call in horde.calls if call[1].startswith("/v2/generate/text/status") and call[0] == "GET"]
    assert len(reads) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "path_body",
    [
        ("/v1/chat/completions", CHAT),
        ("/v1/responses", {"model": MODEL, "input": "Hi"}),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi"}),
    ],
)
async def test_a_cancelled_request_ends_at_once_with_chat_request_cancelled(path_body: tuple[str, dict]) -> None:
    path, body = path_body
    horde = RealHorde(status=dict(EMPTIED_STATUS))
    with installed(horde, nonstream_timeout_seconds=300):
        response = await AsyncClient().post(path, body, content_type="application/json")
    assert response.status_code == 502
    assert response["x-should-retry"] == "false"
    assert "Retry-After" not in response
    assert response.json() == {"error": CANCELLED}
    reads = [call for call in horde.calls if call[1].startswith("/v2/generate/text/status")]
    assert reads[0] == ("GET", "/v2/generate/text/status/text-1")


@pytest.mark.asyncio
async def test_a_cancelled_streamed_request_ends_with_the_error_event() -> None:
    horde = RealHorde(status=dict(EMPTIED_STATUS))
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", {**CHAT, "stream": True}, content_type="application/json"
        )
        # the first read decides before the headers (reference: Stream errors): the same JSON error
        assert response.status_code == 502
        assert response.json() == {"error": CANCELLED}


# --- censored generations ----------------------------------------------------------------------------------------


def censored_status(state: str, text: str = "") -> dict[str, Any]:
    generation = {**DONE_STATUS["generations"][0], "text": text, "state": state}
    return {**DONE_STATUS, "generations": [generation]}


@pytest.mark.asyncio
@pytest.mark.parametrize("state", ["censored", "csam"])
async def test_a_censored_chat_completion_has_finish_reason_content_filter(state: str) -> None:
    horde = RealHorde(status=censored_status(state, " [censored]"))
    with installed(horde):
        response = await AsyncClient().post("/v1/chat/completions", CHAT, content_type="application/json")
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"], choice["native_finish_reason"]) == (
        "[censored]",
        "content_filter",
        state,
    )


@pytest.mark.asyncio
async def test_an_ok_generation_keeps_its_finish_reason() -> None:
    horde = RealHorde()
    with installed(horde):
        response = await AsyncClient().post("/v1/chat/completions", CHAT, content_type="application/json")
    choice = response.json()["choices"][0]
    assert (choice["finish_reason"], choice["native_finish_reason"]) == ("stop", None)


def sse_data(raw: bytes) -> list[Any]:
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line.removeprefix("data: ")))
    return events


async def streamed(response: Any) -> bytes:
    chunks = [chunk async for chunk in response.streaming_content]
    return b"".join(chunk if isinstance(chunk, bytes) else chunk.encode() for chunk in chunks)


@pytest.mark.asyncio
async def test_a_censored_streamed_chat_completion_finishes_with_content_filter() -> None:
    horde = RealHorde(status=censored_status("censored"))
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", {**CHAT, "stream": True}, content_type="application/json"
        )
        raw = await streamed(response)
    finishes = [
        choice["finish_reason"]
        for event in sse_data(raw)
        for choice in event.get("choices", [])
        if choice.get("finish_reason") is not None
    ]
    assert finishes == ["content_filter"]


@pytest.mark.asyncio
async def test_a_censored_response_is_incomplete_for_content_filter() -> None:
    horde = RealHorde(status=censored_status("csam"))
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/responses", {"model": MODEL, "input": "Hi"}, content_type="application/json"
        )
    body = response.json()
    assert (body["status"], body["incomplete_details"]) == ("incomplete", {"reason": "content_filter"})


@pytest.mark.asyncio
async def test_a_censored_legacy_completion_has_finish_reason_content_filter() -> None:
    horde = RealHorde(status=censored_status("censored", "Replaced."))
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/completions", {"model": MODEL, "prompt": "Hi"}, content_type="application/json"
        )
    choice = response.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("Replaced.", "content_filter")


# --- outcome classes ---------------------------------------------------------------------------------------------


def test_the_new_codes_have_an_outcome_class() -> None:
    """A 403 KudosUpfront is the client's to fix (like max_kudos_exceeded); a request the Horde cancelled is the
    service's fault, as a request done without a generation is. ref: outcome-class.1"""
    from chat.metrics import CLIENT_ERROR, SERVICE_FAULT, outcome_class_for

    assert (CLIENT_ERROR, SERVICE_FAULT) == ("client_error", "service_fault")
    assert outcome_class_for("KudosUpfront") == CLIENT_ERROR
    assert outcome_class_for("ChatRequestCancelled") == SERVICE_FAULT


@pytest.mark.asyncio
async def test_a_censored_streamed_response_ends_incomplete_for_content_filter() -> None:
    horde = RealHorde(status=censored_status("censored"))
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/responses", {"model": MODEL, "input": "Hi", "stream": True}, content_type="application/json"
        )
        events = sse_data(await streamed(response))
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert (last["response"]["status"], last["response"]["incomplete_details"]) == (
        "incomplete",
        {"reason": "content_filter"},
    )


@pytest.mark.asyncio
async def test_a_censored_streamed_legacy_completion_finishes_with_content_filter() -> None:
    horde = RealHorde(status=censored_status("csam"))
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/completions", {"model": MODEL, "prompt": "Hi", "stream": True}, content_type="application/json"
        )
        events = sse_data(await streamed(response))
    assert [event["choices"][0]["finish_reason"] for event in events] == ["content_filter"]
    assert events[0]["choices"][0]["text"] == ""
