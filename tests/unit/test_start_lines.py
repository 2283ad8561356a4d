"""What ``make run`` and the front say at start when an address is wrong (issue 38, finding 6): a ``HOST`` that does
not resolve or is not this machine's is said as such, never as "port in use" (``oaifront.preflight.listen_problem``);
a Redis that does not answer is said to be unreachable in the front's start line, with its address and no password
(``chat.asgi.redis_problem``, ``FrontSettings.describe_redis``)."""

from __future__ import annotations

import asyncio
import gc
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings
from loguru import logger

from chat.asgi import redis_problem, serve_lifespan
from chat.settings import FrontSettings, front_settings
from oaifront.preflight import answers, listen_problem
from tests.conftest import ROOT, free_port

NOT_THIS_MACHINE = "192.0.2.1"
"""TEST-NET-1 (RFC 5737): an address no machine of the test holds; binding it fails at once, sending nothing."""


def unknown_name(host: str, port: int, *args: Any) -> list[tuple[Any, ...]]:
    """A resolver that answers as glibc's does for a name no source knows (``127.0.0.l``), without asking DNS."""
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_host_typo_is_said_not_to_resolve() -> None:
    assert listen_problem("127.0.0.l", 8000, "PORT", resolve=unknown_name) == (
        "HOST=127.0.0.l does not resolve to an address (Name or service not known): set HOST to an address of this "
        "machine, such as 127.0.0.1"
    )


def test_an_address_of_another_machine_is_said_to_be_one() -> None:
    assert listen_problem(NOT_THIS_MACHINE, free_port(), "PORT") == (
        f"HOST={NOT_THIS_MACHINE} is not an address of this machine (Cannot assign requested address): set HOST to "
        "one of its addresses, such as 127.0.0.1"
    )


def test_a_port_in_use_is_said_to_be_in_use_and_whose() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert listen_problem("127.0.0.1", port, "PORT") == (
            f"port {port} on 127.0.0.1 is in use (Address already in use): stop what holds it or set PORT"
        )
        assert listen_problem("127.0.0.1", port, "DEVHORDE_PORT", "the devhorde's") == (
            f"port {port} (the devhorde's) is in use (Address already in use): stop what holds it or set DEVHORDE_PORT"
        )


def test_a_free_address_has_no_problem() -> None:
    assert listen_problem("127.0.0.1", free_port(), "PORT") is None
    assert listen_problem("localhost", free_port(), "PORT") is None  # a name /etc/hosts knows


def preflight(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``python -m oaifront.preflight ARGUMENTS`` at the checkout's root, as bin/run runs it."""
    return subprocess.run(
        [sys.executable, "-m", "oaifront.preflight", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_m_oaifront_preflight_listen_says_it_in_one_line() -> None:
    """The command bin/run runs before it starts anything: one line on standard error, status 1."""
    said = preflight("listen", NOT_THIS_MACHINE, "8000", "PORT")
    assert (said.returncode, said.stdout, said.stderr) == (
        1,
        "",
        f"HOST={NOT_THIS_MACHINE} is not an address of this machine (Cannot assign requested address): set HOST to "
        "one of its addresses, such as 127.0.0.1\n",
    )


@contextmanager
def answering(status: int) -> Iterator[str]:
    """A loopback HTTP server answering every GET with ``status``; yields its URL."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_make_runs_wait_ends_when_the_server_answers_2xx_and_not_before() -> None:
    """``oaifront.preflight.answers``, what bin/run waits on: a 2xx ends the wait; a 503 or no listener is waited on
    until the bound, then it is False."""
    with answering(200) as url:
        assert answers(url, timeout=60) is True
    with answering(503) as url:
        assert answers(url, timeout=0.5) is False
    assert answers(f"http://127.0.0.1:{free_port()}/healthz", timeout=0.5) is False


def test_make_runs_wait_is_false_for_a_url_httpx_cannot_send_to() -> None:
    """An IPv6 host outside brackets (bin/run brackets ``HOST=::1``) or another scheme: False, no traceback."""
    assert answers("http://::1:8000/healthz", timeout=60) is False
    assert answers("ftp://127.0.0.1/healthz", timeout=60) is False


def test_python_m_oaifront_preflight_answers_says_it_by_its_status_alone() -> None:
    """bin/run says which server did not answer (``make run: the front did not answer on URL``); the wait itself
    prints nothing."""
    waited = preflight("answers", f"http://127.0.0.1:{free_port()}/healthz", "0.5")
    assert (waited.returncode, waited.stdout, waited.stderr) == (1, "", "")
    with answering(204) as url:
        waited = preflight("answers", url)
    assert (waited.returncode, waited.stdout, waited.stderr) == (0, "", "")


@pytest.mark.parametrize(
    ("arguments", "last_line"),
    [
        (
            ("answers", "http://127.0.0.1:8000/healthz", "abc"),
            "python -m oaifront.preflight answers: error: argument seconds: invalid float value: 'abc'",
        ),
        (
            ("listen", "127.0.0.1", "abc", "PORT"),
            "python -m oaifront.preflight listen: error: argument port: invalid int value: 'abc'",
        ),
    ],
)
def test_preflight_arguments_it_cannot_use_end_in_a_usage_line(arguments: tuple[str, ...], last_line: str) -> None:
    """A subcommand's argument that is not a number: argparse's usage and error lines, status 2, no traceback (a
    ValueError before)."""
    said = preflight(*arguments)
    assert (said.returncode, said.stdout, said.stderr.splitlines()[-1]) == (2, "", last_line)
    assert said.stderr.startswith(f"usage: python -m oaifront.preflight {arguments[0]} [-h]")
    assert "Traceback" not in said.stderr


@pytest.mark.asyncio
async def test_redis_that_does_not_answer_is_said_unreachable_without_its_password() -> None:
    port = free_port()
    assert await redis_problem(f"redis://:s3cret@127.0.0.1:{port}/0") == "Connection refused"
    settings = FrontSettings(redis_url=f"redis://:s3cret@127.0.0.1:{port}/2")
    assert settings.describe_redis("Connection refused") == (
        f"Redis: redis://:***@127.0.0.1:{port}/2 is unreachable (Connection refused): until it answers, streams are "
        "delivered whole and the waiter re-reads on its timer; progress streams read on database 2 (the URL's "
        "database)"
    )


@pytest.mark.asyncio
async def test_the_start_line_says_redis_is_unreachable() -> None:
    """The lifespan's start line, as uvicorn's start logs it, for a Redis where nothing listens."""
    port = free_port()
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(message: Any) -> None:
        return None

    await messages.put({"type": "lifespan.startup"})
    await messages.put({"type": "lifespan.shutdown"})
    front_settings.cache_clear()
    try:
        with override_settings(HORDE_OAI=FrontSettings(redis_url=f"redis://:s3cret@127.0.0.1:{port}/0")):
            await serve_lifespan(messages.get, send)
    finally:
        front_settings.cache_clear()
        logger.remove(sink)
        gc.unfreeze()
    redis_lines = [line for line in lines if line.startswith("Redis: ")]
    assert redis_lines == [
        f"Redis: redis://:***@127.0.0.1:{port}/0 is unreachable (Connection refused): until it answers, streams are "
        "delivered whole and the waiter re-reads on its timer; progress streams read on database 0 (the URL's "
        "database)"
    ]
    assert not [line for line in lines if "s3cret" in line]
