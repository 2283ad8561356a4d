"""The loopback ports and the HTTP client of the suite's own calls, in a module of their own: pytest imports
``tests/conftest.py`` as ``conftest`` and the test files import it again as ``tests.conftest``, and each copy would
keep its own port sequence (two sequences could hand out the same port) and its own client."""

from __future__ import annotations

import os
import random
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

PORT_BLOCK_START = 20000
"""The first port of the tests' port blocks: below Linux's ephemeral range (``ip_local_port_range``, 32768 and up), so
no client connection's local port and no ``bind(("127.0.0.1", 0))`` of another process lands in a block."""
PORTS_PER_BLOCK = 1500
"""The ports of one block: a process of the suite takes a few hundred at most."""
WORKER_BLOCKS = 6
"""The workers' blocks, one per pytest-xdist worker (``make test`` runs six at most: tests/conftest.py); a run without
workers takes the next."""


def port_block(worker: str | None) -> range:
    """The ports of the pytest-xdist worker named ``worker`` (``gw3``), or of a run without workers (``None``: the
    seventh block, after the six workers'): each process of the suite chooses its servers' ports in its own block, so
    two workers never choose the same port in the moment between choosing it and their server binding it (the OS's
    free port of one worker could be the other's, and a test then spoke to the other worker's server)."""
    index = int(worker.removeprefix("gw")) if worker else WORKER_BLOCKS
    start = PORT_BLOCK_START + index * PORTS_PER_BLOCK
    return range(start, start + PORTS_PER_BLOCK)


def ports_from_a_random_start(block: range) -> list[int]:
    """``block``'s ports from a random one on, wrapping around: one run after another seldom serves on the same
    ports, whose URLs would meet what the earlier run's servers left in a shared Redis (a front keys its worker list
    and the uptimes it saw by the Horde's URL)."""
    start = random.randrange(len(block))
    return [*block[start:], *block[:start]]


UNUSED_PORTS: Iterator[int] = iter(ports_from_a_random_start(port_block(os.environ.get("PYTEST_XDIST_WORKER"))))
"""This process's ports not handed out yet, in the order :func:`free_port` hands them out."""


def free_port(ports: Iterator[int] = UNUSED_PORTS) -> int:
    """A TCP port on 127.0.0.1 for a server a test starts: the next of ``ports`` (this process's :func:`port_block`)
    that nothing holds now (a port held or left in ``TIME_WAIT`` by an earlier run is skipped). Raises
    :class:`RuntimeError` when they are used up."""
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"every port of this process's block is taken ({PORTS_PER_BLOCK} from {PORT_BLOCK_START})")


CONTROL_CLIENT = httpx.Client(timeout=5, limits=httpx.Limits(max_keepalive_connections=0))
"""The client of the calls to a devhorde's control and status routes that tests make in polling loops
(:class:`LiveStack`'s, ``tests/integration/test_relay_live.py``'s):
``httpx.get`` and its kind make a client, and with it a TLS context, per call (bench/README.md, stop 45). Like
them it opens a connection per request (no keep-alive a server could close under it); httpx documents a client as
shareable between threads."""


def tls_contexts_counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Count the TLS contexts made from now on (``ssl.create_default_context``, which each new httpx client calls): the
    returned list gets the arguments of each, until ``monkeypatch`` undoes it."""
    made: list[tuple[Any, ...]] = []
    make_context = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(args)
        return make_context(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    return made
