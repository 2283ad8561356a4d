"""``POST /v1/images/generations`` on the REAL AI Horde (``../shared/realhorde`` started with ``RH_IMAGE_WORKER=1``:
its simulated image worker serves ``stable_diffusion``, ``AlbedoBase XL (SDXL)`` and ``Deliberate``), through the
official ``openai`` SDK: the happy path (``b64_json`` and ``url``), ``n: 2``, a censored image, a faulted job, a
client that leaves, upfront kudos and an unknown model (docs/images.md). The censored and faulted cases run a helper
image worker of their own (``image_worker.py --state ...``) that the request targets with ``horde.workers``.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from models_list.image_cards import image_cards, max_pixels_by_model, reference_limits
from tests.realhorde.conftest import Front, RealHorde, client, eventually, marker, retry_a_foreign_429
from tests.realhorde.harness import REALHORDE_DIR, sql

pytestmark = pytest.mark.realhorde

IMAGE_WORKER_MODELS = {"stable_diffusion", "AlbedoBase XL (SDXL)", "Deliberate"}


@pytest.fixture(scope="module")
def image_worker_online(realhorde: RealHorde) -> None:
    """The harness's image worker is serving (``RH_IMAGE_WORKER=1 ./up``); skip the module otherwise."""
    listed = httpx.get(f"{realhorde.horde_url}/v2/status/models", params={"type": "image"}, timeout=10).json()
    if not {entry["name"] for entry in listed} >= IMAGE_WORKER_MODELS:
        pytest.skip("real-Horde lane: no image worker; start the harness with RH_IMAGE_WORKER=1")


def image_requests(mark: str) -> list[tuple[int, int]]:
    """``(n, jobs)`` of the Horde's image requests whose prompt holds ``mark``, oldest first."""
    assert mark.isalnum()
    rows = sql(
        f"SELECT n, jobs FROM waiting_prompts WHERE wp_type = 'image' AND prompt LIKE '%{mark}%' ORDER BY created"
    )
    return [(int(row[0]), int(row[1])) for row in rows]


def decoded(b64: str | None) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(b64 or "")))
    image.load()
    return image


@pytest.fixture
def helper_worker(realhorde: RealHorde, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A helper image worker serving ``Deliberate`` in the state the test's param names (``state`` or
    ``state:delay``, delay 1 s by default); its worker id."""
    state, _, delay = str(request.param).partition(":")
    key, _ = realhorde.new_user("img")
    name = f"lane-img-{state}-{uuid.uuid4().hex[:6]}"
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-u",
            str(REALHORDE_DIR / "image_worker.py"),
            "--name",
            name,
            "--state",
            state,
            "--models",
            "Deliberate",
            "--delay",
            delay or "1",
            "--jobs-log",
            str(tmp_path / "jobs.jsonl"),
        ],
        env={**os.environ, "HORDE_URL": realhorde.horde_url, "WORKER_KEY": key},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def worker_id() -> str | None:
            answer = httpx.get(f"{realhorde.horde_url}/v2/workers/name/{name}", timeout=10)
            return answer.json().get("id") if answer.status_code == 200 else None

        yield eventually(worker_id, timeout=60, interval=2, what=f"the helper worker {name} checked in")
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@retry_a_foreign_429
def test_the_sdk_gets_a_png_from_the_real_hordes_image_worker(
    realhorde: RealHorde, front: Front, image_worker_online: None
) -> None:
    mark = marker()
    answer = client(front, realhorde.client_key, timeout=120).images.generate(
        model="dall-e-2", prompt=f"a lighthouse [{mark}]", size="512x512", extra_body={"horde": {"steps": 20}}
    )
    assert answer.data is not None and len(answer.data) == 1
    image = decoded(answer.data[0].b64_json)
    assert (image.format, image.size) == ("PNG", (512, 512))
    assert (answer.output_format, answer.size) == ("png", "512x512")
    assert image_requests(mark) == [(0, 1)]  # one request for one image, finished


@retry_a_foreign_429
def test_n_2_as_url_gives_the_hordes_own_links(realhorde: RealHorde, front: Front, image_worker_online: None) -> None:
    answer = client(front, realhorde.client_key, timeout=180).images.generate(
        model="stable_diffusion",
        prompt=f"two boats [{marker()}]",
        size="512x512",
        n=2,
        response_format="url",
        extra_body={"horde": {"steps": 20}},
    )
    assert answer.data is not None and len(answer.data) == 2
    for entry in answer.data:
        assert (entry.url or "").startswith("http://127.0.0.1:")  # the harness's image store stand-in
        assert "X-Amz-" in (entry.url or "")  # a presigned link (30 minutes)
        fetched = httpx.get(entry.url or "", timeout=10)
        assert fetched.status_code == 200
        with Image.open(io.BytesIO(fetched.content)) as image:
            assert (image.format, image.size) == ("WEBP", (512, 512))


def refused_image(
    front: Front,
    realhorde: RealHorde,
    helper_worker: str,
    refusal: type[openai.APIStatusError],
    prompt: str,
    timeout: float,
) -> dict[str, Any]:
    """The ``error`` object of a 512x512 ``Deliberate`` image asked of ``helper_worker`` alone, which the SDK raises
    as ``refusal``."""
    with pytest.raises(refusal) as raised:
        client(front, realhorde.client_key, timeout=timeout).images.generate(
            model="Deliberate",
            prompt=prompt,
            size="512x512",
            extra_body={"horde": {"workers": [helper_worker], "steps": 20}},
        )
    body: dict[str, Any] = raised.value.response.json()["error"]
    return body


@retry_a_foreign_429
@pytest.mark.parametrize("helper_worker", ["censored"], indirect=True)
def test_a_censored_image_is_content_policy_violation(
    realhorde: RealHorde, front: Front, image_worker_online: None, helper_worker: str
) -> None:
    body = refused_image(front, realhorde, helper_worker, openai.BadRequestError, f"a portrait [{marker()}]", 120)
    assert (body["code"], body["type"]) == ("content_policy_violation", "invalid_request_error")
    assert body["message"].startswith("Your request was rejected by the Horde worker's safety filter: 1 of the 1")


@retry_a_foreign_429
@pytest.mark.parametrize("helper_worker", ["faulted"], indirect=True)
def test_a_faulted_job_is_image_request_incomplete(
    realhorde: RealHorde, front: Front, image_worker_online: None, helper_worker: str
) -> None:
    """The Horde requeues a faulted job once, then ends the request ``done`` with no image (real-horde.md)."""
    body = refused_image(front, realhorde, helper_worker, openai.InternalServerError, f"a bridge [{marker()}]", 180)
    assert body["code"] == "ImageRequestIncomplete"
    assert body["message"].startswith("The Horde finished this request with 0 of the 1 images asked")


@pytest.mark.parametrize("helper_worker", ["ok:20"], indirect=True)
def test_a_client_that_leaves_cancels_its_image_request(
    realhorde: RealHorde, front: Front, image_worker_online: None, helper_worker: str
) -> None:
    """A helper worker that takes 20 s an image holds the job when the client leaves after 4 s: the front cancels
    the request (the Horde sets its ``n`` to 0; the job the worker holds still finishes, real-horde.md)."""
    mark = marker()
    with pytest.raises(openai.APITimeoutError):
        client(front, realhorde.client_key, timeout=4).images.generate(
            model="Deliberate",
            prompt=f"a slow one [{mark}]",
            size="512x512",
            extra_body={"horde": {"workers": [helper_worker], "steps": 20}},
        )
    eventually(lambda: [n for n, _ in image_requests(mark)] == [0] or None, timeout=15, what="the request cancelled")


def test_upfront_kudos_is_explained(realhorde: RealHorde, front: Front, image_worker_online: None) -> None:
    """A new user's 1536x1536 SDXL request needs kudos upfront: 403 ``KudosUpfront`` at ``size``, and nothing waits."""
    mark = marker()
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(front, realhorde.client_key).images.generate(
            model="dall-e-3", prompt=f"a city [{mark}]", size="1536x1536"
        )
    body = raised.value.response.json()["error"]
    assert (body["code"], body["param"]) == ("KudosUpfront", "size")
    assert body["message"].startswith("Due to heavy demand, for requests over 1024x1024 or over 50 steps")
    assert "This request requires" in body["message"]
    assert body["message"].endswith("or set 'horde.allow_downgrade': true.")
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert image_requests(mark) == []


def test_an_unknown_model_is_no_eligible_worker_at_once(
    realhorde: RealHorde, front: Front, image_worker_online: None
) -> None:
    """The Horde accepts it with a ``NoAvailableWorker`` warning; the front answers 503 at once and cancels it."""
    mark = marker()
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as raised:
        client(front, realhorde.client_key).images.generate(
            model=realhorde.model("no-such-image-model"), prompt=f"a tree [{mark}]", size="512x512"
        )
    assert time.monotonic() - started < 15  # at once: no wait for a worker (the Horde keeps it 20 minutes)
    answer = raised.value.response
    assert answer.status_code == 503
    assert (answer.headers["retry-after"], answer.headers["x-should-retry"]) == ("30", "false")
    assert answer.json()["error"]["code"] == "no_eligible_worker"
    # cancelled while waiting: n and jobs 0 (stable.py:548-574)
    eventually(lambda: image_requests(mark) == [(0, 0)] or None, timeout=15, what="the request cancelled")


@retry_a_foreign_429
def test_the_streamed_form_gets_the_completed_event(
    realhorde: RealHorde, front: Front, image_worker_online: None
) -> None:
    events = list(
        client(front, realhorde.client_key, timeout=120).images.generate(
            model="dall-e-2",
            prompt=f"a harbour [{marker()}]",
            size="512x512",
            stream=True,
            extra_body={"horde": {"steps": 20}},
        )
    )
    assert [event.type for event in events] == ["image_generation.completed"]
    image = decoded(events[0].b64_json)
    assert (image.format, image.size) == ("PNG", (512, 512))


def test_the_image_cards_limits_come_from_what_the_real_horde_serves(
    realhorde: RealHorde, image_worker_online: None
) -> None:
    """The image cards' ``x_horde.image`` read from the real server's own answers: ``GET /v2/workers?type=image``
    carries ``max_pixels`` (1048576 for the harness's image worker), and the model reference the Horde reads (the
    harness serves it on ``RH_REF_PORT``) the baseline; it names no ``max_steps``, so the Horde's default 40 applies."""
    workers = httpx.get(f"{realhorde.horde_url}/v2/workers", params={"type": "image"}, timeout=10).json()
    models = httpx.get(f"{realhorde.horde_url}/v2/status/models", params={"type": "image"}, timeout=10).json()
    reference_url = f"http://127.0.0.1:{os.environ.get('RH_REF_PORT', '17002')}/stable_diffusion.json"
    reference = httpx.get(reference_url, timeout=10).json()
    listed = image_cards(
        models, {"dall-e-3": "AlbedoBase XL (SDXL)"}, max_pixels_by_model(workers), reference_limits(reference)
    )
    cards = {card["id"]: card for card in listed}
    assert cards["dall-e-3"]["x_horde"]["image"] == {
        "baseline": "stable_diffusion_xl",
        "max_pixels": 1048576,
        "max_size": "1024x1024",
        "max_steps": 40,
    }
    assert cards["stable_diffusion"]["x_horde"]["image"]["baseline"] == "stable diffusion 1"
