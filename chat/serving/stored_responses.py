"""Stored responses of ``POST /v1/responses``: what ``store`` (OpenAI's default, true) keeps, and what
``previous_response_id``, ``item_reference`` items and ``GET`` / ``DELETE /v1/responses/{id}`` read back.

A stored response is kept in Django's ``default`` cache: django-redis on ``HORDE_OAI_REDIS_URL`` (so every process
and every host sharing that Redis sees it), or each process's local memory without Redis (oaifront.settings
``CACHES``; a response is then found only by the process that answered it). It lives
``HORDE_OAI_STORED_RESPONSE_SECONDS`` and is not kept at all when its JSON exceeds
``HORDE_OAI_STORED_RESPONSE_MAX_BYTES`` (OpenAI keeps responses for 30 days; a front on a volunteer network keeps them
for a bounded time, in the operator's Redis).

Keys hold a digest of the client's API key (the owner), never the key: a response stored under one key is not found
under another, so only the key that created a response can continue, read or delete it. Every anonymous client sends
the same key (``0000000000``), so anonymous stored responses are readable by whoever knows their id (a random
``resp_`` id).

What is stored per response (:class:`StoredResponse`): the response object as answered, and its ``conversation``:
the input items it was served with (``previous_response_id`` and ``item_reference`` already resolved, so a chain is
one read) followed by its output items, as input items of a next turn. Each output item is also stored by its id,
for ``item_reference``. Nothing stored is logged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

import orjson
from django.core.cache import BaseCache, caches

from chat import errors
from chat.errors import OpenAIError
from chat.horde.native import ANONYMOUS_API_KEY
from chat.settings import front_settings

RESPONSE_KEY: Final[str] = "response:{owner}:{response_id}"
"""The cache key of a stored response (under the cache's ``KEY_PREFIX``, ``horde-oai``)."""

ITEM_KEY: Final[str] = "response-item:{owner}:{item_id}"
"""The cache key of one output item of a stored response, for ``item_reference``."""

MAX_STORED_ID_LENGTH: Final[int] = 128
"""The longest response or item id looked up: the front's own are 53 characters (``resp_`` and 48 hex digits), so a
longer one is no stored response's and is not sent to the cache (nor into its key-length warning, a log line)."""

REPLAYED_ITEM_TYPES: Final[frozenset[str]] = frozenset({"message", "function_call", "function_call_output"})
"""Output item types a next turn replays as input. A ``reasoning`` item is not replayed: the Horde's workers take
no reasoning history (chat completions drop it too)."""


def owner_of(apikey: str | None) -> str:
    """The owner part of a key: the SHA-256 of the client's API key (the anonymous key when None), hex, 32 digits."""
    return hashlib.sha256((apikey or ANONYMOUS_API_KEY).encode()).hexdigest()[:32]


def as_input_item(item: dict[str, Any]) -> dict[str, Any] | None:
    """An output item as the input item a next turn sends, or None for an item that is not replayed.

    A ``message`` keeps ``type``, ``role`` and its ``output_text`` parts (``type``, ``text``); a ``function_call``
    keeps ``type``, ``call_id``, ``name`` and ``arguments``; ids, statuses and annotations are left out.
    """
    kind = item.get("type")
    if kind not in REPLAYED_ITEM_TYPES:
        return None
    if kind == "message":
        parts = [
            {"type": "output_text", "text": str(part.get("text", ""))}
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        ]
        return {"type": "message", "role": str(item.get("role") or "assistant"), "content": parts}
    if kind == "function_call":
        return {key: item[key] for key in ("type", "call_id", "name", "arguments") if key in item}
    return {key: item[key] for key in ("type", "call_id", "output") if key in item}


def referenced_only(item: dict[str, Any]) -> dict[str, Any]:
    """The input item an ``item_reference`` to an output item that is not replayed resolves to: ``{"type"}`` only
    (a ``reasoning`` item, which the Vercel AI SDK references on a reasoning conversation's next turn; the request
    reader accepts it and forwards nothing of it).
    """
    return {"type": str(item.get("type") or "reasoning")}


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response.

    Attributes:
        response: The ``response`` object as the client received it (``GET /v1/responses/{id}``).
        conversation: Its input items then its replayable output items (:func:`as_input_item`): what a request with
            ``previous_response_id`` set to this response's id continues from.
    """

    response: dict[str, Any]
    conversation: list[dict[str, Any]]


def json_size(value: Any) -> int:
    """The bytes of ``value`` (parsed JSON) as compact JSON: orjson's UTF-8, or, for what orjson refuses and a client's
    JSON may hold (an integer beyond 64 bits, a lone surrogate escape), the standard library's ASCII JSON, which is as
    long or longer.
    """
    try:
        return len(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError is one
        return len(json.dumps(value, separators=(",", ":")))


class ResponseStore:
    """Stored responses in a Django cache.

    Args:
        ttl_seconds: How long a response is kept (``HORDE_OAI_STORED_RESPONSE_SECONDS``).
        max_bytes: The largest stored response, its conversation included, in bytes of JSON
            (``HORDE_OAI_STORED_RESPONSE_MAX_BYTES``); a larger one is not stored.
        cache: The cache (Django's ``default`` when None).
    """

    def __init__(self, *, ttl_seconds: float, max_bytes: int, cache: BaseCache | None = None) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self._cache = cache

    @property
    def cache(self) -> BaseCache:
        """The cache in use (read when first needed, so tests may swap Django's settings)."""
        return self._cache if self._cache is not None else caches["default"]

    async def save(self, apikey: str | None, response: dict[str, Any], input_items: list[dict[str, Any]]) -> bool:
        """Store ``response`` (served with the resolved ``input_items``) and each of its output items that has an id.

        Returns:
            Whether it was stored: False when it exceeds ``max_bytes`` or has no ``id``.
        """
        response_id = response.get("id")
        if not isinstance(response_id, str):
            return False
        outputs = [item for item in response.get("output") or [] if isinstance(item, dict)]
        replayed = [converted for item in outputs if (converted := as_input_item(item)) is not None]
        value = {"response": response, "conversation": [*input_items, *replayed]}
        if json_size(value) > self.max_bytes:
            return False
        owner = owner_of(apikey)
        entries: dict[str, Any] = {RESPONSE_KEY.format(owner=owner, response_id=response_id): value}
        for item in outputs:
            converted = as_input_item(item) or referenced_only(item)
            if isinstance(item.get("id"), str):
                entries[ITEM_KEY.format(owner=owner, item_id=item["id"])] = converted
        await self.cache.aset_many(entries, timeout=self.ttl_seconds)
        return True

    async def get(self, apikey: str | None, response_id: str) -> StoredResponse | None:
        """The response stored under ``response_id`` by this key, or None (unknown, expired, deleted, another key's)."""
        if len(response_id) > MAX_STORED_ID_LENGTH:
            return None
        value = await self.cache.aget(RESPONSE_KEY.format(owner=owner_of(apikey), response_id=response_id))
        if not isinstance(value, dict) or not isinstance(value.get("response"), dict):
            return None
        conversation = value.get("conversation")
        return StoredResponse(response=value["response"], conversation=list(conversation or []))

    async def item(self, apikey: str | None, item_id: str) -> dict[str, Any] | None:
        """The stored output item ``item_id`` of one of this key's responses, as an input item, or None."""
        if len(item_id) > MAX_STORED_ID_LENGTH:
            return None
        value = await self.cache.aget(ITEM_KEY.format(owner=owner_of(apikey), item_id=item_id))
        return value if isinstance(value, dict) else None

    async def delete(self, apikey: str | None, response_id: str) -> bool:
        """Delete the response and its output items. Returns whether it was stored (under this key)."""
        stored = await self.get(apikey, response_id)
        if stored is None:
            return False
        owner = owner_of(apikey)
        keys = [RESPONSE_KEY.format(owner=owner, response_id=response_id)]
        keys += [
            ITEM_KEY.format(owner=owner, item_id=item["id"])
            for item in stored.response.get("output") or []
            if isinstance(item, dict) and isinstance(item.get("id"), str)
        ]
        await self.cache.adelete_many(keys)
        return True


PREVIOUS_RESPONSE_NOT_FOUND_MESSAGE: Final[str] = "Previous response with id '{response_id}' not found."
"""OpenAI's message for it (400 at ``previous_response_id``)."""

ITEM_NOT_FOUND_MESSAGE: Final[str] = (
    "Item with id '{item_id}' not found. Items are kept only for responses stored with 'store' true (the default), "
    "for a limited time, and only for the API key that created them; send the item itself in 'input' instead."
)
"""404 at ``input`` for an ``item_reference`` the store does not hold (OpenAI's first sentence, then why here)."""

RESPONSE_NOT_FOUND_MESSAGE: Final[str] = "Response with id '{response_id}' not found."
"""404 of ``GET`` / ``DELETE /v1/responses/{id}`` for a response this key did not store (OpenAI's wording)."""


def previous_response_not_found(response_id: str) -> OpenAIError:
    """400 ``previous_response_not_found`` at ``previous_response_id``, OpenAI's wording."""
    return errors.failure(
        errors.PREVIOUS_RESPONSE_NOT_FOUND,
        PREVIOUS_RESPONSE_NOT_FOUND_MESSAGE.format(response_id=errors.clip(response_id)),
        param="previous_response_id",
    )


def item_not_found(item_id: object, index: int) -> OpenAIError:
    """404 ``item_not_found`` at ``input[<index>]`` (:data:`ITEM_NOT_FOUND_MESSAGE`)."""
    return errors.failure(
        errors.ITEM_NOT_FOUND, ITEM_NOT_FOUND_MESSAGE.format(item_id=errors.clip(str(item_id))), param=f"input[{index}]"
    )


def response_not_found(response_id: str) -> OpenAIError:
    """404 ``response_not_found`` for ``GET`` / ``DELETE /v1/responses/{id}``."""
    return errors.failure(
        errors.RESPONSE_NOT_FOUND, RESPONSE_NOT_FOUND_MESSAGE.format(response_id=errors.clip(response_id))
    )


def _as_items(value: Any) -> list[Any]:
    """``input`` as a list of items: a string is one user message (the Responses API's shorthand)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


async def resolve_stored_input(
    store: ResponseStore, body: dict[str, Any], apikey: str | None
) -> tuple[dict[str, Any], list[Any]]:
    """Resolve a Responses body's stored state before it is validated: the conversation of
    ``previous_response_id`` goes before ``input``, and each ``item_reference`` item becomes the stored item.

    Returns:
        The body without ``previous_response_id`` and with ``input`` as the resolved list of items (the body itself,
        unchanged, when it uses neither), and that resolved input (what :meth:`ResponseStore.save` keeps).

    Raises:
        OpenAIError: 400 ``previous_response_not_found`` at ``previous_response_id``; 404 at ``input[<i>]`` for an
            ``item_reference`` the store does not hold (:data:`ITEM_NOT_FOUND_MESSAGE`).
    """
    previous = body.get("previous_response_id")
    raw_input = body.get("input")
    references = isinstance(raw_input, list) and any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in raw_input
    )
    if not isinstance(previous, str) and not references:
        return body, _as_items(raw_input)
    items: list[Any] = []
    if isinstance(previous, str):
        stored = await store.get(apikey, previous)
        if stored is None:
            raise previous_response_not_found(previous)
        items.extend(stored.conversation)
    for index, item in enumerate(_as_items(raw_input)):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            item_id = item.get("id")
            found = await store.item(apikey, item_id) if isinstance(item_id, str) else None
            if found is None:
                raise item_not_found(item_id, index)
            items.append(found)
        else:
            items.append(item)
    resolved = {key: value for key, value in body.items() if key != "previous_response_id"}
    resolved["input"] = items
    return resolved, items


def response_store() -> ResponseStore:
    """The store of the front's settings (``HORDE_OAI_STORED_RESPONSE_SECONDS``, ``..._MAX_BYTES``) on Django's
    ``default`` cache.
    """
    settings = front_settings()
    return ResponseStore(ttl_seconds=settings.stored_response_seconds, max_bytes=settings.stored_response_max_bytes)
