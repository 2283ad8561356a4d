"""What keeps pytest-xdist workers apart (``make test`` runs the suite in parallel): each worker's own Redis databases
(``tests/conftest.py``), and the real-Horde lane's files found where the harness's ``WORK`` puts them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from devhorde.launch import redis_server_args
from tests.conftest import (
    ROOT,
    SERIAL_REDIS_DATABASES,
    XDIST_WORKER,
    LiveStack,
    Process,
    forget_worker_lists,
    free_port,
    redis_databases,
)
from tests.fresh_clone import fresh_clone
from tests.loopback import port_block, ports_from_a_random_start, tls_contexts_counted
from tests.polling import eventually

IN_PROCESS_REDIS_TEST_DATABASES = {12, 13}
"""The databases tests/unit/test_delta_stream.py (12) and tests/devhorde (13) read, with keys unique to each test."""


def python_prints(code: str, env: dict[str, str]) -> str:
    """What ``code`` prints in a fresh interpreter at the checkout's root, with ``env`` over this environment."""
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return completed.stdout.strip()


def test_a_run_without_workers_keeps_databases_0_and_11() -> None:
    assert redis_databases(None) == SERIAL_REDIS_DATABASES == (0, 11)


def test_six_workers_have_a_pair_each_apart_from_every_other_user_of_the_redis() -> None:
    pairs = [redis_databases(f"gw{index}") for index in range(6)]
    assert pairs == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (14, 15)]
    used = [database for pair in pairs for database in pair]
    assert len(set(used)) == 12
    assert not set(used) & {*SERIAL_REDIS_DATABASES, *IN_PROCESS_REDIS_TEST_DATABASES}


def test_each_worker_chooses_ports_in_a_block_of_its_own_below_the_ephemeral_range() -> None:
    """Servers' ports come from per-process blocks (``tests/conftest.py``, ``port_block``): the six workers' and a run
    without workers' never meet, and none reaches the ports the OS hands out for ``bind(0)`` and client connections,
    so no other process takes a port between a test choosing it and its server binding it."""
    blocks = [port_block(f"gw{index}") for index in range(6)] + [port_block(None)]
    ports = [port for block in blocks for port in block]
    assert len(ports) == len(set(ports))
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert max(ports) < ephemeral_low
    assert min(ports) > 6379  # the suite's Redis; the real-Horde lane's servers sit at 15432-17003, below the blocks
    first = free_port()
    assert first in port_block(XDIST_WORKER)
    with socket.socket() as held:  # a port something holds is never handed out
        held.bind(("127.0.0.1", 0))
        held_port = held.getsockname()[1]
        assert free_port(iter([held_port, first])) == first
    rotated = ports_from_a_random_start(range(100, 110))
    assert sorted(rotated) == list(range(100, 110))
    assert rotated == [*range(rotated[0], 110), *range(100, rotated[0])]


def test_a_seventh_worker_is_refused_with_the_worker_count_to_use() -> None:
    with pytest.raises(pytest.UsageError) as refused:
        redis_databases("gw6")
    assert str(refused.value) == (
        "pytest-xdist worker gw6: Redis databases for 6 workers only (tests/conftest.py WORKER_REDIS_DATABASES); "
        "run with -n 6 or fewer"
    )


def test_the_suite_names_follow_the_worker_of_the_process() -> None:
    """``REDIS_URL`` and ``STREAM_REDIS_DB``, which integration tests import, are the worker's own."""
    code = "from tests.conftest import REDIS_URL, STREAM_REDIS_DB; print(REDIS_URL, STREAM_REDIS_DB)"
    assert python_prints(code, {"PYTEST_XDIST_WORKER": "gw2"}) == "redis://127.0.0.1:6379/5 6"
    assert python_prints(code, {"PYTEST_XDIST_WORKER": ""}) == "redis://127.0.0.1:6379/0 11"


def test_the_fidelity_tests_read_the_keys_of_the_harness_where_its_work_folder_is(tmp_path: Path) -> None:
    code = "from tests.realhorde.test_devhorde_fidelity import KEYS_ENV; print(KEYS_ENV)"
    assert python_prints(code, {"WORK": str(tmp_path)}) == str(tmp_path / "keys.env")


def test_files_marked_starts_first_are_collected_ahead_of_the_rest_and_the_suite_keeps_that_order() -> None:
    """``tests/conftest.py`` puts ``starts_first`` files first; ``make test`` keeps the order for the workers."""
    files = ["tests/unit/test_readme_shape.py", "tests/integration/test_make_run.py", "tests/unit/test_guides.py"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()
    order = list(dict.fromkeys(line.split("::")[0] for line in collected if "::" in line))
    assert order == [
        "tests/integration/test_make_run.py",
        "tests/unit/test_readme_shape.py",
        "tests/unit/test_guides.py",
    ]
    assert "--dist loadfile --no-loadscope-reorder" in (ROOT / "bin" / "test-suite").read_text()


def pytest_run(test_file: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``bin/pytest-run`` (``make test``'s and ``make check``'s runner) on ``test_file`` with this interpreter and
    ``env`` over this environment."""
    return subprocess.run(
        [str(ROOT / "bin" / "pytest-run"), "the runner's test", str(test_file), "-q"],
        env={**os.environ, **env, "PY": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_runner_caches_bytecode_even_where_the_environment_forbids_it(tmp_path: Path) -> None:
    """``bin/pytest-run`` (behind ``make test`` and ``make check``) unsets ``PYTHONDONTWRITEBYTECODE``: a module the
    run imports is compiled once into ``__pycache__``, and every later process of the run reads it from there."""
    (tmp_path / "imported_by_the_run.py").write_text("VALUE = 1\n")
    (tmp_path / "test_imports.py").write_text(
        f"import sys\n\nsys.path.insert(0, {str(tmp_path)!r})\n\n\n"
        "def test_imports() -> None:\n    import imported_by_the_run\n\n    assert imported_by_the_run.VALUE == 1\n"
    )
    completed = pytest_run(tmp_path / "test_imports.py", {"PYTHONDONTWRITEBYTECODE": "1"})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    cached = sorted(path.name for path in (tmp_path / "__pycache__").glob("imported_by_the_run.*"))
    assert cached == [f"imported_by_the_run.{sys.implementation.cache_tag}.pyc"]


def test_the_runner_fails_a_selection_that_collects_nothing(tmp_path: Path) -> None:
    """pytest's exit 5 (nothing collected) is a failure of ``make test`` and ``make check``, said in one line."""
    (tmp_path / "test_nothing.py").write_text("VALUE = 1\n")
    completed = pytest_run(tmp_path / "test_nothing.py", {})
    assert completed.returncode == 5
    assert completed.stdout.splitlines()[-1] == (
        f"the runner's test: pytest collected no test (exit 5): the selection ({tmp_path / 'test_nothing.py'} -q) "
        "matched nothing; that is a failure"
    )


def test_a_lint_finding_fails_make_test_before_the_main_suite(tmp_path: Path) -> None:
    """``bin/test-suite`` (``make test``'s run) runs ``make lint`` after starting the real-Horde lane and before the
    main suite: a finding ends the run with status 1 and one line saying so, and no pytest starts. The clone uses
    this checkout's ``.venv``; its lane is off (``REALHORDE=off``)."""
    clone = fresh_clone(tmp_path / "clone")
    (clone / ".venv").symlink_to(ROOT / ".venv")
    # Older than this .venv's install stamp, so make's install step keeps the venv as it is (bin/ensure-venv).
    for installed in [*clone.glob("requirements*.txt"), clone / "bin" / "find-python"]:
        os.utime(installed, (1, 1))
    (clone / "lint_finding.py").write_text("import os\n")  # an unused import: ruff F401
    run = subprocess.run(
        [str(clone / "bin" / "test-suite")],
        cwd=clone,
        env={**os.environ, "REALHORDE": "off", "TEST_WORKERS": "2", "PYTEST_ARGS": "-k no_test_has_this_name"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 1
    assert "F401" in run.stdout
    assert run.stdout.splitlines()[-1] == "make test: make lint failed; the main suite did not run"
    assert "pytest-xdist workers" not in run.stdout
    assert "Installing" not in run.stdout


FAKE_HARNESS_UP = """#!/usr/bin/env bash
touch "$(dirname "$0")/up-started"
for _ in $(seq 1200); do [ -e "$(dirname "$0")/go-on" ] && break; sleep 0.05; done
touch "$(dirname "$0")/up-done"
"""
"""A harness ``up`` that says it started, then waits (60 s at most) for the test's word before it finishes."""


def test_a_stop_during_the_lanes_up_lets_up_finish_then_runs_down(tmp_path: Path) -> None:
    """``bin/realhorde-lane`` runs the harness's ``up`` in a session of its own: a TERM to the lane's process group
    (what ``bin/test-suite`` sends on a lint finding or a Ctrl-C) while ``up`` runs never cuts ``up`` off; once ``up``
    is done, the lane runs ``down`` (the Horde it started), says so, and exits 143 without running a test. A fake
    harness (``REALHORDE_DIR``) and a heartbeat port where nothing listens (``RH_PORT``)."""
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "up").write_text(FAKE_HARNESS_UP)
    (harness / "down").write_text('#!/usr/bin/env bash\ntouch "$(dirname "$0")/down-ran"\n')
    for script in ("up", "down"):
        (harness / script).chmod(0o755)
    lane = subprocess.Popen(
        [str(ROOT / "bin" / "realhorde-lane")],
        env={**os.environ, "REALHORDE_DIR": str(harness), "RH_PORT": str(free_port())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as bin/test-suite starts it (set -m)
    )
    try:
        eventually((harness / "up-started").exists, what="the fake harness's up")
        os.killpg(lane.pid, signal.SIGTERM)
        (harness / "go-on").touch()
        output, _ = lane.communicate(timeout=120)
    finally:
        (harness / "go-on").touch()  # the fake up, in a session of its own, ends too whatever failed
        if lane.poll() is None:
            os.killpg(lane.pid, signal.SIGKILL)
            lane.wait()
    assert lane.returncode == 143
    assert output.splitlines()[-2:] == [
        "realhorde lane: stopped",
        f"realhorde lane: stopping the Horde it started ({harness}/down)",
    ]
    assert (harness / "up-done").exists()
    assert (harness / "down-ran").exists()
    assert "pytest exit" not in output


def redis_answers(client: redis.Redis) -> bool:
    """Whether ``client``'s Redis answers ``PING`` now."""
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_a_worker_forgets_the_worker_lists_an_earlier_run_left_before_its_servers_start(tmp_path: Path) -> None:
    """``earlier_runs_worker_lists_forgotten`` (a session fixture of every pytest-xdist worker) deletes the fronts'
    worker-list and uptime keys of any Horde URL from the worker's cache database (``forget_worker_lists``), as
    django-redis stores them, and nothing else: a throwaway ``redis-server`` here."""
    port = free_port()
    server = subprocess.Popen(redis_server_args(port, tmp_path), stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(host="127.0.0.1", port=port, db=3)
        eventually(lambda: redis_answers(client), what="the throwaway redis-server")
        url = "http://127.0.0.1:27504/api"
        for key in (f":1:text-workers:{url}", f":1:text-worker-uptimes:{url}", ":1:pacing:127.0.0.1", "other"):
            client.set(key, "1")
        forget_worker_lists(port, 3)
        assert sorted(client.keys()) == [b":1:pacing:127.0.0.1", b"other"]
        forget_worker_lists(free_port(), 3)  # no Redis there: nothing, no error
    finally:
        server.terminate()
        server.wait(10)


class RequestsListing(BaseHTTPRequestHandler):
    """A devhorde's ``GET /_devhorde/requests`` with nothing in it."""

    def do_GET(self) -> None:
        body = b'{"requests": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent."""


def test_a_stacks_control_calls_in_a_polling_loop_make_no_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LiveStack``'s control calls, which tests make in polling loops, go through ``tests.loopback.CONTROL_CLIENT``:
    none makes a client and a TLS context of its own, as ``httpx.get`` does at every call."""
    made = tls_contexts_counted(monkeypatch)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), RequestsListing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        stack = LiveStack(cast("Process", None), f"{url}/api", cast("Process", None), url)
        assert [stack.native_requests() for _ in range(5)] == [[]] * 5
    finally:
        server.shutdown()
        server.server_close()
    assert made == []
