"""``POST /v1/images/generations`` end to end: the official ``openai`` SDK's ``images.generate`` (``b64_json`` and
``url``), Open WebUI's image request body, and the refusals, through uvicorn on the devhorde's ``images`` scenario
(devhorde.image_api: the real server's image routes, limits and answers). docs/images.md.
"""

from __future__ import annotations

import base64
import copy
import io
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from tests.conftest import LiveStack, running_stack, scenario_restored

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def image_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """The devhorde on the ``images`` scenario and a front on it, for this module."""
    with running_stack(tmp_path_factory.mktemp("images"), scenario="images") as stack:
        stack.default_scenario = stack.get_scenario()  # type: ignore[attr-defined]
        yield stack


@pytest.fixture
def stack(image_stack: LiveStack) -> Iterator[LiveStack]:
    with scenario_restored(image_stack):
        yield image_stack


def client(stack: LiveStack, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, **options)


def image_workers(stack: LiveStack, **online: bool) -> None:
    """Put the scenario with each named image worker online or offline."""
    scenario = copy.deepcopy(stack.default_scenario)  # type: ignore[attr-defined]
    for worker in scenario["images"]["workers"]:
        if worker["name"] in online:
            worker["online"] = online[worker["name"]]
    stack.put_scenario(scenario)


def calls(stack: LiveStack) -> dict[str, Any]:
    return httpx.get(f"{stack.devhorde_control}/images", timeout=5).json()


def test_the_sdk_gets_a_png_of_the_size_asked_as_b64_json(stack: LiveStack) -> None:
    """The default answer: one PNG (converted from the Horde's WebP) of the asked size, OpenAI's response shape."""
    before = time.time()
    answer = client(stack).images.generate(
        model="dall-e-2", prompt="a lighthouse at dusk", size="512x512", response_format="b64_json"
    )
    assert answer.created >= int(before)
    assert answer.data is not None and len(answer.data) == 1
    assert answer.data[0].url is None
    png = base64.b64decode(answer.data[0].b64_json or "")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(png)) as image:
        assert (image.format, image.size) == ("PNG", (512, 512))
    assert (answer.output_format, answer.size, answer.background) == ("png", "512x512", "opaque")
    submitted = calls(stack)["requests"][-1]
    assert submitted["models"] == ["stable_diffusion"]  # the dall-e-2 alias's default model


def test_the_sdk_gets_n_images_in_the_format_asked(stack: LiveStack) -> None:
    answer = client(stack).images.generate(
        model="stable_diffusion", prompt="two cats", n=2, size="256x256", output_format="jpeg", quality="low"
    )
    assert answer.data is not None and len(answer.data) == 2
    for entry in answer.data:
        with Image.open(io.BytesIO(base64.b64decode(entry.b64_json or ""))) as image:
            assert (image.format, image.size) == ("JPEG", (256, 256))
    assert (answer.output_format, answer.quality) == ("jpeg", "low")


def test_the_sdk_gets_the_hordes_own_url(stack: LiveStack) -> None:
    """``response_format: url`` is the Horde's own link (``r2: true``), serving the WebP image."""
    answer = client(stack).images.generate(
        model="dall-e-3", prompt="a red kite", size="1024x1024", response_format="url"
    )
    assert answer.data is not None and len(answer.data) == 1
    url = answer.data[0].url or ""
    assert url.startswith(stack.horde_url.removesuffix("/api") + "/_devhorde/r2/")
    fetched = httpx.get(url, timeout=5)
    assert fetched.status_code == 200
    with Image.open(io.BytesIO(fetched.content)) as image:
        assert (image.format, image.size) == ("WEBP", (1024, 1024))
    assert answer.output_format == "webp"


def test_open_webuis_image_request_body_is_served(stack: LiveStack) -> None:
    """Open WebUI's OpenAI image engine posts ``{"model", "prompt", "n", "size", "response_format": "b64_json"}``."""
    response = httpx.post(
        f"{stack.openai_base_url}/images/generations",
        json={
            "model": "gpt-image-1",
            "prompt": "a mountain lake",
            "n": 1,
            "size": "512x512",
            "response_format": "b64_json",
        },
        headers={"Authorization": "Bearer 0000000000"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"created", "data", "background", "output_format", "size"}
    assert list(body["data"][0]) == ["b64_json"]
    assert calls(stack)["requests"][-1]["models"] == ["AlbedoBase XL (SDXL)"]


def test_a_model_no_worker_serves_is_no_eligible_worker_at_once_and_cancelled(stack: LiveStack) -> None:
    before = calls(stack)["calls"].get("cancel", 0)
    with pytest.raises(openai.APIStatusError) as raised:
        client(stack).images.generate(model="Deliberate", prompt="a tree", size="512x512")
    error = raised.value
    assert error.status_code == 503
    assert error.response.headers["retry-after"] == "30"
    assert error.response.headers["x-should-retry"] == "false"
    body = error.response.json()["error"]
    assert (body["code"], body["type"], body["param"]) == ("no_eligible_worker", "api_error", None)
    assert body["message"].startswith(
        "No online image worker of the Horde can serve this request for the model 'Deliberate' at 512x512."
    )
    deadline = time.monotonic() + 5  # the cancel runs as its own task after the answer
    while calls(stack)["calls"].get("cancel", 0) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls(stack)["calls"].get("cancel", 0) == before + 1


def test_a_censored_image_is_content_policy_violation(stack: LiveStack) -> None:
    image_workers(stack, **{"painter-1": False, "censor-1": True})
    with pytest.raises(openai.BadRequestError) as raised:
        client(stack).images.generate(model="stable_diffusion", prompt="a beach", size="512x512")
    body = raised.value.response.json()["error"]
    assert (body["code"], body["type"], body["param"]) == ("content_policy_violation", "invalid_request_error", None)
    assert body["message"].startswith(
        "Your request was rejected by the Horde worker's safety filter: 1 of the 1 images was censored"
    )


def test_fewer_images_than_n_from_a_faulted_job_is_image_request_incomplete(stack: LiveStack) -> None:
    image_workers(stack, **{"painter-1": False, "faulty-1": True})
    with pytest.raises(openai.InternalServerError) as raised:
        client(stack).images.generate(model="stable_diffusion", prompt="a bridge", size="512x512", n=2)
    assert raised.value.status_code == 502
    body = raised.value.response.json()["error"]
    assert body["code"] == "ImageRequestIncomplete"
    assert body["message"].startswith("The Horde finished this request with 1 of the 2 images asked")
    assert (body["metadata"]["images"], body["metadata"]["n"]) == (1, 2)


def test_upfront_kudos_is_explained_at_size(stack: LiveStack) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(stack).images.generate(model="dall-e-3", prompt="a city", size="1536x1536")
    body = raised.value.response.json()["error"]
    assert (body["code"], body["param"]) == ("KudosUpfront", "size")
    assert "This request requires" in body["message"]
    assert body["message"].endswith("or set 'horde.allow_downgrade': true.")
    assert raised.value.response.headers["x-should-retry"] == "false"


def test_allow_downgrade_serves_a_request_over_the_free_size(stack: LiveStack) -> None:
    answer = client(stack).images.generate(
        model="dall-e-3", prompt="a city", size="1536x1536", extra_body={"horde": {"allow_downgrade": True}}
    )
    assert answer.data is not None
    with Image.open(io.BytesIO(base64.b64decode(answer.data[0].b64_json or ""))) as image:
        assert image.size == (1024, 1024)


def test_max_kudos_goes_through_the_dry_run(stack: LiveStack) -> None:
    submits = calls(stack)["calls"].get("submit", 0)
    with pytest.raises(openai.BadRequestError) as raised:
        client(stack).images.generate(
            model="stable_diffusion",
            prompt="a boat",
            size="512x512",
            n=2,
            extra_body={"horde": {"max_kudos": 5, "steps": 20}},
        )
    body = raised.value.response.json()["error"]
    assert (body["code"], body["param"]) == ("max_kudos_exceeded", "horde.max_kudos")
    # the devhorde's dry run prices 512x512x20 at 6 kudos an image, as the real server does
    assert body["message"] == "The request's kudos estimate at current pricing is 12, above its horde.max_kudos of 5."
    assert calls(stack)["calls"]["submit"] == submits + 1  # the dry run only


def test_a_client_that_leaves_cancels_the_request(stack: LiveStack) -> None:
    scenario = copy.deepcopy(stack.default_scenario)  # type: ignore[attr-defined]
    scenario["images"]["workers"][0]["seconds_per_image"] = 30
    stack.put_scenario(scenario)
    before = calls(stack)["calls"].get("cancel", 0)
    with pytest.raises(openai.APITimeoutError):
        client(stack, timeout=2.0).images.generate(model="stable_diffusion", prompt="a slow one", size="512x512")
    deadline = time.monotonic() + 10
    while calls(stack)["calls"].get("cancel", 0) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert calls(stack)["calls"].get("cancel", 0) == before + 1
    assert calls(stack)["requests"][-1]["cancelled"] is True


def test_the_status_is_read_once_and_the_check_on_the_schedule(stack: LiveStack) -> None:
    """One submit, checks about once a second, and exactly one status read per image request."""
    before = dict(calls(stack)["calls"])
    client(stack).images.generate(model="stable_diffusion", prompt="a field", size="512x512")
    after = calls(stack)["calls"]
    assert after["submit"] - before.get("submit", 0) == 1
    assert after["status"] - before.get("status", 0) == 1
    assert after["check"] - before.get("check", 0) >= 1


def test_bad_input_is_openais_envelope(stack: LiveStack) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client(stack).images.generate(model="dall-e-2", prompt="x", n=11)
    body = raised.value.response.json()["error"]
    assert body == {
        "message": "Invalid 'n': integer above maximum value. Expected a value <= 10, but got 11 instead.",
        "type": "invalid_request_error",
        "param": "n",
        "code": "BadRequest",
    }


def test_the_model_list_holds_the_served_image_models_and_their_aliases(stack: LiveStack) -> None:
    """Image models with an online worker, and each alias of one, as cards that say ``text->image`` with the workers'
    max size; ``Deliberate`` (known, no online worker) is not listed."""
    cards = {card.id: card.model_dump() for card in client(stack).models.list()}
    assert {"stable_diffusion", "AlbedoBase XL (SDXL)", "dall-e-2", "dall-e-3", "gpt-image-1"} <= set(cards)
    assert "Deliberate" not in cards
    alias = cards["dall-e-3"]
    assert (alias["name"], alias["canonical_slug"]) == (
        "dall-e-3 (alias of AlbedoBase XL (SDXL))",
        "AlbedoBase XL (SDXL)",
    )
    assert alias["architecture"]["modality"] == "text->image"
    assert alias["architecture"]["output_modalities"] == ["image"]
    assert (alias["x_horde"]["api"], alias["x_horde"]["routes"]) == ("image", ["/v1/images/generations"])
    assert cards["stable_diffusion"]["x_horde"]["workers"] == 1
    # The worker list's max_pixels gives the max size; without HORDE_OAI_IMAGE_MODEL_REFERENCE_URL no baseline or steps.
    assert cards["dall-e-3"]["x_horde"]["image"] == {
        "baseline": None,
        "max_pixels": 1048576,
        "max_size": "1024x1024",
        "max_steps": None,
    }
    assert client(stack).models.retrieve("dall-e-2").name == "dall-e-2 (alias of stable_diffusion)"


def test_the_sdks_stream_gets_the_completed_event_of_each_image(stack: LiveStack) -> None:
    """``stream: true``: one ``image_generation.completed`` event per image (no partial images), then the end."""
    events = list(client(stack).images.generate(model="dall-e-2", prompt="a harbour", size="256x256", n=2, stream=True))
    assert [event.type for event in events] == ["image_generation.completed", "image_generation.completed"]
    for event in events:
        assert (event.size, event.output_format, event.background, event.quality) == (
            "256x256",
            "png",
            "opaque",
            "auto",
        )
        with Image.open(io.BytesIO(base64.b64decode(event.b64_json))) as image:
            assert (image.format, image.size) == ("PNG", (256, 256))


def test_a_streamed_refusal_after_the_headers_is_the_error_event(stack: LiveStack) -> None:
    """A censored image in a stream: the SDK raises the ``content_policy_violation`` error event."""
    image_workers(stack, **{"painter-1": False, "censor-1": True})
    with pytest.raises(openai.APIError) as raised:
        list(client(stack).images.generate(model="stable_diffusion", prompt="a beach", size="256x256", stream=True))
    assert raised.value.code == "content_policy_violation"


def test_a_streamed_client_that_leaves_cancels_the_request(stack: LiveStack) -> None:
    scenario = copy.deepcopy(stack.default_scenario)  # type: ignore[attr-defined]
    scenario["images"]["workers"][0]["seconds_per_image"] = 30
    stack.put_scenario(scenario)
    before = calls(stack)["calls"].get("cancel", 0)
    body = {"model": "dall-e-2", "prompt": "a slow stream", "size": "256x256", "stream": True}
    with httpx.stream(
        "POST",
        f"{stack.openai_base_url}/images/generations",
        json=body,
        headers={"Authorization": "Bearer 0000000000"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
    deadline = time.monotonic() + 10  # leaving the block closed the connection
    while calls(stack)["calls"].get("cancel", 0) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert calls(stack)["calls"].get("cancel", 0) == before + 1
