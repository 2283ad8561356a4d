"""``python -m oaifront.preflight``: what ``make run`` (bin/run) checks before it starts anything.

1. The front's settings, exactly as the front reads them (``django.setup()`` with ``oaifront.settings``): a value it
   cannot use ends the check with the front's one line, prefixed ``make run: ``, on standard error (status 1).
2. When ``HORDE_URL`` is set: the Horde answers ``GET {HORDE_URL}/v2/status/heartbeat``. When it does not, one line
   says so and why (status 1); a ``HORDE_URL`` without ``/api`` whose ``/api`` answers gets that suggestion.
3. When ``HORDE_OAI_REDIS_URL`` is set: Redis answers ``PING``. When it does not, the front still starts (it keeps
   trying that Redis, and meanwhile delivers streams whole and re-reads statuses on its timer): the first line of
   standard output carries the reason, which bin/run prints in its ``mode:`` line, and the status is 0.

When all pass, standard output is that line (empty when Redis answers or none is set), then uvicorn's options for
these settings, one per line (``oaifront.serve.uvicorn_options``), which bin/run passes to uvicorn: the settings are
read once, by this process, before anything starts.

``python -m oaifront.preflight listen HOST PORT PORT_VARIABLE [OWNER]`` checks one address a server of ``make run``
will listen on, as uvicorn binds it (:func:`listen_problem`): when it cannot, one line says what is wrong (status 1).

``python -m oaifront.preflight answers URL [SECONDS]`` waits until a server ``make run`` started answers (status 0), or
ends with status 1 after ``SECONDS`` (:data:`ANSWER_TIMEOUT_SECONDS`) or at once for a URL httpx cannot send to; it
prints nothing (bin/run says which server did not answer).

Arguments a subcommand cannot use (a ``PORT`` or ``SECONDS`` that is not a number) end in argparse's usage and error
lines (status 2).
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import httpx

HORDE_URL_VARIABLE: Final = "HORDE_URL"
REDIS_URL_VARIABLE: Final = "HORDE_OAI_REDIS_URL"
CHECK_TIMEOUT_SECONDS: Final = 3.0
"""How long each reachability check waits."""
PREFIX: Final = "make run: "
ANSWER_TIMEOUT_SECONDS: Final = 120.0
"""How long ``answers`` waits for a server: a start-up on a busy two-core machine can take 40 s and more."""
ANSWER_POLL_SECONDS: Final = 0.2
"""The pause between two requests of ``answers``."""


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


Resolver = Callable[..., Sequence[tuple[Any, ...]]]
"""``socket.getaddrinfo``'s shape: a test passes one that answers as a resolver would, without asking a DNS server."""


def listen_problem(
    host: str, port: int, port_variable: str, owner: str = "", resolve: Resolver = socket.getaddrinfo
) -> str | None:
    """One line saying why a server cannot listen on ``host``:``port``, or None: the socket is bound as uvicorn binds
    it (``SO_REUSEADDR``, IPv6 when ``host`` holds a colon; only a listener makes a port busy) and released at once.

    Each failure is named as what it is: ``HOST`` that does not resolve (a typo such as ``127.0.0.l``), an address
    that is not one of this machine's, a port in use (``port_variable`` says which setting moves it; ``owner``, such
    as ``the devhorde's``, whose port it is), or any other refusal with the system's reason.
    """
    where = f"port {port} ({owner})" if owner else f"port {port} on {host}"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        address = resolve(host, port, family, socket.SOCK_STREAM)[0][4]
    except socket.gaierror as failed:
        return (
            f"HOST={host} does not resolve to an address ({failed.strerror or failed}): set HOST to an address of "
            "this machine, such as 127.0.0.1"
        )
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as failed:
            why = failed.strerror or str(failed)
            if failed.errno == errno.EADDRNOTAVAIL:
                return (
                    f"HOST={host} is not an address of this machine ({why}): set HOST to one of its addresses, such "
                    "as 127.0.0.1"
                )
            if failed.errno == errno.EADDRINUSE:
                return f"{where} is in use ({why}): stop what holds it or set {port_variable}"
            return f"{where} cannot be listened on ({why}): set {port_variable} or HOST"
    return None


def listen_main(arguments: Sequence[str]) -> None:
    """``listen HOST PORT PORT_VARIABLE [OWNER]``: exit with :func:`listen_problem`'s line (status 1), or status 0;
    arguments it cannot use end in argparse's usage line (status 2).
    """
    parser = argparse.ArgumentParser(prog="python -m oaifront.preflight listen")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("port_variable")
    parser.add_argument("owner", nargs="*")
    parsed = parser.parse_args(arguments)
    problem = listen_problem(parsed.host, parsed.port, parsed.port_variable, " ".join(parsed.owner))
    if problem is not None:
        sys.exit(problem)


def answers(url: str, timeout: float = ANSWER_TIMEOUT_SECONDS) -> bool:
    """Whether ``GET url`` answers 2xx within about ``timeout`` seconds, asked every :data:`ANSWER_POLL_SECONDS`
    (httpx's 1 s bound on the connect and on each read, so the last request may end a little after the deadline);
    False at once for a URL httpx cannot send to (``httpx.InvalidURL``, ``httpx.UnsupportedProtocol``).
    """
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as client:
        while True:
            try:
                if client.get(url).is_success:
                    return True
            except (httpx.InvalidURL, httpx.UnsupportedProtocol):
                return False
            except httpx.HTTPError:
                pass
            if time.monotonic() + ANSWER_POLL_SECONDS > deadline:
                return False
            time.sleep(ANSWER_POLL_SECONDS)


def answers_main(arguments: Sequence[str]) -> None:
    """``answers URL [SECONDS]``: status 0 once ``URL`` answers (:func:`answers`), 1 when it did not in time;
    arguments it cannot use end in argparse's usage line (status 2).
    """
    parser = argparse.ArgumentParser(prog="python -m oaifront.preflight answers")
    parser.add_argument("url")
    parser.add_argument("seconds", nargs="?", type=float, default=ANSWER_TIMEOUT_SECONDS)
    parsed = parser.parse_args(arguments)
    sys.exit(0 if answers(parsed.url, parsed.seconds) else 1)


def main() -> None:
    """Run the three checks of the module docstring, the listen check (``listen ...``) or the wait (``answers
    ...``).
    """
    if sys.argv[1:2] == ["listen"]:
        listen_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["answers"]:
        answers_main(sys.argv[2:])
        return
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
    from oaifront.serve import uvicorn_options  # noqa: PLC0415 - after django.setup(), as chat.settings above

    redis_trouble = redis_problem(front.redis_url) if front.redis_url else None
    print(" ".join((redis_trouble or "").split()))  # one line, whatever Redis's error says
    print("\n".join(uvicorn_options(front)))


if __name__ == "__main__":
    main()
