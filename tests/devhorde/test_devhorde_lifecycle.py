"""Cancel, expiry, restarts, workers going offline, the model list and the ``/_devhorde`` control routes
(``native-horde-chat.md``, "Cancel", "Status", "Models")."""

from __future__ import annotations

import asyncio

import pytest
from devhorde_helpers import API, FAST, chat, scenario, status, submit, submit_ok, wait_done, wait_for, worker

SLOW = {"time_to_first_token_seconds": 30.0}


async def requests_by_id(client) -> dict[str, dict]:
    response = await client.get("/_devhorde/requests")
    assert response.status_code == 200
    return {entry["id"]: entry for entry in response.json()}


@pytest.mark.asyncio
async def test_cancel_processing_and_waiting_requests(make_client) -> None:
    client = await make_client(scenario(worker("w1", **SLOW)))
    processing = await submit_ok(client, chat())
    waiting = await submit_ok(client, chat())
    for request_id in (processing, waiting):
        response = await client.delete(f"{API}/generate/chat/status/{request_id}")
        assert response.status_code == 200
        body = response.json()
        assert body["done"] is True and body["faulted"] is False
        assert body["waiting"] == 0 and body["processing"] == 0 and body["generations"] == []
    listed = await requests_by_id(client)
    assert listed[processing]["state"] == "cancelled" and listed[processing]["cancelled"] is True
    assert listed[waiting]["state"] == "cancelled"
    assert listed[processing]["attempts"][0]["ended"] == "cancelled"


@pytest.mark.asyncio
async def test_cancel_frees_the_thread_for_the_next_request(make_client) -> None:
    client = await make_client(scenario(worker("w1", time_to_first_token_seconds=0.2)))
    first = await submit_ok(client, chat())
    second = await submit_ok(client, chat())
    assert (await status(client, second))["waiting"] == 1
    await client.delete(f"{API}/generate/chat/status/{first}")
    assert (await status(client, second))["processing"] == 1
    assert (await wait_done(client, second))["finished"] == 1


@pytest.mark.asyncio
async def test_cancel_of_a_done_request_returns_it_unchanged(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    request_id = await submit_ok(client, chat())
    done = await wait_done(client, request_id)
    response = await client.delete(f"{API}/generate/chat/status/{request_id}")
    assert response.status_code == 200
    assert response.json() == done
    entry = (await requests_by_id(client))[request_id]
    assert entry["state"] == "done" and entry["cancelled"] is False and entry["cancel_requests"] == 1


@pytest.mark.asyncio
async def test_done_reads_count_the_status_reads_that_answered_done(make_client) -> None:
    client = await make_client(scenario(worker("w1", **SLOW)))
    request_id = await submit_ok(client, chat())
    assert (await status(client, request_id))["done"] is False
    assert (await requests_by_id(client))[request_id]["done_reads"] == 0
    await client.delete(f"{API}/generate/chat/status/{request_id}")  # a DELETE answers done but is not a read
    assert (await requests_by_id(client))[request_id]["done_reads"] == 0
    assert (await status(client, request_id))["done"] is True
    assert (await status(client, request_id))["done"] is True
    assert (await requests_by_id(client))[request_id]["done_reads"] == 2


@pytest.mark.asyncio
async def test_requests_expire(make_client) -> None:
    client = await make_client(scenario(worker("w1", **SLOW), request_expiry_seconds=0.3))
    request_id = await submit_ok(client, chat())
    assert (await status(client, request_id))["processing"] == 1
    await asyncio.sleep(0.35)
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"{API}/generate/chat/status/{request_id}")
        assert response.status_code == 404
        assert response.json()["rc"] == "RequestNotFound"
    assert (await requests_by_id(client))[request_id]["state"] == "expired"


@pytest.mark.asyncio
async def test_restart_starts_a_new_attempt_with_a_new_gen(make_client) -> None:
    client = await make_client(
        scenario(worker("w1", restart_after_posts=2, restarts=2, post_interval_seconds=0.001, tokens_per_second=1000))
    )
    request_id = await submit_ok(client, chat())
    body = await wait_done(client, request_id)
    assert body["restarted"] == 2 and body["finished"] == 1
    attempts = (await requests_by_id(client))[request_id]["attempts"]
    assert [attempt["ended"] for attempt in attempts] == ["restarted", "restarted", "completed"]
    assert len({attempt["gen"] for attempt in attempts}) == 3
    assert attempts[0]["posts"] == 2
    assert body["generations"][0]["id"] == attempts[-1]["gen"]


@pytest.mark.asyncio
async def test_worker_going_offline_restarts_its_job_elsewhere(make_client) -> None:
    client = await make_client(scenario(worker("w1", **SLOW), worker("w2", online=False)))
    request_id = await submit_ok(client, chat())
    assert (await status(client, request_id))["processing"] == 1
    response = await client.post("/_devhorde/workers/w1", json={"online": False})
    assert response.status_code == 200 and response.json()["online"] is False
    body = await status(client, request_id)
    assert body["restarted"] == 1 and body["waiting"] == 1
    assert body["is_possible"] is False and "impossible_reason" not in body
    await client.post("/_devhorde/workers/w2", json={"online": True})
    done = await wait_done(client, request_id)
    assert done["generations"][0]["worker_name"] == "w2"


@pytest.mark.asyncio
async def test_worker_goes_offline_after_n_jobs(make_client) -> None:
    client = await make_client(scenario(worker("w1", offline_after_jobs=2)))
    for _ in range(2):
        await wait_done(client, await submit_ok(client, chat()))
    response = await submit(client, chat())
    assert response.status_code == 503 and response.json()["rc"] == "NoEligibleWorker"
    listed = (await client.get("/_devhorde/scenario")).json()["workers"][0]
    assert listed["online"] is False


@pytest.mark.asyncio
async def test_models_route(make_client) -> None:
    client = await make_client(
        scenario(
            worker(
                "a",
                "m/x",
                threads=2,
                features=["seed", "prompt_overflow_refused"],
                max_length=512,
                max_context_length=4096,
                **SLOW,
            ),
            worker(
                "b",
                "m/x",
                features=["vision", "prompt_overflow_refused"],
                image_transports=["base64"],
                max_length=2048,
                max_context_length=8192,
                **SLOW,
            ),
            worker("text-only", "m/text", chat=False),
            worker("gone", "m/gone", online=False),
        ),
    )
    for _ in range(4):
        await submit_ok(client, chat(models=["m/x"]))
    response = await client.get(f"{API}/status/models", params={"type": "text"})
    assert response.status_code == 200
    entries = {entry["name"]: entry for entry in response.json()}
    assert set(entries) == {"m/x", "m/text"}
    x = entries["m/x"]
    assert x["count"] == 2 and x["type"] == "text" and x["jobs"] == 4 and x["queued"] == 512
    assert x["chat"] == {
        "workers": 2,
        "threads": 3,
        "max_length": 2048,
        "max_context_length": 8192,
        "features": ["prompt_overflow_refused", "seed", "vision"],
        "image_transports": ["base64"],
    }
    assert "chat" not in entries["m/text"]
    assert (await client.get(f"{API}/status/models", params={"type": "image"})).json() == []


@pytest.mark.asyncio
async def test_control_scenario_get_put_and_invalid(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    current = (await client.get("/_devhorde/scenario")).json()
    assert current["workers"][0]["name"] == "w1"
    assert current["request_expiry_seconds"] == 1200
    current["workers"].append({"name": "w2", "model": "m/new"})
    replaced = await client.put("/_devhorde/scenario", json=current)
    assert replaced.status_code == 200
    assert [w["name"] for w in replaced.json()["workers"]] == ["w1", "w2"]
    assert (await submit(client, chat(models=["m/new"]))).status_code == 202
    invalid = await client.put(
        "/_devhorde/scenario", json={"workers": [{"name": "v", "model": "m", "features": ["vision"]}]}
    )
    assert invalid.status_code == 400 and invalid.json()["errors"]
    assert (await client.put("/_devhorde/scenario", json={"typo_key": 1})).status_code == 400
    also_under_api = await client.get("/api/_devhorde/scenario")
    assert also_under_api.status_code == 200


@pytest.mark.asyncio
async def test_scenario_replacement_reroutes_existing_requests(make_client) -> None:
    client = await make_client(scenario(worker("w1", **SLOW)))
    request_id = await submit_ok(client, chat())
    document = (await client.get("/_devhorde/scenario")).json()
    document["workers"] = [{"name": "fresh", "model": "m/plain", **FAST}]
    assert (await client.put("/_devhorde/scenario", json=document)).status_code == 200
    done = await wait_done(client, request_id)
    assert done["restarted"] == 1 and done["generations"][0]["worker_name"] == "fresh"


@pytest.mark.asyncio
async def test_control_worker_patch_errors(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    assert (await client.post("/_devhorde/workers/nobody", json={"online": False})).status_code == 404
    assert (await client.post("/_devhorde/workers/w1", json={"threads": 0})).status_code == 400
    assert (await client.post("/_devhorde/workers/w1", json=[1])).status_code == 400


@pytest.mark.asyncio
async def test_control_requests_listing_and_reset(make_client) -> None:
    client = await make_client(scenario(worker("w1", **SLOW)))
    payload = chat(stream=True, max_kudos=100)
    request_id = await submit_ok(client, payload)
    queued = await submit_ok(client, chat())
    await client.post(
        f"{API}/generate/chat/async",
        json=chat(),
        headers={"apikey": "someone", "Client-Agent": "test:1:me"},
    )
    listed = await requests_by_id(client)
    assert listed[request_id]["payload"] == payload and listed[request_id]["apikey"] == "0000000000"
    assert listed[request_id]["state"] == "processing" and listed[queued]["state"] == "waiting"
    assert {entry["client_agent"] for entry in listed.values()} == {None, "test:1:me"}
    reset = await client.post("/_devhorde/reset")
    assert reset.json() == {"forgotten": 3}
    assert (await client.get("/_devhorde/requests")).json() == []
    assert (await client.get(f"{API}/generate/chat/status/{request_id}")).status_code == 404


@pytest.mark.asyncio
async def test_heartbeat(make_client) -> None:
    client = await make_client(scenario(worker("w1")))
    assert (await client.get(f"{API}/status/heartbeat")).json()["message"] == "OK"


@pytest.mark.asyncio
async def test_waiting_request_starts_when_a_worker_appears(make_client) -> None:
    client = await make_client(scenario(worker("w1", online=False), worker("w2", "m/other")))
    response = await submit(client, chat())
    assert response.status_code == 503
    await client.post("/_devhorde/workers/w1", json={"online": True, "time_to_first_token_seconds": 0.05})
    request_id = await submit_ok(client, chat())
    await client.post("/_devhorde/workers/w1", json={"online": False})
    waiting = await wait_for(client, request_id, lambda body: body["waiting"] == 1)
    assert waiting["is_possible"] is False
    await client.post("/_devhorde/workers/w1", json={"online": True})
    assert (await wait_done(client, request_id))["finished"] == 1
