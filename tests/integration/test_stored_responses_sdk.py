"""Stored responses end to end through the official ``openai`` SDK: ``store`` (OpenAI's default true) keeps a
response, ``previous_response_id`` and ``item_reference`` continue it, ``responses.retrieve`` and ``responses.delete``
answer for it, against a real uvicorn front, the devhorde (``fast``) and the Redis on 127.0.0.1:6379; and a
``previous_response_id`` chain across two front processes sharing that Redis.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.conftest import LiveStack, start_devhorde, start_front

pytestmark = pytest.mark.integration

MODEL = "devhorde/tiny-1b"


def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)


def a_key() -> str:
    """A key of this test alone, so no other test's stored responses are seen."""
    return f"stored-{secrets.token_hex(6)}"


def native_messages(stack: LiveStack, response_id: str) -> list[dict[str, Any]]:
    """The chat messages the devhorde received for a response: its latest request (these tests make one at a time; a
    response's own id is random and names no native request, issue 35)."""
    messages: list[dict[str, Any]] = stack.latest_native_request(response_id)["payload"]["messages"]
    return messages


def test_previous_response_id_continues_the_stored_conversation(stack: LiveStack) -> None:
    sdk = client(stack.openai_base_url, a_key())
    first = sdk.responses.create(model=MODEL, instructions="Be brief.", input="Tell me about tides.")
    second = sdk.responses.create(model=MODEL, previous_response_id=first.id, input="And the sun?")
    assert second.previous_response_id == first.id
    assert second.to_dict()["store"] is True
    assert native_messages(stack, second.id) == [
        {"role": "user", "content": "Tell me about tides."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And the sun?"},
    ]  # instructions are not carried over, as at OpenAI
    third = sdk.responses.create(model=MODEL, previous_response_id=second.id, input="Thanks.")
    assert [message["content"] for message in native_messages(stack, third.id)] == chain_of_three(first, second)


def chain_of_three(first: Response, second: Response) -> list[str]:
    """The turns the worker sees for the third response of the chain "Tell me about tides." -> "And the sun?" ->
    "Thanks.": each input, then each stored answer, in order."""
    return ["Tell me about tides.", first.output_text, "And the sun?", second.output_text, "Thanks."]


def assert_not_stored_for(sdk: openai.OpenAI, response_id: str) -> None:
    """``sdk``'s key neither retrieves ``response_id`` (404) nor continues it (400 ``previous_response_not_found``)."""
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response_id)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model=MODEL, previous_response_id=response_id, input="More.")
    assert refused.value.code == "previous_response_not_found"


def test_retrieve_and_delete_a_stored_response(stack: LiveStack) -> None:
    key = a_key()
    sdk = client(stack.openai_base_url, key)
    created = sdk.responses.create(model=MODEL, input="Tell me about lighthouses.")
    retrieved = sdk.responses.retrieve(created.id)
    assert retrieved.to_dict() == created.to_dict()
    deleted = httpx.delete(
        f"{stack.openai_base_url}/responses/{created.id}", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert (deleted.status_code, deleted.json()) == (200, {"id": created.id, "object": "response", "deleted": True})
    with pytest.raises(openai.NotFoundError) as gone:
        sdk.responses.retrieve(created.id)
    assert gone.value.body == {
        "message": f"Response with id '{created.id}' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": "response_not_found",
    }
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(created.id)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model=MODEL, previous_response_id=created.id, input="More.")
    assert (refused.value.code, refused.value.param, refused.value.message) == (
        "previous_response_not_found",
        "previous_response_id",
        f"Error code: 400 - Previous response with id '{created.id}' not found.",
    )


def test_the_sdks_delete_returns_none(stack: LiveStack) -> None:
    sdk = client(stack.openai_base_url, a_key())
    created = sdk.responses.create(model=MODEL, input="Hi")
    assert sdk.responses.delete(created.id) is None


def test_store_false_stores_nothing(stack: LiveStack) -> None:
    sdk = client(stack.openai_base_url, a_key())
    created = sdk.responses.create(model=MODEL, input="Hi", store=False)
    assert created.to_dict()["store"] is False
    assert_not_stored_for(sdk, created.id)


def test_only_the_key_that_stored_a_response_reads_it(stack: LiveStack) -> None:
    created = client(stack.openai_base_url, a_key()).responses.create(model=MODEL, input="Hi")
    other = client(stack.openai_base_url, a_key())
    assert_not_stored_for(other, created.id)


def test_a_streamed_response_is_stored_when_it_completes(stack: LiveStack) -> None:
    sdk = client(stack.openai_base_url, a_key())
    with sdk.responses.stream(model=MODEL, input="Tell me about rivers.") as events:
        for _ in events:
            pass
        final = events.get_final_response()
    retrieved = sdk.responses.retrieve(final.id)
    assert retrieved.output_text == final.output_text and retrieved.output_text
    assert retrieved.status == final.status
    follow = sdk.responses.create(model=MODEL, previous_response_id=final.id, input="Shorter?")
    assert native_messages(stack, follow.id)[:2] == [
        {"role": "user", "content": "Tell me about rivers."},
        {"role": "assistant", "content": final.output_text},
    ]


def test_an_item_reference_is_the_stored_output_item(stack: LiveStack) -> None:
    """The Vercel AI SDK's second turn: the assistant output of turn one as ``item_reference``."""
    key = a_key()
    sdk = client(stack.openai_base_url, key)
    first = sdk.responses.create(model=MODEL, input=[{"role": "user", "content": "Tell me about tides."}])
    message_id = next(item.id for item in first.output if item.type == "message")
    second = sdk.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Tell me about tides."}]},
            {"type": "item_reference", "id": message_id},
            {"role": "user", "content": [{"type": "input_text", "text": "And the sun?"}]},
        ],
    )
    assert native_messages(stack, second.id) == [
        {"role": "user", "content": [{"type": "text", "text": "Tell me about tides."}]},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": [{"type": "text", "text": "And the sun?"}]},
    ]
    unknown = httpx.post(
        f"{stack.openai_base_url}/responses",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": MODEL, "input": [{"type": "item_reference", "id": "msg_unknown"}]},
        timeout=10,
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"]["param"] == "input[0]"
    assert unknown.json()["error"]["code"] == "item_not_found"


# ---------------------------------------------------------------------------------------------------------------------
# Two front processes sharing Redis


@pytest.fixture(scope="module")
def two_fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveStack, str]]:
    """The devhorde and two separate front processes (each its own port) on the same Redis."""
    tmp = tmp_path_factory.mktemp("stored-fronts")
    devhorde, horde_url = start_devhorde(tmp)
    started = []
    try:
        front, front_url = start_front(tmp, horde_url)
        started.append(front)
        other, other_url = start_front(tmp, horde_url)
        started.append(other)
    except Exception:
        for process in (*started, devhorde):
            process.stop()
        raise
    stack = LiveStack(devhorde, horde_url, front, front_url, processes=[other])
    try:
        yield stack, other_url
    finally:
        stack.stop()


def test_a_previous_response_id_chain_across_two_fronts(two_fronts: tuple[LiveStack, str]) -> None:
    stack, other_url = two_fronts
    key = a_key()
    on_a, on_b = client(stack.openai_base_url, key), client(f"{other_url}/v1", key)
    first = on_a.responses.create(model=MODEL, input="Tell me about tides.")
    second = on_b.responses.create(model=MODEL, previous_response_id=first.id, input="And the sun?")
    third = on_a.responses.create(model=MODEL, previous_response_id=second.id, input="Thanks.")
    assert [message["content"] for message in native_messages(stack, third.id)] == chain_of_three(first, second)
    assert on_b.responses.retrieve(third.id).output_text == third.output_text


def test_nothing_stored_is_logged(two_fronts: tuple[LiveStack, str]) -> None:
    """The fronts' logs name neither a stored response's text nor the API key that stored it."""
    stack, other_url = two_fronts
    key = a_key()
    marker = f"tides-{secrets.token_hex(4)}"
    first = client(stack.openai_base_url, key).responses.create(model=MODEL, input=f"Tell me about {marker}.")
    client(f"{other_url}/v1", key).responses.create(model=MODEL, previous_response_id=first.id, input="More.")
    logs = stack.front.log() + stack.processes[0].log()
    assert "Chat request " in logs  # the request lines are there
    for secret in (marker, first.output_text, key, first.id.removeprefix("resp_")):
        assert secret not in logs
