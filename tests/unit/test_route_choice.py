"""chat.serving.route_choice: on a Horde without chat routes (the real AI Horde), a model no online worker serves is 503
``no_eligible_worker`` at once without a submit on every route, and the chat route's HTML 404 means "no chat routes"
unless the heartbeat fails too. Through Django's test client against tests/unit/fake_real_horde.py (the real Horde's
answers), and the choice itself with small stubs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.test import AsyncClient

from chat.horde.budget import HordeBudget
from chat.horde.native import HordeApiRootWrong, HordeUnreachable
from chat.serving import route_choice
from chat.serving.request_record import RequestRecord
from tests.unit.fake_real_horde import HORDE_URL, MODEL, RealHorde, installed

pytestmark = pytest.mark.asyncio

UNSERVED = "koboldcpp/NoSuchModel-3B"
NO_WORKER = (
    f"No worker is currently serving the model '{UNSERVED}'. Retry later. GET /v1/models lists the models served now."
)
USER = [{"role": "user", "content": "Hi"}]

ROUTES = [
    ("/v1/chat/completions", {"model": UNSERVED, "messages": USER}),
    ("/v1/chat/completions", {"model": UNSERVED, "messages": USER, "stream": True}),
    ("/v1/responses", {"model": UNSERVED, "input": "Hi"}),
    ("/v1/responses", {"model": UNSERVED, "input": "Hi", "stream": True}),
    ("/v1/completions", {"model": UNSERVED, "prompt": "Hi"}),
]


def assert_no_eligible_worker(response: Any, message: str) -> None:
    assert response.status_code == 503
    assert (response["Retry-After"], response["x-should-retry"]) == ("30", "false")
    assert response.json() == {
        "error": {"message": message, "type": "api_error", "param": None, "code": "no_eligible_worker"}
    }


@pytest.mark.parametrize(("path", "body"), ROUTES)
async def test_an_unserved_model_is_503_no_eligible_worker_at_once_without_a_submit(path: str, body: dict) -> None:
    """The real Horde lists only models with an online worker and has no chat routes: the front answers from the
    model list, before any submit, on chat completions, Responses and legacy completions alike.
    ref: model-availability.1, model-availability.2, model-availability.3, native-admission-refusals.5"""
    horde = RealHorde()
    with installed(horde):
        response = await AsyncClient().post(path, body, content_type="application/json")
    assert_no_eligible_worker(response, NO_WORKER)
    assert horde.submits == 0
    assert horde.calls == [("GET", "/v2/status/models")]


async def test_listed_models_none_served_name_them_all() -> None:
    horde = RealHorde()
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", {"models": [UNSERVED, "other/x"], "messages": USER}, content_type="application/json"
        )
    assert_no_eligible_worker(
        response,
        f"No worker is currently serving any of the listed models ('{UNSERVED}', 'other/x'). Retry later. "
        "GET /v1/models lists the models served now.",
    )
    assert horde.submits == 0


async def test_listed_models_with_one_served_take_the_text_path_with_every_name() -> None:
    """The Horde accepts any name, and a worker for one of them takes the request."""
    other = "koboldcpp/Qwen2.5-3B-Instruct"  # the same prompt format as MODEL
    horde = RealHorde()
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", {"models": [other, MODEL], "messages": USER}, content_type="application/json"
        )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Hello there."
    assert [submitted["models"] for submitted in horde.submitted] == [[other, MODEL]]


async def test_the_stage_of_the_refusal_is_submit() -> None:
    """ref: error-attributes.3"""
    seen: list[RequestRecord] = []
    original = RequestRecord.finish

    def spy(self: RequestRecord) -> None:
        seen.append(self)
        original(self)

    horde = RealHorde()
    with installed(horde), pytest.MonkeyPatch.context() as patch:
        patch.setattr(RequestRecord, "finish", spy)
        await AsyncClient().post("/v1/chat/completions", ROUTES[0][1], content_type="application/json")
    assert [(record.code, record.stage, record.http_status) for record in seen] == [
        ("no_eligible_worker", "submit", 503)
    ]


async def test_readyz_stays_ready_on_a_horde_without_chat_routes() -> None:
    """Ready; and as the Horde's answers carry its limiter's headers and the front has no passkey, ``details`` says
    that every user shares one address budget of 2 submits a second and 90 a minute."""
    horde = RealHorde()
    with installed(horde, readiness_cache_seconds=0):
        response = await AsyncClient().get("/readyz")
    assert (response.status_code, response.json()) == (
        200,
        {
            "status": "ready",
            "checks": {"horde": "ok"},
            "details": {
                "horde_budget": "without HORDE_OAI_PROXY_PASSKEY every user shares the front's one address budget at "
                "the Horde: 2 submits a second and 90 a minute for all of them; beyond it a request waits its turn or "
                "is answered 429 rate_limit_exceeded (docs/public-horde.md)"
            },
        },
    )


async def test_readyz_names_no_shared_address_budget_with_a_passkey() -> None:
    horde = RealHorde()
    with installed(horde, readiness_cache_seconds=0) as runtime:
        runtime.horde.budget = HordeBudget("pk-test")
        response = await AsyncClient().get("/readyz")
    assert (response.status_code, response.json()) == (200, {"status": "ready", "checks": {"horde": "ok"}})


async def test_a_chat_route_404_beside_a_live_heartbeat_is_remembered_and_served_on_the_text_path() -> None:
    """The model list could not be read (a 429), so the chat route was tried: its HTML 404 with a live heartbeat
    means the Horde has no chat routes, and the request is served on the text path; the next request goes there at
    once, without trying the chat route or reading the heartbeat again."""
    horde = RealHorde(models_status=429)
    with installed(horde):
        first = await AsyncClient().post(
            "/v1/chat/completions", {"model": MODEL, "messages": USER}, content_type="application/json"
        )
        second = await AsyncClient().post(
            "/v1/chat/completions", {"model": MODEL, "messages": USER}, content_type="application/json"
        )
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json()["x_horde"]["api"] == "text"
    chat_calls = [call for call in horde.calls if call[1].startswith("/v2/generate/chat") or "heartbeat" in call[1]]
    assert chat_calls == [("POST", "/v2/generate/chat/async"), ("GET", "/v2/status/heartbeat")]
    # Each of the three model-list reads is refused 429 and retried twice after its Retry-After (1 s), on the
    # budget's clock (fake_real_horde.BudgetTime): no real sleep.
    assert horde.calls.count(("GET", "/v2/status/models")) == 9
    assert horde.budget_time.sleeps == [1.0] * 6
    assert route_choice.chat_routes_missing(HORDE_URL) is False  # the context forgot it


async def test_a_chat_route_404_with_a_failing_heartbeat_is_the_api_root_looking_wrong() -> None:
    horde = RealHorde(models_status=429, heartbeat_alive=False)
    with installed(horde):
        response = await AsyncClient().post(
            "/v1/chat/completions", {"model": MODEL, "messages": USER}, content_type="application/json"
        )
    assert response.status_code == 502
    assert "Retry-After" not in response
    assert response.json()["error"] == {
        "message": (
            f"The Horde's API root looks wrong: {HORDE_URL} answered 404 Not Found to POST /v2/generate/chat/async. "
            "HORDE_URL must name the API root, which usually ends in /api (such as https://aihorde.net/api)."
        ),
        "type": "api_error",
        "param": None,
        "code": "HordeUnavailable",
    }
    assert horde.submits == 1
    assert horde.budget_time.sleeps == [1.0, 1.0]  # the model list's 429 retried twice after its Retry-After


async def test_under_off_a_horde_without_chat_routes_says_so() -> None:
    horde = RealHorde()
    message = (
        f"The Horde at {HORDE_URL} has no native chat routes (POST /v2/generate/chat/async answered 404 while its "
        "heartbeat answers), and HORDE_OAI_TEXT_API_FALLBACK is off. Set it to auto to serve its models through the "
        "Horde's text generation API."
    )
    with installed(horde, text_api_fallback="off"):
        first = await AsyncClient().post(
            "/v1/chat/completions", {"model": MODEL, "messages": USER}, content_type="application/json"
        )
        second = await AsyncClient().post(
            "/v1/chat/completions", {"model": MODEL, "messages": USER}, content_type="application/json"
        )
    for response in (first, second):
        assert response.status_code == 502
        assert response.json()["error"] == {
            "message": message,
            "type": "api_error",
            "param": None,
            "code": "HordeUnavailable",
        }
    assert horde.submits == 1  # the second request is answered from the verdict


# --- the choice alone --------------------------------------------------------------------------------------------


class StubHorde:
    base_url = "http://stub.test/api"
    timeout = 1.0

    def __init__(self, entries: list[dict[str, Any]] | Exception, heartbeat: Exception | None = None) -> None:
        self.entries = entries
        self.heartbeat_failure = heartbeat
        self.heartbeats = 0

    async def text_models(self) -> list[dict[str, Any]]:
        if isinstance(self.entries, Exception):
            raise self.entries
        return self.entries

    async def heartbeat(self) -> None:
        self.heartbeats += 1
        if self.heartbeat_failure is not None:
            raise self.heartbeat_failure


def stub_runtime(horde: StubHorde, mode: str = "auto") -> SimpleNamespace:
    return SimpleNamespace(settings=SimpleNamespace(text_api_fallback=mode, models_cache_seconds=0), horde=horde)


CHAT_ENTRY = {"name": "org/chat-8b", "count": 1, "chat": {"workers": 1}}
TEXT_ENTRY = {"name": MODEL, "count": 1}


@pytest.fixture(autouse=True)
def fresh_verdicts() -> Any:
    route_choice.forget_verdicts()
    yield
    route_choice.forget_verdicts()


@pytest.mark.parametrize(
    ("entries", "mode", "models", "route"),
    [
        ([TEXT_ENTRY], "auto", [MODEL], True),
        ([TEXT_ENTRY], "on", [MODEL], True),
        ([TEXT_ENTRY, CHAT_ENTRY], "on", [MODEL], True),
        ([TEXT_ENTRY, CHAT_ENTRY], "on", [UNSERVED], False),  # a chat Horde answers for its own models
        ([TEXT_ENTRY, CHAT_ENTRY], "auto", [UNSERVED], False),
        ([TEXT_ENTRY], "off", [UNSERVED], False),
    ],
)
async def test_the_route_of_each_horde(entries: list, mode: str, models: list[str], route: bool) -> None:
    assert await route_choice.find_route(stub_runtime(StubHorde(entries), mode), models) is route


@pytest.mark.parametrize("entries", [[TEXT_ENTRY], [], [{"name": UNSERVED, "count": 0}]])
@pytest.mark.parametrize("mode", ["auto", "on"])
async def test_a_horde_without_chat_entries_refuses_an_unserved_model(entries: list, mode: str) -> None:
    """An entry with no online worker (``count`` 0) serves nothing either."""
    with pytest.raises(route_choice.errors.OpenAIError) as refused:
        await route_choice.find_route(stub_runtime(StubHorde(entries), mode), [UNSERVED])
    error = refused.value
    assert (error.status, error.code, error.message, error.headers()) == (
        503,
        "no_eligible_worker",
        NO_WORKER,
        {"Retry-After": "30", "x-should-retry": "false"},
    )


async def test_an_unreadable_list_takes_the_native_route_unless_the_horde_has_no_chat_routes() -> None:
    horde = StubHorde(HordeUnreachable("down"))
    runtime = stub_runtime(horde)
    assert await route_choice.find_route(runtime, [MODEL]) is False
    failure = HordeApiRootWrong(f"{horde.base_url} answered 404 Not Found to POST /v2/generate/chat/async")
    assert await route_choice.native_route_failure(runtime, failure) is None
    assert route_choice.chat_routes_missing(horde.base_url) is True
    assert await route_choice.find_route(runtime, [MODEL]) is True  # the Horde decides on the text path
    assert horde.heartbeats == 1


async def test_the_verdict_lasts_its_time() -> None:
    route_choice.remember_no_chat_routes("http://x/api")
    now = route_choice._no_chat_routes["http://x/api"]
    assert route_choice.chat_routes_missing("http://x/api", now=now + route_choice.NO_CHAT_ROUTES_VERDICT_SECONDS - 1)
    assert not route_choice.chat_routes_missing("http://x/api", now=now + route_choice.NO_CHAT_ROUTES_VERDICT_SECONDS)
    assert not route_choice.chat_routes_missing("http://y/api")


async def test_other_native_failures_are_their_own_error_and_read_no_heartbeat() -> None:
    horde = StubHorde([])
    error = await route_choice.native_route_failure(stub_runtime(horde), HordeUnreachable("ConnectError: refused"))
    assert error is not None
    assert (error.status, error.message) == (502, "The Horde could not be reached (ConnectError: refused).")
    assert horde.heartbeats == 0
