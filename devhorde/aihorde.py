"""The public AI Horde's own rules, as ``shared/spec/real-horde.md`` records them: its rate limits, the text API's
parameter bounds, upfront kudos and the answers that differ from the native contract.

A scenario with ``aihorde`` set (:class:`devhorde.scenario.AiHordeSpec`) uses these. The values are the server's
(AI-Horde ``fbd5ed46``); each constant names where the real server holds it. Nothing here is the server's code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, Final

from devhorde.answers import HordeReply, refusal
from devhorde.limits import ANONYMOUS_API_KEY

FLASK_NOT_FOUND_HTML: Final[str] = (
    "<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n<p>The requested URL was not "
    "found on the server. If you entered the URL manually please check your spelling and try again.</p>\n"
)
"""Flask's 404 page: what the real Horde answers on a route it lacks (``/v2/generate/chat/...``), without ``rc``."""

MIN_MAX_LENGTH: Final[int] = 16
MAX_MAX_LENGTH: Final[int] = 4096
"""``params.max_length`` bounds (``horde/apis/models/kobold_v2.py:197-200``): not horde-sdk's 16384."""
DEFAULT_MAX_LENGTH: Final[int] = 80
"""``params.max_length`` when a request sends none (``horde/validation.py``)."""
MIN_MAX_CONTEXT_LENGTH: Final[int] = 80
MAX_MAX_CONTEXT_LENGTH: Final[int] = 1048576
DEFAULT_MAX_CONTEXT_LENGTH: Final[int] = 2048
"""``params.max_context_length`` bounds and default."""
MAX_STOP_SEQUENCES: Final[int] = 128
MAX_STOP_SEQUENCE_CHARS: Final[int] = 2000
"""Stop sequence limits: distinct sequences and their total characters (``horde/validation.py:31-48``)."""

UPFRONT_BASE_TOKENS: Final[int] = 512
UPFRONT_TOKENS_PER_THREAD: Final[int] = 5
UPFRONT_QUEUE_FACTOR: Final[float] = 0.9
UPFRONT_MIN_TOKENS: Final[int] = 256
UPFRONT_MAX_TOKENS: Final[int] = 512
"""The free ceiling ``512 + 5 * threads - round(0.9 * queued)``, clamped to 256..512
(``horde/classes/kobold/waiting_prompt.py:97-118``)."""
KUDOS_PARAMETER_DIVISOR: Final[int] = 21
"""Upfront kudos are ``round(max_length * parameters_in_billions / 21, 2)`` (``horde/apis/v2/kobold.py:128-157``)."""

FAULTED_JOBS_TO_FAULT: Final[int] = 3
"""A request faults once this many of its jobs faulted (``horde/database/threads.py``: more than 2); each faulted job
before returns it to the queue and counts in ``restarted``."""

VALIDATION_FAILED_MESSAGE: Final[str] = "Input payload validation failed"
NO_WORKER_WARNING: Final[str] = (
    "Warning: No available workers can fulfill this request. It will expire in 20 minutes. Consider reducing the "
    "amount of tokens to generate."
)
"""The ``message`` of a 202 that no online worker can serve."""


def kudos_upfront_message(tokens: int, required: float) -> str:
    """The real ``KudosUpfront`` message."""
    return (
        f"Due to heavy demand, for requests over {tokens} tokens, the client needs to already have the required "
        f"kudos. This request requires {required} kudos to fulfil."
    )


def not_found_message(request_id: str, action: str, path: str) -> str:
    """The real ``RequestNotFound`` message of a text status read (``action`` ``Status``) or cancel (``Delete``),
    with the hint Flask appends.
    """
    return (
        f"Text Waiting Prompt ({action}) with ID '{request_id}' not found. You have requested this URI [{path}] but "
        "did you mean /api/v2/generate/text/status/<string:id> ?"
    )


def param_bound_errors(params: Mapping[str, Any]) -> dict[str, str]:
    """The payload validation of ``params.max_length`` and ``params.max_context_length`` (400 ``errors`` entries,
    such as ``{"params.max_length": "5000 is greater than the maximum of 4096"}``).
    """
    errors: dict[str, str] = {}
    for key, low, high in (
        ("max_length", MIN_MAX_LENGTH, MAX_MAX_LENGTH),
        ("max_context_length", MIN_MAX_CONTEXT_LENGTH, MAX_MAX_CONTEXT_LENGTH),
    ):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            if value > high:
                errors[f"params.{key}"] = f"{value} is greater than the maximum of {high}"
            elif value < low:
                errors[f"params.{key}"] = f"{value} is less than the minimum of {low}"
    return errors


def param_rule_refusal(params: Mapping[str, Any]) -> HordeReply | None:
    """The real server's rules over valid ``params``: ``TokenOverflow``, ``TooManyStopSequences`` and
    ``ExcessiveStopSequence`` (400 with ``rc``); None when they hold.
    """
    if int(params.get("max_context_length", DEFAULT_MAX_CONTEXT_LENGTH)) < int(
        params.get("max_length", DEFAULT_MAX_LENGTH)
    ):
        return refusal(400, "You cannot request more tokens than your context length.", "TokenOverflow")
    stops = {stop for stop in params.get("stop_sequence") or [] if isinstance(stop, str)}
    if len(stops) > MAX_STOP_SEQUENCES:
        return refusal(400, "Too many stop sequences specified (max allowed is 128).", "TooManyStopSequences")
    if sum(len(stop) for stop in stops) > MAX_STOP_SEQUENCE_CHARS:
        return refusal(
            400,
            "Your total stop sequence length exceeds the allowed limit (2000 chars).",
            "ExcessiveStopSequence",
        )
    return None


def free_token_ceiling(total_threads: int, queued: int, *, slow_workers: bool = True) -> int:
    """The most tokens a request may ask for without kudos held upfront: ``512 + 5 * threads - round(0.9 *
    queued)``, clamped to 256..512 (unclamped when the request refuses slow workers: it always needs kudos then).
    """
    ceiling = UPFRONT_BASE_TOKENS + UPFRONT_TOKENS_PER_THREAD * total_threads - round(UPFRONT_QUEUE_FACTOR * queued)
    if not slow_workers:
        return ceiling
    return max(UPFRONT_MIN_TOKENS, min(UPFRONT_MAX_TOKENS, ceiling))


KUDOS_HOLDER_KUDOS: Final[float] = 1_000_000.0
"""The ``kudos`` ``GET /v2/find_user`` reports for a key of ``kudos_api_keys`` (enough for any request's upfront
kudos); every other key is a new user's, with 0."""


def user_not_found_message(apikey: str) -> str:
    """The 404 ``UserNotFound`` message of ``GET /v2/find_user`` for an unknown key (``horde/exceptions.py``
    ``UserNotFound(apikey, "api_key")``).
    """
    return f"User with api_key '{apikey}' not found."


def performance_totals(*, text_workers: int, text_threads: int, queued_text_requests: int) -> dict[str, Any]:
    """``GET /v2/status/performance`` (``horde/apis/v2/base.py`` ``HordeLoad``, marshalled as
    ``response_model_horde_performance``): every field, the text ones from the simulated text workers counted online
    (``count_active_workers("text")``) and the waiting text requests; the image and interrogation ones 0.
    """
    return {
        "queued_requests": 0,
        "queued_text_requests": queued_text_requests,
        "worker_count": 0,
        "text_worker_count": text_workers,
        "thread_count": 0,
        "text_thread_count": text_threads,
        "queued_megapixelsteps": 0.0,
        "past_minute_megapixelsteps": 0.0,
        "queued_forms": 0.0,
        "interrogator_count": 0,
        "interrogator_thread_count": 0,
        "queued_tokens": 0.0,
        "past_minute_tokens": 0.0,
    }


def required_kudos(max_length: int, models: list[str], parameters: Mapping[str, int]) -> float:
    """The kudos a request must hold upfront: its ``max_length`` priced at the largest of its models."""
    multiplier = max((parameters.get(model, 1_000_000_000) / 1_000_000_000 for model in models), default=1.0)
    return round(max_length * multiplier / KUDOS_PARAMETER_DIVISOR, 2)


# ----------------------------------------------------------------- rate limits


@dataclass(frozen=True, slots=True)
class Limit:
    """One flask-limiter limit: ``amount`` per ``seconds``, counted per ``key``."""

    amount: int
    seconds: int
    key: str

    @property
    def message(self) -> str:
        """The 429 body's message, such as ``2 per 1 second``."""
        unit = {1: "second", 60: "minute", 3600: "hour"}[self.seconds]
        return f"{self.amount} per 1 {unit}"


SUBMIT_PER_IP_PER_SECOND: Final[int] = 2
SUBMIT_PER_KEY_PER_SECOND: Final[int] = 2
SUBMIT_ANONYMOUS_PER_SECOND: Final[int] = 60
SUBMIT_PER_IP_PER_MINUTE: Final[int] = 90
STATUS_PER_IP_PATH_PER_MINUTE: Final[int] = 60
DEFAULT_PER_IP_PER_MINUTE: Final[int] = 90
"""The limits (``horde/apis/limiter_api.py``, ``horde/apis/v2/kobold.py:47-57,236``, ``horde/limiter.py:14``)."""


def route_limits(
    method: str,
    path: str,
    *,
    client_address: str,
    limited_address: str,
    apikey: str | None,
) -> list[Limit]:
    """The limits of one request, in the order flask-limiter checks them (the shortest window first).

    ``limited_address`` is the client as the Horde's own key functions see it (``Proxied-For`` behind a known
    passkey); the default limit uses the connection's address (``client_address``), as flask-limiter's does.
    """
    scope = f"{limited_address}@{method}@{path}"
    if method == "POST" and path.endswith("/v2/generate/text/async"):
        key = apikey or ANONYMOUS_API_KEY
        per_key = SUBMIT_ANONYMOUS_PER_SECOND if key == ANONYMOUS_API_KEY else SUBMIT_PER_KEY_PER_SECOND
        hashed = sha256(key.encode()).hexdigest()
        return [
            Limit(SUBMIT_PER_IP_PER_SECOND, 1, scope),
            Limit(per_key, 1, f"{hashed}@{method}@{path}"),
            Limit(SUBMIT_PER_IP_PER_MINUTE, 60, scope),
        ]
    if "/v2/generate/text/status/" in path:
        return [Limit(STATUS_PER_IP_PATH_PER_MINUTE, 60, scope)]
    return [Limit(DEFAULT_PER_IP_PER_MINUTE, 60, f"{client_address}@{method}@{path}")]


class RateLimiter:
    """flask-limiter's fixed windows in memory: a window opens at a key's first hit and lasts the limit's period.

    Args:
        clock: The wall clock (epoch seconds; ``X-RateLimit-Reset`` is an epoch). Tests pass a fixed one.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._windows: dict[tuple[str, int, int], tuple[float, int]] = {}

    def hit(self, limits: list[Limit]) -> tuple[Limit | None, dict[str, str]]:
        """Count one request against ``limits`` (stopping at the first breach, as flask-limiter does) and return the
        breached limit (None when within every one) and the headers every answer carries: ``X-RateLimit-Limit``,
        ``-Remaining``, ``-Reset`` (of the breached limit, else the first) and ``Retry-After``.
        """
        now = self.clock()
        header: tuple[Limit, int, float] | None = None
        breached: Limit | None = None
        for limit in limits:
            slot = (limit.key, limit.amount, limit.seconds)
            start, count = self._windows.get(slot, (now, 0))
            if now >= start + limit.seconds:
                start, count = now, 0
            if count >= limit.amount:
                breached = limit
                header = (limit, 0, start)
                break
            count += 1
            self._windows[slot] = (start, count)
            if header is None:
                header = (limit, limit.amount - count, start)
        if header is None:
            return None, {}
        limit, remaining, started = header
        # the reset the real server reports: one second past the whole second its window opened in plus the period
        # (observed: a 60 s window opened at t reports int(t) + 61, a 1 s one int(t) + 2)
        reset = int(started) + limit.seconds + 1
        return breached, {
            "X-RateLimit-Limit": str(limit.amount),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(reset),
            "Retry-After": str(max(0, int(reset - now))),
        }

    def clear(self) -> None:
        """Forget every window."""
        self._windows.clear()
