"""chat.serving.stored_responses: what ``store`` keeps, per API key, for a bounded time and size, and how
``previous_response_id`` and ``item_reference`` resolve from it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache.backends.locmem import LocMemCache

from chat.errors import OpenAIError
from chat.serving.stored_responses import (
    ResponseStore,
    as_input_item,
    owner_of,
    resolve_stored_input,
)

RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "output": [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Thinking."}]},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Tides follow the moon.", "annotations": []}],
        },
        {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
    ],
}
FIRST_INPUT: list[Any] = [{"type": "message", "role": "user", "content": "Tell me about tides."}]
ASSISTANT_TURN = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Tides follow the moon."}],
}
CALL_TURN = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}


def store(max_bytes: int = 100_000) -> ResponseStore:
    return ResponseStore(ttl_seconds=60, max_bytes=max_bytes, cache=LocMemCache(f"test-{max_bytes}", {}))


def test_the_owner_is_a_digest_of_the_key_never_the_key() -> None:
    assert owner_of("secret-key-1") != owner_of("secret-key-2")
    assert "secret" not in owner_of("secret-key-1") and len(owner_of("secret-key-1")) == 32
    assert owner_of(None) == owner_of("0000000000")  # no key is the anonymous key


def test_output_items_become_input_items_and_reasoning_is_not_replayed() -> None:
    assert [as_input_item(item) for item in RESPONSE["output"]] == [None, ASSISTANT_TURN, CALL_TURN]


@pytest.mark.asyncio
async def test_a_stored_response_reads_back_only_under_its_key() -> None:
    responses = store()
    assert await responses.save("key-a", RESPONSE, FIRST_INPUT) == "stored"
    stored = await responses.get("key-a", "resp_1")
    assert stored is not None
    assert stored.response == RESPONSE
    assert stored.conversation == [*FIRST_INPUT, ASSISTANT_TURN, CALL_TURN]
    assert await responses.get("key-b", "resp_1") is None
    assert await responses.item("key-a", "msg_1") == ASSISTANT_TURN
    assert await responses.item("key-b", "msg_1") is None
    assert await responses.item("key-a", "rs_1") == {"type": "reasoning"}  # referenced, not replayed


@pytest.mark.asyncio
async def test_a_response_over_the_size_bound_is_not_stored() -> None:
    responses = store(max_bytes=200)
    assert await responses.save("key-a", RESPONSE, FIRST_INPUT) == "too_large"
    assert await responses.get("key-a", "resp_1") is None


@pytest.mark.asyncio
async def test_delete_removes_the_response_and_its_items() -> None:
    responses = store()
    await responses.save("key-a", RESPONSE, FIRST_INPUT)
    assert await responses.delete("key-b", "resp_1") is False
    assert await responses.delete("key-a", "resp_1") is True
    assert await responses.get("key-a", "resp_1") is None
    assert await responses.item("key-a", "msg_1") is None
    assert await responses.delete("key-a", "resp_1") is False


@pytest.mark.asyncio
async def test_previous_response_id_puts_the_stored_conversation_first() -> None:
    responses = store()
    await responses.save("key-a", RESPONSE, FIRST_INPUT)
    body = {"model": "m", "previous_response_id": "resp_1", "input": "And the sun?", "store": True}
    resolved, items, _ = await resolve_stored_input(responses, body, "key-a")
    follow_up = {"type": "message", "role": "user", "content": "And the sun?"}
    assert items == [*FIRST_INPUT, ASSISTANT_TURN, CALL_TURN, follow_up]
    assert resolved == {"model": "m", "input": items, "store": True}


@pytest.mark.asyncio
async def test_an_item_reference_becomes_the_stored_item() -> None:
    responses = store()
    await responses.save("key-a", RESPONSE, FIRST_INPUT)
    second_turn = [*FIRST_INPUT, {"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "More."}]
    resolved, items, _ = await resolve_stored_input(responses, {"model": "m", "input": second_turn}, "key-a")
    assert items == [*FIRST_INPUT, ASSISTANT_TURN, {"role": "user", "content": "More."}]
    assert resolved["input"] == items


@pytest.mark.asyncio
async def test_a_body_without_stored_state_is_unchanged() -> None:
    body = {"model": "m", "input": "Hi"}
    resolved, items, _ = await resolve_stored_input(store(), body, "key-a")
    assert resolved is body
    assert items == [{"type": "message", "role": "user", "content": "Hi"}]


@pytest.mark.asyncio
async def test_an_unknown_previous_response_is_openais_400() -> None:
    with pytest.raises(OpenAIError) as raised:
        await resolve_stored_input(store(), {"model": "m", "previous_response_id": "resp_gone", "input": "x"}, "k")
    assert raised.value.status == 400
    assert raised.value.envelope()["error"] == {
        "message": "Previous response with id 'resp_gone' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


@pytest.mark.asyncio
async def test_an_unknown_item_reference_is_a_404_at_its_input_index() -> None:
    responses = store()
    await responses.save("key-a", RESPONSE, FIRST_INPUT)
    body = {"model": "m", "input": [*FIRST_INPUT, {"type": "item_reference", "id": "msg_1"}]}
    with pytest.raises(OpenAIError) as raised:
        await resolve_stored_input(responses, body, "key-b")  # another key's item
    assert (raised.value.status, raised.value.param, raised.value.code) == (404, "input[1]", "item_not_found")
    assert raised.value.message.startswith("Item with id 'msg_1' not found. ")


@pytest.mark.asyncio
async def test_a_reference_to_a_reasoning_item_resolves_to_a_reasoning_item() -> None:
    """The Vercel AI SDK references the reasoning item of a reasoning turn too; it carries nothing forward."""
    responses = store()
    await responses.save("key-a", RESPONSE, FIRST_INPUT)
    second_turn = [*FIRST_INPUT, {"type": "item_reference", "id": "rs_1"}, {"type": "item_reference", "id": "msg_1"}]
    _, items, _ = await resolve_stored_input(responses, {"model": "m", "input": second_turn}, "key-a")
    assert items == [*FIRST_INPUT, {"type": "reasoning"}, ASSISTANT_TURN]


@pytest.mark.asyncio
async def test_input_orjson_cannot_write_is_measured_and_stored_all_the_same() -> None:
    """A client's input may hold what parsed JSON allows and orjson does not write (an integer beyond 64 bits, a lone
    surrogate escape, in keys the front passes through): the size limit is measured with the standard library's JSON
    then, and the response is stored, not a 500 (found by the schema-driven test)."""
    odd_input = [{"type": "message", "role": "user", "content": "Hi.", "x": 14262704999762042552320, "y": "\ud8a1"}]
    responses = store()
    assert await responses.save("key-a", RESPONSE, odd_input) == "stored"
    stored = await responses.get("key-a", "resp_1")
    assert stored is not None
    assert stored.conversation[0] == odd_input[0]
    assert await store(max_bytes=100).save("key-a", RESPONSE, odd_input) == "too_large"
