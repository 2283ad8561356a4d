"""Reading, screening and validating a chat completions body (reference: Request keys).

:func:`read_chat_request` is the one entry point: bytes in, a validated
:class:`chat.schema.ChatCompletionRequest` out, or :class:`chat.errors.OpenAIError` raised with OpenAI's envelope.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from chat import errors
from chat.errors import OpenAIError
from chat.schema import ChatCompletionRequest

NOT_JSON_MESSAGE = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble "
    "figuring out how to fix this, please contact us through our help center at help.openai.com.)"
)
"""OpenAI's own message for a body that is not JSON (openai-errors.md)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """Parse a body as a JSON object; NaN, Infinity and -Infinity are refused like any invalid JSON.

    Raises:
        OpenAIError: 400 ``BadRequest`` with OpenAI's not-JSON message and param null.
    """
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise OpenAIError(status=400, message=NOT_JSON_MESSAGE, code=errors.BAD_REQUEST) from None
    if not isinstance(body, dict):
        raise OpenAIError(status=400, message=NOT_JSON_MESSAGE, code=errors.BAD_REQUEST)
    return body


def format_location(location: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as a request path: ``messages[0].content``."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    return path


def read_chat_request(raw: bytes) -> ChatCompletionRequest:
    """Parse, screen and validate a ``POST /v1/chat/completions`` body.

    Raises:
        OpenAIError: 400 with OpenAI's message, the front's code and the parameter's path.
    """
    body = parse_json_body(raw)
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = tuple(part for part in first["loc"] if not _is_union_tag(part))
        param = format_location(location) or None
        raise OpenAIError(
            status=400,
            message=f"Invalid '{param}': {first['msg']}." if param else f"{first['msg']}.",
            code=errors.BAD_REQUEST,
            param=param,
        ) from None


def _is_union_tag(part: int | str) -> bool:
    """Pydantic puts the discriminator tag or union member in the location; they are not request keys."""
    return isinstance(part, str) and (
        part in {"system", "developer", "user", "assistant", "tool", "text", "image_url"}
        or part.startswith(("function-", "list[", "str", "literal["))
    )
