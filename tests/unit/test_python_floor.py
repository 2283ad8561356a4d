"""The lowest Python ``requires-python`` accepts imports the front: Python 3.12.0 to 3.12.2 hash every member of a
union, and so the discriminators in ``Annotated`` members; :class:`~chat.protocol.chat_request.ContextDiscriminator`
keeps those hashable although their error context is a dict.

tests/integration/test_lowest_python.py imports and runs the front under the lowest accepted Python installed.
"""

from __future__ import annotations

import pytest

from chat.protocol.chat_request import ChatCompletionRequest, by_json_type
from chat.protocol.responses_api import ResponsesRequest


def test_a_discriminator_with_an_error_context_hashes_by_its_fields() -> None:
    expected = "one of a string or array of objects"
    assert hash(by_json_type(expected)) == hash(by_json_type(expected))
    assert by_json_type(expected) == by_json_type(expected)
    assert {by_json_type(expected), by_json_type("an object")} == {by_json_type("an object"), by_json_type(expected)}


def test_a_union_of_annotated_members_with_such_discriminators_hashes() -> None:
    """What Python 3.12.0-3.12.2 do to every ``X | Y`` (their ``typing._deduplicate``)."""
    content = ChatCompletionRequest.model_fields["messages"].annotation
    assert isinstance(hash(content), int)


@pytest.mark.parametrize("content", ["hi", [{"type": "text", "text": "hi"}]])
def test_user_content_still_validates_by_json_type(content: object) -> None:
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": content}]})
    assert request.messages[0].content == content or request.messages[0].content[0].text == "hi"
    assert ResponsesRequest.model_validate({"model": "m", "input": "hi"}).input == "hi"
