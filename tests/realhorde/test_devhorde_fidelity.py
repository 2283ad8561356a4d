"""The devhorde's fidelity, measured: the same calls against the devhorde's ``aihorde`` scenario and the real AI Horde
(the realhorde harness on loopback), comparing statuses, field sets, exact bodies where the server's are fixed, and the
rate limit headers.

Self-contained: it reads the harness's ``keys.env`` itself (``HORDE_URL``, ``CLIENT_KEY``, ``PROXY_PASSKEY``; in the
harness's ``WORK``, ``tests/realhorde/harness.py``),
starts its own devhorde process and a simulated worker of its own serving :data:`MODEL` (``worker.py``; the lane
starts the harness with ``RH_WORKER=0``). The real Horde's limits are shared
with every other user of the harness, so each call goes through the proxy passkey with an address of this module's
own (``Proxied-For``), submits are spaced a second apart, and the only key that spends a per-key budget is one
refused ``KudosUpfront`` submit of the 0-kudos ``CLIENT_KEY``. The model list and ``/v2/workers`` (limited per
connection address, 90 a minute) are read once each by the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devhorde.launch import wait_http
from devhorde.scenario import load_scenario
from tests.conftest import free_port
from tests.realhorde.harness import WORK, read_keys, register_user
from tests.realhorde.worker import SimWorker

pytestmark = [pytest.mark.integration, pytest.mark.realhorde]

KEYS_ENV = WORK / "keys.env"
"""The harness's keys, where its ``WORK`` (the environment's, as the lane's ``up`` uses it) puts them."""
MODEL = "koboldcpp/Qwen2.5-7B-Instruct"
"""The model the devhorde scenario's worker serves, and the module's own simulated worker on the real Horde
(:func:`model_worker`)."""
WORKER_LISTED_SECONDS = 70.0
"""How long the module waits for its worker in the Horde's lists: the model list is refreshed every 10 s and the
worker list every 30 s (a wait, not a timing)."""
ANON = "0000000000"
LIMIT_HEADERS = ("retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")
SUBMIT_SPACING_SECONDS = 1.1
"""Between two submits from one address: the per-second window has passed (a budget, not a timing)."""


class Horde:
    """One Horde under comparison: a client that sends every call through the proxy passkey as one address."""

    def __init__(self, name: str, api_root: str, passkey: str, address: str) -> None:
        self.name = name
        self.client = httpx.Client(
            base_url=api_root.rstrip("/") + "/",
            headers={"Proxy-Authorization": passkey, "Proxied-For": address},
            timeout=30.0,
        )
        self._last_submit = 0.0

    def submit(self, payload: dict[str, Any], apikey: str = ANON, *, spaced: bool = True) -> httpx.Response:
        if spaced:
            time.sleep(max(0.0, self._last_submit + SUBMIT_SPACING_SECONDS - time.monotonic()))
        self._last_submit = time.monotonic()
        return self.client.post("v2/generate/text/async", json=payload, headers={"apikey": apikey})

    @property
    def last_submit_started(self) -> float:
        """When the latest :meth:`submit` was sent (``time.monotonic()``)."""
        return self._last_submit

    def status(self, request_id: str) -> httpx.Response:
        return self.client.get(f"v2/generate/text/status/{request_id}")

    def wait_done(self, request_id: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            time.sleep(1.05)  # one read a second: the 60/min per path
            body: dict[str, Any] = self.status(request_id).json()
            if body["done"]:
                return body
            assert time.monotonic() < deadline, f"{self.name}: never done: {body}"


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    if not KEYS_ENV.exists():
        pytest.skip(f"no realhorde harness: {KEYS_ENV} is absent (run ../shared/realhorde/up, or set WORK to its WORK)")
    keys = read_keys(KEYS_ENV)
    missing = [name for name in ("HORDE_URL", "CLIENT_KEY", "PROXY_PASSKEY") if not keys.get(name)]
    if missing:
        pytest.skip(f"{KEYS_ENV} lacks {', '.join(missing)}")
    try:
        httpx.get(keys["HORDE_URL"].rstrip("/") + "/v2/status/heartbeat", timeout=5.0)
    except httpx.HTTPError as error:
        pytest.skip(f"the real Horde at {keys['HORDE_URL']} does not answer ({error}); run the realhorde harness")
    return keys


def _serves_model(horde_url: str, worker_name: str) -> bool:
    models = httpx.get(f"{horde_url}/v2/status/models", params={"type": "text"}, timeout=10).json()
    workers = httpx.get(f"{horde_url}/v2/workers", params={"type": "text"}, timeout=10).json()
    return (
        isinstance(models, list)
        and any(entry.get("name") == MODEL for entry in models)
        and isinstance(workers, list)
        and any(entry.get("name") == worker_name and entry.get("online") is True for entry in workers)
    )


@pytest.fixture(scope="module")
def model_worker(keys: dict[str, str]) -> Iterator[SimWorker]:
    """A simulated worker of a fresh user serving :data:`MODEL`, listed in both the model list and ``/v2/workers``
    before the first test. Always the module's own: a worker of an earlier run, stopped, still reads as online for
    300 s, and the harness's ``RH_WORKER=1`` worker may not run (the lane starts the harness without it)."""
    horde_url = keys["HORDE_URL"].rstrip("/")
    key, _ = register_user(horde_url, f"fidelity{os.getpid()}{int(time.time()) % 100000}")
    worker = SimWorker(horde_url, key, f"fidelity-{os.getpid()}", [MODEL]).start()
    try:
        worker.wait_registered()
        deadline = time.monotonic() + WORKER_LISTED_SECONDS
        while not _serves_model(horde_url, worker.name):
            assert time.monotonic() < deadline, f"the Horde listed no worker for {MODEL} in {WORKER_LISTED_SECONDS} s"
            time.sleep(3)
        yield worker
    finally:
        worker.stop(abandon=True, timeout=5)


@pytest.fixture(scope="module")
def hordes(
    keys: dict[str, str], model_worker: SimWorker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Horde, Horde]]:
    """``(devhorde, real)``: the devhorde ``aihorde`` scenario in its own process, knowing the same passkey."""
    document = load_scenario("aihorde").model_dump(mode="json")
    document["aihorde"]["proxy_passkey"] = keys["PROXY_PASSKEY"]
    path = tmp_path_factory.mktemp("fidelity") / "aihorde.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "devhorde", "--host", "127.0.0.1", "--port", str(port), "--scenario", str(path)],
        env={**os.environ, "DEVHORDE_REDIS_URL": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/_devhorde/scenario", process)
        address = f"10.{os.getpid() % 250}.{int(time.time()) % 250}.7"
        dev = Horde("devhorde", f"http://127.0.0.1:{port}/api", keys["PROXY_PASSKEY"], address)
        real = Horde("real", keys["HORDE_URL"], keys["PROXY_PASSKEY"], address)
        yield dev, real
        dev.client.close()
        real.client.close()
    finally:
        process.terminate()
        process.wait(timeout=30)


def limit_headers(response: httpx.Response) -> dict[str, bool]:
    return {header: header in response.headers for header in LIMIT_HEADERS}


def assert_same_limit_headers(dev: httpx.Response, real: httpx.Response, *, fresh: bool = False) -> None:
    """The same limit headers; ``fresh``: the answer opened its limit's window on both (an address of this module's
    own), so ``X-RateLimit-Remaining`` is equal and ``Retry-After`` within a second (the windows opened at different
    instants)."""
    assert limit_headers(dev) == limit_headers(real)
    if "x-ratelimit-limit" in real.headers:
        assert dev.headers["x-ratelimit-limit"] == real.headers["x-ratelimit-limit"]
        assert dev.headers["retry-after"].isdigit() and real.headers["retry-after"].isdigit()
        if fresh:
            assert dev.headers["x-ratelimit-remaining"] == real.headers["x-ratelimit-remaining"]
            assert abs(int(dev.headers["retry-after"]) - int(real.headers["retry-after"])) <= 1, (
                dev.headers["retry-after"],
                real.headers["retry-after"],
            )


def both(hordes: tuple[Horde, Horde], call: Any) -> tuple[httpx.Response, httpx.Response]:
    dev, real = hordes
    return call(dev), call(real)


def text(max_length: int = 32, *, models: list[str] | None = None, **keys: Any) -> dict[str, Any]:
    return {
        "prompt": "User: hello\nAssistant:",
        "models": models or [MODEL],
        "params": {"max_length": max_length},
        **keys,
    }


def test_chat_routes_are_an_html_404_without_rc(hordes: tuple[Horde, Horde]) -> None:
    dev, real = both(hordes, lambda h: h.client.post("v2/generate/chat/async", json={}, headers={"apikey": ANON}))
    assert dev.status_code == real.status_code == 404
    assert dev.headers["content-type"].split(";")[0] == real.headers["content-type"].split(";")[0] == "text/html"
    assert dev.text == real.text
    assert_same_limit_headers(dev, real)


def test_dry_run(hordes: tuple[Horde, Horde]) -> None:
    dev, real = both(hordes, lambda h: h.submit(text(64, dry_run=True)))
    assert dev.status_code == real.status_code == 200
    assert set(dev.json()) == set(real.json()) == {"kudos"}
    assert isinstance(dev.json()["kudos"], float) and isinstance(real.json()["kudos"], float)
    assert_same_limit_headers(dev, real, fresh=True)


def test_submit_status_and_generation(hordes: tuple[Horde, Horde]) -> None:
    dev, real = both(hordes, lambda h: h.submit(text()))
    assert dev.status_code == real.status_code == 202
    assert set(dev.json()) == set(real.json()) == {"id", "kudos"}
    assert dev.json()["kudos"] == real.json()["kudos"] == 0.0
    assert_same_limit_headers(dev, real, fresh=True)
    dev_status = hordes[0].status(dev.json()["id"])
    real_status = hordes[1].status(real.json()["id"])
    assert list(dev_status.json()) == list(real_status.json())
    assert_same_limit_headers(dev_status, real_status, fresh=True)
    dev_done, real_done = hordes[0].wait_done(dev.json()["id"]), hordes[1].wait_done(real.json()["id"])
    assert list(dev_done) == list(real_done)
    assert (dev_done["finished"], dev_done["faulted"]) == (real_done["finished"], real_done["faulted"]) == (1, False)
    assert set(dev_done["generations"][0]) == set(real_done["generations"][0])
    assert dev_done["generations"][0]["state"] == real_done["generations"][0]["state"] == "ok"
    assert dev_done["generations"][0]["model"] == real_done["generations"][0]["model"] == MODEL


def test_no_worker_warning_and_cancel_semantics(hordes: tuple[Horde, Horde]) -> None:
    model = f"fidelity/no-worker-{os.getpid()}"
    dev, real = both(hordes, lambda h: h.submit(text(models=[model])))
    assert dev.status_code == real.status_code == 202, (dev.text, real.text)
    # a real worker declaring no models serves any model: then the real Horde sends no warning
    assert set(dev.json()) == set(real.json()) == {"id", "kudos", "message"}, (dev.json(), real.json())
    assert dev.json()["message"] == real.json()["message"]
    ids = (dev.json()["id"], real.json()["id"])
    cancels = [horde.client.delete(f"v2/generate/text/status/{rid}") for horde, rid in zip(hordes, ids, strict=True)]
    assert [c.status_code for c in cancels] == [200, 200]
    # queue_position and wait_time count the Horde's whole queue, shared with every other user: not compared
    picked = ("done", "waiting", "processing", "is_possible", "finished", "faulted")
    dev_before, real_before = ({k: c.json()[k] for k in picked} for c in cancels)
    assert dev_before == real_before, (cancels[0].json(), cancels[1].json())
    assert (real_before["done"], real_before["waiting"]) == (False, 1)  # the status from before the cancel
    assert_same_limit_headers(*cancels, fresh=True)
    after = [horde.status(rid).json() for horde, rid in zip(hordes, ids, strict=True)]
    expected = {"done": False, "waiting": 0, "processing": 0, "is_possible": False}
    assert [{k: body[k] for k in expected} for body in after] == [expected, expected], after
    assert list(after[0]) == list(after[1])


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"max_length": 5000}, id="max_length-above-4096"),
        pytest.param({"max_length": 8}, id="max_length-below-16"),
        pytest.param({"max_length": 600, "max_context_length": 500}, id="token-overflow"),
        pytest.param({"max_length": 64, "stop_sequence": ["x" * 1001, "y" * 1000]}, id="excessive-stop-sequence"),
    ],
)
def test_parameter_refusals_are_the_same_bodies(hordes: tuple[Horde, Horde], params: dict[str, Any]) -> None:
    payload = {"prompt": "hi", "models": [MODEL], "params": params}
    dev, real = both(hordes, lambda h: h.submit(payload))
    assert dev.status_code == real.status_code == 400
    assert dev.json() == real.json()
    assert_same_limit_headers(dev, real, fresh=True)


def test_kudos_upfront_for_a_new_user(hordes: tuple[Horde, Horde], keys: dict[str, str]) -> None:
    dev = hordes[0].submit(text(600), apikey="devhorde-new-user")
    real = hordes[1].submit(text(600), apikey=keys["CLIENT_KEY"])
    assert dev.status_code == real.status_code == 403
    assert dev.json() == real.json()
    assert real.json()["rc"] == "KudosUpfront"
    assert_same_limit_headers(dev, real, fresh=True)


def test_unknown_id_is_the_same_404(hordes: tuple[Horde, Horde]) -> None:
    dev, real = both(hordes, lambda h: h.status("00000000-0000-0000-0000-000000000000"))
    assert dev.status_code == real.status_code == 404
    assert dev.json() == real.json()
    assert_same_limit_headers(dev, real, fresh=True)


def test_model_list_and_workers_have_the_same_fields(hordes: tuple[Horde, Horde], model_worker: SimWorker) -> None:
    dev, real = both(hordes, lambda h: h.client.get("v2/status/models", params={"type": "text"}))
    assert dev.status_code == real.status_code == 200
    dev_entry = next(entry for entry in dev.json() if entry["name"] == MODEL)
    real_entry = next(entry for entry in real.json() if entry["name"] == MODEL)
    assert list(dev_entry) == list(real_entry)
    assert {k: type(v) for k, v in dev_entry.items()} == {k: type(v) for k, v in real_entry.items()}
    assert_same_limit_headers(dev, real)
    dev, real = both(hordes, lambda h: h.client.get("v2/workers", params={"type": "text"}))
    assert dev.status_code == real.status_code == 200
    dev_worker = next(entry for entry in dev.json() if MODEL in entry["models"])
    real_worker = next(entry for entry in real.json() if entry["name"] == model_worker.name)
    assert set(dev_worker) == set(real_worker)
    assert {k: type(v) for k, v in dev_worker.items()} == {k: type(v) for k, v in real_worker.items()}
    assert dev_worker["online"] is real_worker["online"] is True
    assert_same_limit_headers(dev, real)


BURST_SECONDS = 0.8
"""The longest the three submits of a burst may take to be sent: with the server's own delay the third still falls in
the first one's one-second window. A slower burst (a busy machine) says nothing about the window and is sent again."""

BURST_ATTEMPTS = 5
"""How many bursts a test sends at most before it says the machine is too busy to make one."""


def burst(horde: Horde) -> tuple[list[httpx.Response], float]:
    """Three dry-run submits one after the other, once the previous submit's window has passed; the answers and the
    seconds from the first submit's start to the third's."""
    time.sleep(SUBMIT_SPACING_SECONDS)
    answers = [horde.submit(text(16, dry_run=True), spaced=False)]
    started = horde.last_submit_started
    answers += [horde.submit(text(16, dry_run=True), spaced=False) for _ in range(2)]
    return answers, horde.last_submit_started - started


def test_a_third_submit_in_one_second_is_the_same_429(hordes: tuple[Horde, Horde]) -> None:
    for _ in range(BURST_ATTEMPTS):
        (dev_answers, dev_spread), (real_answers, real_spread) = burst(hordes[0]), burst(hordes[1])
        if max(dev_spread, real_spread) <= BURST_SECONDS:
            break
    else:
        pytest.fail(f"no burst of three submits was sent within {BURST_SECONDS} s in {BURST_ATTEMPTS} attempts")
    assert [a.status_code for a in dev_answers] == [a.status_code for a in real_answers] == [200, 200, 429]
    assert dev_answers[2].json() == real_answers[2].json() == {"message": "2 per 1 second"}
    for dev, real in zip(dev_answers, real_answers, strict=True):
        assert_same_limit_headers(dev, real)
        assert dev.headers["x-ratelimit-remaining"] == real.headers["x-ratelimit-remaining"]


def test_the_passkey_gives_each_proxied_address_its_own_budget(hordes: tuple[Horde, Horde]) -> None:
    """Three submits at once from three proxied addresses: within each one's 2 a second (a front with a passkey)."""

    def spread(horde: Horde) -> list[int]:
        time.sleep(SUBMIT_SPACING_SECONDS)
        base = f"10.{os.getpid() % 250}.{int(time.time()) % 250}"
        return [
            horde.client.post(
                "v2/generate/text/async",
                json=text(16, dry_run=True),
                headers={"apikey": ANON, "Proxied-For": f"{base}.{20 + index}"},
            ).status_code
            for index in range(3)
        ]

    assert spread(hordes[0]) == spread(hordes[1]) == [200, 200, 200]
