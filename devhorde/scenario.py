"""Scenario files: the simulated workers and the Horde's knobs, as a validated JSON document.

A scenario is a JSON object read by :func:`load_scenario` (or sent whole to ``PUT /_devhorde/scenario``) and
validated by :class:`Scenario`. Unknown keys are refused, so a typo fails loudly. ``devhorde/README.md`` documents
every key with its default; the docstrings below are the same text.

Each worker's declaration is built with ``horde_sdk``'s ``ChatWorkerDeclaration`` (:meth:`WorkerSpec.declaration`),
so a scenario that declares something the SDK refuses (``vision`` without an image transport, an unknown feature,
non-positive limits) is refused when loaded.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Literal

from horde_sdk.generation_parameters.text.chat_policy import (
    ChatFeature,
    ChatGuarantee,
    ChatWorkerLimits,
    parse_chat_declaration,
)
from horde_sdk.worker.chat_declaration import ChatFaultReason, ChatImageTransport, ChatWorkerDeclaration
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from devhorde.image_api import ImageApiSpec
from devhorde.limits import HORDE_CHAT_REQUEST_EXPIRY_SECONDS

SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
"""The folder of the bundled scenarios; ``default.json`` is used when no scenario is given."""

DEFAULT_SCENARIO_PATH = SCENARIOS_DIR / "default.json"
"""The scenario served when neither ``--scenario`` nor ``DEVHORDE_SCENARIO`` names one."""

WORKER_ID_NAMESPACE = uuid.UUID("5f1d7c0e-3a52-4f0e-9b7a-6d2f3c1e8a90")
"""Namespace of the uuid5 a worker gets from its name when the scenario gives it no ``id``."""

UsageField = Literal["prompt_tokens", "completion_tokens", "reasoning_tokens"]
USAGE_FIELDS: tuple[UsageField, ...] = ("prompt_tokens", "completion_tokens", "reasoning_tokens")
"""The token counts a worker may report on submit (``build_chat_reply_submit``'s ``ChatUsage``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkerSpec(_Strict):
    """One simulated worker: its ``ChatWorkerDeclaration`` fields, its speed and its scripted behaviours."""

    name: str = Field(min_length=1)
    """Unique worker name; the control route ``POST /_devhorde/workers/{name}`` addresses it."""
    id: str | None = None
    """Worker id (a uuid string) reported as ``worker_id`` and in stream ``worker`` fields; default uuid5 of name."""
    model: str = Field(min_length=1)
    """The model the worker serves (``ChatWorkerDeclaration.model_id``)."""
    chat: bool = True
    """False: a text-only worker (``chat_jobs=False``); counted in the model list's ``count``, never pops chat."""
    features: list[str] = Field(default_factory=lambda: [ChatGuarantee.PROMPT_OVERFLOW_REFUSED.value])
    """Declared ``ChatFeature`` and ``ChatGuarantee`` values. Default ``["prompt_overflow_refused"]``, which every
    ``strict`` request needs."""
    max_context_length: int = 8192
    """Declared ``ChatWorkerLimits.max_context_length`` (tokens)."""
    max_length: int = 1024
    """Declared ``ChatWorkerLimits.max_length`` (tokens)."""
    tools_max_temperature: float | None = None
    """Declared ``ChatWorkerLimits.tools_max_temperature``; null: none."""
    image_transports: list[str] = Field(default_factory=list)
    """Declared ``ChatImageTransport`` values (``url``, ``base64``, ``messages_url``); ``vision`` needs url or
    base64."""
    threads: int = Field(default=1, ge=1)
    """Jobs the worker runs at once."""
    online: bool = True
    """Whether the worker is online now; offline workers route nothing and vanish from the model list."""
    trusted: bool = True
    """Whether the worker counts as trusted (a request with ``trusted_workers: true`` needs it)."""
    slow: bool = False
    """Whether the worker counts as slow (a request with ``slow_workers: false`` avoids it)."""

    time_to_first_token_seconds: float = Field(default=0.6, ge=0)
    """Seconds between pop and the first progress post."""
    tokens_per_second: float = Field(default=8.0, gt=0)
    """Generation speed (tokens per second; a token is one word with its leading whitespace)."""
    post_interval_seconds: float = Field(default=0.45, ge=0)
    """Seconds between progress posts; each post carries ``max(1, round(tokens_per_second * interval))`` tokens."""
    posts_progress: bool = True
    """Whether the worker posts progress (needed for the Redis stream and ``stream_progress``)."""

    reply_style: Literal["topic", "echo", "fixed"] = "topic"
    """``topic``: readable sentences about the last user message's topic, deterministic per conversation;
    ``echo``: ``You said: <last user text>``; ``fixed``: ``fixed_reply``."""
    fixed_reply: str = "This is a fixed reply."
    """The reply text of ``reply_style: fixed``."""
    reply_words: int = Field(default=60, ge=1)
    """About how many words a ``topic`` reply has before the ``max_length`` cut."""
    reasoning: Literal["auto", "always", "never"] = "auto"
    """``auto``: reason when the worker declares ``reasoning_effort`` and the request's effort is not ``none``;
    ``always``: reason on every job (sentences by effort, 3 without one); ``never``."""
    reasoning_only: bool = False
    """Reply with reasoning and an empty ``content`` (a reasoning-only completion)."""
    empty_reply: bool = False
    """Reply with empty ``content`` and no reasoning."""
    tool_calls: Literal["follow", "never", "invalid"] = "follow"
    """``follow``: call tools as ``tools``/``tool_choice`` ask (auto calls a tool whose name the last user message
    mentions); ``never``: prose only; ``invalid``: call a function the request does not define."""
    final_text_diverges: bool = False
    """The submitted ``content`` differs from the text relayed in progress posts (prefix ``Correction: ``)."""
    report_usage: list[UsageField] = Field(
        default_factory=lambda: list(USAGE_FIELDS),
    )
    """The token counts the worker reports; others are absent from the generation. ``reasoning_tokens`` is
    reported only for a reply with reasoning."""
    fault_reason: ChatFaultReason | None = None
    """Fault every job with this ``ChatFaultReason`` (request ends ``faulted: true``); null: no scripted fault."""
    fault_after_posts: int = Field(default=0, ge=0)
    """Progress posts made before the scripted fault."""
    restart_after_posts: int | None = Field(default=None, ge=0)
    """An attempt on this worker dies after this many progress posts (``restarted`` rises, a new attempt with a new
    ``gen`` is queued); null: never."""
    restarts: int = Field(default=1, ge=0)
    """How many attempts of one request die on this worker before one completes."""
    offline_after_jobs: int | None = Field(default=None, ge=1)
    """The worker goes offline after finishing this many jobs (its other running jobs restart); null: never."""
    skip_seq: int | None = Field(default=None, ge=1)
    """The progress post with this ``seq`` is not written to the stream (a gap); the reply keeps its text."""
    omit_model_in_deltas: bool = False
    """Stream entries carry no ``model`` field."""
    omit_worker_in_deltas: bool = False
    """Stream entries carry no ``worker`` field."""
    ended_reason: bool = True
    """Whether ``ended`` markers carry ``reason`` (``completed``, ``restarted``, ``faulted``, ``cancelled``)."""
    done_without_generation: bool = False
    """The job ends with the request ``done`` and no generation, not faulted."""
    text_state: Literal["ok", "censored", "csam"] = "ok"
    """The ``state`` of the worker's text API generations (the real worker's submit ``state``); ``csam`` also adds
    ``{"type": "censorship", "value": "csam"}`` to ``gen_metadata``, as the Horde does."""
    done_while_processing: bool = False
    """While this worker processes a request, its status reads ``done: true`` with ``processing: 1`` and no
    generation (a transient native state the front must treat as unfinished)."""

    @field_validator("features")
    @classmethod
    def _known_declarations(cls, value: list[str]) -> list[str]:
        unknown = [declaration for declaration in value if parse_chat_declaration(declaration) is None]
        if unknown:
            raise ValueError(f"unknown chat declarations: {unknown}")
        return value

    @field_validator("image_transports")
    @classmethod
    def _known_transports(cls, value: list[str]) -> list[str]:
        for transport in value:
            ChatImageTransport(transport)
        return value

    @model_validator(mode="after")
    def _valid_declaration(self) -> WorkerSpec:
        self.declaration()
        return self

    @property
    def worker_id(self) -> str:
        """The worker's id: ``id`` when set, else the uuid5 of its name."""
        return self.id or str(uuid.uuid5(WORKER_ID_NAMESPACE, self.name))

    @property
    def limits(self) -> ChatWorkerLimits:
        """The declared ``ChatWorkerLimits``."""
        return ChatWorkerLimits(
            max_context_length=self.max_context_length,
            max_length=self.max_length,
            tools_max_temperature=self.tools_max_temperature,
        )

    def declaration(self) -> ChatWorkerDeclaration:
        """Return the worker's ``ChatWorkerDeclaration``, as it would send it on a text pop.

        Raises:
            ValueError: The SDK refuses the declaration (such as ``vision`` without url or base64).
        """
        if not self.chat:
            return ChatWorkerDeclaration(chat_jobs=False)
        features: set[ChatFeature | ChatGuarantee] = set()
        for declared in self.features:
            parsed = parse_chat_declaration(declared)
            if parsed is not None:
                features.add(parsed)
        return ChatWorkerDeclaration(
            model_id=self.model,
            features=frozenset(features),
            limits=self.limits,
            image_transports=frozenset(ChatImageTransport(t) for t in self.image_transports),
        )

    @property
    def declared_values(self) -> frozenset[str]:
        """The declared capability and guarantee wire values."""
        return frozenset(declared.value for declared in self.declaration().features)


class SubmitRefusal(_Strict):
    """A scripted refusal of ``POST /v2/generate/chat/async``, applied after payload validation and the API key
    check, before any other rule.
    """

    status: int = Field(ge=400, le=599)
    """HTTP status, such as 429, 403 or 503."""
    rc: str | None = None
    """The body's ``rc``; null: the body has no ``rc`` (such as a bare 429)."""
    message: str = "Refused by the development Horde's scenario."
    """The body's ``message``."""
    retry_after: int | None = Field(default=None, ge=0)
    """Seconds for a ``Retry-After`` header; null: no header."""
    impossible_reason: Literal["auto"] | dict[str, Any] | None = None
    """``auto``: add the request's routing gap (omitted when it has none); an object: added as is; null: none."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """More keys merged into the body."""
    apikey: str | None = None
    """Only refuse requests sent with this ``apikey``; null: any."""
    models: list[str] | None = None
    """Only refuse requests listing one of these models; null: any."""
    times: int | None = Field(default=None, ge=1)
    """Refuse only this many requests, then stop applying; null: always."""


class AiHordeSpec(_Strict):
    """The public AI Horde's own rules (``shared/spec/real-horde.md``), simulated when a scenario sets ``aihorde``:
    no chat routes, the rate limits, upfront kudos, the text API's bounds and cancel, the worker window.
    """

    online_window_seconds: float = Field(default=300.0, gt=0)
    """A worker counts as online (listed, serving ``is_possible``) this long after its last pop; a simulated worker
    pops while it is ``online``, so the window starts when it goes offline. The real Horde's value is 300."""
    proxy_passkey: str | None = None
    """A service account's proxy passkey: a request with ``Proxy-Authorization: <it>`` is limited as its
    ``Proxied-For`` address. Null: no passkey is known, the header is ignored."""
    kudos_api_keys: list[str] = Field(default_factory=list)
    """Keys whose users hold kudos, so upfront kudos never refuse them; every other key is a new user's (0 kudos)."""
    model_parameters: dict[str, int] = Field(default_factory=dict)
    """The model reference's parameter count per model: the upfront kudos of a request are
    ``round(max_length * parameters / 1e9 / 21, 2)`` (a model not listed counts 1e9)."""
    rate_limits: bool = True
    """Apply the rate limits (flask-limiter's fixed windows) and their headers."""
    totals_refresh_seconds: float = Field(default=60.0, ge=0)
    """The waiting text requests that ``GET /v2/status/performance`` reports and the upfront kudos ceiling subtracts
    are counted again once this long has passed since the last count, as the real Horde's ``store_totals``
    (``horde/database/__init__.py``: every 60 s) does; 0 counts them live."""


class Scenario(_Strict):
    """A whole development Horde scenario: workers, known models and the Horde's knobs."""

    name: str = "unnamed"
    """A label shown by ``GET /_devhorde/scenario``."""
    description: str = ""
    """Free text."""
    known_models: list[str] = Field(default_factory=list)
    """Text models the Horde knows besides the workers' models (known but unserved: 503 ``NoEligibleWorker``)."""
    workers: list[WorkerSpec] = Field(default_factory=list)
    """The simulated workers."""
    request_expiry_seconds: float = Field(default=HORDE_CHAT_REQUEST_EXPIRY_SECONDS, gt=0)
    """Seconds after submit at which a request expires (404 ``RequestNotFound``)."""
    queue_position_delay_seconds: float = Field(default=0.0, ge=0)
    """For this long after submit, ``queue_position`` and ``wait_time`` read 0 (the real Horde refreshes them about
    every 2 s)."""
    older_horde: bool = False
    """Statuses omit ``eligible_workers``, ``eligible_worker_threads``, ``might_stall`` and ``impossible_reason``."""
    might_stall: bool = False
    """The value of every status's ``might_stall``."""
    maintenance: bool = False
    """Refuse every submit with 503 ``MaintenanceMode``."""
    invalid_api_keys: list[str] = Field(default_factory=list)
    """Keys refused with 401 ``InvalidAPIKey``."""
    kudos_per_token: float = Field(default=0.025, ge=0)
    """Kudos price of one completion token: the estimate is ``round(max_length * kudos_per_token, 2)`` with the
    applied ``max_length``; a finished request's kudos use its ``completion_tokens``."""
    free_output_allowance: int | None = Field(default=None, ge=0)
    """Completion tokens a key may request without holding kudos upfront; above it, keys outside
    ``upfront_kudos_api_keys`` are refused (403 ``KudosUpfront``, or 403 ``NoEligibleWorker`` when no online worker
    can serve the request). Null: no allowance check."""
    upfront_kudos_api_keys: list[str] = Field(default_factory=list)
    """Keys that have the kudos to hold upfront."""
    submit_refusals: list[SubmitRefusal] = Field(default_factory=list)
    """Scripted submit refusals; the first matching one applies."""
    submit_warnings: list[dict[str, str]] = Field(default_factory=list)
    """``warnings`` returned in every 202 (each ``{"code", "message"}``); empty: the key is omitted."""
    malformed_first_replies: bool = False
    """Text API: a prompt holding tools or the JSON instruction of the front's prompt contract, and not a repair turn
    ("Your previous reply was not valid: "), gets a malformed reply (a tool call whose JSON is cut short, or JSON
    after prose with a trailing comma); the repair turn gets the good reply (devhorde.prompted)."""
    images: ImageApiSpec | None = None
    """The image API's workers and rules (devhorde.image_api); null: no image worker, and every image model
    unknown."""
    aihorde: AiHordeSpec | None = None
    """Behave as the public AI Horde does (no chat routes, its limits, kudos and cancel); null: the native Horde of
    the contract."""

    @model_validator(mode="after")
    def _unique_worker_names(self) -> Scenario:
        names = [worker.name for worker in self.workers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate worker names: {duplicates}")
        return self

    def worker(self, name: str) -> WorkerSpec | None:
        """Return the worker named ``name``, or None."""
        return next((worker for worker in self.workers if worker.name == name), None)

    @property
    def text_models(self) -> frozenset[str]:
        """Every text model the Horde knows: ``known_models`` and each worker's model, online or not."""
        return frozenset(self.known_models) | {worker.model for worker in self.workers}


def bundled_scenario_names() -> list[str]:
    """The names of the scenarios bundled in ``devhorde/scenarios`` (``aihorde``, ``busy``, ``default``, ...)."""
    return sorted(path.stem for path in SCENARIOS_DIR.glob("*.json"))


class ScenarioNotFoundError(FileNotFoundError):
    """A scenario that is neither a file nor a bundled scenario's name; the message lists the bundled names."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no such scenario file, and no bundled scenario of that name: expected a scenario file or one of "
            f"{', '.join(bundled_scenario_names())}"
        )
        self.name = name


def scenario_path(path: str | Path | None = None) -> Path:
    """The file of a scenario: ``None`` is ``scenarios/default.json``; a bare name such as ``fast`` resolves to
    ``devhorde/scenarios/fast.json`` when no such path exists.

    Raises:
        ScenarioNotFoundError: Neither a file nor a bundled scenario's name.
    """
    if path is None:
        return DEFAULT_SCENARIO_PATH
    resolved = Path(path)
    if resolved.is_file():
        return resolved
    if str(path) in bundled_scenario_names():
        return SCENARIOS_DIR / f"{path}.json"
    raise ScenarioNotFoundError(str(path))


def load_scenario(path: str | Path | None = None) -> Scenario:
    """Read and validate a scenario file (:func:`scenario_path` resolves ``path``).

    Raises:
        ScenarioNotFoundError: Neither a file nor a bundled scenario's name.
        pydantic.ValidationError: The document is not a valid scenario.
    """
    return Scenario.model_validate(json.loads(scenario_path(path).read_text(encoding="utf-8")))
