"""Hostile input, in process (issue 35): every finding of the audit with its exact input, answered with OpenAI's
envelope and never a 500 (reference: Request keys, Value and contract validation).

Driven through Django's test client, so the whole view runs: the body reader, the API's screening and the rules the
Horde's own limits apply (where the raw surrogate bytes used to reach ``str.encode`` and a traceback).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

import pytest
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loguru import logger

from chat.serving.stored_responses import RESPONSE_KEY, ResponseStore, owner_of, resolve_stored_input
from chat.settings import DEFAULT_MAX_BODY_BYTES, FrontSettings
from oaifront.guards import AdmissionGuards
from tests.asgi_driver import Body, Held, Recorder, scope

NOT_JSON: Final[str] = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. This API expects a JSON object as the request body, but what was sent was not valid JSON. NaN, "
    "Infinity, numbers too large for a double and lone UTF-16 surrogates are not accepted either.)"
)
"""Written out here so the test does not read it from the code under test."""

RAW_SURROGATE: Final[bytes] = b"\xed\xa0\x80"
"""U+D800 encoded as if it were a character: the audit's bytes."""

MARK: Final[str] = "@@HOSTILE@@"
"""Stands where the hostile bytes go in a body serialised as JSON; replaced in the bytes."""

CHAT_BODY: Final[dict[str, Any]] = {
    "model": "example/model-7b",
    "messages": [
        {"role": "system", "content": "Answer briefly.", "name": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [{"type": "function", "function": {"name": "get", "description": "Weather", "parameters": {}}}],
    "stop": ["\n\n"],
    "max_tokens": 16,
    "temperature": 0.5,
    "user": "someone",
    "horde": {"workers": ["6f1c2b1e-0d8a-4c3e-9a55-3e0f7d2c9b10"], "max_kudos": 10},
}
RESPONSES_BODY: Final[dict[str, Any]] = {
    "model": "example/model-7b",
    "instructions": "Answer briefly.",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ],
    "tools": [{"type": "function", "name": "get", "description": "Weather", "parameters": {}}],
    "previous_response_id": "resp_0123456789abcdef",
    "metadata": {"topic": "weather"},
    "max_output_tokens": 16,
    "store": True,
}
COMPLETIONS_BODY: Final[dict[str, Any]] = {
    "model": "example/model-7b",
    "prompt": ["Once", "upon"],
    "stop": "\n",
    "max_tokens": 16,
    "suffix": "end",
}
ROUTE_BODIES: Final[dict[str, dict[str, Any]]] = {
    "/v1/chat/completions": CHAT_BODY,
    "/v1/responses": RESPONSES_BODY,
    "/v1/completions": COMPLETIONS_BODY,
}


def positions(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    """Every place a JSON body holds text or a value: ``(path, "key")`` for an object's key, ``(path, "value")`` for
    a leaf (a string gets the bytes added, any other leaf is replaced by a string holding them)."""
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(value, dict):
        for key, child in value.items():
            found.append(((*path, key), "key"))
            found.extend(positions(child, (*path, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(positions(child, (*path, index)))
    else:
        found.append((path, "value"))
    return found


def hostile_body(base: dict[str, Any], path: tuple[Any, ...], where: str, hostile: bytes) -> bytes:
    """``base`` as JSON bytes with ``hostile`` written raw into the key or value at ``path``."""
    body = json.loads(json.dumps(base))
    parent: Any = body
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if where == "key":
        parent[f"{last}{MARK}"] = parent.pop(last)
    else:
        leaf = parent[last]
        parent[last] = f"{leaf}{MARK}" if isinstance(leaf, str) else MARK
    return json.dumps(body, ensure_ascii=False).encode().replace(MARK.encode(), hostile)


def assert_not_json(response: Any) -> None:
    assert response.status_code == 400, response.content[:300]
    assert response.json() == {
        "error": {"message": NOT_JSON, "type": "invalid_request_error", "param": None, "code": "BadRequest"}
    }


@pytest.mark.parametrize(
    ("route", "path", "where"),
    [
        pytest.param("/v1/chat/completions", ("messages", 4, "content"), "value", id="chat-messages-content"),
        pytest.param("/v1/chat/completions", ("stop", 0), "value", id="chat-stop"),
        pytest.param("/v1/chat/completions", ("temperature",), "key", id="chat-unknown-key-name"),
        pytest.param("/v1/chat/completions", ("tools", 0, "function", "description"), "value", id="chat-tool-desc"),
        pytest.param("/v1/chat/completions", ("model",), "value", id="chat-model"),
        pytest.param("/v1/responses", ("input", 0, "content", 0, "text"), "value", id="responses-input"),
        pytest.param("/v1/responses", ("instructions",), "value", id="responses-instructions"),
        pytest.param("/v1/responses", ("previous_response_id",), "value", id="responses-previous-response-id"),
        pytest.param("/v1/responses", ("tools", 0, "description"), "value", id="responses-tool-description"),
        pytest.param("/v1/completions", ("prompt", 0), "value", id="completions-prompt"),
        pytest.param("/v1/completions", ("suffix",), "value", id="completions-suffix"),
    ],
)
def test_raw_surrogate_bytes_in_a_field_are_the_not_json_400(route: str, path: tuple[Any, ...], where: str) -> None:
    """The audit's bytes ``\\xed\\xa0\\x80`` (8 of these 11 fields answered 500 with a traceback): a lone surrogate
    as raw bytes is invalid UTF-8, refused like its escaped form. ref: request-keys.3"""
    raw = hostile_body(ROUTE_BODIES[route], path, where, RAW_SURROGATE)
    assert RAW_SURROGATE in raw
    assert_not_json(Client().post(route, raw, content_type="application/json"))


lone_surrogates = st.integers(min_value=0xD800, max_value=0xDFFF).map(
    lambda point: chr(point).encode("utf-8", "surrogatepass")
)
escaped_surrogates = st.integers(min_value=0xD800, max_value=0xDFFF).map(lambda point: f"\\u{point:04x}".encode())


def is_invalid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


invalid_utf8 = st.binary(min_size=1, max_size=8).filter(is_invalid_utf8)
HOSTILE_SLOTS: Final[list[tuple[str, tuple[Any, ...], str]]] = [
    (route, path, where) for route, body in ROUTE_BODIES.items() for path, where in positions(body)
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slot=st.sampled_from(HOSTILE_SLOTS),
    prefix=st.text(max_size=4).map(lambda text: json.dumps(text)[1:-1].encode()),
    hostile=lone_surrogates | escaped_surrogates | invalid_utf8,
)
def test_invalid_utf8_or_a_lone_surrogate_anywhere_is_the_not_json_400(
    slot: tuple[str, tuple[Any, ...], str], prefix: bytes, hostile: bytes
) -> None:
    """Raw invalid UTF-8, a lone surrogate as raw bytes and an escaped lone surrogate, at every key and value of every
    route's body: always 400 ``BadRequest`` with the not-JSON message and param null. ref: request-keys.3"""
    route, path, where = slot
    raw = hostile_body(ROUTE_BODIES[route], path, where, prefix + hostile)
    assert_not_json(Client().post(route, raw, content_type="application/json"))


# ---------------------------------------------------------------------------------------------------------------------
# Echoes without bounds (issue 35, finding 6)

LONG: Final[str] = "x" * 1_000_000
"""The audit's 1,000,000-character value."""


def error_of(response: Any) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"model": LONG, "messages": [{"role": "user", "content": "Hi"}]}),
        ("/v1/responses", {"model": LONG, "input": "Hi"}),
        ("/v1/completions", {"model": LONG, "prompt": "Once"}),
    ],
)
def test_a_model_id_longer_than_the_hordes_is_refused_at_model(route: str, body: dict[str, Any]) -> None:
    """A 1,000,000-character ``model`` was forwarded to the Horde and echoed whole (a 1 MB error body): now 400 at
    ``model`` in OpenAI's string-length wording, before anything is sent. ref: request-keys.3"""
    response = Client().post(route, json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    assert error_of(response) == {
        "message": (
            "Invalid 'model': string too long. Expected a string with maximum length 255, but got a string with "
            "length 1000000 instead."
        ),
        "type": "invalid_request_error",
        "param": "model",
        "code": "BadRequest",
    }


def test_a_model_id_of_255_characters_is_not_refused_for_its_length() -> None:
    """The bound is the Horde's own (its model column holds 255 characters): such a name is read and goes on (to
    the unreachable test Horde: 502, not a 400)."""
    body = {"model": "m" * 255, "messages": [{"role": "user", "content": "Hi"}]}
    response = Client().post("/v1/chat/completions", json.dumps(body), content_type="application/json")
    assert response.status_code == 502, response.content[:300]


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], LONG: 1}),
        ("/v1/responses", {"model": "m", "input": "Hi", LONG: 1}),
        ("/v1/completions", {"model": "m", "prompt": "Once", LONG: 1}),
    ],
)
def test_an_unknown_key_is_quoted_cut_in_message_and_param(route: str, body: dict[str, Any]) -> None:
    """A 1,000,000-character unknown key was echoed twice (message and param, 2 MB): the message quotes 64
    characters, the param holds 256. ref: request-keys.3"""
    response = Client().post(route, json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["message"] == f"Unrecognized request argument supplied: {'x' * 64}…"
    assert error["param"] == "x" * 256 + "…"
    assert len(response.content) < 1024


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"model": "m", "input": "Hi", "previous_response_id": LONG},
            400,
            f"Previous response with id '{'x' * 64}…' not found.",
        ),
        (
            {"model": "m", "input": [{"type": "item_reference", "id": LONG}]},
            404,
            f"Item with id '{'x' * 64}…' not found. Items are kept only for responses stored with 'store' true (the "
            "default), for a limited time, and only for the API key that created them; send the item itself in "
            "'input' instead.",
        ),
    ],
)
def test_stored_ids_are_quoted_cut(body: dict[str, Any], status: int, message: str) -> None:
    """An unknown ``previous_response_id`` or ``item_reference`` id is quoted to 64 characters, not whole."""
    response = Client().post("/v1/responses", json.dumps(body), content_type="application/json")
    assert response.status_code == status
    assert error_of(response)["message"] == message


def test_an_unknown_stored_response_path_is_quoted_cut() -> None:
    response = Client().get("/v1/responses/" + "y" * 100_000)
    assert response.status_code == 404
    assert error_of(response)["message"] == f"Response with id '{'y' * 64}…' not found."


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}),
        ("/v1/responses", {"model": "m", "input": "Hi"}),
    ],
)
def test_an_empty_worker_id_is_refused_at_its_path(route: str, body: dict[str, Any]) -> None:
    """``horde.workers: [""]`` was sent on and waited 30 s into a 503: now 400 at ``horde.workers[0]``."""
    response = Client().post(route, json.dumps({**body, "horde": {"workers": [""]}}), content_type="application/json")
    assert response.status_code == 400
    assert error_of(response) == {
        "message": (
            "Invalid 'horde.workers[0]': string too short. Expected a string with minimum length 1, but got an empty "
            "string instead."
        ),
        "type": "invalid_request_error",
        "param": "horde.workers[0]",
        "code": "BadRequest",
    }


NOT_BEARER: Final[str] = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth "
    "(i.e. Authorization: Bearer YOUR_KEY). Send no Authorization header for the Horde's anonymous key."
)


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "0000000000", "Token abc", "Bearerabc"])
@pytest.mark.parametrize(
    ("method", "route", "body"),
    [
        ("post", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}),
        ("post", "/v1/responses", {"model": "m", "input": "Hi"}),
        ("post", "/v1/completions", {"model": "m", "prompt": "Once"}),
        ("get", "/v1/responses/resp_abc", None),
    ],
)
def test_an_authorization_header_that_is_not_bearer_is_401(
    header: str, method: str, route: str, body: dict[str, Any] | None
) -> None:
    """A malformed ``Authorization`` header was served as the anonymous user; OpenAI answers 401, and so does the
    front, with OpenAI's sentences."""
    client = Client(headers={"Authorization": header})
    if method == "post":
        response = client.post(route, json.dumps(body), content_type="application/json")
    else:
        response = client.get(route)
    assert response.status_code == 401
    assert error_of(response) == {
        "message": NOT_BEARER,
        "type": "authentication_error",
        "param": None,
        "code": "InvalidAPIKey",
    }
    assert response["x-should-retry"] == "false"


@pytest.mark.parametrize("header", ["", "Bearer ", "bearer  "])
def test_no_key_or_an_empty_bearer_key_is_the_anonymous_key(header: str) -> None:
    """An empty header or bearer key is still the anonymous key (the unreachable test Horde answers: 502)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    response = Client(headers={"Authorization": header}).post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 502, response.content[:300]


# ---------------------------------------------------------------------------------------------------------------------
# Memory not bounded by the documented limits (issue 35, finding 2): the request-body budget of the process


BODIES_FULL: Final[dict[str, Any]] = {
    "error": {
        "message": "The front is holding as many request bodies as its memory allows. Retry shortly.",
        "type": "api_error",
        "param": None,
        "code": "FrontAtCapacity",
    }
}
MIB: Final[int] = 1024 * 1024


def budget_guards(app: Any) -> AdmissionGuards:
    """Guards of a 1 MiB body limit and a 1.5 MiB body budget (one body at the limit, and half another)."""
    return AdmissionGuards(app, FrontSettings(max_body_bytes=MIB, max_buffered_body_bytes=MIB + MIB // 2))


@pytest.mark.asyncio
async def test_bodies_past_the_process_budget_are_refused_as_they_arrive() -> None:
    """Each body under the size limit, from different clients (so no per-client cap applies), but together past the
    body budget: the body that would pass it is 503 ``FrontAtCapacity`` with ``Retry-After`` and
    ``x-should-retry: true`` while the first is held; once the first request ends its bytes are free again."""
    app = Held()
    guards = budget_guards(app)
    first = asyncio.create_task(guards(scope(client="10.0.0.1"), Body(MIB), Recorder()))
    while app.entered < 1:
        await asyncio.sleep(0)
    assert guards.buffered_body_bytes == MIB
    refused, second_body = Recorder(), Body(MIB)
    await guards(scope(client="10.0.0.2"), second_body, refused)
    assert refused.status == 503
    assert refused.headers["retry-after"] == str(guards.retry_after)
    assert refused.headers["x-should-retry"] == "true"
    assert json.loads(refused.messages[1]["body"]) == BODIES_FULL
    assert second_body.pulled <= MIB // 2 + 64 * 1024  # refused as its bytes came, not after the whole body
    assert guards.buffered_body_bytes == MIB  # the refused body's bytes are given back
    app.release.set()
    await first
    assert guards.buffered_body_bytes == 0
    served = Recorder()
    third = asyncio.create_task(guards(scope(client="10.0.0.3"), Body(MIB), served))
    while app.entered < 2:
        await asyncio.sleep(0)
    await third
    assert served.status == 200
    assert guards.buffered_body_bytes == 0


@pytest.mark.asyncio
async def test_a_declared_body_past_the_budget_is_refused_unread() -> None:
    """A ``Content-Length`` that the budget has no room for is refused on the request's head: no byte is read."""
    app = Held()
    guards = budget_guards(app)
    first = asyncio.create_task(guards(scope(client="10.0.0.1"), Body(MIB), Recorder()))
    while app.entered < 1:
        await asyncio.sleep(0)
    refused, body = Recorder(), Body(MIB)
    await guards(scope(client="10.0.0.2", headers=[(b"content-length", str(MIB).encode())]), body, refused)
    assert (refused.status, body.pulled) == (503, 0)
    assert json.loads(refused.messages[1]["body"]) == BODIES_FULL
    app.release.set()
    await first
    assert guards.buffered_body_bytes == 0


def test_the_default_budget_holds_two_bodies_at_the_default_limit() -> None:
    """The documented default: two maximum bodies at once (about 0.3 GB with their parsing; bench/README.md)."""
    assert FrontSettings().max_buffered_body_bytes == 2 * DEFAULT_MAX_BODY_BYTES == 68_537_686


# ---------------------------------------------------------------------------------------------------------------------
# Stored responses without a per-key bound (issue 35, finding 3)


def turn(index: int) -> dict[str, Any]:
    """The response of turn ``index``: one assistant message."""
    return {
        "id": f"resp_{index}",
        "object": "response",
        "output": [
            {
                "id": f"msg_{index}",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"Answer {index}."}],
            }
        ],
    }


def responses_store(**bounds: Any) -> ResponseStore:
    cache = LocMemCache(f"hostile-{id(bounds)}", {"OPTIONS": {"MAX_ENTRIES": 100_000}})
    return ResponseStore(ttl_seconds=60, max_bytes=1_000_000, cache=cache, **bounds)


async def continue_chain(store: ResponseStore, turns: int, apikey: str = "key-a") -> list[str]:
    """``turns`` responses, each continuing the one before (``previous_response_id``) with a few words; what each
    save answered."""
    outcomes = []
    for index in range(turns):
        body: dict[str, Any] = {"model": "m", "input": f"And then {index}?"}
        if index:
            body["previous_response_id"] = f"resp_{index - 1}"
        _, items, parent = await resolve_stored_input(store, body, apikey)
        outcomes.append(await store.save(apikey, turn(index), items, parent))
    return outcomes


@pytest.mark.asyncio
async def test_a_continuation_stores_its_own_items_and_its_parent_not_the_chain() -> None:
    """200 continuations on one key stored the whole chain each time (Redis grew to 135 MB): now each stores what it
    adds and its parent's id, and the chain reads back whole."""
    store = responses_store()
    assert await continue_chain(store, 200) == ["stored"] * 200
    last = await store.cache.aget(RESPONSE_KEY.format(owner=owner_of("key-a"), response_id="resp_199"))
    assert last["ancestors"] == [f"resp_{index}" for index in range(199)]
    assert last["items"] == [
        {"type": "message", "role": "user", "content": "And then 199?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Answer 199."}]},
    ]
    stored = await store.get("key-a", "resp_199")
    assert stored is not None
    assert len(stored.conversation) == 400
    assert stored.conversation[:2] == [
        {"type": "message", "role": "user", "content": "And then 0?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Answer 0."}]},
    ]
    assert stored.chain == tuple(f"resp_{index}" for index in range(200))


@pytest.mark.asyncio
async def test_a_key_over_its_quota_of_responses_stores_no_more_and_another_key_is_untouched() -> None:
    store = responses_store(max_per_key=3)
    assert await continue_chain(store, 4) == ["stored", "stored", "stored", "over_quota"]
    assert await store.get("key-a", "resp_3") is None
    assert await continue_chain(store, 2, apikey="key-b") == ["stored", "stored"]
    assert await store.delete("key-a", "resp_2")
    assert await store.save("key-a", turn(9), []) == "stored"  # a deleted response frees its place


@pytest.mark.asyncio
async def test_a_key_over_its_quota_of_bytes_stores_no_more() -> None:
    """Each response counts its JSON (its own items and parent reference): 3.5 responses' worth holds three."""
    replayed = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Answer 0."}]}
    one = len(json.dumps({"response": turn(0), "ancestors": [], "items": [replayed]}, separators=(",", ":")))
    store = responses_store(max_bytes_per_key=one * 7 // 2)
    outcomes = [await store.save("key-a", turn(index), []) for index in range(5)]
    assert outcomes == ["stored", "stored", "stored", "over_quota", "over_quota"]


class DeafCache(LocMemCache):
    """A cache that takes writes and keeps nothing: django-redis with ``IGNORE_EXCEPTIONS`` when Redis is paused."""

    async def aset_many(self, data: Any, timeout: Any = None, version: Any = None) -> list[str]:
        return []


@pytest.mark.asyncio
async def test_a_store_the_cache_did_not_hold_is_never_silent() -> None:
    """A store that failed (Redis paused) answered ``store: true`` and logged nothing: now the save says so, with a
    warning line that names no id."""
    store = ResponseStore(ttl_seconds=60, max_bytes=1_000_000, cache=DeafCache("hostile-deaf", {}))
    lines: list[str] = []
    handler = logger.add(lines.append, level="WARNING", format="{message}")
    try:
        assert await store.save("key-a", turn(0), []) == "failed"
    finally:
        logger.remove(handler)
    assert lines == ["A stored response was not kept: the cache did not hold it (Redis down or paused?)\n"]
