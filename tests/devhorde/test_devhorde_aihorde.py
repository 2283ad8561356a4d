"""The ``aihorde`` scenario: the public AI Horde as ``shared/spec/real-horde.md`` records it, point by point (no chat
routes, the text API's fields, the model list and its window, ``/v2/workers``, rate limits and their headers, the
proxy passkey, upfront kudos and ``allow_downgrade``, the parameter bounds, cancel)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from devhorde_helpers import API, FAST

from devhorde.aihorde import FLASK_NOT_FOUND_HTML, NO_WORKER_WARNING
from devhorde.scenario import Scenario, load_scenario

MODEL = "koboldcpp/Qwen2.5-7B-Instruct"
ANON = {"apikey": "0000000000"}
NEW_USER = {"apikey": "new-user-key-0001"}
"""A key outside ``kudos_api_keys``: a new user with 0 kudos."""
PASSKEY = "devhorde-proxy-passkey"
STATUS_KEYS = [
    "generations",
    "finished",
    "processing",
    "restarted",
    "waiting",
    "done",
    "faulted",
    "wait_time",
    "queue_position",
    "kudos",
    "is_possible",
]
"""The real status body's keys, in the real order."""
LIMIT_HEADERS = ("retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


class Clock:
    """A wall clock the test moves (the rate limit windows read it)."""

    def __init__(self, now: float = 1_800_000_000.25) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def aihorde(*, workers: list[dict[str, Any]] | None = None, **spec: Any) -> Scenario:
    """The bundled ``aihorde`` scenario with fast workers, a passkey and ``spec`` merged into its ``aihorde``."""
    document = load_scenario("aihorde").model_dump(mode="json")
    document["aihorde"] = {**document["aihorde"], "proxy_passkey": PASSKEY, **spec}
    if workers is not None:
        document["workers"] = workers
    else:
        document["workers"] = [{**document["workers"][0], **FAST}]
    return Scenario.model_validate(document)


async def make(make_client: Any, scenario: Scenario | None = None) -> tuple[httpx.AsyncClient, Clock]:
    client = await make_client(scenario or aihorde())
    clock = Clock()
    client.app.state.limiter.clock = clock
    return client, clock


def text(max_length: int = 64, *, models: list[str] | None = None, **keys: Any) -> dict[str, Any]:
    params = {"max_length": max_length, **keys.pop("params", {})}
    return {"prompt": "User: hello\nAssistant:", "models": models or [MODEL], "params": params, **keys}


async def wait_text(client: httpx.AsyncClient, request_id: str, clock: Clock) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        clock.now += 1.1  # one status read a second, within the 60/min per path
        body = (await client.get(f"{API}/generate/text/status/{request_id}")).json()
        if body["done"]:
            return body
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/generate/chat/async"), ("GET", "/generate/chat/status/x"), ("DELETE", "/generate/chat/status/x")],
)
async def test_chat_routes_answer_flasks_html_404_without_rc(make_client, method: str, path: str) -> None:
    client, _ = await make(make_client)
    response = await client.request(method, f"{API}{path}", json={"messages": []}, headers=ANON)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert response.text == FLASK_NOT_FOUND_HTML
    assert "x-ratelimit-limit" not in response.headers


@pytest.mark.asyncio
async def test_submit_answers_202_with_kudos_zero_and_status_has_the_real_fields(make_client) -> None:
    client, clock = await make(make_client)
    response = await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"id", "kudos"} and body["kudos"] == 0.0
    done = await wait_text(client, body["id"], clock)
    assert list(done) == STATUS_KEYS
    assert (done["done"], done["finished"], done["faulted"], done["is_possible"]) == (True, 1, False, True)
    generation = done["generations"][0]
    assert set(generation) == {"text", "seed", "gen_metadata", "worker_id", "worker_name", "model", "state"}
    assert (generation["state"], generation["model"], generation["gen_metadata"]) == ("ok", MODEL, [])


@pytest.mark.asyncio
@pytest.mark.parametrize(("state", "metadata"), [("censored", []), ("csam", [{"type": "censorship", "value": "csam"}])])
async def test_a_censoring_worker_sets_the_generation_state(make_client, state: str, metadata: list) -> None:
    worker = {"name": "w", "model": MODEL, "chat": False, "max_length": 512, "text_state": state, **FAST}
    client, clock = await make(make_client, aihorde(workers=[worker]))
    response = await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)
    done = await wait_text(client, response.json()["id"], clock)
    assert (done["generations"][0]["state"], done["generations"][0]["gen_metadata"]) == (state, metadata)


@pytest.mark.asyncio
async def test_a_request_no_worker_serves_gets_the_warning_message_and_reads_impossible(make_client) -> None:
    client, clock = await make(make_client)
    response = await client.post(f"{API}/generate/text/async", json=text(models=["nobody/serves-this"]), headers=ANON)
    assert response.status_code == 202
    assert response.json()["message"] == NO_WORKER_WARNING
    assert response.json()["kudos"] == 0.0
    clock.now += 1
    status = (await client.get(f"{API}/generate/text/status/{response.json()['id']}")).json()
    assert (status["waiting"], status["is_possible"], status["queue_position"]) == (1, False, 1)


@pytest.mark.asyncio
async def test_dry_run_answers_only_the_kudos_estimate(make_client) -> None:
    client, _ = await make(make_client)
    response = await client.post(f"{API}/generate/text/async", json=text(64, dry_run=True), headers=ANON)
    assert response.status_code == 200
    assert response.json() == {"kudos": 2.0}  # round(64 * 0.025) as a float
    listing = (await client.get("/_devhorde/requests")).json()
    assert listing == []


@pytest.mark.asyncio
async def test_max_length_above_4096_is_the_real_validation_body(make_client) -> None:
    client, _ = await make(make_client)
    response = await client.post(f"{API}/generate/text/async", json=text(5000), headers=ANON)
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"params.max_length": "5000 is greater than the maximum of 4096"},
        "message": "Input payload validation failed",
    }


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"max_length": 8}, "params.max_length", "8 is less than the minimum of 16"),
        ({"max_context_length": 40}, "params.max_context_length", "40 is less than the minimum of 80"),
        (
            {"max_context_length": 2_000_000},
            "params.max_context_length",
            "2000000 is greater than the maximum of 1048576",
        ),
    ],
)
async def test_parameter_bounds(make_client, params: dict, field: str, message: str) -> None:
    client, _ = await make(make_client)
    payload = {"prompt": "hi", "models": [MODEL], "params": params}
    response = await client.post(f"{API}/generate/text/async", json=payload, headers=ANON)
    assert (response.status_code, response.json()["errors"]) == (400, {field: message})


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("params", "status", "rc", "message"),
    [
        (
            {"max_length": 600, "max_context_length": 500},
            400,
            "TokenOverflow",
            "You cannot request more tokens than your context length.",
        ),
        (
            {"max_length": 2100},  # max_context_length defaults to 2048
            400,
            "TokenOverflow",
            "You cannot request more tokens than your context length.",
        ),
        (
            {"max_length": 64, "stop_sequence": [f"s{i}" for i in range(129)]},
            400,
            "TooManyStopSequences",
            "Too many stop sequences specified (max allowed is 128).",
        ),
        (
            {"max_length": 64, "stop_sequence": ["x" * 1001, "y" * 1000]},
            400,
            "ExcessiveStopSequence",
            "Your total stop sequence length exceeds the allowed limit (2000 chars).",
        ),
    ],
)
async def test_token_overflow_and_stop_sequence_limits(make_client, params, status, rc, message) -> None:
    client, _ = await make(make_client)
    payload = {"prompt": "hi", "models": [MODEL], "params": params}
    response = await client.post(f"{API}/generate/text/async", json=payload, headers=ANON)
    assert (response.status_code, response.json()) == (status, {"message": message, "rc": rc})


@pytest.mark.asyncio
async def test_a_new_user_above_the_free_ceiling_gets_kudos_upfront(make_client) -> None:
    client, _ = await make(make_client)
    # one worker of 1 thread, nothing queued: 512 + 5 - 0 = 517, clamped to 512
    response = await client.post(f"{API}/generate/text/async", json=text(600), headers=NEW_USER)
    assert response.status_code == 403
    assert response.json() == {
        "message": "Due to heavy demand, for requests over 512 tokens, the client needs to already have the required "
        "kudos. This request requires 217.59 kudos to fulfil.",
        "rc": "KudosUpfront",
    }
    assert "retry-after" in response.headers  # the limiter's header, on every answer


@pytest.mark.asyncio
async def test_the_ceiling_falls_with_the_queue_and_allow_downgrade_lowers_max_length(make_client) -> None:
    client, clock = await make(make_client, aihorde(totals_refresh_seconds=0))  # the queue counted live
    # 300 requests no worker serves queue up: 512 + 5 - round(0.9 * 300) = 247, clamped to 256
    for _ in range(300):
        clock.now += 1.0
        response = await client.post(f"{API}/generate/text/async", json=text(16, models=["x/none"]), headers=ANON)
        assert response.status_code == 202
    clock.now += 1.0
    refused = await client.post(f"{API}/generate/text/async", json=text(300), headers=NEW_USER)
    assert refused.status_code == 403
    assert "for requests over 256 tokens" in refused.json()["message"]
    clock.now += 1.0
    lowered = await client.post(f"{API}/generate/text/async", json=text(300, allow_downgrade=True), headers=NEW_USER)
    assert lowered.status_code == 202
    listing = (await client.get("/_devhorde/requests")).json()
    assert listing[-1]["max_length"] == 256


@pytest.mark.asyncio
async def test_a_user_holding_kudos_is_not_refused_and_slow_workers_false_always_needs_kudos(make_client) -> None:
    client, clock = await make(make_client, aihorde(totals_refresh_seconds=0))  # the queue counted live
    assert (await client.post(f"{API}/generate/text/async", json=text(600), headers=ANON)).status_code == 202
    clock.now += 1
    response = await client.post(f"{API}/generate/text/async", json=text(64, slow_workers=False), headers=NEW_USER)
    assert response.status_code == 403
    assert response.json()["rc"] == "KudosUpfront"
    # unclamped when slow workers are refused: 512 + 5 - round(0.9 * 1), the 600-token request still waiting (no
    # worker takes 600 tokens)
    assert "for requests over 516 tokens" in response.json()["message"]


@pytest.mark.asyncio
async def test_cancel_returns_the_status_from_before_and_empties_the_request(make_client) -> None:
    client, clock = await make(make_client)
    request_id = (await client.post(f"{API}/generate/text/async", json=text(models=["x/none"]), headers=ANON)).json()[
        "id"
    ]
    cancelled = await client.delete(f"{API}/generate/text/status/{request_id}")
    assert cancelled.status_code == 200
    assert (cancelled.json()["waiting"], cancelled.json()["done"]) == (1, False)
    for _ in range(2):
        clock.now += 1.1
        after = (await client.get(f"{API}/generate/text/status/{request_id}")).json()
        assert list(after) == STATUS_KEYS
        assert (after["done"], after["waiting"], after["processing"], after["is_possible"]) == (False, 0, 0, False)


@pytest.mark.asyncio
async def test_an_unknown_id_is_the_real_request_not_found(make_client) -> None:
    client, _ = await make(make_client)
    response = await client.get(f"{API}/generate/text/status/abc")
    assert response.status_code == 404
    assert response.json() == {
        "message": "Text Waiting Prompt (Status) with ID 'abc' not found. You have requested this URI "
        "[/api/v2/generate/text/status/abc] but did you mean /api/v2/generate/text/status/<string:id> ?",
        "rc": "RequestNotFound",
    }


@pytest.mark.asyncio
async def test_model_list_entries_are_shaped_as_the_real_ones(make_client) -> None:
    client, _ = await make(make_client)
    response = await client.get(f"{API}/status/models", params={"type": "text"})
    assert response.json() == [
        {
            "performance": 2000.0,
            "queued": 0.0,
            "jobs": 0.0,
            "eta": 0,
            "type": "text",
            "name": MODEL,
            "count": 1,
        }
    ]


@pytest.mark.asyncio
async def test_workers_list_publishes_the_declared_limits(make_client) -> None:
    client, _ = await make(make_client)
    workers = (await client.get(f"{API}/workers", params={"type": "text"})).json()
    assert len(workers) == 1
    entry = workers[0]
    assert {key: entry[key] for key in ("models", "threads", "max_length", "max_context_length", "online")} == {
        "models": [MODEL],
        "threads": 1,
        "max_length": 512,
        "max_context_length": 4096,
        "online": True,
    }
    assert (entry["trusted"], entry["maintenance_mode"], entry["type"]) == (True, False, "text")
    assert isinstance(entry["uptime"], int)


@pytest.mark.asyncio
async def test_a_worker_counts_online_for_the_window_after_its_last_pop(make_client) -> None:
    client, clock = await make(make_client, aihorde(online_window_seconds=2.0))
    request_id = (await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)).json()["id"]
    await wait_text(client, request_id, clock)
    await client.post("/_devhorde/workers/sim-text-worker-1", json={"online": False})
    clock.now += 1
    waiting_id = (await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)).json()
    assert "message" not in waiting_id  # still counted online: no warning
    clock.now += 1.1
    status = (await client.get(f"{API}/generate/text/status/{waiting_id['id']}")).json()
    assert (status["waiting"], status["is_possible"]) == (1, True)
    assert [entry["name"] for entry in (await client.get(f"{API}/status/models")).json()] == [MODEL]
    assert (await client.get(f"{API}/workers")).json()[0]["online"] is True
    deadline = asyncio.get_running_loop().time() + 5
    while (await client.get(f"{API}/status/models")).json():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    clock.now += 1.1
    status = (await client.get(f"{API}/generate/text/status/{waiting_id['id']}")).json()
    assert (status["waiting"], status["is_possible"]) == (1, False)
    assert (await client.get(f"{API}/workers")).json() == []


@pytest.mark.asyncio
async def test_two_submits_a_second_per_ip_then_429_without_rc_and_headers_on_every_answer(make_client) -> None:
    client, clock = await make(make_client)
    answers = [await client.post(f"{API}/generate/text/async", json=text(), headers=ANON) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [202, 202, 429]
    assert answers[2].json() == {"message": "2 per 1 second"}
    assert [answer.headers["x-ratelimit-remaining"] for answer in answers] == ["1", "0", "0"]
    reset = str(int(clock.now) + 2)  # as the real server reports a 1 s window opened at x.25
    for answer in answers:
        assert all(header in answer.headers for header in LIMIT_HEADERS)
        assert (answer.headers["x-ratelimit-limit"], answer.headers["x-ratelimit-reset"]) == ("2", reset)
        assert answer.headers["retry-after"] == "1"  # int(reset - now)
    clock.now += 1.0
    assert (await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)).status_code == 202


@pytest.mark.asyncio
async def test_two_submits_a_second_per_key_across_addresses(make_client) -> None:
    client, _ = await make(make_client)
    statuses = []
    for index in range(3):
        headers = {**NEW_USER, "Proxy-Authorization": PASSKEY, "Proxied-For": f"10.0.0.{index}"}
        statuses.append((await client.post(f"{API}/generate/text/async", json=text(), headers=headers)).status_code)
    assert statuses == [202, 202, 429]


@pytest.mark.asyncio
async def test_the_anonymous_key_gets_60_a_second_but_the_ip_limit_still_holds(make_client) -> None:
    client, _ = await make(make_client)
    statuses = []
    for index in range(6):
        headers = {**ANON, "Proxy-Authorization": PASSKEY, "Proxied-For": f"10.0.1.{index}"}
        statuses.append((await client.post(f"{API}/generate/text/async", json=text(), headers=headers)).status_code)
    assert statuses == [202] * 6


@pytest.mark.asyncio
async def test_a_wrong_passkey_leaves_the_connection_address(make_client) -> None:
    client, _ = await make(make_client)
    statuses = []
    for index in range(3):
        headers = {**ANON, "Proxy-Authorization": "not-the-passkey", "Proxied-For": f"10.0.2.{index}"}
        statuses.append((await client.post(f"{API}/generate/text/async", json=text(), headers=headers)).status_code)
    assert statuses == [202, 202, 429]


@pytest.mark.asyncio
async def test_90_submits_a_minute_per_ip(make_client) -> None:
    client, clock = await make(make_client, aihorde(workers=[]))
    statuses = []
    for _ in range(91):
        clock.now += 0.5  # two a second at most: within the per-second limits
        statuses.append(
            (await client.post(f"{API}/generate/text/async", json=text(16, dry_run=True), headers=ANON)).status_code
        )
    assert statuses[:90] == [200] * 90  # a dry run counts like a submit
    assert statuses[90] == 429


@pytest.mark.asyncio
async def test_status_reads_60_a_minute_per_path(make_client) -> None:
    client, _ = await make(make_client, aihorde(workers=[]))
    request_id = (await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)).json()["id"]
    reads = [(await client.get(f"{API}/generate/text/status/{request_id}")) for _ in range(61)]
    assert [read.status_code for read in reads[:60]] == [200] * 60
    assert (reads[60].status_code, reads[60].json()) == (429, {"message": "60 per 1 minute"})
    assert reads[0].headers["x-ratelimit-limit"] == "60"
    assert reads[0].headers["retry-after"] == "60"
    other = await client.get(f"{API}/generate/text/status/another-id")
    assert other.status_code == 404  # another path, another budget


@pytest.mark.asyncio
async def test_other_routes_90_a_minute_per_ip_each(make_client) -> None:
    client, _ = await make(make_client)
    reads = [(await client.get(f"{API}/status/models")).status_code for _ in range(91)]
    assert reads == [200] * 90 + [429]
    heartbeat = await client.get(f"{API}/status/heartbeat")
    assert (heartbeat.status_code, heartbeat.headers["x-ratelimit-limit"]) == (200, "90")
    assert heartbeat.headers["x-ratelimit-remaining"] == "89"


@pytest.mark.asyncio
async def test_a_faulting_worker_restarts_the_request_until_its_third_fault(make_client) -> None:
    worker = {"name": "w", "model": MODEL, "chat": False, "max_length": 512, "fault_reason": "generation_error", **FAST}
    client, clock = await make(make_client, aihorde(workers=[worker]))
    request_id = (await client.post(f"{API}/generate/text/async", json=text(), headers=ANON)).json()["id"]
    done = await wait_text(client, request_id, clock)
    assert list(done) == STATUS_KEYS
    assert (done["done"], done["faulted"], done["restarted"], done["finished"], done["generations"]) == (
        True,
        True,
        3,
        0,
        [],
    )
