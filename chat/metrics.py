"""The front's OpenTelemetry instruments and their bounded attributes (reference: Metrics through Outcome class).

Every instrument is made from one meter: the global meter provider's unless one is supplied
(:func:`configure_metrics`). An unconfigured global provider records nothing, so metrics cost nothing when off.
Tests supply a ``MeterProvider`` with an ``InMemoryMetricReader``; ``HORDE_OAI_METRICS_ENDPOINT`` serves the same
instruments at ``GET /metrics`` in Prometheus text format (oaifront.telemetry).

Instruments (attribute keys carry the ``horde.`` prefix; every value is from a bounded set):

=====================================  =========  ======================================================================
instrument                             kind       attributes
=====================================  =========  ======================================================================
``horde.oai.requests.refused``         counter    ``status``, ``code``, ``parameter``, ``outcome_class``
``horde.oai.requests.errors``          counter    ``status``, ``code``, ``reason``, ``stage``, ``max_tokens_bucket``,
                                                  ``outcome_class``, ``streamed``
``horde.oai.stream.failures``          counter    ``code``, ``outcome_class``, ``relayed``
``horde.oai.request.duration``         histogram  ``status``, ``outcome_class``, ``streamed`` (seconds)
``horde.oai.completions``              counter    ``model``, ``finish_reason``, ``content``, ``max_tokens_source``,
                                                  ``streamed``
``horde.oai.cancels``                  counter    ``outcome``
``horde.oai.text.prompted_replies``    counter    ``prompted_output`` (``tools``, ``json``), ``repair_attempts`` (0 to
                                                  ``HORDE_OAI_TEXT_REPAIR_ATTEMPTS``), ``outcome`` (``valid``,
                                                  ``invalid``: 502 ``ModelReplyInvalid``, ``unread``: another end,
                                                  ``abandoned``: the client left first)
``horde.oai.request.max_tokens``       histogram  ``source`` (tokens)
``horde.oai.request.queue_wait``       histogram  ``streamed`` (seconds from submit to the first processing read)
``horde.oai.request.first_content``    histogram  ``streamed`` (seconds from submit to the first content sent)
``horde.oai.request.body_size``        histogram  (bytes)
``horde.oai.stream.post_gap``          histogram  (seconds between a generation's progress posts)
``horde.oai.stream.pacing_lag``        histogram  (seconds a paced piece went out after it was due)
``horde.oai.stream.pieces_per_post``   histogram  (pieces one relayed delta was cut into)
``horde.oai.completion.reasoning_share`` histogram ``model`` (reasoning characters / all reply characters)
``horde.oai.horde.call.duration``      histogram  ``call``, ``status`` (seconds of one native call)
``horde.oai.address_budget.refusals``  counter    ``by`` (``front``: its pacing; ``horde``: the Horde's limiter)
``horde.oai.horde.pool_full``          counter    (Horde calls that found every pooled connection busy and waited)
``horde.oai.responses.not_stored``     counter    ``reason`` (``too_large``, ``over_quota``, ``failed``)
=====================================  =========  ======================================================================

No client address, API key, prompt, client title or request id is ever an attribute (``metrics.7``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider

from chat import errors

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.view import View

METER_NAME: Final[str] = "horde.oai"
"""The instrumentation scope of every instrument."""

# --- bucket boundaries (reference: Histogram buckets) ------------------------------------------------------------
# The reference takes BUCKETS_SECONDS and BUCKETS_REQUEST_LIFECYCLE_SECONDS from the Horde's own horde/metrics.py.
# horde-sdk does not publish them and the reference does not state their values, so the two tuples below are this
# front's choice (native calls: 5 ms to 30 s; request lifecycle: 0.5 s to the 20-minute native expiry). Import them
# instead once horde-sdk publishes them.

BUCKETS_SECONDS: Final[tuple[float, ...]] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Native call latency, in seconds (the Horde's ``BUCKETS_SECONDS``)."""

BUCKETS_REQUEST_LIFECYCLE_SECONDS: Final[tuple[float, ...]] = (
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0
)  # fmt: skip
"""Queue wait, first content and request duration, in seconds (the Horde's ``BUCKETS_REQUEST_LIFECYCLE_SECONDS``)."""

BUCKETS_BODY_BYTES: Final[tuple[float, ...]] = (
    1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864
)  # fmt: skip
"""Request body size, in bytes: 1 KiB to 64 MiB by factors of 4."""

BUCKETS_POST_GAP_SECONDS: Final[tuple[float, ...]] = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
"""Post gap and pacing lag, in seconds (0.1 to 10)."""

BUCKETS_PIECES_PER_POST: Final[tuple[float, ...]] = (1, 2, 3, 5, 8, 10, 15, 20, 30, 40, 60, 80)
"""Pieces one relayed delta was cut into (1 to 80)."""

BUCKETS_MAX_TOKENS: Final[tuple[int, ...]] = (16, 64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384)
"""The completion limit, in tokens (reference: Error attributes)."""

BUCKETS_REASONING_SHARE: Final[tuple[float, ...]] = tuple(round(step / 10, 1) for step in range(11))
"""The reasoning share of a reply, 0 to 1 in steps of 0.1."""

OVER_MAX_TOKENS_BUCKET: Final[str] = "over"
"""``max_tokens_bucket`` of a limit above the last :data:`BUCKETS_MAX_TOKENS` boundary."""


def max_tokens_bucket(limit: int) -> str:
    """The upper bound of ``limit``'s :data:`BUCKETS_MAX_TOKENS` bucket, as text; ``over`` above 16384.

    ``max_tokens_bucket(600) == "768"``, ``max_tokens_bucket(512) == "512"`` (reference: Error attributes).
    """
    for bound in BUCKETS_MAX_TOKENS:
        if limit <= bound:
            return str(bound)
    return OVER_MAX_TOKENS_BUCKET


# --- outcome classes (reference: Outcome class) ------------------------------------------------------------------

SERVED: Final = "served"
CAPACITY: Final = "capacity"
UNSERVABLE: Final = "unservable"
SERVICE_FAULT: Final = "service_fault"
CLIENT_ERROR: Final = "client_error"
RATE_LIMITED: Final = "rate_limited"
FRONT_AT_CAPACITY: Final = "front_at_capacity"
ABANDONED: Final = "abandoned"
FRONT_SHUTDOWN: Final = "front_shutdown"
UNCLASSIFIED: Final = "unclassified"

STAGE_SUBMIT: Final = "submit"
"""``stage`` of a ``no_eligible_worker`` the Horde refused at creation."""
STAGE_GRACE: Final = "grace"
"""``stage`` of a ``no_eligible_worker`` returned when the fail-fast grace ended."""

SERVED_CODE: Final = ""
"""The code of a delivered completion (no error)."""
CLIENT_DISCONNECTED: Final = "ClientDisconnected"
"""The code recorded for a request whose client left before its reply ended (never sent to anyone)."""

OUTCOME_CLASS_BY_CODE: Final[Mapping[str, str]] = {
    SERVED_CODE: SERVED,
    errors.BAD_REQUEST: CLIENT_ERROR,
    errors.UNSUPPORTED_CHAT_PARAMETER: CLIENT_ERROR,
    errors.CHAT_REQUEST_CONFLICT: CLIENT_ERROR,
    errors.INVALID_API_KEY: CLIENT_ERROR,
    errors.MODEL_NOT_FOUND: CLIENT_ERROR,
    errors.UNKNOWN_MODEL: CLIENT_ERROR,
    errors.MAX_KUDOS_EXCEEDED: CLIENT_ERROR,
    errors.KUDOS_UPFRONT: CLIENT_ERROR,
    "method_not_allowed": CLIENT_ERROR,
    errors.REQUEST_TOO_LARGE: CLIENT_ERROR,
    errors.REQUEST_BODY_TIMEOUT: CLIENT_ERROR,
    errors.NO_WORKER_SUPPORTS_FEATURES: UNSERVABLE,
    errors.NO_WORKER_SUPPORTS_LIMIT: UNSERVABLE,
    errors.QUEUE_UNAVAILABLE: CAPACITY,
    errors.CHAT_REQUEST_TIMEOUT: CAPACITY,
    errors.RATE_LIMIT_EXCEEDED: RATE_LIMITED,
    errors.CHAT_REQUEST_FAULTED: SERVICE_FAULT,
    errors.CHAT_REQUEST_NO_GENERATION: SERVICE_FAULT,
    errors.CHAT_REQUEST_CANCELLED: SERVICE_FAULT,
    errors.MODEL_REPLY_INVALID: SERVICE_FAULT,
    errors.CHAT_STREAM_DIVERGED: SERVICE_FAULT,
    errors.IMAGE_REQUEST_INCOMPLETE: SERVICE_FAULT,
    errors.CONTENT_POLICY_VIOLATION: CLIENT_ERROR,
    errors.HORDE_UNAVAILABLE: SERVICE_FAULT,
    "internal_error": SERVICE_FAULT,
    errors.FRONT_AT_CAPACITY: FRONT_AT_CAPACITY,
    errors.FRONT_SHUTTING_DOWN: FRONT_SHUTDOWN,
    CLIENT_DISCONNECTED: ABANDONED,
}
"""The outcome class of each code the front knows. ``no_eligible_worker`` is classed by its stage instead
(:func:`outcome_class_for`); a code not here (a new Horde rc) is :data:`UNCLASSIFIED`, never given a default class, so
it stays visible. The served share of servable requests is served / (served + capacity + service_fault)."""

NO_ELIGIBLE_WORKER_CLASS_BY_STAGE: Final[Mapping[str, str]] = {STAGE_SUBMIT: UNSERVABLE, STAGE_GRACE: CAPACITY}
"""``no_eligible_worker`` at ``submit`` is unservable (no online worker serves the request), at ``grace`` capacity
(the Horde accepted it, but no eligible worker took it within the grace)."""


def outcome_class_for(code: str | None, stage: str = "") -> str:
    """The ``outcome_class`` of a finished request from its code (None or ``""`` when served) and, for
    ``no_eligible_worker``, its stage; :data:`UNCLASSIFIED` for a code outside :data:`OUTCOME_CLASS_BY_CODE`.
    """
    if code == errors.NO_ELIGIBLE_WORKER:
        return NO_ELIGIBLE_WORKER_CLASS_BY_STAGE.get(stage, UNCLASSIFIED)
    return OUTCOME_CLASS_BY_CODE.get(code or SERVED_CODE, UNCLASSIFIED)


# --- instruments -------------------------------------------------------------------------------------------------

HISTOGRAM_BOUNDARIES: Final[Mapping[str, Sequence[float]]] = {
    "horde.oai.request.duration": BUCKETS_REQUEST_LIFECYCLE_SECONDS,
    "horde.oai.request.queue_wait": BUCKETS_REQUEST_LIFECYCLE_SECONDS,
    "horde.oai.request.first_content": BUCKETS_REQUEST_LIFECYCLE_SECONDS,
    "horde.oai.request.body_size": BUCKETS_BODY_BYTES,
    "horde.oai.request.max_tokens": BUCKETS_MAX_TOKENS,
    "horde.oai.stream.post_gap": BUCKETS_POST_GAP_SECONDS,
    "horde.oai.stream.pacing_lag": BUCKETS_POST_GAP_SECONDS,
    "horde.oai.stream.pieces_per_post": BUCKETS_PIECES_PER_POST,
    "horde.oai.completion.reasoning_share": BUCKETS_REASONING_SHARE,
    "horde.oai.horde.call.duration": BUCKETS_SECONDS,
}
"""Each histogram's bucket boundaries (reference: Histogram buckets); :func:`histogram_views` turns them into views."""


def histogram_views() -> list[View]:
    """One OpenTelemetry SDK ``View`` per histogram with its explicit bucket boundaries (needs opentelemetry-sdk)."""
    from opentelemetry.sdk.metrics.view import (  # noqa: PLC0415 - the SDK only when views are needed
        ExplicitBucketHistogramAggregation,
        View,
    )

    return [
        View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(boundaries=list(bounds)))
        for name, bounds in HISTOGRAM_BOUNDARIES.items()
    ]


@dataclass(frozen=True)
class FrontMetrics:
    """The front's instruments, made from one meter (see the module docstring for their attributes)."""

    requests_refused: Counter
    requests_errors: Counter
    stream_failures: Counter
    request_duration: Histogram
    completions: Counter
    cancels: Counter
    prompted_replies: Counter
    request_max_tokens: Histogram
    queue_wait: Histogram
    first_content: Histogram
    body_size: Histogram
    post_gap: Histogram
    pacing_lag: Histogram
    pieces_per_post: Histogram
    reasoning_share: Histogram
    horde_call_duration: Histogram
    address_budget_refusals: Counter
    horde_pool_full: Counter
    responses_not_stored: Counter

    @classmethod
    def from_meter(cls, meter: Meter) -> FrontMetrics:
        """Make every instrument on ``meter``."""
        return cls(
            requests_refused=meter.create_counter(
                "horde.oai.requests.refused", unit="{request}", description="Admission and validation refusals."
            ),
            requests_errors=meter.create_counter(
                "horde.oai.requests.errors",
                unit="{request}",
                description="Admitted requests that got an error status before any header.",
            ),
            stream_failures=meter.create_counter(
                "horde.oai.stream.failures", unit="{request}", description="Streams that ended with an error event."
            ),
            request_duration=meter.create_histogram(
                "horde.oai.request.duration", unit="s", description="Seconds from a request's arrival to its end."
            ),
            completions=meter.create_counter(
                "horde.oai.completions", unit="{completion}", description="Delivered completions."
            ),
            cancels=meter.create_counter(
                "horde.oai.cancels", unit="{attempt}", description="Cancel attempts, retries and shutdown included."
            ),
            prompted_replies=meter.create_counter(
                "horde.oai.text.prompted_replies",
                unit="{request}",
                description="Text path requests whose reply was read for tool calls or JSON, by repairs and outcome.",
            ),
            request_max_tokens=meter.create_histogram(
                "horde.oai.request.max_tokens",
                unit="{token}",
                description="The completion limit of each request the Horde accepted, recorded when it ends.",
            ),
            queue_wait=meter.create_histogram(
                "horde.oai.request.queue_wait",
                unit="s",
                description="Seconds from submit to the first read with a processing or finished generation.",
            ),
            first_content=meter.create_histogram(
                "horde.oai.request.first_content",
                unit="s",
                description="Seconds from submit to the first reply content sent to the client.",
            ),
            body_size=meter.create_histogram(
                "horde.oai.request.body_size", unit="By", description="Request body sizes."
            ),
            post_gap=meter.create_histogram(
                "horde.oai.stream.post_gap", unit="s", description="Seconds between a generation's progress posts."
            ),
            pacing_lag=meter.create_histogram(
                "horde.oai.stream.pacing_lag", unit="s", description="Seconds a paced piece went out after it was due."
            ),
            pieces_per_post=meter.create_histogram(
                "horde.oai.stream.pieces_per_post", unit="{piece}", description="Pieces per relayed delta."
            ),
            reasoning_share=meter.create_histogram(
                "horde.oai.completion.reasoning_share",
                unit="1",
                description="Reasoning characters over all reply characters of a delivered completion.",
            ),
            horde_call_duration=meter.create_histogram(
                "horde.oai.horde.call.duration", unit="s", description="Seconds of one native Horde call."
            ),
            address_budget_refusals=meter.create_counter(
                "horde.oai.address_budget.refusals",
                unit="{request}",
                description="Submits answered 429 while every user shares the front's address budget (no passkey).",
            ),
            horde_pool_full=meter.create_counter(
                "horde.oai.horde.pool_full",
                unit="{call}",
                description="Horde calls that found all HORDE_OAI_HORDE_CONNECTIONS busy and waited for one.",
            ),
            responses_not_stored=meter.create_counter(
                "horde.oai.responses.not_stored",
                unit="{response}",
                description="Responses asked to be stored (store true) that were not: too large, over the key's "
                "quota, or the cache failed.",
            ),
        )


_metrics: FrontMetrics | None = None


def configure_metrics(meter_provider: MeterProvider | None = None) -> FrontMetrics:
    """Make the process's instruments from ``meter_provider``, or the global meter provider when None."""
    global _metrics  # noqa: PLW0603 - one set of instruments per process, replaced only by a supplied provider
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    _metrics = FrontMetrics.from_meter(provider.get_meter(METER_NAME))
    return _metrics


def front_metrics() -> FrontMetrics:
    """The process's instruments, made from the global meter provider on first use."""
    return _metrics if _metrics is not None else configure_metrics()
