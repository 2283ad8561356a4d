"""Request rules shared with the native route (reference: Value and contract validation)."""

from __future__ import annotations

import re
from typing import Final

KUDOS_CAP_EXCESS_PATTERN: Final[re.Pattern[str]] = re.compile(
    r"kudos estimate at current pricing is (?P<kudos_estimate>\d+(?:\.\d+)?), "
    r"above its horde\.max_kudos of (?P<max_kudos>\d+(?:\.\d+)?)\."
)
"""Reads the two numbers of the native ``ChatKudosCapExceeded`` message (reference: Kudos cap), such as "The
request's kudos estimate at current pricing is 215, above its horde.max_kudos of 1. The estimate assumes the full
max_tokens is generated.": groups ``kudos_estimate`` and ``max_kudos``, decimal text without a sign or exponent.
The native error body holds only the message and the rc, so the front reads the values from the message."""
