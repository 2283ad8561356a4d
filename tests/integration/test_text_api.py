"""The front over the Horde's text generation API (the ``text-only`` devhorde scenario), through the official SDK:
prompt rendering and trimming, refusals of what the text API cannot honour, cancels on disconnect, no eligible
worker, the kudos cap's dry run, and the legacy ``POST /v1/completions`` with LlamaIndex ``OpenAILike``'s body."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from chat.serving.prompt_templates import LLAMA_3, render, template_messages
from tests.conformance.cases import langchain_legacy_body
from tests.conftest import LiveStack, scenario_restored
from tests.polling import eventually

pytestmark = pytest.mark.integration

LLAMA = "koboldcpp/Meta-Llama-3-8B-Instruct"
MISTRAL = "koboldcpp/Mistral-7B-Instruct-v0.3"


@pytest.fixture
def text_stack(text_live_stack: LiveStack) -> Iterator[LiveStack]:
    """The text-only stack, its scenario restored after the test."""
    with scenario_restored(text_live_stack):
        yield text_live_stack


def client(stack: LiveStack, *, timeout: float = 30) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=timeout)


def marker() -> str:
    return uuid.uuid4().hex[:12]


def text_requests(stack: LiveStack, mark: str) -> list[dict[str, Any]]:
    return [r for r in stack.native_requests() if r.get("api") == "text" and mark in r["payload"]["prompt"]]


def patch_worker(stack: LiveStack, name: str, patch: dict[str, Any]) -> None:
    httpx.post(f"{stack.devhorde_control}/workers/{name}", json=patch, timeout=5).raise_for_status()


# --- chat completions over the text API ------------------------------------------------------------------------


def test_the_conversation_is_rendered_with_the_models_template(text_stack: LiveStack) -> None:
    """A Llama 3 model gets the Llama 3 prompt, the client's stop before the template's turn markers, and the reply
    says how it was served."""
    mark = marker()
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": f"Tides? [{mark}]"}, {"type": "text", "text": "Why?"}]},
    ]
    completion = client(text_stack).chat.completions.create(
        model=LLAMA, messages=messages, max_tokens=40, stop="###", temperature=0.5
    )
    [native] = text_requests(text_stack, mark)
    assert native["payload"]["prompt"] == render(LLAMA_3, template_messages(messages))
    assert native["payload"]["models"] == [LLAMA]
    assert native["payload"]["params"] == {
        "max_length": 40,
        "max_context_length": 2048,
        "stop_sequence": ["###", "<|eot_id|>", "<|start_header_id|>"],
        "temperature": 0.5,
    }
    assert completion.model == LLAMA
    assert completion.id == f"chatcmpl-{native['id']}"
    assert completion.choices[0].message.content
    assert completion.model_extra["x_horde"] == {
        "estimated_usage": True,
        "api": "text",
        "prompt_template": "llama-3",
        "max_context_length": 2048,
    }
    status = httpx.get(f"{text_stack.horde_url}/v2/generate/text/status/{native['id']}").json()
    assert completion.choices[0].message.content == status["generations"][0]["text"].lstrip()


def test_oldest_turns_are_dropped_to_fit_the_context_and_the_reply_says_so(text_stack: LiveStack) -> None:
    mark = marker()
    long_turn = "A long story about the sea. " * 40
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": long_turn},
        {"role": "assistant", "content": long_turn},
        {"role": "user", "content": f"And tides? [{mark}]"},
    ]
    completion = client(text_stack).chat.completions.create(
        model=MISTRAL, messages=messages, max_tokens=64, extra_body={"horde": {"max_context_length": 300}}
    )
    [native] = text_requests(text_stack, mark)
    assert native["payload"]["prompt"] == f"[INST] Be brief.\n\nAnd tides? [{mark}] [/INST]"
    assert native["payload"]["params"]["max_context_length"] == 300
    assert completion.model_extra["x_horde"]["dropped_messages"] == 2
    assert completion.model_extra["x_horde"]["prompt_template"] == "mistral"


def test_a_prompt_that_cannot_fit_is_context_length_exceeded(text_stack: LiveStack) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client(text_stack).chat.completions.create(
            model=MISTRAL,
            messages=[{"role": "user", "content": "word " * 400}],
            max_tokens=64,
            extra_body={"horde": {"max_context_length": 200}},
        )
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.param == "messages"
    prompt_tokens = -(-len("[INST] " + "word " * 400 + " [/INST]") // 4)  # the Mistral prompt, 4 characters a token
    assert prompt_tokens == 504
    assert refused.value.body["message"] == (
        "This model's maximum context length is 200 tokens. However, your messages resulted in 568 tokens (504 in "
        "the messages, 64 in the completion). Please reduce the length of the messages or completion."
    )


@pytest.mark.parametrize(
    ("extra", "param", "what"),
    [
        ({"seed": 7}, "seed", "seed"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "frequency_penalty"),
        (
            {"horde": {"conformance": "strict"}},
            "horde.conformance",
            'horde.conformance "strict" (it gives no worker guarantees)',
        ),
    ],
)
def test_what_the_text_api_cannot_honour_is_refused_like_a_declaration_gap(
    text_stack: LiveStack, extra: dict[str, Any], param: str, what: str
) -> None:
    mark = marker()
    with pytest.raises(openai.NotFoundError) as refused:
        client(text_stack).chat.completions.create(
            model=LLAMA, messages=[{"role": "user", "content": f"json weather [{mark}]"}], extra_body=extra
        )
    assert refused.value.body == {
        "message": "No worker can serve this request: the model is served through the Horde's text generation API, "
        f"which cannot honour {what}. Leave it out, or use a model with a chat worker (GET /v1/models: x_horde.api "
        'is "text" for these models).',
        "type": "not_found_error",
        "param": param,
        "code": "no_worker_supports_features",
    }
    assert text_requests(text_stack, mark) == []


def test_an_image_part_is_refused_at_its_path(text_stack: LiveStack) -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    with pytest.raises(openai.NotFoundError) as refused:
        client(text_stack).chat.completions.create(
            model=LLAMA, messages=[{"role": "user", "content": [{"type": "text", "text": "What?"}, image]}]
        )
    assert (refused.value.param, refused.value.code) == ("messages.[0].content.[1]", "no_worker_supports_features")


def test_max_kudos_is_checked_with_the_dry_run(text_stack: LiveStack) -> None:
    """64 tokens at 0.025 kudos each estimate 1.6 kudos, above a cap of 1: refused before any request exists."""
    mark = marker()
    with pytest.raises(openai.BadRequestError) as refused:
        client(text_stack).chat.completions.create(
            model=LLAMA,
            messages=[{"role": "user", "content": f"Tides [{mark}]"}],
            max_tokens=64,
            extra_body={"horde": {"max_kudos": 1}},
        )
    assert refused.value.body == {
        "message": "The request's kudos estimate at current pricing is 1.6, above its horde.max_kudos of 1. The "
        "estimate assumes the full max_tokens is generated.",
        "type": "invalid_request_error",
        "param": "horde.max_kudos",
        "code": "max_kudos_exceeded",
        "metadata": {"rc": "ChatKudosCapExceeded", "kudos_estimate": 1.6, "max_kudos": 1},
    }
    assert text_requests(text_stack, mark) == []
    allowed = client(text_stack).chat.completions.create(
        model=LLAMA,
        messages=[{"role": "user", "content": f"Tides [{mark}]"}],
        max_tokens=64,
        extra_body={"horde": {"max_kudos": 2}},
    )
    assert allowed.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_gets_the_text_request_cancelled(text_stack: LiveStack, stream: bool) -> None:
    """The client leaves while the request waits (a streamed one after its first keepalive); the text request is
    cancelled well before the front's 20 s budget would end it."""
    patch_worker(text_stack, "llama-text-1", {"time_to_first_token_seconds": 60})
    mark = marker()
    body = {"model": LLAMA, "messages": [{"role": "user", "content": f"Tides [{mark}]"}], "stream": stream}
    url = f"{text_stack.openai_base_url}/chat/completions"
    left_at = time.monotonic()
    if stream:
        with httpx.stream("POST", url, json=body, timeout=10) as answer:
            assert answer.status_code == 200
            # the first keepalive comment, with the place: the worker took it, or has not yet
            assert next(answer.iter_bytes()) in (b": processing\n\n", b": waiting for a worker\n\n")
            left_at = time.monotonic()
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=body, timeout=1.5)
        left_at = time.monotonic()
    cancelled = eventually(
        lambda: [r for r in text_requests(text_stack, mark) if r["cancelled"] and r["state"] == "cancelled"],
        timeout=8,
        what="the text request to be cancelled",
    )
    assert len(cancelled) == 1
    assert time.monotonic() - left_at < 10


def test_a_worker_going_offline_is_no_eligible_worker_after_the_grace(text_stack: LiveStack) -> None:
    patch_worker(text_stack, "tiny-text-1", {"time_to_first_token_seconds": 60, "threads": 1})
    holder_mark, mark = marker(), marker()
    holder = httpx.post(
        f"{text_stack.horde_url}/v2/generate/text/async",
        headers={"apikey": "0000000000"},
        json={"prompt": f"hold [{holder_mark}]", "models": ["koboldcpp/tiny-story-1b"], "params": {"max_length": 16}},
        timeout=5,
    )
    assert holder.status_code == 202
    result: dict[str, Any] = {}

    def offline_when_queued() -> None:
        eventually(lambda: text_requests(text_stack, mark), what="the request to be queued")
        patch_worker(text_stack, "tiny-text-1", {"online": False})

    switcher = threading.Thread(target=offline_when_queued)
    switcher.start()
    try:
        client(text_stack).chat.completions.create(
            model="koboldcpp/tiny-story-1b", messages=[{"role": "user", "content": f"Tides [{mark}]"}]
        )
    except openai.APIStatusError as error:
        result["error"] = error
    switcher.join(20)
    error = result["error"]
    [native] = eventually(
        lambda: [r for r in text_requests(text_stack, mark) if r["cancelled"]], what="the request to be cancelled"
    )
    assert error.status_code == 503
    assert error.body["code"] == "no_eligible_worker"
    assert error.body["metadata"]["request_id"] == native["id"]
    assert error.response.headers["Retry-After"] == "30"
    httpx.delete(f"{text_stack.horde_url}/v2/generate/text/status/{holder.json()['id']}", timeout=5)


# --- legacy completions ----------------------------------------------------------------------------------------

LLAMA_INDEX_OPENAI_LIKE_BODY = {"model": LLAMA, "prompt": "Hello World!", "temperature": 0.1, "stream": False}
"""The body LlamaIndex's ``OpenAILike(model=..., api_base=..., api_key=...).complete("Hello World!")`` sends with
its defaults (llama-index-llms-openai-like 0.8.1 over llama-index-llms-openai 0.8.3: ``is_chat_model`` false, so
``client.completions.create(prompt=..., stream=False, model=..., temperature=DEFAULT_TEMPERATURE)``, 0.1, and no
``max_tokens`` without a tokenizer)."""


def test_llama_index_openai_like_defaults_complete_through_v1_completions(text_stack: LiveStack) -> None:
    """The package itself is not installed: it requires ``openai<3`` (the suite pins openai 3) and pulls about 70
    packages; its exact request body is sent instead, and read back the way it reads it (``choices[0].text``)."""
    response = httpx.post(
        f"{text_stack.openai_base_url}/completions",
        json=LLAMA_INDEX_OPENAI_LIKE_BODY,
        headers={"Authorization": "Bearer fake"},
        timeout=30,
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-")
    assert body["model"] == LLAMA
    [choice] = body["choices"]
    assert choice["text"] and choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] in {"stop", "length"}
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    [native] = [r for r in text_stack.native_requests() if r["id"] == body["id"].removeprefix("cmpl-")]
    assert native["payload"] == {
        "prompt": "Hello World!",
        "models": [LLAMA],
        "params": {"max_length": 512, "temperature": 0.1},
        "allow_downgrade": False,  # over 256: a lower ceiling comes back as a 403 naming it (test_downgrade_resubmit)
    }
    assert native["apikey"] == "fake"
    status = httpx.get(f"{text_stack.horde_url}/v2/generate/text/status/{native['id']}").json()
    assert choice["text"] == status["generations"][0]["text"]


def test_completions_through_the_sdk_streamed_with_usage(text_stack: LiveStack) -> None:
    sdk = client(text_stack)
    completion = sdk.completions.create(model=LLAMA, prompt=["Once upon a time"], max_tokens=32, stop=["\n\n"])
    assert completion.object == "text_completion"
    assert completion.choices[0].text
    chunks = list(
        sdk.completions.create(
            model=LLAMA, prompt="Once upon a time", max_tokens=32, stream=True, stream_options={"include_usage": True}
        )
    )
    assert [chunk.object for chunk in chunks] == ["text_completion"] * 3
    assert chunks[0].choices[0].text and chunks[0].choices[0].finish_reason is None
    assert chunks[1].choices[0].text == "" and chunks[1].choices[0].finish_reason in {"stop", "length"}
    assert chunks[2].choices == [] and chunks[2].usage is not None
    assert len({chunk.id for chunk in chunks}) == 1


def test_completions_refuse_keys_they_do_not_serve(text_stack: LiveStack) -> None:
    sdk = client(text_stack)
    with pytest.raises(openai.BadRequestError) as unknown:
        sdk.completions.create(model=LLAMA, prompt="x", suffix="y")
    assert unknown.value.body == {
        "message": "Unsupported value: 'suffix' does not support 'y' on the AI Horde. Only the default (null) value is "
        "supported.",
        "type": "invalid_request_error",
        "param": "suffix",
        "code": "UnsupportedChatParameter",
    }
    with pytest.raises(openai.BadRequestError) as echo:
        sdk.completions.create(model=LLAMA, prompt="x", echo=True)
    assert (echo.value.param, echo.value.code) == ("echo", "UnsupportedChatParameter")
    with pytest.raises(openai.BadRequestError) as many:
        sdk.completions.create(model=LLAMA, prompt=["a", "b"])
    assert (many.value.param, many.value.code) == ("prompt", "BadRequest")


LANGCHAIN_LEGACY_OPENAI_BODY = langchain_legacy_body("MODEL", "Tell me about lighthouses.")
"""The body LangChain's legacy ``OpenAI(...).invoke(...)`` sends on its defaults (``langchain_legacy_body``)."""


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "default_body", [LLAMA_INDEX_OPENAI_LIKE_BODY, LANGCHAIN_LEGACY_OPENAI_BODY], ids=["llamaindex", "langchain"]
)
def test_legacy_defaults_complete_on_a_native_chat_model(
    stack: LiveStack, default_body: dict[str, Any], stream: bool
) -> None:
    """On the native stack no model has a text path: the prompt goes to the native chat route as one user message,
    and the reply keeps the ``text_completion`` shapes."""
    model = "devhorde/tiny-1b"
    body = {**default_body, "model": model, "stream": stream}
    url = f"{stack.openai_base_url}/completions"
    if not stream:
        response = httpx.post(url, json=body, headers={"Authorization": "Bearer fake"}, timeout=30)
        assert response.status_code == 200, response.text
        completion = response.json()
        assert (completion["object"], completion["model"]) == ("text_completion", model)
        [choice] = completion["choices"]
        assert choice["text"].strip() and choice["index"] == 0 and choice["logprobs"] is None
        assert choice["finish_reason"] in {"stop", "length"}
        request_id = completion["id"].removeprefix("cmpl-")
        text = choice["text"]
    else:
        with httpx.stream("POST", url, json=body, headers={"Authorization": "Bearer fake"}, timeout=30) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert {chunk["object"] for chunk in chunks} == {"text_completion"}
        assert len({chunk["id"] for chunk in chunks}) == 1
        finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]]
        assert finishes[-1] in {"stop", "length"} and all(reason is None for reason in finishes[:-1])
        text = "".join(chunk["choices"][0]["text"] for chunk in chunks if chunk["choices"])
        request_id = chunks[0]["id"].removeprefix("cmpl-")
    [native] = [entry for entry in stack.native_requests() if entry["id"] == request_id]
    prompt = body["prompt"] if isinstance(body["prompt"], str) else body["prompt"][0]
    assert native["payload"]["messages"] == [{"role": "user", "content": prompt}]
    assert native["apikey"] == "fake"
    status = httpx.get(f"{stack.horde_url}/v2/generate/chat/status/{request_id}", timeout=5).json()
    assert text == status["generations"][0]["message"]["content"]


def test_legacy_keys_away_from_their_default_are_refused(stack: LiveStack) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client(stack).completions.create(model="devhorde/tiny-1b", prompt="x", frequency_penalty=0.5)
    assert refused.value.body == {
        "message": "Unsupported value: 'frequency_penalty' does not support 0.5 on the AI Horde. Only the default (0) "
        "value is supported.",
        "type": "invalid_request_error",
        "param": "frequency_penalty",
        "code": "UnsupportedChatParameter",
    }


# --- the Responses API over the text API -----------------------------------------------------------------------


def test_responses_on_a_text_model_go_through_the_text_api(text_stack: LiveStack) -> None:
    """``POST /v1/responses`` for a text-only model renders the instructions and input with the model's template,
    submits to the text API and answers the generation as a ``response``, whole and as typed events."""
    mark = marker()
    sdk = client(text_stack)
    response = sdk.responses.create(
        model=LLAMA, instructions="Be brief.", input=f"Tides? [{mark}]", max_output_tokens=40, store=False
    )
    [native] = text_requests(text_stack, mark)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Tides? [{mark}]"}]
    assert native["payload"]["prompt"] == render(LLAMA_3, template_messages(messages))
    assert native["payload"]["params"]["max_length"] == 40
    assert response.id == f"resp_{native['id']}"
    assert (response.object, response.model) == ("response", LLAMA)
    status = httpx.get(f"{text_stack.horde_url}/v2/generate/text/status/{native['id']}").json()
    assert response.output_text == status["generations"][0]["text"].lstrip()

    stream_mark = marker()
    with sdk.responses.stream(model=LLAMA, input=f"Waves? [{stream_mark}]", max_output_tokens=40) as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    [streamed] = text_requests(text_stack, stream_mark)
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert final.id == f"resp_{streamed['id']}"
    status = httpx.get(f"{text_stack.horde_url}/v2/generate/text/status/{streamed['id']}").json()
    assert final.output_text == status["generations"][0]["text"].lstrip()


@pytest.mark.parametrize(
    ("extra", "param", "what"),
    [
        ({"reasoning": {"effort": "low"}}, "reasoning.effort", "reasoning_effort"),
    ],
)
def test_responses_refusals_on_the_text_path_name_the_responses_param(
    text_stack: LiveStack, extra: dict[str, Any], param: str, what: str
) -> None:
    mark = marker()
    with pytest.raises(openai.NotFoundError) as refused:
        client(text_stack).responses.create(model=LLAMA, input=f"weather [{mark}]", extra_body=extra)
    assert refused.value.body == {
        "message": "No worker can serve this request: the model is served through the Horde's text generation API, "
        f"which cannot honour {what}. Leave it out, or use a model with a chat worker (GET /v1/models: x_horde.api "
        'is "text" for these models).',
        "type": "not_found_error",
        "param": param,
        "code": "no_worker_supports_features",
    }
    assert text_requests(text_stack, mark) == []


def test_text_model_cards_list_the_three_routes(text_stack: LiveStack) -> None:
    card = client(text_stack).models.retrieve(LLAMA)
    assert card.model_extra["x_horde"]["api"] == "text"
    assert card.model_extra["x_horde"]["routes"] == ["/v1/chat/completions", "/v1/responses", "/v1/completions"]


def test_text_path_requests_log_the_finished_line(text_stack: LiveStack) -> None:
    """A chat completion and a streamed response served through the text API each write the finished-request line
    (chat.serving.request_record.RequestRecord), with the text request's id, estimated usage and the served model.

    ref: finished-request-log-line.1"""
    mark = marker()
    sdk = client(text_stack)
    sdk.chat.completions.create(model=LLAMA, messages=[{"role": "user", "content": f"Tides? [{mark}]"}], max_tokens=32)
    with sdk.responses.stream(model=LLAMA, input=f"Waves? [{mark}]", max_output_tokens=32) as events:
        for _ in events:
            pass
    ids = [native["id"] for native in text_requests(text_stack, mark)]
    assert len(ids) == 2

    def finished(request_id: str) -> str | None:
        lines = [line for line in text_stack.front.log().splitlines() if f"Chat request {request_id} finished:" in line]
        return lines[0] if lines else None

    for request_id, streamed in zip(ids, (False, True), strict=True):
        line = eventually(lambda request_id=request_id: finished(request_id), what=f"{request_id} finished")
        assert f"finished: streamed={streamed} " in line
        assert " status=200 code=None " in line
        assert " estimated_usage=True " in line
        assert f" requested_model={LLAMA} served_model={LLAMA} " in line
