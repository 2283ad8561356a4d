"""A text request the Horde could lower to its upfront kudos ceiling is sent with ``allow_downgrade: false``, so that a
ceiling the front did not foresee comes back as 403 ``KudosUpfront`` "for requests over N tokens" and the front submits
again at N and reports it, instead of the Horde lowering it unreported (chat.horde.upfront_kudos,
chat.serving.text_limits.resubmit_after_downgrade_refusal, chat.horde.text.TextRoutes.submit; httpx.MockTransport).

The real Horde counts its queue from totals it refreshes every 60 s (``horde/database/threads.py`` ``store_totals``),
so the front's cached ``GET /v2/status/performance`` can foresee 512 while the Horde applies less: the realhorde lane's
``test_the_default_max_tokens_is_served_for_a_user_without_kudos`` failed CI on it."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from django.core.cache import cache

from chat.horde.native import HordeRefusal, SubmitResult
from chat.horde.text import (
    PreparedTextRequest,
    TextBounds,
    TextHordeClient,
    TextRoutes,
    check_max_kudos,
    native_status,
)
from chat.horde.upfront_kudos import PERFORMANCE_CACHE_KEY, asks_free_ceiling, refused_ceiling
from chat.protocol.chat_request import ChatCompletionRequest
from chat.protocol.legacy_completion import CompletionRequest
from chat.serving.service import submit_shielded
from chat.serving.text_limits import resubmit_after_downgrade_refusal
from chat.serving.text_route import prepare_chat_request, prepare_completion_request

QWEN = "koboldcpp/Qwen2.5-7B-Instruct"
REQUEST_ID = "5f1c2a3e-0d4b-4c1e-9a7b-2b1e0c9d8f70"


def kudos_upfront(tokens: int) -> dict[str, Any]:
    """The real Horde's 403 body (``horde/apis/v2/kobold.py`` ``initiate_waiting_prompt``)."""
    return {
        "message": f"Due to heavy demand, for requests over {tokens} tokens, the client needs to already have the "
        "required kudos. This request requires 24.38 kudos to fulfil.",
        "rc": "KudosUpfront",
    }


SHARED_KEY_EMPTY = {"message": "This shared key has run out of kudos.", "rc": "SharedKeyEmpty"}
SHARED_KEY_SHORT = {
    "message": "This shared key does not have enough remaining kudos (3) to fulfill this reques (24.38).",
    "rc": "SharedKeyInsufficientKudos",
}
VALIDATION = {"message": "Input payload validation failed", "errors": {"params.max_length": "too big"}}


def refusal(status: int, body: dict[str, Any]) -> HordeRefusal:
    return HordeRefusal(status=status, message=body["message"], rc=body.get("rc"), body=body)


class SubmitHorde:
    """Answers each ``POST /v2/generate/text/async`` with the next scripted ``(status, body)``; keeps the payloads."""

    def __init__(self, *answers: tuple[int, dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.payloads: list[dict[str, Any]] = []
        self.url = f"http://horde-{uuid.uuid4().hex[:8]}.test/api"

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v2/generate/text/async"
        self.payloads.append(json.loads(request.content))
        status, body = self.answers.pop(0)
        return httpx.Response(status, content=json.dumps(body))

    def client(self) -> TextHordeClient:
        return TextHordeClient(self.url, "test:1:none", 5.0, transport=httpx.MockTransport(self.handle))


ACCEPTED = (202, {"id": REQUEST_ID, "kudos": 12})


def chat(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": QWEN, "messages": [{"role": "user", "content": "Hi"}], **body}
    )


def routes_for(client: TextHordeClient, prepared: Any) -> TextRoutes:
    return TextRoutes(client, prepared, resubmit=functools.partial(resubmit_after_downgrade_refusal, client))


async def submitted(
    horde: SubmitHorde, prepared: PreparedTextRequest, *, resubmit: bool = True
) -> tuple[TextRoutes, SubmitResult | HordeRefusal]:
    """Submit ``prepared`` through routes (with the front's resubmit, unless ``resubmit`` is false) over ``horde``:
    the routes and what the submit returned, or the refusal it raised."""
    client = horde.client()
    routes = routes_for(client, prepared) if resubmit else TextRoutes(client, prepared)
    try:
        return routes, await routes.submit(routes.prepared.payload, "new-user-key")
    except HordeRefusal as refusal:
        return routes, refusal
    finally:
        await client.aclose()


def reported(routes: TextRoutes) -> list[dict[str, Any]]:
    """The ``context_adjustments`` a status of the request carries."""
    status = native_status({"done": False, "waiting": 1, "generations": []}, routes.prepared)
    return [dict(adjustment) for adjustment in status.context_adjustments or []]


@pytest.mark.parametrize(
    ("max_length", "slow_workers", "asks"),
    [(256, True, False), (257, True, True), (512, True, True), (4096, True, True), (512, False, False)],
)
def test_a_request_over_the_lowest_ceiling_asks_the_horde_for_its_ceiling(
    max_length: int, slow_workers: bool, asks: bool
) -> None:
    """256 is the lowest ceiling with slow workers; with ``slow_workers: false`` the ceiling is unclamped and every
    request needs the kudos, so ``allow_downgrade: true`` is sent as before."""
    assert asks_free_ceiling(max_length, slow_workers=slow_workers) is asks


@pytest.mark.parametrize(
    ("body", "allow_downgrade"),
    [
        ({}, False),  # the default 512
        ({"max_tokens": 256}, True),
        ({"max_tokens": 257}, False),
        ({"horde": {"slow_workers": False}}, True),
        ({"horde": {"slow_workers": True}, "max_tokens": 300}, False),
    ],
)
def test_the_payload_sends_allow_downgrade_false_where_the_horde_could_lower(
    body: dict[str, Any], allow_downgrade: bool
) -> None:
    assert prepare_chat_request(chat(**body)).payload["allow_downgrade"] is allow_downgrade


def test_a_legacy_completion_asks_as_chat_does() -> None:
    legacy = CompletionRequest.model_validate({"model": QWEN, "prompt": "Once"})
    assert prepare_completion_request(legacy).payload["allow_downgrade"] is False
    short = CompletionRequest.model_validate({"model": QWEN, "prompt": "Once", "max_tokens": 100})
    assert prepare_completion_request(short).payload["allow_downgrade"] is True


@pytest.mark.parametrize(
    ("status", "body", "ceiling"),
    [
        (403, kudos_upfront(342), 342),
        (403, kudos_upfront(512), 512),
        (403, {"message": "Due to heavy demand, the client needs kudos.", "rc": "KudosUpfront"}, None),
        (403, SHARED_KEY_SHORT, None),
        (400, kudos_upfront(342), None),
    ],
)
def test_the_ceiling_a_kudos_upfront_refusal_names(status: int, body: dict[str, Any], ceiling: int | None) -> None:
    assert refused_ceiling(refusal(status, body)) == ceiling


@pytest.mark.asyncio
async def test_a_ceiling_the_front_did_not_foresee_is_submitted_again_at_it_and_reported() -> None:
    """The front foresaw 512 (an idle Horde, cached); the Horde's totals say 342: the second submit carries 342 and
    ``allow_downgrade: true``, every status reports ``kudos_upfront`` 512 -> 342, and the cached performance read is
    dropped, so the next request reads the Horde's totals again."""
    horde = SubmitHorde((403, kudos_upfront(342)), ACCEPTED)
    cache_key = PERFORMANCE_CACHE_KEY.format(horde_url=horde.url)
    await cache.aset(cache_key, {"text_thread_count": 2, "queued_text_requests": 0}, timeout=30)
    assert await cache.aget(cache_key) is not None
    routes, result = await submitted(horde, prepare_chat_request(chat()))
    assert isinstance(result, SubmitResult) and result.id == REQUEST_ID
    assert [(p["params"]["max_length"], p["allow_downgrade"]) for p in horde.payloads] == [(512, False), (342, True)]
    assert {k: v for k, v in horde.payloads[1].items() if k != "params"} == {
        k: v for k, v in horde.payloads[0].items() if k not in ("params", "allow_downgrade")
    } | {"allow_downgrade": True}
    assert horde.payloads[1]["params"] == {**horde.payloads[0]["params"], "max_length": 342}
    assert routes.prepared.max_length == 342
    assert reported(routes) == [{"kind": "kudos_upfront", "requested": 512, "applied": 342}]
    assert await cache.aget(cache_key) is None


@pytest.mark.asyncio
async def test_a_ceiling_the_front_foresaw_too_high_is_replaced_keeping_the_clients_limit() -> None:
    """The front lowered 1024 to the workers' 512, then to a foreseen 400; the Horde says 300: one ``kudos_upfront``
    entry, from 512 (the limit the ceiling applied to) to 300, after the worker's entry."""
    bounds = TextBounds(
        max_length=400,
        max_context_length=4096,
        adjustments=(
            {"kind": "worker_max_length", "requested": 1024, "applied": 512},
            {"kind": "kudos_upfront", "requested": 512, "applied": 400},
        ),
    )
    horde = SubmitHorde((403, kudos_upfront(300)), ACCEPTED)
    request = chat(max_tokens=1024, horde={"max_context_length": 8192})
    routes, result = await submitted(horde, prepare_chat_request(request, bounds))
    assert isinstance(result, SubmitResult)
    assert [p["params"]["max_length"] for p in horde.payloads] == [400, 300]
    assert reported(routes) == [
        {"kind": "worker_max_length", "requested": 1024, "applied": 512},
        {"kind": "kudos_upfront", "requested": 512, "applied": 300},
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "body",
    [
        SHARED_KEY_EMPTY,  # served at the anonymous priority with allow_downgrade
        SHARED_KEY_SHORT,
        kudos_upfront(512),  # a ceiling not below the limit sent: the Horde lowers it, if anything
        {"message": "Due to heavy demand, the client needs kudos.", "rc": "KudosUpfront"},  # no ceiling named
        kudos_upfront(8),  # below the text API's smallest max_length
    ],
)
async def test_a_refusal_allow_downgrade_would_have_served_is_submitted_again_as_it_was(body: dict[str, Any]) -> None:
    horde = SubmitHorde((403, body), ACCEPTED)
    routes, result = await submitted(horde, prepare_chat_request(chat()))
    assert isinstance(result, SubmitResult) and result.id == REQUEST_ID
    assert [(p["params"]["max_length"], p["allow_downgrade"]) for p in horde.payloads] == [(512, False), (512, True)]
    assert routes.prepared.max_length == 512
    assert reported(routes) == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "first"),
    [
        (kudos_upfront(342), {"max_tokens": 200}),  # sent with allow_downgrade: true already
        (kudos_upfront(342), {"horde": {"slow_workers": False}}),
        ({"message": "Wrong key", "rc": "InvalidAPIKey"}, {}),
    ],
)
async def test_other_refusals_are_answered_after_one_submit(body: dict[str, Any], first: dict[str, Any]) -> None:
    status = 401 if body["rc"] == "InvalidAPIKey" else 403
    horde = SubmitHorde((status, body))
    _, result = await submitted(horde, prepare_chat_request(chat(**first)))
    assert isinstance(result, HordeRefusal) and (result.status, result.rc) == (status, body["rc"])
    assert len(horde.payloads) == 1


@pytest.mark.asyncio
async def test_a_validation_refusal_is_answered_after_one_submit() -> None:
    horde = SubmitHorde((400, VALIDATION))
    _, result = await submitted(horde, prepare_chat_request(chat()))
    assert isinstance(result, HordeRefusal)
    assert (result.status, result.message) == (400, "Input payload validation failed")
    assert len(horde.payloads) == 1


@pytest.mark.asyncio
async def test_the_second_submits_refusal_is_the_answer_and_there_is_no_third() -> None:
    horde = SubmitHorde((403, kudos_upfront(342)), (403, kudos_upfront(300)))
    _, result = await submitted(horde, prepare_chat_request(chat()))
    assert isinstance(result, HordeRefusal) and refused_ceiling(result) == 300
    assert [(p["params"]["max_length"], p["allow_downgrade"]) for p in horde.payloads] == [(512, False), (342, True)]


@pytest.mark.asyncio
async def test_routes_without_a_resubmit_answer_the_refusal() -> None:
    horde = SubmitHorde((403, kudos_upfront(342)))
    _, result = await submitted(horde, prepare_chat_request(chat()), resubmit=False)
    assert isinstance(result, HordeRefusal) and refused_ceiling(result) == 342
    assert len(horde.payloads) == 1


@pytest.mark.asyncio
async def test_the_max_kudos_dry_run_allows_the_downgrade() -> None:
    """The Horde checks the upfront kudos before a dry run as well: the estimate is asked with ``allow_downgrade:
    true``, so a user short of kudos gets an estimate, not the 403 the submit answers by submitting again."""
    horde = SubmitHorde((200, {"kudos": 9}))
    client = horde.client()
    prepared = prepare_chat_request(chat())
    assert prepared.payload["allow_downgrade"] is False
    try:
        await check_max_kudos(client, prepared.payload, "new-user-key", 50.0)
    finally:
        await client.aclose()
    [dry_run] = horde.payloads
    assert (dry_run["dry_run"], dry_run["allow_downgrade"], dry_run["params"]["max_length"]) == (True, True, 512)


@pytest.mark.asyncio
async def test_a_client_that_left_during_the_submit_gets_no_second_submit() -> None:
    """The view is cancelled (the client left) while the first submit is at the Horde; the submit runs on, shielded,
    so a request it creates is cancelled (chat.serving.service.submit_shielded), but its refusal is not followed by a
    second submit that would create a request nobody waits for."""
    arrived, answer = asyncio.Event(), asyncio.Event()
    payloads: list[dict[str, Any]] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        payloads.append(json.loads(request.content))
        arrived.set()
        await answer.wait()
        return httpx.Response(403, content=json.dumps(kudos_upfront(342)))

    client = TextHordeClient(
        f"http://horde-{uuid.uuid4().hex[:8]}.test/api", "test:1:none", 5.0, transport=httpx.MockTransport(handle)
    )
    routes = routes_for(client, prepare_chat_request(chat()))
    cancels = SimpleNamespace(cancel_soon=lambda *args: pytest.fail(f"nothing was created to cancel: {args}"))
    view = asyncio.ensure_future(
        submit_shielded(
            SimpleNamespace(),
            routes.prepared.payload,
            "new-user-key",
            horde=routes,
            cancels=cancels,  # type: ignore[arg-type]
        )
    )
    try:
        async with asyncio.timeout(5):
            await arrived.wait()
        view.cancel()
        with pytest.raises(asyncio.CancelledError):
            await view
        answer.set()
        async with asyncio.timeout(5):
            while routes.abandoned is False or len(asyncio.all_tasks()) > 1:
                await asyncio.sleep(0.01)
    finally:
        answer.set()
        await client.aclose()
    assert routes.abandoned is True
    assert [(p["params"]["max_length"], p["allow_downgrade"]) for p in payloads] == [(512, False)]
