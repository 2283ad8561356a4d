"""The edge lane: Debian's nginx (``bin/ensure-nginx``; ``make test`` runs it) with ``deploy/nginx.conf`` in front of
a real front and the devhorde, all on loopback (docs/edge.md).

:func:`render` turns the shipped configuration into one for a prefix directory under the test's tmp: the listen port
and the upstream's port from the OS, the pid, error log and temporary paths under the prefix. Every limit and timeout
is the shipped one. Without nginx every test here is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, LiveStack, free_port, running_stack

NGINX = next((path for path in ("/usr/sbin/nginx", "/usr/bin/nginx") if os.access(path, os.X_OK)), None) or (
    shutil.which("nginx")
)
SHIPPED = ROOT / "deploy" / "nginx.conf"
UPSTREAM = "server front:8000;"
LISTEN = "listen 8080 reuseport backlog=4096;"

PACE = {"time_to_first_token_seconds": 0.05, "tokens_per_second": 20, "post_interval_seconds": 0.05}
SCENARIO = {
    "name": "edge",
    "description": "A paced reply, so a stream lasts about two seconds (tests/edge).",
    "queue_position_delay_seconds": 0,
    "workers": [{"name": "paced-1", "model": "edge/paced-7b", "threads": 64, "reply_words": 30, **PACE}],
}
FRONT_ENV = {
    "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For",
    # The front's own caps out of the way: a 503 FrontAtCapacity in these tests is the edge's.
    "HORDE_OAI_MAX_IN_FLIGHT": "100000",
    "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": "100000",
}


def render(prefix: Path, port: int, front_port: int) -> str:
    """``deploy/nginx.conf`` for a prefix of its own: loopback ports, paths under ``prefix``."""
    text = SHIPPED.read_text()
    assert UPSTREAM in text and LISTEN in text, "deploy/nginx.conf changed its listen or upstream line"
    text = text.replace(UPSTREAM, f"server 127.0.0.1:{front_port};")
    text = text.replace(LISTEN, f"listen 127.0.0.1:{port} backlog=4096;")
    paths = "".join(
        f"    {name}_temp_path {prefix / name};\n" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace("http {\n", "http {\n" + paths, 1)
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"{user}pid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'} warn;\n{text}"


@dataclass
class Edge:
    """nginx running in front of a live stack."""

    url: str
    port: int
    prefix: Path
    stack: LiveStack

    def error_log(self) -> str:
        return (self.prefix / "error.log").read_text(errors="replace")


def start_nginx(prefix: Path, front_url: str) -> tuple[subprocess.Popen[bytes], int]:
    """nginx on a free loopback port in front of ``front_url``, in the foreground (``daemon off``)."""
    assert NGINX is not None
    for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
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


@pytest.fixture(scope="session")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    if NGINX is None:
        pytest.skip("no nginx (bin/ensure-nginx installs Debian's package when it can)")
    tmp = tmp_path_factory.mktemp("edge")
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    with running_stack(tmp, scenario=scenario, front_env=FRONT_ENV) as stack:
        prefix = tmp / "nginx"
        prefix.mkdir()
        process, port = start_nginx(prefix, stack.front_url)
        try:
            yield Edge(f"http://127.0.0.1:{port}", port, prefix, stack)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
