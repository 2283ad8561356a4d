"""Fixtures of the real-Horde lane: the real AI Horde (``../shared/realhorde``, started by ``bin/realhorde-lane``
when it is not running), users registered for this session, the front under uvicorn pointed at it (no Redis), and
the fleet of simulated workers of the lane's own (``worker.py``), started once for the session.

Without a running Horde every test of the lane is skipped with the reason; ``make test`` runs the lane through
``bin/realhorde-lane``, which says in one line when ``../shared/realhorde`` is absent.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest

from tests import polling
from tests.conftest import Process, start_front
from tests.realhorde.harness import REALHORDE_DIR, WORK, SubmitBudget, heartbeat_ok, read_keys, register_user, sql
from tests.realhorde.worker import SimWorker

LANE_FRONT_ENV = {
    "HORDE_OAI_SIGNAL_RECHECK_SECONDS": "1.0",
    "HORDE_OAI_SIGNAL_RECHECK_MAX_SECONDS": "1.0",
    "HORDE_OAI_KEEPALIVE_SECONDS": "0.5",
    "HORDE_OAI_FAIL_FAST_GRACE_SECONDS": "1.5",
    "HORDE_OAI_MODELS_CACHE_SECONDS": "2",
    "HORDE_OAI_CANCEL_RETRY_SECONDS": "0.5",
    "HORDE_OAI_NONSTREAM_TIMEOUT_SECONDS": "240",
    "HORDE_OAI_STREAM_TIMEOUT_SECONDS": "240",
}
"""The front's settings in the lane: status reads at most once a second per request (the Horde allows 60 a minute),
the model list cached 2 s (its route allows 90 a minute per address), timeouts above the Horde's minute-long
check that faults a request (``check_waiting_prompts``) and above the time the front takes to see a stopped
worker (120 s of unchanged uptime in a worker list up to a minute old, then the grace), yet short enough that a
request the Horde never ends fails its test in four minutes instead of five (the tests that expect an answer at once
set a shorter client timeout)."""

WORKER_SLOTS = 3
"""Workers one test may run at once: an untrusted user may own 3 (``horde/apis/v2/base.py:759-764``), so the lane's
worker user has three names, reused by every test."""


@dataclass
class RealHorde:
    """The running Horde and this session's users."""

    horde_url: str
    keys: dict[str, str]
    tag: str
    """Short and unique to the session: in model names, user names and prompt markers."""
    client_key: str
    client_id: int
    worker_key: str
    worker_id: int
    budget: SubmitBudget = field(default_factory=SubmitBudget)
    extra_users: list[tuple[str, int]] = field(default_factory=list)

    def model(self, slug: str) -> str:
        """A model name of this session's own (no other worker serves it)."""
        return f"lane/{slug}-{self.tag}"

    def users(self, count: int) -> list[tuple[str, int]]:
        """``count`` extra 0-kudos users (key, id), registered on first use and reused."""
        while len(self.extra_users) < count:
            self.extra_users.append(register_user(self.horde_url, f"laneu{self.tag}x{len(self.extra_users)}"))
        return self.extra_users[:count]

    def new_user(self, label: str) -> tuple[str, int]:
        """A fresh 0-kudos user (key, id) for one test."""
        return register_user(self.horde_url, f"lane{label}{self.tag}{uuid.uuid4().hex[:4]}")


@pytest.fixture(scope="session")
def realhorde() -> RealHorde:
    keys_path = WORK / "keys.env"
    if not keys_path.exists():
        pytest.skip(
            f"real-Horde lane: no {keys_path}; start the harness with RH_WORKER=0 {REALHORDE_DIR}/up"
            " (make realhorde does)"
        )
    keys = read_keys(keys_path)
    horde_url = keys["HORDE_URL"]
    if not heartbeat_ok(horde_url):
        pytest.skip(f"real-Horde lane: {horde_url} does not answer; start it with RH_WORKER=0 {REALHORDE_DIR}/up")
    tag = uuid.uuid4().hex[:6]
    client_key, client_id = register_user(horde_url, f"lanec{tag}")
    worker_key, worker_id = register_user(horde_url, f"lanew{tag}")
    return RealHorde(horde_url, keys, tag, client_key, client_id, worker_key, worker_id)


@dataclass
class Front:
    process: Process
    url: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def _front(tmp_path_factory: pytest.TempPathFactory, horde_url: str, env: dict[str, str]) -> Iterator[Front]:
    tmp = tmp_path_factory.mktemp("realhorde-front")
    process, url = start_front(tmp, horde_url, redis=False, env={**LANE_FRONT_ENV, **env})
    try:
        yield Front(process, url)
    finally:
        process.stop()


@pytest.fixture(scope="session")
def front(realhorde: RealHorde, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """The front on the real Horde, without Redis and without a proxy passkey."""
    yield from _front(tmp_path_factory, realhorde.horde_url, {})


@pytest.fixture(scope="session")
def passkey_front(realhorde: RealHorde, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """The front with the service account's proxy passkey, reading each client's address from ``X-Forwarded-For``."""
    env = {
        "HORDE_OAI_PROXY_PASSKEY": realhorde.keys["PROXY_PASSKEY"],
        "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For",
    }
    yield from _front(tmp_path_factory, realhorde.horde_url, env)


REPLY = "Lanterns glow over the harbour."
"""What every ``ok`` worker of the fleet answers."""

KUDOS_MODEL = "koboldcpp/Mistral-7B-Instruct-v0.3"
"""The ``horde.max_kudos`` test's model: one in the harness's model reference, because the real server's text dry
run raises for any other model (``AttributeError: 'TextWaitingPrompt' object has no attribute 'wp'``,
``horde/classes/kobold/waiting_prompt.py:148``, an HTML 500 the front relays as 502)."""

HONEST_DELAY_SECONDS = 0.3
"""How long the fleet's answering workers take per job: slow enough for the Horde's speed check. It counts a text job
as at least 20 tokens and an untrusted worker above 150 tokens a second gets an ``UNREASONABLY_FAST`` suspicion
(``horde/classes/base/worker.py``, ``hv.suspicion_thresholds``); at five the Horde pauses the worker, which then
serves nobody else's requests, and the front rightly answers 503 ``no_eligible_worker`` for its models (20 tokens
in 0.1 s plus the round trip paused the pool halfway through the lane)."""

POOL_SLUGS = (
    "cards",
    "chat",
    "stream",
    "responses",
    "legacy",
    "badkey",
    "default",
    "downgrade",
    "bound",
    "paced",
    "users",
    "proxied",
)
"""The models the pool serves: one per test, so a test's requests are its own."""


@dataclass
class Fleet:
    """The lane's simulated workers, started once for the session (the Horde lists a worker's models from its
    model cache, refreshed every 10 s, and its limits from its worker cache, every 30 s: one wait for all):

    - ``pool``: three workers of the lane's worker user (an untrusted user may own 3), each serving every model of
      :data:`POOL_SLUGS`, replying :data:`REPLY` after :data:`HONEST_DELAY_SECONDS`, ``max_length`` 4096,
      ``max_context_length`` 16384;
    - ``special``: one worker per behaviour, each of a worker user of its own so that a worker a test spoils (one in
      maintenance after faulting) spoils nothing else: ``limits`` (declares 300 / 3072), ``leave`` (6 s per job),
      ``lost`` (stopped once listed: the Horde counts it online for 300 s more), ``faulty``, ``censored``, ``csam``,
      and ``kudos``, which serves :data:`KUDOS_MODEL`.
    """

    realhorde: RealHorde
    pool: list[SimWorker] = field(default_factory=list)
    special: dict[str, SimWorker] = field(default_factory=dict)

    def model(self, slug: str) -> str:
        return KUDOS_MODEL if slug == "kudos" else self.realhorde.model(slug)

    def popped_prompts(self) -> list[str]:
        return [p for w in [*self.pool, *self.special.values()] for p in w.popped_prompts()]

    def stop(self) -> None:
        for worker in [*self.pool, *self.special.values()]:
            worker.stop(abandon=True, timeout=5)

    def paused(self) -> list[str]:
        """The fleet's workers the Horde paused (its suspicion rules), from its database."""
        names = [worker.name for worker in [*self.pool, *self.special.values()]]
        rows = sql("SELECT name FROM workers WHERE paused AND name IN (" + ", ".join(f"'{n}'" for n in names) + ")")
        return sorted(row[0] for row in rows)


def listed_models(horde_url: str) -> set[str]:
    body = httpx.get(f"{horde_url}/v2/status/models", params={"type": "text"}, timeout=10).json()
    return {m["name"] for m in body} if isinstance(body, list) else set()


@pytest.fixture(scope="session")
def fleet(realhorde: RealHorde) -> Iterator[Fleet]:
    fleet = Fleet(realhorde)
    url = realhorde.horde_url
    pool_models = [realhorde.model(slug) for slug in POOL_SLUGS]
    try:
        for i in range(WORKER_SLOTS):
            fleet.pool.append(
                SimWorker(
                    url,
                    realhorde.worker_key,
                    f"lane{realhorde.tag}-w{i + 1}",
                    pool_models,
                    max_length=4096,
                    max_context_length=16384,
                    delay=HONEST_DELAY_SECONDS,
                    text=REPLY,
                ).start()
            )
        specials: dict[str, dict[str, Any]] = {
            "limits": {"max_length": 300, "max_context_length": 3072},
            "leave": {"delay": 6.0},
            "lost": {},
            "faulty": {"state": "faulted", "delay": 0.1},
            "censored": {"state": "censored"},
            "csam": {"state": "csam"},
            "kudos": {"delay": HONEST_DELAY_SECONDS},
        }
        owners = [realhorde.new_user("wa"), realhorde.new_user("wb"), realhorde.new_user("wc")]
        for i, (slug, options) in enumerate(specials.items()):
            key = owners[i // 3][0]
            fleet.special[slug] = SimWorker(
                url, key, f"lane{realhorde.tag}-{slug}", [fleet.model(slug)], text=REPLY, **options
            ).start()
        for worker in [*fleet.pool, *fleet.special.values()]:
            worker.wait_registered()
        wanted = {*pool_models, *(fleet.model(slug) for slug in specials)}
        deadline = time.monotonic() + 40
        while not wanted <= (listed := listed_models(url)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Horde did not list {sorted(wanted - listed)} within 40 s")
            time.sleep(2)
        fleet.special["lost"].stop()
        yield fleet
        paused = fleet.paused()
        assert not paused, f"the Horde paused {paused} during the lane (see HONEST_DELAY_SECONDS)"
    finally:
        fleet.stop()


@pytest.fixture(autouse=True)
def submit_budget(request: pytest.FixtureRequest, realhorde: RealHorde) -> Iterator[None]:
    """Spend the Horde's submit budget as ``harness.SubmitBudget`` says: a test's ``@pytest.mark.submits(n)`` (1 by
    default) is reserved before it starts."""
    mark = request.node.get_closest_marker("submits")
    realhorde.budget.reserve(int(mark.args[0]) if mark else 1)
    try:
        yield
    finally:
        realhorde.budget.finished()


FOREIGN_429_RETRIES: list[str] = []
"""The tests :func:`retry_a_foreign_429` ran twice (listed at the end of the run)."""


def retry_a_foreign_429[**P, R](test: Callable[P, R]) -> Callable[P, R]:
    """Run a test of what the front serves once more, 2 s later, when the Horde's 2-a-second limit refused it.

    Every process of the machine reaches the Horde from 127.0.0.1 and shares that budget, so on a shared machine
    another process's traffic can refuse a test's one submit; the lane's own submits are paced (``SubmitBudget``).
    Only for tests that do not test the limits: the front's own pacing is pinned in ``test_realhorde_issue22.py``."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return test(*args, **kwargs)
        except openai.RateLimitError as exc:
            if "per 1 second" not in str(exc):
                raise
            FOREIGN_429_RETRIES.append(test.__name__)
            time.sleep(2)
            return test(*args, **kwargs)

    return run


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FOREIGN_429_RETRIES:
        terminalreporter.write_line(
            f"realhorde lane: {len(FOREIGN_429_RETRIES)} test(s) ran twice after a 429 of the Horde's shared "
            f"2-a-second budget: {', '.join(FOREIGN_429_RETRIES)}"
        )


def client(front: Front, key: str, *, timeout: float = 60, **options: Any) -> openai.OpenAI:
    """The official SDK on the front, never retrying by itself (a retry would hide what the front answered)."""
    return openai.OpenAI(base_url=front.base_url, api_key=key, max_retries=0, timeout=timeout, **options)


def marker() -> str:
    """A prompt marker: finds this test's requests in the Horde's database."""
    return "mk" + uuid.uuid4().hex[:12]


def eventually[T](probe: Callable[[], T | None], *, timeout: float, interval: float = 1.0, what: str) -> T:
    """Poll ``probe`` every ``interval`` seconds (the Horde's routes allow 90 reads a minute per address):
    :func:`tests.polling.eventually`."""
    return polling.eventually(probe, timeout=timeout, interval=interval, what=what)
