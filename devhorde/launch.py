"""Starting local processes on loopback for the tests and the benchmarks: free ports and readiness waits.

The tests (tests/conftest.py) and the benchmarks (bench/) start the devhorde, the front and sometimes a throwaway
``redis-server`` as real processes on 127.0.0.1; this module is what they share.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Final

import httpx


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


START_UP_TIMEOUT_SECONDS: Final[float] = 180.0
"""How long :func:`wait_http` waits for a process to answer: a guard against a hung start-up (an exit is seen at once),
not a timing. A start-up imports Django, pydantic and horde-sdk, about 3 s on an idle 2-core machine and 40 s and more
on a busy one (measured with load averages of 11 and 13)."""


def wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = START_UP_TIMEOUT_SECONDS) -> None:
    """Wait until ``url`` answers any HTTP status, asking every 0.1 s through one client (each ``httpx.get`` would
    make a client of its own, and a TLS context with it: bench/README.md, stop 45).

    Raises:
        RuntimeError: ``process`` exited first, or ``url`` did not answer within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    # No keep-alive: each probe is a new connection, as with httpx.get. The first answer of a busy process may take
    # seconds.
    with httpx.Client(timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the process for {url} exited with {process.returncode}")
            try:
                client.get(url)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def redis_server_args(port: int, directory: Path, dbfilename: str | None = None) -> list[str]:
    """The command line of a throwaway ``redis-server``: bound to 127.0.0.1:``port``, no scheduled snapshot and no
    append-only file, working in ``directory``; its dump file (written only by ``SAVE``, read back at start) is
    ``dbfilename`` there, Redis's ``dump.rdb`` when None.
    """
    args = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    args += ["--dir", str(directory)]
    if dbfilename is not None:
        args += ["--dbfilename", dbfilename]
    return args
