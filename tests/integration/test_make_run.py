"""``make run`` as a newcomer meets it: ``bin/run`` (what ``make run`` execs) started as a real process on free ports.

Each test runs the script with ``PORT`` and ``DEVHORDE_PORT`` on free loopback ports and the devhorde's ``default``
scenario (as ``make run`` does), waits for its ``ready:`` line, calls the front with the official ``openai`` SDK and
stops the script with SIGTERM. The Redis of 127.0.0.1:6379 is never touched: the default mode is exercised with
``REDIS_PORT`` on a free port, where nothing answers, so ``bin/run`` starts (and must stop) a Redis of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
import redis

from tests.conftest import ROOT, free_port, start_devhorde

pytestmark = [pytest.mark.integration, pytest.mark.starts_first]

READY_TIMEOUT_SECONDS = 120.0
"""How long the script may take to print ``ready:`` (two Python processes importing Django and horde-sdk on a busy
two-core machine, and possibly starting a Redis)."""

STOP_TIMEOUT_SECONDS = 30.0
"""How long the script may take to stop everything after SIGTERM (uvicorn's graceful shutdown is 5 s)."""

PROMPT = [{"role": "user", "content": "Tell me about lighthouses."}]

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed (make test installs it)"
)


@dataclass
class MakeRun:
    """A running ``bin/run`` and its combined output."""

    popen: subprocess.Popen[bytes]
    log_path: Path
    port: int

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> str:
        """Wait for the ``ready:`` line; return the output so far. Fails when the script exits first."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            output = self.output()
            if "\nready: " in "\n" + output:
                return output
            if self.popen.poll() is not None:
                pytest.fail(f"bin/run exited with {self.popen.returncode} before ready:\n{output}")
            time.sleep(0.2)
        pytest.fail(f"bin/run printed no ready line within {READY_TIMEOUT_SECONDS} s:\n{self.output()}")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="0000000000", max_retries=0)


def make_run_environment(port: int, env: dict[str, str]) -> dict[str, str]:
    """``PORT``, a free ``DEVHORDE_PORT`` and ``env`` over a copy of this environment without its Horde, Redis and
    scenario settings."""
    full_env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"HORDE_URL", "HORDE_OAI_REDIS_URL", "HORDE_OAI_STREAM_REDIS_DB", "REDIS", "DEVHORDE_SCENARIO"}
    }
    return full_env | {"PORT": str(port), "DEVHORDE_PORT": str(free_port()), "PYTHONUNBUFFERED": "1", **env}


def start_make_run(tmp_path: Path, env: dict[str, str]) -> MakeRun:
    """Start ``bin/run`` with free ports and ``env`` (:func:`make_run_environment`)."""
    port = free_port()
    log_path = tmp_path / f"make-run-{port}.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            ["bin/run"], cwd=ROOT, env=make_run_environment(port, env), stdout=log, stderr=subprocess.STDOUT
        )
    return MakeRun(popen, log_path, port)


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[list[MakeRun]]:
    """The runs a test starts, stopped at its end whatever happened."""
    runs: list[MakeRun] = []
    try:
        yield runs
    finally:
        for run in runs:
            run.stop()


def content_chunks(client: openai.OpenAI) -> list[str]:
    """The content pieces of one streamed completion of the README's example."""
    stream = client.chat.completions.create(model="devhorde/reasoner-8b", messages=PROMPT, max_tokens=64, stream=True)
    return [chunk.choices[0].delta.content for chunk in stream if chunk.choices and chunk.choices[0].delta.content]


def redis_answers(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping())
    except redis.exceptions.ConnectionError:
        return False


def mode_and_ready_lines(output: str) -> tuple[str, str]:
    lines = output.splitlines()
    mode = [line for line in lines if line.startswith("mode: ")]
    ready = [line for line in lines if line.startswith("ready: ")]
    assert len(mode) == 1 and len(ready) == 1, output
    assert lines.index(mode[0]) < lines.index(ready[0])
    return mode[0], ready[0]


@needs_redis_server
def test_make_run_starts_a_redis_when_none_answers_and_streams_live(tmp_path: Path, make_run: list[MakeRun]) -> None:
    """The default mode: no HORDE_OAI_REDIS_URL and nothing on REDIS_PORT, so bin/run starts a Redis, passes it to the
    front and the devhorde, and the first stream arrives live in several paced content chunks. The Redis stops with
    the script."""
    redis_port = free_port()
    run = start_make_run(tmp_path, {"REDIS_PORT": str(redis_port)})
    make_run.append(run)
    output = run.wait_ready()
    mode, ready = mode_and_ready_lines(output)
    assert f"Starting a Redis on 127.0.0.1:{redis_port}" in output
    assert mode == (
        f"mode: live streaming through Redis redis://127.0.0.1:{redis_port}/0 (progress streams on database 0)"
    )
    assert ready.startswith(f"ready: front on http://127.0.0.1:{run.port}/v1 (Horde: http://127.0.0.1:")
    assert (
        f"Redis: redis://127.0.0.1:{redis_port}/0; progress streams read on database 0 (the URL's database)" in output
    )

    chunks = content_chunks(run.client)
    assert len(chunks) > 1, chunks
    assert redis_answers(redis_port)

    assert run.stop() != 0  # stopped by a signal: 130, as after Ctrl-C
    assert not redis_answers(redis_port), "the Redis bin/run started outlived it"


@needs_redis_server
def test_make_run_uses_horde_oai_redis_url_hides_its_password_and_follows_its_database(
    tmp_path: Path, make_run: list[MakeRun]
) -> None:
    """HORDE_OAI_REDIS_URL names a Redis with a password and database 3: bin/run starts none, the banner and the front's
    log line show the URL without the password, and both sides use database 3 for the progress streams (the devhorde
    writes there, the front reads there: the stream is live)."""
    redis_port = free_port()
    workdir = tempfile.mkdtemp(dir=tmp_path)
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--requirepass", "s3cret", "--save", ""],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", redis_port)) == 0:
                    break
            time.sleep(0.1)
        run = start_make_run(tmp_path, {"HORDE_OAI_REDIS_URL": f"redis://:s3cret@127.0.0.1:{redis_port}/3"})
        make_run.append(run)
        output = run.wait_ready()
        mode, _ = mode_and_ready_lines(output)
        assert mode == (
            f"mode: live streaming through Redis redis://:***@127.0.0.1:{redis_port}/3 (progress streams on database 3)"
        )
        assert f"Redis: redis://:***@127.0.0.1:{redis_port}/3; progress streams read on database 3" in output
        assert "Starting a Redis" not in output

        chunks = content_chunks(run.client)
        assert len(chunks) > 1, chunks
        written = redis.Redis(host="127.0.0.1", port=redis_port, password="s3cret", db=3)
        assert written.keys("horde:chat:stream:*"), "the devhorde wrote no progress stream on database 3"
        run.stop()
        assert "s3cret" not in run.output()
    finally:
        server.terminate()
        server.wait(10)


def test_make_run_with_redis_off_delivers_streams_whole(tmp_path: Path, make_run: list[MakeRun]) -> None:
    """REDIS=off keeps the no-Redis mode, and the banner says so: the reply arrives as one content chunk."""
    run = start_make_run(tmp_path, {"REDIS": "off", "HORDE_OAI_REDIS_URL": "redis://127.0.0.1:6379/0"})
    make_run.append(run)
    output = run.wait_ready()
    mode, _ = mode_and_ready_lines(output)
    assert (
        mode == "mode: no Redis: every stream is delivered whole (REDIS=off, or HORDE_URL without HORDE_OAI_REDIS_URL)"
    )
    assert "Redis: none (HORDE_OAI_REDIS_URL unset)" in output
    assert len(content_chunks(run.client)) == 1


def start_in_a_terminal_group(tmp_path: Path, devhorde_port: int) -> MakeRun:
    """``bin/run`` (``REDIS=off``) as a terminal starts a foreground job: a process group of its own, SIGINT at its
    default, so :func:`os.killpg` with SIGINT is a Ctrl-C."""
    port = free_port()
    env = make_run_environment(port, {"DEVHORDE_PORT": str(devhorde_port), "REDIS": "off"})
    log_path = tmp_path / "make-run.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            ["bin/run"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A shell started with SIGINT ignored (as a background job of a non-interactive shell is) can never take
            # it back: give bin/run the default disposition a terminal's foreground job has.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 - no threads started yet
        )
    return MakeRun(popen, log_path, port)


def test_ctrl_c_says_the_front_is_stopping(tmp_path: Path) -> None:
    """Ctrl-C sends SIGINT to the whole foreground group (bin/run, the devhorde and uvicorn): bin/run says the front is
    stopping (never restarting), everything stops, and the status is 130, the interrupt's."""
    run = start_in_a_terminal_group(tmp_path, free_port())
    port = run.port
    try:
        run.wait_ready()
        os.killpg(run.popen.pid, signal.SIGINT)
        assert run.popen.wait(STOP_TIMEOUT_SECONDS) == 130
    finally:
        run.stop()
    output = run.output()
    after_ready = output[output.index("\nready: ") :]
    assert "\nstopping: the front and everything make run started\n" in after_ready
    assert "restarting" not in output.lower()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the front outlived bin/run"


def start_up_waits(ports: set[int]) -> list[int]:
    """The pids of the ``python -m oaifront.preflight answers`` processes polling one of ``ports`` on 127.0.0.1."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        polled = any(f"127.0.0.1:{port}/".encode() in word for word in words for port in ports)
        if b"oaifront.preflight" in words and b"answers" in words and polled:
            pids.append(int(entry.name))
    return pids


def test_ctrl_c_during_the_start_up_stops_the_wait_too(tmp_path: Path) -> None:
    """Ctrl-C while bin/run waits for the devhorde or the front to answer: bin/run stops at once with status 130 and
    leaves nothing behind, the process that polls the server (``oaifront.preflight answers``, which a background job
    of a script runs with SIGINT ignored) included."""
    devhorde_port = free_port()
    run = start_in_a_terminal_group(tmp_path, devhorde_port)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not (waits := start_up_waits({devhorde_port, run.port})):
            assert "\nready: " not in "\n" + run.output(), "bin/run was ready before its wait was seen"
            assert run.popen.poll() is None and time.monotonic() < deadline, run.output()
            time.sleep(0.02)
        os.killpg(run.popen.pid, signal.SIGINT)
        assert run.popen.wait(STOP_TIMEOUT_SECONDS) == 130
    finally:
        run.stop()
    assert start_up_waits({devhorde_port, run.port}) == [], f"the wait {waits} outlived bin/run"
    assert "stopping: the front and everything make run started" in run.output().splitlines()


@pytest.mark.parametrize("taken", ["PORT", "DEVHORDE_PORT"])
def test_a_port_in_use_is_reported_before_anything_starts(tmp_path: Path, make_run: list[MakeRun], taken: str) -> None:
    """A port already listened on ends the script with one line naming it, before any devhorde, front or ready line."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = start_make_run(tmp_path, {taken: str(port), "REDIS": "off"})
        make_run.append(run)
        assert run.popen.wait(60) == 1
    output = run.output()
    assert re.fullmatch(
        rf"make run: port {port} (on 127\.0\.0\.1 |\(the devhorde's\) )?is in use \([^)]*\): stop what holds it or set "
        rf"{taken}\n",
        output,
    ), output


def test_a_host_that_is_not_this_machines_is_said_so_not_port_in_use(tmp_path: Path, make_run: list[MakeRun]) -> None:
    """``HOST`` set to an address this machine does not hold (TEST-NET-1: binding it sends nothing) ends the script
    with one line saying so, before anything starts. A name that does not resolve (``HOST=127.0.0.l``) is said in
    the same way; tests/unit/test_start_lines.py checks it without asking a DNS server."""
    run = start_make_run(tmp_path, {"HOST": "192.0.2.1", "REDIS": "off"})
    make_run.append(run)
    assert run.popen.wait(60) == 1
    assert run.output() == (
        "make run: HOST=192.0.2.1 is not an address of this machine (Cannot assign requested address): set HOST to "
        "one of its addresses, such as 127.0.0.1\n"
    )


def test_a_bad_horde_url_is_refused_in_one_line_before_anything_starts(tmp_path: Path, make_run: list[MakeRun]) -> None:
    """``make run`` with ``HORDE_URL=not-a-url``: the front's one-line error, no traceback, nothing started."""
    run = start_make_run(tmp_path, {"HORDE_URL": "not-a-url"})
    make_run.append(run)
    assert run.popen.wait(60) == 1
    assert run.output() == (
        "make run: Invalid front configuration: HORDE_URL='not-a-url': expected the Horde's API root as an http(s) "
        "URL, such as https://aihorde.net/api\n"
    )


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"HORDE_OAI_KEEPALIVE_SECONDS": "ten"},
            "make run: Invalid front configuration: HORDE_OAI_KEEPALIVE_SECONDS='ten': Input should be a valid "
            "number, unable to parse string as a number",
        ),
        (
            {"HORDE_OAI_REDIS_URL": "127.0.0.1:6379"},
            "make run: Invalid front configuration: HORDE_OAI_REDIS_URL='127.0.0.1:6379': expected a Redis URL such "
            "as redis://127.0.0.1:6379/0: Redis URL must specify one of the following schemes (redis://, rediss://, "
            "unix://)",
        ),
        (
            {"DEVHORDE_SCENARIO": "buzy"},
            "make run: Invalid devhorde configuration: DEVHORDE_SCENARIO='buzy': no such scenario file, and no "
            "bundled scenario of that name: expected a scenario file or one of aihorde, busy, deep-queue, default, "
            "fast, flaky, images, older-horde, text-only",
        ),
        ({"PORT": "eighty"}, "make run: PORT=eighty: expected a port number (1 to 65535)"),
    ],
    ids=["HORDE_OAI_KEEPALIVE_SECONDS", "HORDE_OAI_REDIS_URL", "DEVHORDE_SCENARIO", "PORT"],
)
def test_a_bad_setting_is_refused_in_one_line_before_anything_starts(
    tmp_path: Path, make_run: list[MakeRun], env: dict[str, str], line: str
) -> None:
    """Each value the front or the devhorde cannot use: exactly one line naming it, status 1, nothing started."""
    run = start_make_run(tmp_path, {"REDIS": "on", **env})
    make_run.append(run)
    assert run.popen.wait(90) == 1
    assert run.output() == line + "\n"


def test_a_horde_url_without_api_is_refused_with_the_api_root_it_answers_at(
    tmp_path: Path, make_run: list[MakeRun]
) -> None:
    """HORDE_URL names a running Horde without ``/api``: make run says the Horde does not answer there and names the
    root that answers, before starting anything (no ready line)."""
    devhorde, api_root = start_devhorde(tmp_path, redis=False)
    try:
        server = api_root.removesuffix("/api")
        run = start_make_run(tmp_path, {"HORDE_URL": server})
        make_run.append(run)
        assert run.popen.wait(90) == 1
        assert run.output() == (
            f"make run: the Horde does not answer at HORDE_URL={server} (GET {server}/v2/status/heartbeat answered "
            f"404 Not Found); it answers at {api_root}: set HORDE_URL={api_root}\n"
        )
    finally:
        devhorde.stop()


def test_a_horde_url_where_nothing_answers_is_refused_in_one_line(tmp_path: Path, make_run: list[MakeRun]) -> None:
    api_root = f"http://127.0.0.1:{free_port()}/api"
    run = start_make_run(tmp_path, {"HORDE_URL": api_root})
    make_run.append(run)
    assert run.popen.wait(90) == 1
    assert run.output() == (
        f"make run: the Horde does not answer at HORDE_URL={api_root} (GET {api_root}/v2/status/heartbeat: [Errno "
        "111] Connection refused); start the Horde or set HORDE_URL to where it answers\n"
    )


def test_a_redis_that_does_not_answer_is_said_with_the_mode_it_falls_back_to(
    tmp_path: Path, make_run: list[MakeRun]
) -> None:
    """HORDE_OAI_REDIS_URL where nothing answers: the mode line says so and what the front does meanwhile (never "live
    streaming"), the front still gets ready, and a stream arrives whole, in one content chunk."""
    redis_port = free_port()
    run = start_make_run(tmp_path, {"HORDE_OAI_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"})
    make_run.append(run)
    mode, _ = mode_and_ready_lines(run.wait_ready())
    assert mode == (
        f"mode: no live streaming: Redis at redis://127.0.0.1:{redis_port}/0 does not answer (Error 111 connecting "
        f"to 127.0.0.1:{redis_port}. Connection refused.); until it does, every stream is delivered whole and waits "
        "re-read the Horde's status on a timer"
    )
    assert (
        f"Redis: redis://127.0.0.1:{redis_port}/0 is unreachable (Connection refused): until it answers, streams "
        "are delivered whole and the waiter re-reads on its timer; progress streams read on database 0 (the URL's "
        "database)"
    ) in run.output()
    assert len(content_chunks(run.client)) == 1
