"""The front's settings, read once from the environment and typed with pydantic-settings.

Every knob is an environment variable; the README's configuration table lists each with its default. Django's
settings module exposes the parsed object as ``settings.HORDE_OAI``, the one namespaced key a host project sets,
and the front's code reads it through :func:`front_settings`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

from horde_sdk.ai_horde_api.endpoints import AI_HORDE_BASE_URL
from horde_sdk.generation_parameters.text.chat_limits import MAX_CHAT_TEXT_BYTES, MAX_CHAT_TOOL_SPEC_BYTES
from pydantic import AliasChoices, Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from chat.horde_url import horde_url_problem

OPENAI_MAX_IMAGE_BYTES: Final[int] = 20 * 1000 * 1000
"""OpenAI's documented limit of one image input (20 MB); no SDK publishes it."""

JSON_ESCAPE_FACTOR: Final[int] = 6
"""The most bytes JSON may spend on one byte of text (``\\u0001``)."""

DEFAULT_MAX_BODY_BYTES: Final[int] = (
    math.ceil(OPENAI_MAX_IMAGE_BYTES * 4 / 3)  # one image at OpenAI's limit as a base64 data URL
    + JSON_ESCAPE_FACTOR * MAX_CHAT_TEXT_BYTES  # the Horde's whole message text budget, every byte escaped
    + MAX_CHAT_TOOL_SPEC_BYTES  # tools, tool_choice and response_format
    + 1024 * 1024  # the rest of the request's keys
)
"""The default ``HORDE_OAI_MAX_BODY_BYTES`` (34,268,843 bytes, about 32.7 MiB): the largest legal request, an image
at OpenAI's size limit included, fits; a larger body cannot be a request the Horde would serve."""

DEFAULT_MAX_BUFFERED_BODY_BYTES: Final[int] = 2 * DEFAULT_MAX_BODY_BYTES
"""The default ``HORDE_OAI_MAX_BUFFERED_BODY_BYTES`` (68,537,686 bytes, about 65 MiB): two bodies at the default
``HORDE_OAI_MAX_BODY_BYTES`` at once, which with their parsing cost about 0.3 GB of memory (bench/README.md, issue
35), so a small machine serves them without swapping; many small bodies fit beside them."""

DEFAULT_IMAGE_MODEL_ALIASES: Final[str] = (
    "dall-e-2=stable_diffusion,dall-e-3=AlbedoBase XL (SDXL),gpt-image-1=AlbedoBase XL (SDXL)"
)
"""The default ``HORDE_OAI_IMAGE_MODEL_ALIASES``: OpenAI's image model names on the Horde's most served SD 1.5 and
SDXL models (docs/images.md)."""


def image_model_aliases(value: str) -> dict[str, str]:
    """``name=Horde model,...`` as ``{name: Horde model}`` (spaces around each part dropped; empty parts skipped)."""
    pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
    return {name.strip(): model.strip() for name, model in pairs}


def alias_pairs_problem(value: str) -> str | None:
    """What is wrong with a ``HORDE_OAI_IMAGE_MODEL_ALIASES`` value, or None."""
    for part in (part for part in value.split(",") if part.strip()):
        name, equals, model = part.partition("=")
        if not equals or not name.strip() or not model.strip():
            return f"expected name=Horde model pairs separated by commas, such as {DEFAULT_IMAGE_MODEL_ALIASES!r}"
    return None


PUBLIC_HORDE_URL = AI_HORDE_BASE_URL.rstrip("/")
"""The public Horde's API root, the default ``HORDE_URL``: a front started without configuration never talks to the
development Horde by accident."""


class FrontSettings(BaseSettings):
    """The front's configuration. Field names map to ``HORDE_OAI_<NAME>`` variables unless an alias says otherwise."""

    model_config = SettingsConfigDict(env_prefix="HORDE_OAI_", extra="ignore", frozen=True, allow_inf_nan=False)

    horde_url: str = Field(default=PUBLIC_HORDE_URL, validation_alias=AliasChoices("HORDE_URL"))
    """The native Horde API root (``HORDE_URL``), such as ``https://aihorde.net/api``; paths are relative to it."""

    redis_url: str | None = None
    """``HORDE_OAI_REDIS_URL``: the Redis the Horde publishes progress streams and signals on. Unset: no relay,
    no signals; the waiter re-reads the status on its timer."""

    stream_redis_db: int = Field(default=None, validate_default=True, ge=0)
    """``HORDE_OAI_STREAM_REDIS_DB``: the Redis database of the ``horde:chat:stream:<id>`` progress streams. Unset:
    the database of ``HORDE_OAI_REDIS_URL`` (``redis://host:6379/6`` reads them on 6; no database in the URL: 0)."""

    client_agent: str = "horde-oai-front:0.1:https://github.com/Haidra-Org/AI-Horde"
    """``HORDE_OAI_CLIENT_AGENT``: the ``Client-Agent`` header sent to the Horde (``name:version:contact``)."""

    nonstream_timeout_seconds: float = Field(default=300.0, gt=0)
    """``HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS``: how long a non-streamed request may wait for its reply."""

    stream_timeout_seconds: float = Field(default=600.0, gt=0)
    """``HORDE_OAI_STREAM_TIMEOUT_SECONDS``: how long a streamed request may wait for its reply."""

    signal_recheck_seconds: float = Field(default=1.0, gt=0)
    """``HORDE_OAI_SIGNAL_RECHECK_SECONDS``: the waiter's status re-read interval when no signal wakes it."""

    signal_recheck_max_seconds: float = Field(default=30.0, gt=0)
    """``HORDE_OAI_SIGNAL_RECHECK_MAX_SECONDS``: with the signal listener subscribed, the ceiling the waiter's re-read
    timer backs off to (doubling from ``signal_recheck_seconds`` after each re-read no signal preceded). Signals
    carry every state change, so this only bounds how late a change without a signal is seen (a worker going
    offline, which starts the ``fail_fast_grace_seconds`` grace). Below ``signal_recheck_seconds`` it is that. With
    many requests waiting the ceiling rises further (``signal_recheck_reads_per_second``)."""

    signal_recheck_reads_per_second: float = Field(default=25.0, gt=0)
    """``HORDE_OAI_SIGNAL_RECHECK_READS_PER_SECOND``: without a subscribed signal listener, the timer re-reads of
    requests deep in the queue one process books per second, after the urgent ones (processing, at the head: about
    one a second each; chat.waiting.read_schedule). With the listener subscribed, the timer re-reads one
    process makes per second in all once every waiter has backed off: the ceiling is at least the number of requests
    registered for signals divided by this (5,000 waiting: 200 s), so the process's re-read cost stops growing with
    the number of waiting requests (a cold status read costs about 2 ms of CPU, bench/README.md). Signals still wake
    each request at once; a resubscription after lost signals wakes every one."""

    fail_fast_grace_seconds: float = Field(default=30.0, ge=0)
    """``HORDE_OAI_FAIL_FAST_GRACE_SECONDS``: how long a request reported impossible waits for a worker to appear."""

    keepalive_seconds: float = Field(default=10.0, gt=0)
    """``HORDE_OAI_KEEPALIVE_SECONDS``: the interval of the SSE keepalive comments while a stream waits."""

    progress_chunk_seconds: float = Field(default=60.0, ge=0)
    """``HORDE_OAI_PROGRESS_CHUNK_SECONDS``: once a stream has sent no data event for this long, its next keepalive
    is a progress chunk (``choices: []`` with ``x_horde.queue``; a ``response.in_progress`` event on the Responses
    API) instead of a comment, so clients that give up after a time without a chunk (LangChain's ``astream``: 120 s)
    keep waiting. 0: never (chat.streaming.progress)."""

    horde_timeout_seconds: float = Field(default=30.0, gt=0)
    """``HORDE_OAI_HORDE_TIMEOUT_SECONDS``: the timeout of one native HTTP call."""

    horde_connections: int = Field(default=32, ge=1)
    """``HORDE_OAI_HORDE_CONNECTIONS``: native calls one process makes at once, and the keep-alive connections it
    holds for them; more wait their turn (chat.horde.native.POOL_CONNECTIONS)."""

    cancel_retry_seconds: float = Field(default=10.0, gt=0)
    """``HORDE_OAI_CANCEL_RETRY_SECONDS``: the interval between retries of a failed cancel."""

    delta_pacing_max_window_seconds: float = Field(default=2.0, ge=0)
    """``HORDE_OAI_DELTA_PACING_MAX_WINDOW_SECONDS``: the largest pacing window; 0 sends each delta as it arrives."""

    delta_pacing_max_chunks_per_second: float = Field(default=20.0, gt=0)
    """``HORDE_OAI_DELTA_PACING_MAX_CHUNKS_PER_SECOND``: the most paced pieces sent per second."""

    models_cache_seconds: float = Field(default=10.0, ge=0)
    """``HORDE_OAI_MODELS_CACHE_SECONDS``: how long the native model list is reused."""

    stored_response_seconds: float = Field(default=3600.0, gt=0)
    """``HORDE_OAI_STORED_RESPONSE_SECONDS``: how long a ``POST /v1/responses`` response stored with ``store`` true
    (OpenAI's default) is kept for ``previous_response_id``, ``item_reference`` and ``GET`` / ``DELETE
    /v1/responses/{id}`` (chat.serving.stored_responses; in the front's Redis, or each process's memory without)."""

    stored_response_max_bytes: int = Field(default=1024 * 1024, gt=0)
    """``HORDE_OAI_STORED_RESPONSE_MAX_BYTES``: the largest stored response, its conversation included, in bytes of
    JSON; a larger response is answered and not stored (a later ``previous_response_id`` to it is not found)."""

    stored_responses_per_key: int = Field(default=1000, gt=0)
    """``HORDE_OAI_STORED_RESPONSES_PER_KEY``: the most responses one API key keeps stored at once (every anonymous
    client shares the anonymous key's); one more is answered and not stored, and says so (``store: false``,
    ``x_horde.store``: ``over_quota``)."""

    stored_response_bytes_per_key: int = Field(default=64 * 1024 * 1024, gt=0)
    """``HORDE_OAI_STORED_RESPONSE_BYTES_PER_KEY``: the most bytes of JSON one API key keeps stored at once (each
    response counted with its own items: a continuation stores only what it adds); past it a response is answered and
    not stored, as above."""

    text_api_fallback: Literal["auto", "on", "off"] = "auto"
    """``HORDE_OAI_TEXT_API_FALLBACK``: when models with text workers but no chat worker are served through the
    Horde's text generation API (chat.serving.text_route). ``auto``: when the Horde's model list has no ``chat`` entry
    at all (a Horde without the native chat routes, such as the public Horde today); ``on``: always; ``off``: never."""

    text_repair_attempts: int = Field(default=1, ge=0)
    """``HORDE_OAI_TEXT_REPAIR_ATTEMPTS``: on the text path, how many times a reply that must hold a valid tool call
    or valid JSON and does not is asked again, with the model's reply and the error as the next turn (each attempt a
    submit of its own); 0 answers the first invalid reply with 502 ``ModelReplyInvalid``."""

    log_level: Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """``HORDE_OAI_LOG_LEVEL``: the lowest Loguru level written to standard error (``DEBUG`` shows the relay's and the
    waiter's detail lines)."""

    log_json: bool = False
    """``HORDE_OAI_LOG_JSON``: write each log record as one JSON object (Loguru's ``serialize``), with the values of
    the reference's log lines under ``record.extra``."""

    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    """``HORDE_OAI_MAX_BODY_BYTES``: the largest request body, in bytes; a larger one is refused with 413 before it is
    read (oaifront.guards). The default (:data:`DEFAULT_MAX_BODY_BYTES`) fits the largest legal request, an image data
    URL included."""

    max_buffered_body_bytes: int = Field(default=DEFAULT_MAX_BUFFERED_BODY_BYTES, gt=0)
    """``HORDE_OAI_MAX_BUFFERED_BODY_BYTES``: the most request-body bytes the process holds at once, all requests
    together, counted as each body arrives and held until its request ends (oaifront.guards); a body that would pass
    it is refused with 503 ``FrontAtCapacity``, ``Retry-After`` and ``x-should-retry: true`` (at once when its
    ``Content-Length`` says so). Set it to at least ``HORDE_OAI_MAX_BODY_BYTES``, or the largest bodies are always
    refused. Default: :data:`DEFAULT_MAX_BUFFERED_BODY_BYTES`."""

    body_timeout_seconds: float = Field(default=30.0, gt=0)
    """``HORDE_OAI_BODY_TIMEOUT_SECONDS``: how long a client may take to send its whole request body before 408
    ``RequestBodyTimeout``."""

    max_in_flight: int = Field(default=1024, gt=0)
    """``HORDE_OAI_MAX_IN_FLIGHT``: the most requests the process serves at once; one more is refused with 503
    ``FrontAtCapacity`` and ``Retry-After``."""

    max_in_flight_per_client: int = Field(default=256, gt=0)
    """``HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT``: the most requests one client address has in flight at once."""

    client_address_header: str | None = None
    """``HORDE_OAI_CLIENT_ADDRESS_HEADER``: behind a trusted proxy, the header that carries the client's address
    (such as ``X-Forwarded-For``; its first entry is used). Unset: the connection's peer address."""

    proxy_passkey: SecretStr | None = None
    """``HORDE_OAI_PROXY_PASSKEY``: a Horde service account's proxy passkey (a secret: never logged, shown as
    ``**********``). Set, every call to the Horde carries ``Proxy-Authorization`` with it and ``Proxied-For`` with
    the client address the in-flight caps use, so each user spends their own address budget at the Horde
    (chat.horde.budget). Unset: every user of the front shares the front's address budget."""

    capacity_retry_after_seconds: int = Field(default=1, gt=0)
    """``HORDE_OAI_CAPACITY_RETRY_AFTER_SECONDS``: the ``Retry-After`` of a 503 ``FrontAtCapacity``."""

    readiness_cache_seconds: float = Field(default=2.0, ge=0)
    """``HORDE_OAI_READINESS_CACHE_SECONDS``: how long ``GET /readyz`` reuses its last checks; the Horde heartbeat's
    verdict is shared by every process for as long, through Django's cache (front_operations.readiness.check_horde)."""

    readiness_strict: bool = False
    """``HORDE_OAI_READINESS_STRICT``: ``GET /readyz`` answers 503 when Redis is down (off by default: Redis down is a
    degraded 200, since requests are still served, streams whole and waits on timer re-reads)."""

    telemetry_enabled: bool = False
    """``HORDE_OAI_TELEMETRY_ENABLED``: configure Logfire / OpenTelemetry traces, metrics and logs (off by default;
    ``OTEL_SDK_DISABLED=true`` keeps them off)."""

    metrics_endpoint: bool = False
    """``HORDE_OAI_METRICS_ENDPOINT``: serve ``GET /metrics`` in Prometheus text format (off by default)."""

    image_model_aliases: str = DEFAULT_IMAGE_MODEL_ALIASES
    """``HORDE_OAI_IMAGE_MODEL_ALIASES``: the OpenAI image model names ``POST /v1/images/generations`` maps to Horde
    image models, as ``name=Horde model`` pairs separated by commas (docs/images.md); empty: no alias."""

    image_model_reference_url: str | None = None
    """``HORDE_OAI_IMAGE_MODEL_REFERENCE_URL``: the image model reference the Horde reads (its
    ``HORDE_IMAGE_COMPVIS_REFERENCE``, ``stable_diffusion.json``), for each image card's baseline and max steps
    (docs/images.md); unset (the default): not read, and the cards say null. The Horde's API does not serve it."""

    @field_validator("image_model_aliases")
    @classmethod
    def _alias_pairs(cls, value: str) -> str:
        problem = alias_pairs_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("horde_url")
    @classmethod
    def _api_root(cls, value: str) -> str:
        problem = horde_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value.rstrip("/")

    @field_validator("proxy_passkey")
    @classmethod
    def _header_value(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        secret = value.get_secret_value()
        if not (secret.isascii() and secret.isprintable()) or secret != secret.strip():
            raise ValueError("a proxy passkey is printable ASCII without surrounding spaces (an HTTP header value)")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value:
            problem = redis_url_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("stream_redis_db", mode="before")
    @classmethod
    def _follow_the_url_database(cls, value: object, info: ValidationInfo) -> object:
        if value is not None and value != "":
            return value
        return redis_url_database(info.data.get("redis_url"))

    def describe_redis(self, unreachable: str | None = None) -> str:
        """One line naming the Redis and the progress streams' database, with no password (the start log line).

        ``unreachable``: why that Redis did not answer at start (chat.asgi.redis_problem), said in the line with what
        the front does until it answers.
        """
        if not self.redis_url:
            return (
                "Redis: none (HORDE_OAI_REDIS_URL unset): streams are delivered whole, the waiter re-reads on its timer"
            )
        source = "HORDE_OAI_STREAM_REDIS_DB" if "stream_redis_db" in self.model_fields_set else "the URL's database"
        database = f"progress streams read on database {self.stream_redis_db} ({source})"
        if unreachable is not None:
            return (
                f"Redis: {redacted_url(self.redis_url)} is unreachable ({unreachable}): until it answers, streams are "
                f"delivered whole and the waiter re-reads on its timer; {database}"
            )
        return f"Redis: {redacted_url(self.redis_url)}; {database}"


REDIS_URL_EXAMPLE: Final = "redis://127.0.0.1:6379/0"
"""The shape of a good ``HORDE_OAI_REDIS_URL``, quoted in its error."""


def redis_url_problem(url: str) -> str | None:
    """What redis-py's own URL parser finds wrong with ``url`` (such as ``127.0.0.1:6379``, without a scheme), or
    None.
    """
    from redis.connection import parse_url  # noqa: PLC0415 - only a Redis URL needs it

    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        return f"expected a Redis URL such as {REDIS_URL_EXAMPLE}: {exc}"
    return None


def redis_url_database(url: str | None) -> int:
    """The database a Redis URL selects (``redis://host:6379/6`` is 6, ``unix:///run/redis.sock?db=2`` is 2), read by
    redis-py's own parser; 0 when the URL names none or there is no URL.
    """
    if not url:
        return 0
    from redis.connection import parse_url  # noqa: PLC0415 - only a Redis URL needs it

    try:
        return int(parse_url(url).get("db", 0))  # type: ignore[no-untyped-call]
    except ValueError:
        return 0


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (``redis://:secret@host:6379/0`` is ``redis://:***@host:6379/0``),
    for log lines and banners.
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostinfo}"))


SECRET_FIELDS: Final[frozenset[str]] = frozenset({"proxy_passkey"})
"""Settings whose values are never shown (:func:`describe_invalid_settings` writes ``'***'``)."""


def environment_variable(field_name: str) -> str:
    """The environment variable of a :class:`FrontSettings` field (``horde_url`` is ``HORDE_URL``)."""
    if field_name.lower() == "horde_url":
        return "HORDE_URL"
    return f"HORDE_OAI_{field_name.upper()}"


def describe_invalid_settings(invalid: ValidationError) -> str:
    """One line per invalid variable, such as ``HORDE_OAI_KEEPALIVE_SECONDS='ten': Input should be a valid number``."""
    lines = []
    for error in invalid.errors():
        field_name = str(error["loc"][0]) if error["loc"] else ""
        shown = "'***'" if field_name in SECRET_FIELDS else repr(error.get("input"))
        lines.append(f"{environment_variable(field_name)}={shown}: {error['msg'].removeprefix('Value error, ')}")
    return "Invalid front configuration: " + "; ".join(lines)


ENVIRONMENT_PREFIX: Final[str] = str(FrontSettings.model_config.get("env_prefix", ""))
"""The prefix of the front's environment variables (``HORDE_OAI_``)."""


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a mistyped ``name`` (``difflib``'s best match at its default cutoff), or None."""
    matches = difflib.get_close_matches(name, list(known), n=1)
    return matches[0] if matches else None


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Each ``HORDE_OAI_*`` variable of ``environ`` no setting reads, with the closest variable that one does."""
    known = {environment_variable(name) for name in FrontSettings.model_fields}
    # Compared without the prefix every name shares, which would make any two names look alike.
    suffixes = {name.removeprefix(ENVIRONMENT_PREFIX): name for name in known}
    found = []
    for name in sorted(environ):
        if name.startswith(ENVIRONMENT_PREFIX) and name not in known:
            match = closest(name.removeprefix(ENVIRONMENT_PREFIX), suffixes)
            found.append((name, suffixes[match] if match else None))
    return found


def unknown_keys(configured: Mapping[str, object]) -> list[tuple[str, str | None]]:
    """Each key of a ``HORDE_OAI`` settings dict that names no setting, with the closest field name."""
    return [
        (str(key), closest(str(key), FrontSettings.model_fields))
        for key in configured
        if key not in FrontSettings.model_fields
    ]


def not_a_settings_dict(configured: object) -> str:
    """The one line saying ``settings.HORDE_OAI`` is neither a dict of settings nor a :class:`FrontSettings`."""
    return (
        f"HORDE_OAI must be a dict of the front's settings (such as {{'horde_url': ...}}) or a "
        f"chat.settings.FrontSettings, not {type(configured).__name__}"
    )


@cache
def front_settings() -> FrontSettings:
    """Return the front's settings: Django's ``settings.HORDE_OAI`` when configured (a :class:`FrontSettings` or a
    dict of its fields, over the environment), else the environment's.

    Raises:
        ImproperlyConfigured: ``HORDE_OAI`` is something else, or a value is invalid; the message is one line
            (:func:`describe_invalid_settings`, :func:`not_a_settings_dict`).
    """
    from django.conf import settings  # noqa: PLC0415 - the module also serves settings.py, before Django is set up
    from django.core.exceptions import ImproperlyConfigured  # noqa: PLC0415 - same

    configured = getattr(settings, "HORDE_OAI", None)
    if isinstance(configured, FrontSettings):
        return configured
    if isinstance(configured, BaseSettings):
        # A FrontSettings of an earlier import of this module (a test that re-imports the apps): its values, anew.
        configured = configured.model_dump()
    if configured is not None and not isinstance(configured, dict):
        raise ImproperlyConfigured(not_a_settings_dict(configured))
    try:
        return FrontSettings(**(configured or {}))
    except ValidationError as invalid:
        raise ImproperlyConfigured(describe_invalid_settings(invalid)) from None
