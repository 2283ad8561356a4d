"""The ``aihorde`` scenario's reads behind the front's text path limits, as the real AI Horde answers them:
``GET /v2/status/performance`` (the totals the upfront kudos ceiling uses), ``GET /v2/find_user`` (the key's user and
its kudos) and the ``uptime`` of ``GET /v2/workers``, which grows only while a worker checks in."""

from __future__ import annotations

import asyncio

import pytest
from devhorde_helpers import API, FAST, scenario, worker
from test_devhorde_aihorde import ANON, MODEL, NEW_USER, aihorde, make, text

from devhorde.aihorde import KUDOS_HOLDER_KUDOS


@pytest.mark.asyncio
async def test_performance_reports_the_text_workers_threads_and_queue(make_client) -> None:
    client, clock = await make(make_client, aihorde(totals_refresh_seconds=0))  # the queue counted live
    response = await client.get(f"{API}/status/performance")
    assert response.status_code == 200
    assert response.json() == {
        "queued_requests": 0,
        "queued_text_requests": 0,
        "worker_count": 0,
        "text_worker_count": 1,
        "thread_count": 0,
        "text_thread_count": 1,
        "queued_megapixelsteps": 0.0,
        "past_minute_megapixelsteps": 0.0,
        "queued_forms": 0.0,
        "interrogator_count": 0,
        "interrogator_thread_count": 0,
        "queued_tokens": 0.0,
        "past_minute_tokens": 0.0,
    }
    assert response.headers["x-ratelimit-limit"] == "90"  # the default limit, as every other read
    # a request no worker serves waits: the queue the ceiling subtracts
    clock.now += 1
    await client.post(f"{API}/generate/text/async", json=text(models=["x/none"]), headers=ANON)
    totals = (await client.get(f"{API}/status/performance")).json()
    assert (totals["queued_text_requests"], totals["text_thread_count"]) == (1, 1)


@pytest.mark.asyncio
async def test_the_queue_in_the_totals_and_the_ceiling_is_counted_again_only_after_the_refresh(
    make_client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real Horde reports (and subtracts from the ceiling) the waiting text requests of totals it counts every
    60 s (``store_totals``): a request queued since the last count is not in them yet, and a new user's 512 is not
    refused for it, until the next count. The Horde's clock is moved by the test, not waited for."""
    client, _ = await make(make_client, aihorde(rate_limits=False))
    horde = client.app.state.horde  # type: ignore[attr-defined]
    real_now, moved = horde.now, [0.0]
    monkeypatch.setattr(horde, "now", lambda: real_now() + moved[0])
    assert (await client.get(f"{API}/status/performance")).json()["queued_text_requests"] == 0
    for _ in range(10):  # with the 512 below, 11 waiting: 512 + 5 - round(0.9 * 11) = 507 once counted
        waiting = await client.post(f"{API}/generate/text/async", json=text(models=["x/none"]), headers=ANON)
        assert waiting.status_code == 202
    moved[0] = 30.0
    assert (await client.get(f"{API}/status/performance")).json()["queued_text_requests"] == 0
    served = await client.post(f"{API}/generate/text/async", json=text(512, models=["x/none"]), headers=NEW_USER)
    assert served.status_code == 202
    moved[0] = 61.0
    assert (await client.get(f"{API}/status/performance")).json()["queued_text_requests"] == 11
    refused = await client.post(f"{API}/generate/text/async", json=text(512), headers=NEW_USER)
    assert refused.status_code == 403
    assert "for requests over 507 tokens" in refused.json()["message"]


@pytest.mark.asyncio
async def test_find_user_reports_a_new_users_zero_kudos_and_a_holders_kudos(make_client) -> None:
    client, _ = await make(make_client, aihorde(kudos_api_keys=["0000000000"]))
    new_user = await client.get(f"{API}/find_user", headers=NEW_USER)
    assert new_user.status_code == 200
    assert (new_user.json()["kudos"], new_user.json()["worker_count"]) == (0.0, 0)
    assert new_user.json()["username"] == f"devhorde user#{new_user.json()['id']}"
    holder = await client.get(f"{API}/find_user", headers=ANON)
    assert holder.json()["kudos"] == KUDOS_HOLDER_KUDOS
    missing = await client.get(f"{API}/find_user")
    assert (missing.status_code, missing.json()) == (
        401,
        {"message": "No user matching sent API Key. Have you remembered to register?", "rc": "InvalidAPIKey"},
    )


@pytest.mark.asyncio
async def test_find_user_of_an_unknown_key_is_user_not_found(make_client) -> None:
    document = aihorde().model_dump(mode="json")
    document["invalid_api_keys"] = ["bad-key-0001"]
    client, _ = await make(make_client, type(aihorde()).model_validate(document))
    response = await client.get(f"{API}/find_user", headers={"apikey": "bad-key-0001"})
    assert (response.status_code, response.json()) == (
        404,
        {"message": "User with api_key 'bad-key-0001' not found.", "rc": "UserNotFound"},
    )


@pytest.mark.asyncio
async def test_other_scenarios_have_neither_route(make_client) -> None:
    client = await make_client(scenario(worker("w1", MODEL)))
    assert (await client.get(f"{API}/status/performance")).status_code == 404
    assert (await client.get(f"{API}/find_user", headers=NEW_USER)).status_code == 404


@pytest.mark.asyncio
async def test_a_stopped_workers_uptime_stops_growing_while_it_still_counts_online(make_client) -> None:
    client, _ = await make(
        make_client,
        aihorde(workers=[{**worker("live", MODEL), **FAST}, {**worker("stopping", MODEL), **FAST}]),
    )
    await client.get(f"{API}/workers")  # the Horde's clock starts at its first list
    await client.post("/_devhorde/workers/stopping", json={"online": False})
    await asyncio.sleep(1.1)  # uptimes are whole seconds
    first = {entry["name"]: entry["uptime"] for entry in (await client.get(f"{API}/workers")).json()}
    await asyncio.sleep(1.1)
    second = {entry["name"]: entry["uptime"] for entry in (await client.get(f"{API}/workers")).json()}
    assert set(second) == {"live", "stopping"}  # both still listed online
    assert second["stopping"] == first["stopping"] == 0
    assert second["live"] > first["live"] >= 1
