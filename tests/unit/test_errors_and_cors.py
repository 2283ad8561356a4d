"""The error envelope, refusal mapping and browser access (reference: Browser access, Error attributes)."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from chat.errors import OpenAIError
from chat.horde.native import HordeRefusal
from chat.horde.refusals import error_from_refusal

EXPOSED = "Retry-After, x-should-retry, x-horde-queue-position, x-horde-wait-time"
"""The front's ``Access-Control-Expose-Headers``: the retry headers and the queue-progress headers."""


def test_envelope_has_message_type_param_code() -> None:
    error = OpenAIError(status=400, message="Bad.", code="BadRequest", param="messages")
    assert error.envelope() == {
        "error": {"message": "Bad.", "type": "invalid_request_error", "param": "messages", "code": "BadRequest"}
    }
    response = error.to_response()
    assert response.status_code == 400
    assert json.loads(response.content) == error.envelope()
    assert response["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize(
    ("status", "rc", "headers", "expected_status", "expected_code", "retry_after", "should_retry"),
    [
        (503, "NoEligibleWorker", {}, 503, "no_eligible_worker", "30", "false"),
        (429, None, {"Retry-After": "7"}, 429, "rate_limit_exceeded", "7", None),
        (429, "TooManyPrompts", {}, 429, "TooManyPrompts", None, None),
        (401, "InvalidAPIKey", {"Retry-After": "1"}, 401, "InvalidAPIKey", None, "false"),
        (503, "MaintenanceMode", {}, 503, "MaintenanceMode", None, None),
        (500, "InternalError", {}, 502, "HordeUnavailable", None, None),
    ],
)
def test_native_refusals_map_to_openai_envelopes(
    status: int,
    rc: str | None,
    headers: dict,
    expected_status: int,
    expected_code: str,
    retry_after: str | None,
    should_retry: str | None,
) -> None:
    """ref: model-availability.2, model-availability.3, native-admission-refusals.5, error-attributes.1"""
    refusal = HordeRefusal(
        status=status, message="native says no", rc=rc, body={"message": "native says no"}, headers=headers
    )
    response = error_from_refusal(refusal).to_response()
    body = json.loads(response.content)["error"]
    assert response.status_code == expected_status
    assert body["code"] == expected_code
    assert response.get("Retry-After") == retry_after
    assert response.get("x-should-retry") == should_retry
    if expected_status < 500 or expected_code == "no_eligible_worker":
        assert body["message"] == "native says no"


def test_native_validation_failure_is_bad_request_with_first_field() -> None:
    refusal = HordeRefusal(
        status=400,
        message="Input payload validation failed",
        rc=None,
        body={"message": "Input payload validation failed", "errors": {"params.top_p": "x"}},
    )
    error = error_from_refusal(refusal)
    assert (error.status, error.code, error.param, error.message) == (400, "BadRequest", "top_p", "Invalid 'top_p': x.")


@pytest.mark.asyncio
async def test_preflight_and_cors_on_every_response() -> None:
    """ref: browser-access.1"""
    client = AsyncClient()
    preflight = await client.options(
        "/v1/chat/completions",
        headers={
            "Origin": "https://lite.koboldai.net",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, x-stainless-retry-count",
        },
    )
    assert preflight.status_code == 200
    assert preflight.content == b""
    assert preflight["Access-Control-Allow-Origin"] == "*"
    assert preflight["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"
    allowed = preflight["Access-Control-Allow-Headers"].split(", ")
    for name in ("authorization", "content-type", "x-stainless-os", "x-stainless-retry-count", "x-stainless-timeout"):
        assert name in allowed
    assert preflight["Access-Control-Max-Age"] == "86400"
    health = await client.get("/healthz", headers={"Origin": "https://lite.koboldai.net"})
    assert health.status_code == 200
    assert health["Access-Control-Allow-Origin"] == "*"
    assert health["Access-Control-Expose-Headers"] == EXPOSED
    for origin in ({"Origin": "https://lite.koboldai.net"}, {}):
        refused = await client.post(
            "/v1/chat/completions", data=b"{not json", content_type="application/json", headers=origin
        )
        assert refused.status_code == 400
        assert refused["Access-Control-Allow-Origin"] == "*"
        assert refused["Access-Control-Expose-Headers"] == EXPOSED
        assert json.loads(refused.content)["error"]["code"] == "BadRequest"


@pytest.mark.asyncio
async def test_every_cors_response_exposes_the_queue_progress_headers() -> None:
    """A browser client can read ``x-horde-queue-position`` and ``x-horde-wait-time`` (issue 25): every place the
    front sends CORS headers exposes them beside ``Retry-After`` and ``x-should-retry``: django-cors-headers'
    responses (an ``Origin``), the chat views' own (errors, replies, streams) and the admission guards'. An
    addition to the reference's two exposed headers (issue 25; README, Deliberate deviations).
    ref: browser-access.1
    """
    import asyncio

    from chat.cors_settings import CORS_EXPOSE_HEADERS
    from chat.errors import CORS_HEADERS
    from chat.rendering.progress import WAITING, QueueProgress
    from chat.views.prelude import event_stream_response, with_progress

    assert CORS_HEADERS["Access-Control-Expose-Headers"] == EXPOSED
    assert CORS_EXPOSE_HEADERS == ("Retry-After", "x-should-retry", "x-horde-queue-position", "x-horde-wait-time")
    client = AsyncClient()
    health = await client.get("/healthz", headers={"Origin": "https://lite.koboldai.net"})
    assert health["Access-Control-Expose-Headers"] == EXPOSED
    progress = QueueProgress(WAITING, 3, 12, 1, 0)
    refused = with_progress(OpenAIError(status=503, message="No.", code="no_eligible_worker").to_response(), progress)
    assert (refused["Access-Control-Expose-Headers"], refused["x-horde-queue-position"]) == (EXPOSED, "3")

    async def no_events():  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        yield b"data: [DONE]\n\n"

    stream = event_stream_response(no_events(), lambda: None, progress)
    assert (stream["Access-Control-Expose-Headers"], stream["x-horde-wait-time"]) == (EXPOSED, "12")


def test_the_front_passes_its_own_browser_access_checks() -> None:
    """oaifront's settings are what chat.cors_settings asks of a host project: no chat.W00x warning."""
    from chat.checks import check_browser_access

    assert check_browser_access() == []


def test_a_project_without_django_cors_headers_is_warned(settings: object) -> None:
    """A host project that forgot django-cors-headers hears it from ``manage.py check``."""
    from chat.checks import check_browser_access

    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "corsheaders"]  # type: ignore[attr-defined]
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "corsheaders" not in m]  # type: ignore[attr-defined]
    settings.CORS_EXPOSE_HEADERS = ["Retry-After"]  # type: ignore[attr-defined]
    warnings = {warning.id: warning.msg for warning in check_browser_access()}
    assert warnings == {
        "chat.W001": "django-cors-headers is not in INSTALLED_APPS.",
        "chat.W002": "corsheaders.middleware.CorsMiddleware is not in MIDDLEWARE.",
        "chat.W004": "CORS_EXPOSE_HEADERS or CORS_ALLOW_HEADERS lacks x-should-retry, x-horde-queue-position, "
        "x-horde-wait-time.",
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/images/edits", "/v1/files", "/docs/"])
async def test_unknown_routes_answer_in_the_openai_envelope(path: str) -> None:
    """A route the front does not serve is a JSON 404, never Django's HTML page."""
    response = await AsyncClient().get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {
        "error": {
            "message": f"Unknown route: GET {path}. The front serves POST /v1/chat/completions, POST /v1/responses, "
            "POST /v1/completions, POST /v1/images/generations, GET /v1/models and GET /v1/models/{model}; /docs "
            "describes them.",
            "type": "not_found_error",
            "param": None,
            "code": "unknown_url",
        }
    }


def test_invalid_configuration_names_the_environment_variable() -> None:
    from pydantic import ValidationError

    from chat.settings import FrontSettings, describe_invalid_settings

    with pytest.raises(ValidationError) as invalid:
        FrontSettings(keepalive_seconds="ten", horde_url=3)
    assert describe_invalid_settings(invalid.value) == (
        "Invalid front configuration: HORDE_URL=3: Input should be a valid string; "
        "HORDE_OAI_KEEPALIVE_SECONDS='ten': Input should be a valid number, unable to parse string as a number"
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("key", ["caf\u00e9", "tab\tkey", "del\x7fkey"])
async def test_a_bearer_key_no_horde_key_can_be_is_401_before_anything_is_sent(key: str) -> None:
    """A key that cannot travel as the native ``apikey`` header is refused (never a 500), before the body is read."""
    response = await AsyncClient().post(
        "/v1/chat/completions",
        data=b"{not json",
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 401
    assert json.loads(response.content) == {
        "error": {
            "message": "The API key in the Authorization header is not a valid Horde API key: a key is printable "
            "ASCII. Send 'Authorization: Bearer <your Horde API key>', or no header for the anonymous key.",
            "type": "authentication_error",
            "param": None,
            "code": "InvalidAPIKey",
        }
    }
