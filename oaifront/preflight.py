"""``python -m oaifront.preflight``: what ``make run`` (bin/run) checks before it starts anything.

1. The front's settings, exactly as the front reads them (``django.setup()`` with ``oaifront.settings``): a value it
   cannot use ends the check with the front's one line, prefixed ``make run: ``, on standard error (status 1).
2. When ``HORDE_URL`` is set: the Horde answers ``GET {HORDE_URL}/v2/status/heartbeat``. When it does not, one line
   says so and why (status 1); a ``HORDE_URL`` without ``/api`` whose ``/api`` answers gets that suggestion.
3. When ``HORDE_OAI_REDIS_URL`` is set: Redis answers ``PING``. When it does not, the front still starts (it keeps
   trying that Redis, and meanwhile delivers streams whole and re-reads statuses on its timer): standard output
   carries the reason, which bin/run prints in its ``mode:`` line, and the status is 0.
"""

from __future__ import annotations

import os
import sys
from typing import Final

import httpx

HORDE_URL_VARIABLE: Final = "HORDE_URL"
REDIS_URL_VARIABLE: Final = "HORDE_OAI_REDIS_URL"
CHECK_TIMEOUT_SECONDS: Final = 3.0
"""How long each reachability check waits."""
PREFIX: Final = "make run: "


def _heartbeat_problem(api_root: str) -> str | None:
    """Why ``GET {api_root}/v2/status/heartbeat`` does not answer 2xx, or None."""
    heartbeat = f"{api_root}/v2/status/heartbeat"
    try:
        response = httpx.get(heartbeat, timeout=CHECK_TIMEOUT_SECONDS)
    except httpx.HTTPError as failed:
        return f"GET {heartbeat}: {failed or type(failed).__name__}"
    if response.is_success:
        return None
    return f"GET {heartbeat} answered {response.status_code} {response.reason_phrase}"


def horde_problem(api_root: str) -> str | None:
    """One line saying the Horde does not answer at ``api_root`` (and the ``/api`` root when that one does), or
    None.
    """
    why = _heartbeat_problem(api_root)
    if why is None:
        return None
    problem = f"the Horde does not answer at {HORDE_URL_VARIABLE}={api_root} ({why})"
    if not api_root.endswith("/api"):
        suggested = f"{api_root}/api"
        if _heartbeat_problem(suggested) is None:
            return f"{problem}; it answers at {suggested}: set {HORDE_URL_VARIABLE}={suggested}"
        return f"{problem}; the Horde's API root usually ends in /api, such as https://aihorde.net/api"
    return f"{problem}; start the Horde or set {HORDE_URL_VARIABLE} to where it answers"


def redis_problem(url: str) -> str | None:
    """Why Redis at ``url`` does not answer ``PING``, or None."""
    from redis import Redis  # noqa: PLC0415 - after django.setup(), as the front imports it
    from redis.exceptions import RedisError  # noqa: PLC0415 - likewise

    client = Redis.from_url(url, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, socket_timeout=CHECK_TIMEOUT_SECONDS)
    try:
        client.ping()
    except (RedisError, OSError) as failed:
        return str(failed) or type(failed).__name__
    finally:
        client.close()
    return None


def main() -> None:
    """Run the three checks of the module docstring."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    import django  # noqa: PLC0415 - after the settings module is chosen

    from oaifront.startup import one_line_configuration_errors  # noqa: PLC0415 - likewise

    with one_line_configuration_errors(PREFIX):
        django.setup(set_prefix=False)
    from chat.settings import front_settings  # noqa: PLC0415 - after django.setup()

    front = front_settings()
    if os.environ.get(HORDE_URL_VARIABLE):
        problem = horde_problem(front.horde_url)
        if problem is not None:
            sys.exit(PREFIX + problem)
    if front.redis_url:
        problem = redis_problem(front.redis_url)
        if problem is not None:
            print(problem)


if __name__ == "__main__":
    main()
