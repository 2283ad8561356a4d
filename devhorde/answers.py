"""The simulated Horde's HTTP answers and the messages both of its APIs (chat and text generation) share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

CONTROL_INVALID_KEY_MESSAGE: Final[str] = "No user matching sent API Key. Have you remembered to register?"
MAINTENANCE_MESSAGE: Final[str] = "The Horde is in maintenance mode and accepts no new work. Please try again later."
NOT_FOUND_MESSAGE: Final[str] = "Request Not found"


@dataclass(frozen=True, slots=True)
class HordeReply:
    """An HTTP answer of the simulated Horde: status, JSON body and extra headers."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


def refusal(status: int, message: str, rc: str | None, **extra: Any) -> HordeReply:
    """A refusal: ``{"message"[, "rc"], **extra}`` with ``status``."""
    body: dict[str, Any] = {"message": message}
    if rc is not None:
        body["rc"] = rc
    body.update(extra)
    return HordeReply(status, body)


def format_number(value: float) -> str:
    """Format a kudos amount as the Horde's messages do: the shortest decimal that reads back as ``value``, never
    rounded and never with an exponent, an integral value without ``.0``: ``215``, ``1.5``, ``0.001``,
    ``1234567.5``.

    The front reads the ``ChatKudosCapExceeded`` message's numbers back with ``KUDOS_CAP_EXCESS_PATTERN``
    (``chat/contract.py``), which takes plain decimal text only (contract: Submit).
    """
    return format(Decimal(repr(float(value))).normalize(), "f")
