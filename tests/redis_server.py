"""The command line of a throwaway ``redis-server`` that the tests start on their own loopback port (the suite's
Redis at 127.0.0.1:6379 is left alone)."""

from __future__ import annotations

from pathlib import Path


def redis_server_args(port: int, directory: Path, dbfilename: str) -> list[str]:
    """``redis-server`` bound to 127.0.0.1:``port`` with no scheduled snapshot and no append-only file; its dump file
    (written only by ``SAVE``, read back at start) is ``directory/dbfilename``."""
    return [
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
        "--dbfilename",
        dbfilename,
    ]
