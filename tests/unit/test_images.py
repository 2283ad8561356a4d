"""The images app in process: OpenAI's validation wording at each param, the mapping onto the Horde's payload, the
conversion of the Horde's WebP, the refusals (docs/images.md), the image cards, and the wait against a scripted Horde.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from loguru import logger
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from PIL import Image

import chat.metrics
from chat import errors
from chat.errors import OpenAIError
from chat.horde.budget import HordeBudget
from chat.horde.native import HordeRefusal, HordeUnreachable, NativeStatus, SubmitResult
from chat.horde.pacing import IMAGE_STATUS_READS, STATUS_READS
from chat.metrics import configure_metrics, histogram_views
from chat.rendering.progress import QueueProgress
from chat.serving.runtime import FrontRuntime
from chat.settings import (
    DEFAULT_IMAGE_MODEL_ALIASES,
    DEFAULT_MAX_BODY_BYTES,
    FrontSettings,
    alias_pairs_problem,
    image_model_aliases,
)
from chat.waiting.read_schedule import ReadBudget
from images.convert import NotAnImage, convert_image
from images.horde import ImageGeneration, ImageStatus, horde_payload
from images.reading import ImagePlan, read_image_request
from images.service import (
    ImageOutcome,
    ImageService,
    censored_error,
    image_events,
    image_runtime,
    record_image_request,
    refusal_error,
)
from models_list.image_cards import image_cards, max_pixels_by_model, max_size, reference_limits, served_image_cards
from models_list.schema import ModelList
from tests.unit.fake_real_horde import RealHorde, installed


def read(body: dict[str, Any], aliases: str = DEFAULT_IMAGE_MODEL_ALIASES) -> ImagePlan:
    return read_image_request(json.dumps(body).encode(), aliases)


def refused(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(OpenAIError) as raised:
        read(body)
    return {**raised.value.envelope()["error"], "status": raised.value.status}


def webp(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 40)) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "WEBP", quality=95)
    return base64.b64encode(out.getvalue()).decode()


# --- reading ----------------------------------------------------------------------------------------------------


def test_a_minimal_request_takes_openais_defaults_on_the_dall_e_2_alias() -> None:
    plan = read({"prompt": "a lighthouse"})
    assert (plan.model, plan.requested_model, plan.n, plan.size, plan.steps) == (
        "stable_diffusion",
        "dall-e-2",
        1,
        "1024x1024",
        30,
    )
    assert (plan.response_format, plan.output_format, plan.output_compression, plan.transparent) == (
        "b64_json",
        "png",
        100,
        False,
    )


@pytest.mark.parametrize(
    ("body", "message", "param", "code"),
    [
        ({}, "Missing required parameter: 'prompt'.", "prompt", "BadRequest"),
        (
            {"prompt": "x", "n": 11},
            "Invalid 'n': integer above maximum value. Expected a value <= 10, but got 11 instead.",
            "n",
            "BadRequest",
        ),
        (
            {"prompt": "x", "n": 0},
            "Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 instead.",
            "n",
            "BadRequest",
        ),
        (
            {"prompt": "x", "quality": "ultra"},
            "Invalid value: 'ultra'. Supported values are: 'low', 'medium', 'high', 'xhigh', 'max', 'auto', "
            "'standard', and 'hd'.",
            "quality",
            "BadRequest",
        ),
        (
            {"prompt": "x", "size": "1000x1000"},
            "Invalid 'size': '1000x1000'. The AI Horde makes images whose width and height are multiples of 64 from "
            "64 to 3072 pixels.",
            "size",
            "BadRequest",
        ),
        (
            {"prompt": "x", "size": "big"},
            "Invalid value: 'big'. Supported values are: 'auto' and 'WIDTHxHEIGHT' sizes such as '1024x1024', "
            "'1536x1024' and '512x512'.",
            "size",
            "BadRequest",
        ),
        ({"prompt": "x", "colour": "red"}, "Unrecognized request argument supplied: colour", "colour", None),
        (
            {"prompt": "x", "style": "natural"},
            "The AI Horde's image models have no 'natural' style: describe the style in the prompt instead.",
            "style",
            None,
        ),
        (
            {"prompt": "x", "output_format": "svg"},
            "The AI Horde makes raster still images: 'output_format' 'svg' cannot be served. Use 'png', 'jpeg' or "
            "'webp'.",
            "output_format",
            None,
        ),
        (
            {"prompt": "x", "response_format": "url", "output_format": "png"},
            "A 'url' image is the Horde's own WebP file: 'output_format' 'png' cannot apply to it. Ask "
            "'response_format': 'b64_json' for another format.",
            "output_format",
            None,
        ),
        (
            {"prompt": "x", "background": "transparent", "output_format": "jpeg"},
            "Transparent background requires 'output_format' to be 'png' or 'webp', not 'jpeg'.",
            "background",
            "BadRequest",
        ),
        (
            {"prompt": "x", "stream": True, "partial_images": 2},
            "The AI Horde sends no partial images: 'partial_images' must be 0 or absent.",
            "partial_images",
            None,
        ),
        (
            {"prompt": "x", "stream": True, "response_format": "url"},
            "A streamed image comes as 'b64_json' in its completed event: 'url' cannot be streamed.",
            "response_format",
            None,
        ),
        (
            {"prompt": "x", "horde": {"steps": 501}},
            "Invalid 'horde.steps': integer above maximum value. Expected a value <= 500, but got 501 instead.",
            "horde.steps",
            "BadRequest",
        ),
        (
            {"prompt": "x", "horde": {"sampler_name": "euler_cfg_pp"}},
            "Invalid value: 'euler_cfg_pp'. Supported values are: 'k_lms', 'k_heun', 'k_euler', 'k_euler_a', "
            "'k_dpm_2', 'k_dpm_2_a', 'k_dpm_fast', 'k_dpm_adaptive', 'k_dpmpp_2s_a', 'k_dpmpp_2m', 'dpmsolver', "
            "'k_dpmpp_sde', 'DDIM', and 'lcm'.",
            "horde.sampler_name",
            "BadRequest",
        ),
        (
            {"prompt": "x", "horde": {"cfg_scale": 101}},
            "Invalid 'horde.cfg_scale': integer above maximum value. Expected a value <= 100, but got 101 instead.",
            "horde.cfg_scale",
            "BadRequest",
        ),
    ],
)
def test_bad_input_is_refused_at_its_param_in_openais_wording(
    body: dict[str, Any], message: str, param: str, code: str | None
) -> None:
    error = refused(body)
    assert (error["message"], error["param"], error["status"]) == (message, param, 400)
    assert error["code"] == (code or errors.UNSUPPORTED_CHAT_PARAMETER)


def test_the_moderation_low_is_refused_toward_the_hordes_own_options() -> None:
    error = refused({"prompt": "x", "moderation": "low"})
    assert (error["param"], error["code"]) == ("moderation", errors.UNSUPPORTED_CHAT_PARAMETER)
    assert "'horde.nsfw' and 'horde.censor_nsfw'" in error["message"]


def test_keys_without_a_horde_meaning_are_accepted_at_their_default() -> None:
    plan = read(
        {"prompt": "x", "style": "vivid", "moderation": "auto", "background": "auto", "user": "u1", "partial_images": 0}
    )
    assert (plan.transparent, plan.stream) == (False, False)


def test_without_aliases_a_request_must_name_its_model() -> None:
    with pytest.raises(OpenAIError) as raised:
        read({"prompt": "x"}, aliases="")
    assert (raised.value.message, raised.value.param) == ("Missing required parameter: 'model'.", "model")


def test_aliases_are_pairs_and_a_bad_value_says_the_shape() -> None:
    assert image_model_aliases(" a = Model One , b=m2,") == {"a": "Model One", "b": "m2"}
    assert alias_pairs_problem("dall-e-2") is not None
    with pytest.raises(ValueError, match="expected name=Horde model pairs"):
        FrontSettings(image_model_aliases="dall-e-2")


# --- the payload ------------------------------------------------------------------------------------------------


def test_the_payload_maps_openais_keys_and_sends_nsfw_explicitly() -> None:
    plan = read(
        {
            "model": "dall-e-3",
            "prompt": "a kite",
            "n": 2,
            "size": "1536x1024",
            "quality": "high",
            "background": "transparent",
            "output_format": "webp",
            "horde": {"cfg_scale": 6, "sampler_name": "k_euler", "trusted_workers": True, "allow_downgrade": True},
        }
    )
    assert horde_payload(plan) == {
        "prompt": "a kite",
        "models": ["AlbedoBase XL (SDXL)"],
        "params": {
            "width": 1536,
            "height": 1024,
            "steps": 40,
            "n": 2,
            "cfg_scale": 6.0,
            "sampler_name": "k_euler",
            "transparent": True,
        },
        "nsfw": False,
        "censor_nsfw": True,
        "r2": False,
        "trusted_workers": True,
        "allow_downgrade": True,
    }
    assert horde_payload(plan, dry_run=True)["dry_run"] is True


def test_a_url_request_asks_the_hordes_link_and_reports_webp() -> None:
    plan = read({"prompt": "x", "response_format": "url", "horde": {"steps": 12}})
    payload = horde_payload(plan)
    assert (payload["r2"], payload["params"]["steps"], plan.output_format) == (True, 12, "webp")


# --- conversion -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("output_format", "pillow"), [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")])
def test_the_hordes_webp_is_converted_to_the_format_asked(output_format: str, pillow: str) -> None:
    converted = convert_image(webp(128, 64), output_format, 80)
    with Image.open(io.BytesIO(converted)) as image:
        assert (image.format, image.size) == (pillow, (128, 64))
        assert image.convert("RGB").getpixel((5, 5)) == pytest.approx((200, 30, 40), abs=8)


def test_something_not_an_image_is_not_an_image() -> None:
    with pytest.raises(NotAnImage):
        convert_image(base64.b64encode(b"not an image").decode(), "png", 100)
    with pytest.raises(NotAnImage):
        convert_image("%%%", "png", 100)


# --- refusals and budgets ---------------------------------------------------------------------------------------


def test_kudos_upfront_says_how_to_get_kudos_or_what_to_lower() -> None:
    error = refusal_error(
        HordeRefusal(403, "This request requires 117.16 kudos to fulfil.", "KudosUpfront", headers={"Retry-After": "1"})
    )
    assert (error.status, error.code, error.param, error.retry_after, error.should_retry) == (
        403,
        "KudosUpfront",
        "size",
        None,
        False,
    )
    assert error.message.startswith("This request requires 117.16 kudos to fulfil. The API key sent must already hold")
    assert error.message.endswith("or set 'horde.allow_downgrade': true.")


def test_a_censored_generation_is_told_by_its_flag_or_its_metadata() -> None:
    """real-horde.md: ``state`` stays ``ok`` for a censored image; ``censored`` and ``gen_metadata`` say it."""
    assert ImageGeneration(img="", censored=True).is_censored
    assert ImageGeneration(img="", gen_metadata=[{"type": "censorship", "value": "nsfw"}]).is_censored
    assert not ImageGeneration(img="", state="ok").is_censored


def test_image_submits_are_paced_and_image_statuses_capped() -> None:
    budget = HordeBudget()
    assert [rule for rule, _ in budget.turns("POST", "/v2/generate/async", "key")] == [
        rule for rule, _ in budget.turns("POST", "/v2/generate/text/async", "key")
    ]
    assert budget.turns("GET", "/v2/generate/check/abc", None) == [(STATUS_READS, "/v2/generate/check/abc")]
    assert budget.turns("GET", "/v2/generate/status/abc", None) == [(IMAGE_STATUS_READS, "GET /v2/generate/status/abc")]
    assert budget.turns("DELETE", "/v2/generate/status/abc", None) == [
        (IMAGE_STATUS_READS, "DELETE /v2/generate/status/abc")
    ]
    assert IMAGE_STATUS_READS.calls < 10  # the Horde's 10 a minute per request


# --- the wait ---------------------------------------------------------------------------------------------------


class ScriptedImageHorde:
    """A Horde that answers the submit, then the scripted checks, then the status; records every call."""

    def __init__(self, checks: list[dict[str, Any]], status: dict[str, Any], warnings: list[dict[str, Any]]) -> None:
        self.checks = checks
        self.final = status
        self.warnings = warnings
        self.calls: list[str] = []

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        self.calls.append("dry_run" if payload.get("dry_run") else "submit")
        return SubmitResult(id="req-1", kudos=6, warnings=self.warnings)

    async def check(self, request_id: str, apikey: str | None) -> NativeStatus:
        self.calls.append("check")
        return NativeStatus.model_validate(self.checks.pop(0))

    async def status(self, request_id: str, apikey: str | None) -> ImageStatus:
        self.calls.append("status")
        return ImageStatus.model_validate(self.final)


class RecordedCancels:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel_soon(self, request_id: str, apikey: str | None, submitted_at: float) -> None:
        self.cancelled.append(request_id)


def service(horde: ScriptedImageHorde) -> tuple[ImageService, RecordedCancels]:
    settings = FrontSettings(signal_recheck_seconds=1.0, fail_fast_grace_seconds=2.0, nonstream_timeout_seconds=60)
    runtime = SimpleNamespace(settings=settings, read_budget=ReadBudget(settings.signal_recheck_reads_per_second))
    cancels = RecordedCancels()
    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    images = SimpleNamespace(horde=horde, cancels=cancels)
    made = ImageService(runtime, images, clock=lambda: clock[0], sleep=sleep)  # type: ignore[arg-type]
    return made, cancels


WAITING = {"done": False, "waiting": 1, "queue_position": 1, "wait_time": 3, "is_possible": True}
DONE = {"done": True, "finished": 1, "is_possible": True}


def test_the_check_is_read_until_done_and_the_status_once() -> None:
    horde = ScriptedImageHorde([WAITING, WAITING, DONE], {"done": True, "generations": [{"img": webp(64, 64)}]}, [])
    made, cancels = service(horde)
    outcome = ImageOutcome()
    body = asyncio.run(made.generate(read({"prompt": "x", "size": "64x64"}), None, outcome))
    assert horde.calls == ["submit", "check", "check", "check", "status"]
    assert (len(body["data"]), body["size"], outcome.checks, cancels.cancelled) == (1, "64x64", 3, [])


@pytest.mark.parametrize(
    ("generations", "code", "status"),
    [
        ([], errors.IMAGE_REQUEST_INCOMPLETE, 502),
        ([{"img": "", "censored": True}], errors.CONTENT_POLICY_VIOLATION, 400),
    ],
)
def test_a_done_request_without_every_clean_image_is_refused(
    generations: list[dict[str, Any]], code: str, status: int
) -> None:
    horde = ScriptedImageHorde([DONE], {"done": True, "restarted": 2, "generations": generations}, [])
    made, _ = service(horde)
    with pytest.raises(OpenAIError) as raised:
        asyncio.run(made.generate(read({"prompt": "x"}), None, ImageOutcome()))
    assert (raised.value.code, raised.value.status) == (code, status)


def test_a_request_no_worker_can_serve_is_refused_at_once_and_cancelled() -> None:
    warning = {"code": "NoAvailableWorker", "message": "Warning: No available workers can fulfill this request."}
    horde = ScriptedImageHorde([], {}, [warning])
    made, cancels = service(horde)
    with pytest.raises(OpenAIError) as raised:
        asyncio.run(made.generate(read({"prompt": "x", "model": "nope"}), None, ImageOutcome()))
    assert (raised.value.code, raised.value.retry_after, raised.value.should_retry) == ("no_eligible_worker", 30, False)
    assert raised.value.message == (
        "No online image worker of the Horde can serve this request for the model 'nope' at 1024x1024. "
        "GET /v1/models lists the image models with online workers. The Horde said: Warning: No available workers "
        "can fulfill this request."
    )
    assert (horde.calls, cancels.cancelled) == (["submit"], ["req-1"])


def test_an_impossible_request_is_no_eligible_worker_after_the_grace_and_cancelled() -> None:
    impossible = {"done": False, "waiting": 1, "is_possible": False}
    horde = ScriptedImageHorde([impossible] * 5, {}, [])
    made, cancels = service(horde)
    with pytest.raises(OpenAIError) as raised:
        asyncio.run(made.generate(read({"prompt": "x"}), None, ImageOutcome()))
    assert raised.value.code == "no_eligible_worker"
    assert cancels.cancelled == ["req-1"]


def test_max_kudos_refuses_from_the_dry_run_without_a_submit() -> None:
    horde = ScriptedImageHorde([], {}, [])
    made, _ = service(horde)
    with pytest.raises(OpenAIError) as raised:
        asyncio.run(made.generate(read({"prompt": "x", "n": 2, "horde": {"max_kudos": 10}}), None, ImageOutcome()))
    assert (raised.value.code, raised.value.param) == ("max_kudos_exceeded", "horde.max_kudos")
    assert raised.value.message == (
        "The request's kudos estimate at current pricing is 12, above its horde.max_kudos of 10."
    )
    assert horde.calls == ["dry_run"]


# --- cards ------------------------------------------------------------------------------------------------------


def test_image_cards_list_served_models_and_the_aliases_of_served_ones() -> None:
    entries = [
        {"name": "stable_diffusion", "count": 2, "queued": 0, "jobs": 0, "eta": 0, "performance": 1.0},
        {"name": "Deliberate", "count": 0},
    ]
    cards = image_cards(entries, image_model_aliases(DEFAULT_IMAGE_MODEL_ALIASES))
    assert [card["id"] for card in cards] == ["stable_diffusion", "dall-e-2"]
    assert cards[1]["name"] == "dall-e-2 (alias of stable_diffusion)"
    assert cards[0]["architecture"]["modality"] == "text->image"


HARNESS_IMAGE_MODELS = [
    {"name": name, "count": 1, "performance": 0.0, "queued": 0, "jobs": 0, "eta": 0, "type": "image"}
    for name in ("AlbedoBase XL (SDXL)", "Deliberate", "stable_diffusion")
]
"""``GET /v2/status/models?type=image`` of the real-Horde harness with its image worker (realhorde README, Images)."""

HARNESS_IMAGE_WORKER = {
    "name": "sim-image-worker-1",
    "id": "0f4c3d1e-6a7b-4c2d-9e8f-1a2b3c4d5e6f",
    "type": "image",
    "online": True,
    "maintenance_mode": False,
    "models": ["AlbedoBase XL (SDXL)", "Deliberate", "stable_diffusion"],
    "threads": 1,
    "max_pixels": 1048576,
    "megapixelsteps_generated": 0.0,
    "img2img": False,
    "painting": False,
    "post-processing": False,
    "controlnet": False,
    "sdxl_controlnet": False,
    "lora": False,
    "nsfw": False,
    "trusted": False,
}
"""One entry of ``GET /v2/workers?type=image`` on the harness (``image_worker.py``'s defaults; the real server's
fields, ``horde/classes/stable/worker.py`` ``get_details``)."""

HARNESS_REFERENCE = {
    "stable_diffusion": {"name": "stable_diffusion", "baseline": "stable diffusion 1", "type": "ckpt", "nsfw": False},
    "AlbedoBase XL (SDXL)": {"name": "AlbedoBase XL (SDXL)", "baseline": "stable_diffusion_xl", "nsfw": False},
    "Deliberate": {"name": "Deliberate", "baseline": "stable diffusion 1", "type": "ckpt", "nsfw": True},
}
"""The harness's ``stable_diffusion.json`` (its ``up``, the model reference the Horde reads): no ``requirements``."""

REFERENCE_URL = "http://127.0.0.1:17002/stable_diffusion.json"


def test_an_image_card_gives_the_baseline_max_size_and_max_steps_the_horde_works_with() -> None:
    """``x_horde.image``: the baseline and max steps from the reference (40, the Horde's default, when it names
    none), the max size from the workers' largest ``max_pixels``; every card passes the list's schema."""
    cards = image_cards(
        HARNESS_IMAGE_MODELS,
        image_model_aliases(DEFAULT_IMAGE_MODEL_ALIASES),
        max_pixels_by_model([HARNESS_IMAGE_WORKER, {**HARNESS_IMAGE_WORKER, "max_pixels": 4194304, "online": False}]),
        reference_limits(
            {**HARNESS_REFERENCE, "Turbo": {"baseline": "stable_diffusion_xl", "requirements": {"max_steps": 8}}}
        ),
    )
    by_id = {card["id"]: card for card in cards}
    assert by_id["dall-e-3"]["x_horde"]["image"] == {
        "baseline": "stable_diffusion_xl",
        "max_pixels": 1048576,
        "max_size": "1024x1024",
        "max_steps": 40,
    }
    assert by_id["stable_diffusion"]["x_horde"]["image"]["baseline"] == "stable diffusion 1"
    assert by_id["stable_diffusion"]["top_provider"] == {
        "context_length": None,
        "max_completion_tokens": None,
        "is_moderated": True,
    }
    assert (
        by_id["stable_diffusion"]["x_horde"]["tool_calls"],
        by_id["stable_diffusion"]["x_horde"]["tool_format"],
    ) == (
        None,
        None,
    )
    assert reference_limits({"Turbo": {"baseline": "stable_diffusion_xl", "requirements": {"max_steps": 8}}}) == {
        "Turbo": {"baseline": "stable_diffusion_xl", "max_steps": 8}
    }
    ModelList.model_validate({"object": "list", "data": cards})


def test_without_the_reference_or_a_worker_list_the_limits_are_null() -> None:
    (card,) = image_cards(HARNESS_IMAGE_MODELS[2:], {})
    assert card["x_horde"]["image"] == {"baseline": None, "max_pixels": None, "max_size": None, "max_steps": None}
    assert max_size(640 * 480) == "512x512"
    assert max_size(3072 * 3072 * 4) == "3072x3072"


def test_the_real_hordes_image_lists_and_the_reference_make_the_cards() -> None:
    """Against the fake real Horde (the harness's answers): the image model list, the image worker list and the
    model reference the Horde reads; the real server serves no baseline or max steps of its own."""
    horde = RealHorde(image_models=HARNESS_IMAGE_MODELS, image_workers=[HARNESS_IMAGE_WORKER])
    fetched: list[str] = []

    def reference(request: httpx.Request) -> httpx.Response:
        fetched.append(str(request.url))
        return httpx.Response(200, json=HARNESS_REFERENCE)

    async def list_cards() -> list[dict[str, Any]]:
        with installed(horde, image_model_reference_url=REFERENCE_URL) as runtime:
            return await served_image_cards(runtime, httpx.MockTransport(reference))

    cards = {card["id"]: card for card in asyncio.run(list_cards())}
    assert set(cards) == {
        "AlbedoBase XL (SDXL)",
        "Deliberate",
        "stable_diffusion",
        "dall-e-2",
        "dall-e-3",
        "gpt-image-1",
    }
    assert cards["Deliberate"]["x_horde"]["image"] == {
        "baseline": "stable diffusion 1",
        "max_pixels": 1048576,
        "max_size": "1024x1024",
        "max_steps": 40,
    }
    assert cards["gpt-image-1"]["x_horde"]["image"]["baseline"] == "stable_diffusion_xl"
    assert ("GET", "/v2/workers") in horde.calls
    assert fetched == [REFERENCE_URL]


def test_a_reference_that_cannot_be_read_leaves_baseline_and_steps_null() -> None:
    horde = RealHorde(image_models=HARNESS_IMAGE_MODELS[2:], image_workers=[HARNESS_IMAGE_WORKER])

    async def list_cards() -> list[dict[str, Any]]:
        with installed(horde, image_model_reference_url=REFERENCE_URL, image_model_aliases="") as runtime:
            return await served_image_cards(runtime, httpx.MockTransport(lambda request: httpx.Response(404)))

    (card,) = asyncio.run(list_cards())
    assert card["x_horde"]["image"] == {
        "baseline": None,
        "max_pixels": 1048576,
        "max_size": "1024x1024",
        "max_steps": None,
    }


def test_a_client_that_leaves_during_the_submit_has_the_created_request_cancelled() -> None:
    """The submit is finished at the Horde even when the client leaves while it is there; its request is cancelled."""
    release = asyncio.Event()

    class SlowSubmitHorde(ScriptedImageHorde):
        async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
            await release.wait()
            return await super().submit(payload, apikey)

    horde = SlowSubmitHorde([], {}, [])
    made, cancels = service(horde)

    async def leave_during_the_submit() -> None:
        task = asyncio.ensure_future(made.generate(read({"prompt": "x"}), None, ImageOutcome()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancels.cancelled == []
        release.set()
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(leave_during_the_submit())
    assert (horde.calls, cancels.cancelled) == (["submit"], ["req-1"])


# --- shutdown ---------------------------------------------------------------------------------------------------


def test_the_image_cancel_queue_is_drained_when_the_runtime_closes() -> None:
    """An image cancel in flight at shutdown is awaited and, when it failed, tried once more before the HTTP pool
    closes, as the chat route's are (chat.serving.runtime.FrontRuntime.aclose).

    ref: cancel-outcomes.2"""

    class FailingOnceCanceller:
        def __init__(self) -> None:
            self.calls: list[tuple[str, str | None]] = []

        async def cancel(self, request_id: str, apikey: str | None) -> NativeStatus:
            self.calls.append((request_id, apikey))
            if len(self.calls) == 1:
                raise HordeUnreachable("the Horde did not answer", reached=False)
            return NativeStatus.model_validate({"done": True})

    async def close_with_one_cancel_pending() -> list[tuple[str, str | None]]:
        runtime = FrontRuntime(FrontSettings(horde_url="http://127.0.0.1:9/api", cancel_retry_seconds=600))
        canceller = FailingOnceCanceller()
        queue = image_runtime(runtime).cancels
        queue.horde = canceller
        queue.cancel_soon("img-1", "key-1", time.time())
        await runtime.aclose()
        assert queue.outcome_counts == {"failed": 1, "cancelled": 1}
        return canceller.calls

    assert asyncio.run(close_with_one_cancel_pending()) == [("img-1", "key-1"), ("img-1", "key-1")]


# --- the edges of issue 39 not pinned elsewhere -----------------------------------------------------------------


class RateLimitedHorde(ScriptedImageHorde):
    """The Horde's limiter past the front's pacing: a 429 ``{"message": "2 per 1 second"}`` without ``rc``."""

    async def submit(self, payload: dict[str, Any], apikey: str | None) -> SubmitResult:
        self.calls.append("submit")
        raise HordeRefusal(429, "2 per 1 second", None, {"message": "2 per 1 second"}, {"Retry-After": "1"})


def test_the_hordes_rate_limit_is_429_with_its_retry_after() -> None:
    """A 429 the Horde sends past the front's pacing (and the budget's retry) is OpenAI's ``rate_limit_exceeded`` with
    the Horde's ``Retry-After``; nothing was submitted, so nothing is cancelled."""
    horde = RateLimitedHorde([], {}, [])
    made, cancels = service(horde)
    outcome = ImageOutcome()
    with pytest.raises(OpenAIError) as raised:
        asyncio.run(made.generate(read({"prompt": "x"}), None, outcome))
    error = raised.value
    assert (error.status, error.code, error.type) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert error.headers() == {"Retry-After": "1"}
    assert (outcome.stage, cancels.cancelled, horde.calls) == ("submit", [], ["submit"])


def test_no_image_within_the_timeout_is_408_and_cancelled() -> None:
    """A request still waiting at ``HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS`` is 408 ``ChatRequestTimeout`` with
    ``x-should-retry: false``, cancelled at the Horde; the status (10 a minute) is never read."""
    horde = ScriptedImageHorde([WAITING] * 500, {}, [])
    made, cancels = service(horde)
    with pytest.raises(OpenAIError) as raised:
        asyncio.run(made.generate(read({"prompt": "x"}), None, ImageOutcome()))
    error = raised.value
    assert (error.status, error.code) == (408, "ChatRequestTimeout")
    assert error.message == "The Horde made no image within 60 s; the request was cancelled at the Horde."
    assert error.headers() == {"x-should-retry": "false"}
    assert cancels.cancelled == ["req-1"]
    assert "status" not in horde.calls


def sse_data(event: bytes) -> Any:
    text = event.decode()
    assert text.startswith("data: ") and text.endswith("\n\n"), text
    body = text.removeprefix("data: ").removesuffix("\n\n")
    return body if body == "[DONE]" else json.loads(body)


def test_a_stream_sends_keepalives_while_waiting_then_each_image_then_done() -> None:
    """The streamed form's events in order: ``: keepalive`` while the request waits, one
    ``image_generation.completed`` per image (OpenAI's ``ImageGenCompletedEvent`` keys), ``data: [DONE]``."""
    plan = read({"prompt": "x", "n": 2, "size": "256x256", "quality": "low", "stream": True})
    ended: list[OpenAIError | None] = []

    async def run() -> tuple[bytes, list[bytes]]:
        task: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        events = image_events(task, plan, 0.001, ended.append)
        first = await anext(events)
        task.set_result({"created": 1700000000, "data": [{"b64_json": "AAAA"}, {"b64_json": "BBBB"}]})
        return first, [event async for event in events]

    first, rest = asyncio.run(run())
    assert first == b": keepalive\n\n"
    assert [sse_data(event) for event in rest] == [
        {
            "type": "image_generation.completed",
            "b64_json": image,
            "created_at": 1700000000,
            "size": "256x256",
            "quality": "low",
            "background": "opaque",
            "output_format": "png",
        }
        for image in ("AAAA", "BBBB")
    ] + ["[DONE]"]
    assert ended == [None]


def test_a_waiting_stream_says_its_place_at_the_horde_in_its_comments() -> None:
    """Queue progress for streamed requests: once a check has placed the request, each tick's comment is its place
    (chat.rendering.progress), as the chat route's streams say it; the check's ``processing`` reads ``: processing``."""
    plan = read({"prompt": "x", "stream": True})
    places = [QueueProgress.of(NativeStatus.model_validate(WAITING))]

    async def run() -> list[bytes]:
        task: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        events = image_events(task, plan, 0.001, lambda error: None, lambda: places[-1])
        first = await anext(events)
        places.append(QueueProgress.of(NativeStatus.model_validate({"done": False, "processing": 1})))
        second = await anext(events)
        task.cancel()
        return [first, second]

    assert asyncio.run(run()) == [b": queue position 1, estimated wait 3 s\n\n", b": processing\n\n"]


def test_the_wait_keeps_the_latest_checks_place_for_the_stream() -> None:
    horde = ScriptedImageHorde([WAITING, DONE], {"done": True, "generations": [{"img": webp(64, 64)}]}, [])
    made, _ = service(horde)
    outcome = ImageOutcome()
    asyncio.run(made.generate(read({"prompt": "x", "size": "64x64"}), None, outcome))
    assert outcome.progress == QueueProgress(state="processing", queue_position=0, wait_time=0, waiting=0, processing=0)


def test_a_stream_refused_after_its_headers_ends_with_the_error_event_then_done() -> None:
    plan = read({"prompt": "x", "stream": True})
    ended: list[OpenAIError | None] = []
    refusal = censored_error("req-1", 1, 1)

    async def run() -> list[bytes]:
        task: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        task.set_exception(refusal)
        return [event async for event in image_events(task, plan, 0.001, ended.append)]

    events = asyncio.run(run())
    assert [sse_data(event) for event in events] == [refusal.envelope(), "[DONE]"]
    assert events[0] == refusal.stream_event()
    assert ended == [refusal]


@pytest.fixture
def metric_reader() -> Iterator[InMemoryMetricReader]:
    memory = InMemoryMetricReader()
    configure_metrics(MeterProvider(metric_readers=[memory], views=histogram_views()))
    yield memory
    chat.metrics._metrics = None


@pytest.mark.parametrize(
    ("stream", "status", "code", "stage", "outcome_class"),
    [
        (False, 200, "", "", "served"),
        (True, 200, "", "", "served"),
        (False, 400, "content_policy_violation", "", "client_error"),
        (False, 502, "ImageRequestIncomplete", "", "service_fault"),
        (False, 503, "no_eligible_worker", "submit", "unservable"),
        (False, 503, "no_eligible_worker", "grace", "capacity"),
        (False, 408, "ChatRequestTimeout", "", "capacity"),
        (True, 499, "ClientDisconnected", "", "abandoned"),
    ],
)
def test_the_log_line_and_the_duration_metric_carry_the_outcome_class(
    metric_reader: InMemoryMetricReader, stream: bool, status: int, code: str, stage: str, outcome_class: str
) -> None:
    """One ``Image request finished`` line per request (no prompt, key or image) and one
    ``horde.oai.request.duration`` point with its status, outcome class and whether it streamed."""
    plan = read({"prompt": "a secret prompt", "size": "512x512", "stream": stream})
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message).rstrip("\n")), format="{message}")
    try:
        record_image_request(plan, ImageOutcome(status=status, code=code, stage=stage, checks=3), time.monotonic())
    finally:
        logger.remove(sink)
    (line,) = lines
    assert re.fullmatch(
        rf"Image request finished: status={status} code={code or '-'} outcome_class={outcome_class} "
        r"model=stable_diffusion n=1 size=512x512 images=0 kudos=- checks=3 seconds=\d+\.\d\d",
        line,
    ), line
    assert "secret" not in line
    data = metric_reader.get_metrics_data()
    (point,) = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "horde.oai.request.duration"
        for point in metric.data.data_points
    ]
    assert dict(point.attributes) == {
        "horde.status": status,
        "horde.outcome_class": outcome_class,
        "horde.streamed": stream,
    }


def test_the_largest_legal_image_request_fits_the_default_body_limit() -> None:
    """Body limits sized for images: an image request is a prompt and options, no image; OpenAI's longest prompt
    with every byte JSON-escaped and every ``horde`` list at its bound is far under ``HORDE_OAI_MAX_BODY_BYTES``'s
    default (sized for a chat request carrying an image), so no legal image request is refused 413."""
    body = {
        "prompt": "\u0001" * 32000,
        "n": 10,
        "size": "3072x3072",
        "horde": {
            "loras": [{"name": str(index), "model": 1, "clip": 1} for index in range(5)],
            "tis": [{"name": str(index)} for index in range(20)],
            "workers": [f"{index:032x}" for index in range(5)],
            "post_processing": ["RealESRGAN_x4plus", "GFPGAN"],
        },
    }
    raw = json.dumps(body).encode()
    assert len(raw) < DEFAULT_MAX_BODY_BYTES // 100
    plan = read_image_request(raw, DEFAULT_IMAGE_MODEL_ALIASES)
    assert (len(plan.prompt), plan.n, plan.size) == (32000, 10, "3072x3072")


@pytest.mark.parametrize(
    ("horde", "param"),
    [
        ({"tis": [{"name": "0", "strength": False}]}, "horde.tis[0].strength"),
        ({"loras": [{"name": "a", "clip": True}]}, "horde.loras[0].clip"),
    ],
)
def test_a_boolean_where_horde_sdks_entries_take_a_number_is_refused(horde: dict[str, Any], param: str) -> None:
    """horde-sdk's LoRA and textual inversion entries are read as strictly as the request schema documents them
    (schemathesis found ``strength: false`` accepted as 0)."""
    assert refused({"prompt": "x", "horde": horde}) == {
        "message": f"Invalid type for '{param}': expected a decimal, but got a boolean instead.",
        "type": "invalid_request_error",
        "param": param,
        "code": "BadRequest",
        "status": 400,
    }
