"""The devhorde's image API against the real server's answers (real-horde.md "Images"; devhorde/image_api.py): the
routes, the status limit, upfront kudos and downgrade, the dry run, censored and faulted images, the cancel.
"""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import httpx
import pytest
from devhorde_helpers import MakeClient
from PIL import Image

from devhorde.scenario import Scenario, load_scenario

pytestmark = pytest.mark.asyncio

PAYLOAD: dict[str, Any] = {
    "prompt": "a lighthouse",
    "models": ["stable_diffusion"],
    "nsfw": False,
    "r2": False,
    "params": {"width": 512, "height": 512, "steps": 20, "n": 1},
}


def images_scenario(**worker: Any) -> Scenario:
    """The bundled ``images`` scenario with its first image worker changed by ``worker``."""
    scenario = load_scenario("images").model_dump(mode="json")
    scenario["images"]["workers"][0].update(seconds_per_image=0.05, **worker)
    return Scenario.model_validate(scenario)


async def done_status(client: httpx.AsyncClient, request_id: str) -> dict[str, Any]:
    for _ in range(100):
        check = (await client.get(f"/api/v2/generate/check/{request_id}")).json()
        if check["done"]:
            break
        await asyncio.sleep(0.05)
    answer: dict[str, Any] = (await client.get(f"/api/v2/generate/status/{request_id}")).json()
    return answer


async def test_a_request_is_served_as_inline_webp_of_its_size(make_client: MakeClient) -> None:
    client = await make_client(images_scenario())
    submitted = await client.post("/api/v2/generate/async", json=PAYLOAD)
    assert submitted.status_code == 202
    assert submitted.json()["kudos"] == 6  # 512x512x20, as the real server prices it
    status = await done_status(client, submitted.json()["id"])
    assert (status["done"], status["finished"], len(status["generations"])) == (True, 1, 1)
    generation = status["generations"][0]
    assert (generation["censored"], generation["state"], generation["model"]) == (False, "ok", "stable_diffusion")
    with Image.open(io.BytesIO(base64.b64decode(generation["img"]))) as image:
        assert (image.format, image.size) == ("WEBP", (512, 512))


async def test_the_status_is_limited_to_ten_a_minute_per_request(make_client: MakeClient) -> None:
    client = await make_client(images_scenario())
    request_id = (await client.post("/api/v2/generate/async", json=PAYLOAD)).json()["id"]
    answers = [(await client.get(f"/api/v2/generate/status/{request_id}")).status_code for _ in range(11)]
    assert answers == [200] * 10 + [429]
    refused = await client.get(f"/api/v2/generate/status/{request_id}")
    assert refused.json() == {"message": "10 per 1 minute"}
    assert (await client.delete(f"/api/v2/generate/status/{request_id}")).status_code == 200  # counted apart


async def test_an_unknown_model_is_accepted_with_the_no_available_worker_warning(make_client: MakeClient) -> None:
    client = await make_client(images_scenario())
    answer = await client.post("/api/v2/generate/async", json={**PAYLOAD, "models": ["nope"]})
    assert answer.status_code == 202
    assert answer.json()["warnings"][0]["code"] == "NoAvailableWorker"
    check = (await client.get(f"/api/v2/generate/check/{answer.json()['id']}")).json()
    assert (check["is_possible"], check["done"], check["waiting"]) == (False, False, 1)
    cancelled = await client.delete(f"/api/v2/generate/status/{answer.json()['id']}")
    assert cancelled.json()["done"] is False  # the status from before the cancel
    after = (await client.get(f"/api/v2/generate/check/{answer.json()['id']}")).json()
    assert (after["done"], after["waiting"]) == (True, 0)


async def test_upfront_kudos_the_downgrade_and_the_dry_run(make_client: MakeClient) -> None:
    client = await make_client(images_scenario())
    big = {**PAYLOAD, "params": {"width": 1536, "height": 1536, "steps": 30, "n": 1}}
    refused = await client.post("/api/v2/generate/async", json=big)
    assert refused.status_code == 403
    assert refused.json()["rc"] == "KudosUpfront"
    assert refused.json()["message"].startswith("Due to heavy demand, for requests over 1024x1024 or over 50 steps")
    kudos_key = await client.post(
        "/api/v2/generate/async", json={**big, "dry_run": True}, headers={"apikey": "devhorde-kudos-key"}
    )
    assert (kudos_key.status_code, list(kudos_key.json())) == (200, ["kudos"])
    await asyncio.sleep(1.1)  # the submit limit: 2 a second per address, as the real server's
    downgraded = await client.post("/api/v2/generate/async", json={**big, "allow_downgrade": True})
    status = await done_status(client, downgraded.json()["id"])
    with Image.open(io.BytesIO(base64.b64decode(status["generations"][0]["img"]))) as image:
        assert image.size == (1024, 1024)


async def test_censored_and_faulted_workers(make_client: MakeClient) -> None:
    client = await make_client(images_scenario(state="censored"))
    status = await done_status(client, (await client.post("/api/v2/generate/async", json=PAYLOAD)).json()["id"])
    generation = status["generations"][0]
    assert (generation["censored"], generation["gen_metadata"], generation["state"]) == (
        True,
        [{"type": "censorship", "value": "nsfw"}],
        "ok",
    )
    client = await make_client(images_scenario(state="faulted"))
    status = await done_status(client, (await client.post("/api/v2/generate/async", json=PAYLOAD)).json()["id"])
    assert (status["done"], status["faulted"], status["restarted"], status["generations"]) == (True, False, 2, [])
