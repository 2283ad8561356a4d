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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson
from django.core.cache import BaseCache, caches
from loguru import logger

from chat import errors
from chat.errors import OpenAIError
from chat.horde.native import ANONYMOUS_API_KEY
from chat.metrics import front_metrics
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
        conversation: Its whole conversation, its ancestors' first: what a request with ``previous_response_id`` set
            to this response's id continues from.
        chain: The ids of the stored responses that conversation was read from, oldest first, this one last.
    """

    response: dict[str, Any]
    conversation: list[dict[str, Any]]
    chain: tuple[str, ...] = ()


STORED: Final[str] = "stored"
TOO_LARGE: Final[str] = "too_large"
OVER_QUOTA: Final[str] = "over_quota"
STORE_FAILED: Final[str] = "failed"
"""What :meth:`ResponseStore.save` did: :data:`STORED`, or why not (:data:`TOO_LARGE` over
``HORDE_OAI_STORED_RESPONSE_MAX_BYTES``, :data:`OVER_QUOTA` over the key's quota, :data:`STORE_FAILED` the cache did
not take it: Redis down or paused)."""

USAGE_KEY: Final[str] = "response-usage:{owner}"
"""The cache key of one owner's stored responses: ``{response_id: [bytes, expires_at]}`` (Unix seconds), for the
per-key quota."""

MAX_CHAIN_LENGTH: Final[int] = 100_000
"""The most ancestors a stored response lists (a guard on a corrupt value; the per-key quota comes first)."""


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

    A response is stored with its own items only: the input items it added (``item_reference`` resolved) and its
    replayable output items, and the ids of the responses it continues, oldest first (``ancestors``); its
    conversation is read back with one more read of those, so a chain of N turns stores its items once, not N times.
    Storing a continuation renews its ancestors' lifetime (``touch``, once half of it is spent), so a live chain does
    not lose its start.

    Args:
        ttl_seconds: How long a response is kept (``HORDE_OAI_STORED_RESPONSE_SECONDS``).
        max_bytes: The largest stored response, its own items included, in bytes of JSON
            (``HORDE_OAI_STORED_RESPONSE_MAX_BYTES``); a larger one is not stored.
        max_per_key: The most responses one API key keeps at once (``HORDE_OAI_STORED_RESPONSES_PER_KEY``).
        max_bytes_per_key: The most bytes of JSON one API key keeps at once
            (``HORDE_OAI_STORED_RESPONSE_BYTES_PER_KEY``).
        cache: The cache (Django's ``default`` when None).
        clock: Unix seconds (the quota's expiry times).
    """

    def __init__(  # noqa: PLR0913 - the store's bounds, each a keyword
        self,
        *,
        ttl_seconds: float,
        max_bytes: int,
        max_per_key: int = 1000,
        max_bytes_per_key: int = 64 * 1024 * 1024,
        cache: BaseCache | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self.max_per_key = max_per_key
        self.max_bytes_per_key = max_bytes_per_key
        self._cache = cache
        self._clock = clock

    @property
    def cache(self) -> BaseCache:
        """The cache in use (read when first needed, so tests may swap Django's settings)."""
        return self._cache if self._cache is not None else caches["default"]

    async def save(
        self,
        apikey: str | None,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        parent: StoredResponse | None = None,
    ) -> str:
        """Store ``response`` with the input items it added (``input_items`` without ``parent``'s conversation) and
        each of its output items that has an id, under the key's quota.

        Returns:
            :data:`STORED`, or why it was not: :data:`TOO_LARGE`, :data:`OVER_QUOTA`, :data:`STORE_FAILED` (the cache
            did not hold it; a warning line says so too); each counted on ``horde.oai.responses.not_stored``; or
            ``"no_id"``.
        """
        response_id = response.get("id")
        if not isinstance(response_id, str):
            return "no_id"
        outputs = [item for item in response.get("output") or [] if isinstance(item, dict)]
        replayed = [converted for item in outputs if (converted := as_input_item(item)) is not None]
        own = input_items[len(parent.conversation) :] if parent is not None else input_items
        ancestors = list(parent.chain) if parent is not None else []
        value = {"response": response, "ancestors": ancestors, "items": [*own, *replayed]}
        size = json_size(value)
        if size > self.max_bytes:
            return self._not_stored(TOO_LARGE)
        owner = owner_of(apikey)
        usage_key = USAGE_KEY.format(owner=owner)
        now = self._clock()
        try:
            usage = await self.cache.aget(usage_key)
            held = {
                key: entry
                for key, entry in (usage.items() if isinstance(usage, dict) else ())
                if isinstance(entry, list) and len(entry) == 2 and entry[1] > now
            }
            held_bytes = sum(entry[0] for entry in held.values())
            if len(held) + 1 > self.max_per_key or held_bytes + size > self.max_bytes_per_key:
                return self._not_stored(OVER_QUOTA)
            expires = now + self.ttl_seconds
            held[response_id] = [size, expires]
            entries: dict[str, Any] = {RESPONSE_KEY.format(owner=owner, response_id=response_id): value}
            for item in outputs:
                converted = as_input_item(item) or referenced_only(item)
                if isinstance(item.get("id"), str):
                    entries[ITEM_KEY.format(owner=owner, item_id=item["id"])] = converted
            for ancestor in ancestors:  # each ancestor's lifetime renewed once it is half spent
                if ancestor not in held or held[ancestor][1] < now + self.ttl_seconds / 2:
                    await self.cache.atouch(RESPONSE_KEY.format(owner=owner, response_id=ancestor), self.ttl_seconds)
                    if ancestor in held:
                        held[ancestor][1] = expires
            entries[usage_key] = held
            await self.cache.aset_many(entries, timeout=self.ttl_seconds)
            # django-redis ignores a Redis error (IGNORE_EXCEPTIONS): only reading the response back tells.
            kept = await self.cache.ahas_key(RESPONSE_KEY.format(owner=owner, response_id=response_id))
        except Exception as error:  # noqa: BLE001 - any cache failure is a store that did not hold, never a 500
            logger.warning("A stored response was not kept: the cache failed ({})", type(error).__name__)
            return self._not_stored(STORE_FAILED)
        if not kept:
            logger.warning("A stored response was not kept: the cache did not hold it (Redis down or paused?)")
            return self._not_stored(STORE_FAILED)
        return STORED

    @staticmethod
    def _not_stored(reason: str) -> str:
        front_metrics().responses_not_stored.add(1, {"horde.reason": reason})
        return reason

    async def get(self, apikey: str | None, response_id: str) -> StoredResponse | None:
        """The response stored under ``response_id`` by this key, with its whole conversation, or None (unknown,
        expired, deleted, another key's, or one of its ancestors is gone).
        """
        if len(response_id) > MAX_STORED_ID_LENGTH:
            return None
        owner = owner_of(apikey)
        value = await self.cache.aget(RESPONSE_KEY.format(owner=owner, response_id=response_id))
        if not isinstance(value, dict) or not isinstance(value.get("response"), dict):
            return None
        ancestors = value.get("ancestors") or []
        if not isinstance(ancestors, list) or len(ancestors) >= MAX_CHAIN_LENGTH:
            return None
        keys = [RESPONSE_KEY.format(owner=owner, response_id=ancestor) for ancestor in ancestors]
        found = await self.cache.aget_many(keys) if keys else {}
        if len(found) != len(keys) or not all(isinstance(found[key], dict) for key in keys):
            return None
        conversation = [item for key in keys for item in _own_items(found[key])]
        conversation += _own_items(value)
        return StoredResponse(value["response"], conversation, (*map(str, ancestors), response_id))

    async def item(self, apikey: str | None, item_id: str) -> dict[str, Any] | None:
        """The stored output item ``item_id`` of one of this key's responses, as an input item, or None."""
        if len(item_id) > MAX_STORED_ID_LENGTH:
            return None
        value = await self.cache.aget(ITEM_KEY.format(owner=owner_of(apikey), item_id=item_id))
        return value if isinstance(value, dict) else None

    async def delete(self, apikey: str | None, response_id: str) -> bool:
        """Delete the response and its output items (a continuation of it is then not found either). Returns whether
        it was stored (under this key).
        """
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
        usage_key = USAGE_KEY.format(owner=owner)
        usage = await self.cache.aget(usage_key)
        if isinstance(usage, dict) and usage.pop(response_id, None) is not None:
            await self.cache.aset(usage_key, usage, timeout=self.ttl_seconds)
        return True


def _own_items(value: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored value's own items (``items``; ``conversation`` of a value stored before chains were shared)."""
    items = value.get("items", value.get("conversation"))
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


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


class ResolvedInput(NamedTuple):
    """A Responses body with its stored state resolved (:func:`resolve_stored_input`)."""

    body: dict[str, Any]
    """The body without ``previous_response_id``, ``input`` the resolved list of items."""
    items: list[Any]
    """That resolved input: the previous response's conversation, then this request's items."""
    parent: StoredResponse | None
    """The stored response of ``previous_response_id``, or None (what :meth:`ResponseStore.save` refers to)."""


async def resolve_stored_input(store: ResponseStore, body: dict[str, Any], apikey: str | None) -> ResolvedInput:
    """Resolve a Responses body's stored state before it is validated: the conversation of
    ``previous_response_id`` goes before ``input``, and each ``item_reference`` item becomes the stored item.

    Returns:
        The body without ``previous_response_id`` and with ``input`` as the resolved list of items (the body itself,
        unchanged, when it uses neither), that resolved input, and the previous response (:class:`ResolvedInput`).

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
        return ResolvedInput(body, _as_items(raw_input), None)
    items: list[Any] = []
    stored = None
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
    return ResolvedInput(resolved, items, stored)


def response_store() -> ResponseStore:
    """The store of the front's settings (``HORDE_OAI_STORED_RESPONSE_SECONDS``, ``..._MAX_BYTES``,
    ``HORDE_OAI_STORED_RESPONSES_PER_KEY``, ``HORDE_OAI_STORED_RESPONSE_BYTES_PER_KEY``) on Django's ``default`` cache.
    """
    settings = front_settings()
    return ResponseStore(
        ttl_seconds=settings.stored_response_seconds,
        max_bytes=settings.stored_response_max_bytes,
        max_per_key=settings.stored_responses_per_key,
        max_bytes_per_key=settings.stored_response_bytes_per_key,
    )
