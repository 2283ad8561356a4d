"""Debian's nginx with ``deploy/nginx.conf`` in front of a running front, on loopback, for the edge's tests
(tests/edge) and benchmarks (``bench.front_cost --part burst --burst-edge``).

:func:`render` turns the shipped configuration into one for a prefix directory of its own: the listen port and the
upstream's port from the OS, the pid, error log and temporary paths under the prefix; every limit and timeout is the
shipped one. :func:`running_edge` starts nginx in the foreground and stops it on leaving.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
NGINX = next((path for path in ("/usr/sbin/nginx", "/usr/bin/nginx") if os.access(path, os.X_OK)), None) or (
    shutil.which("nginx")
)
SHIPPED = ROOT / "deploy" / "nginx.conf"
UPSTREAM = "server front:8000;"
LISTEN = "listen 8080 reuseport backlog=4096;"

TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def free_port() -> int:
    """A free loopback port, from the OS."""
    import socket  # noqa: PLC0415 - only here

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def render(prefix: Path, port: int, front_port: int) -> str:
    """``deploy/nginx.conf`` for a prefix of its own: loopback ports, paths under ``prefix``."""
    text = SHIPPED.read_text()
    if UPSTREAM not in text or LISTEN not in text:
        raise ValueError(f"deploy/nginx.conf no longer has {UPSTREAM!r} and {LISTEN!r}")
    text = text.replace(UPSTREAM, f"server 127.0.0.1:{front_port};")
    text = text.replace(LISTEN, f"listen 127.0.0.1:{port} backlog=4096;")
    paths = "".join(f"    {name}_temp_path {prefix / name};\n" for name in TEMP_PATHS)
    text = text.replace("http {\n", "http {\n" + paths, 1)
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"{user}pid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'} warn;\n{text}"


def start_nginx(prefix: Path, front_url: str) -> tuple[subprocess.Popen[bytes], int]:
    """nginx on a free loopback port in front of ``front_url``, in the foreground (``daemon off``)."""
    assert NGINX is not None
    for name in TEMP_PATHS:
        (prefix / name).mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = prefix / "nginx.conf"
    config.write_text(render(prefix, port, int(front_url.rsplit(":", 1)[1])))
    checked = subprocess.run(
        [NGINX, "-t", "-p", str(prefix), "-c", str(config)], check=False, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    log = (prefix / "nginx.out").open("wb")
    process = subprocess.Popen(
        [NGINX, "-p", str(prefix), "-c", str(config), "-g", "daemon off;"], stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, (prefix / "error.log").read_text(errors="replace")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process, port
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.terminate()
    raise AssertionError("nginx did not answer /healthz within 20 s")


@contextlib.contextmanager
def running_edge(prefix: Path, front_url: str) -> Iterator[int]:
    """nginx in front of ``front_url`` while inside; yields its port."""
    process, port = start_nginx(prefix, front_url)
    try:
        yield port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
