"""The real AI Horde the lane runs against: ``../shared/realhorde`` (the harness's ``up`` starts it on 127.0.0.1), its
keys, users registered for the lane, read-only looks into its database, and the lane's budget of its rate limits.

The Horde's limits (``real-horde.md``): 2 text submits a second per client address and per API key, 90 a minute per
address (dry runs included), 90 a minute per address on every other route, 60 status reads a minute per request.
Every process of this machine reaches it from 127.0.0.1, so the lane spends little: :class:`SubmitBudget` keeps the
lane's own submits under 80 in any 60 s and one test's first submit a second after the previous test's last.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
REALHORDE_DIR = Path(os.environ.get("REALHORDE_DIR", ROOT.parent / "shared" / "realhorde"))
"""The harness: ``../shared/realhorde`` beside the clone (CI has a read-only copy there)."""
WORK = Path(os.environ.get("WORK", Path(os.environ.get("TMPDIR", "/tmp")) / "realhorde"))
"""The harness's working folder (its ``WORK``): ``keys.env`` is there."""
PG_PORT = int(os.environ.get("RH_PG_PORT", "15432"))
HORDE_REDIS_PORT = int(os.environ.get("RH_REDIS_PORT", "16379"))
"""The Horde's private Redis (read only by the passkey test, to see whose budget a submit was charged to)."""

SUBMITS_PER_MINUTE = 80
"""The lane's own ceiling on text submits (dry runs included) in any 60 s: under the Horde's 90 per address."""
GAP_BETWEEN_TESTS_SECONDS = 1.1
"""Between one test's end and the next one's start: the 2-a-second windows of the previous test are over."""


def read_keys(path: Path | None = None) -> dict[str, str]:
    """``keys.env`` as a dict (``HORDE_URL``, ``CLIENT_KEY``, ``WORKER_KEY``, ``PROXY_PASSKEY``, ...)."""
    keys: dict[str, str] = {}
    for line in (path or WORK / "keys.env").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip():
            keys[name.strip()] = value.strip()
    return keys


def heartbeat_ok(horde_url: str) -> bool:
    try:
        return httpx.get(f"{horde_url}/v2/status/heartbeat", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def register_user(horde_url: str, username: str) -> tuple[str, int]:
    """Register a user the way the Horde's web page does (``POST /register``, no captcha here); return its API key
    and id. A new user has 0 kudos."""
    site = horde_url.removesuffix("/api")
    page = httpx.post(f"{site}/register", data={"username": username}, timeout=30)
    found = re.search(r'<code class="ah-api-key">([^<]+)</code>', page.text)
    if not found:
        raise RuntimeError(f"register {username}: no API key in the answer ({page.status_code})")
    key = found.group(1)
    user = httpx.get(f"{horde_url}/v2/find_user", headers={"apikey": key}, timeout=10).json()
    return key, int(user["id"])


def find_user(horde_url: str, key: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{horde_url}/v2/find_user", headers={"apikey": key}, timeout=10).json()
    return body


def sql(query: str) -> list[list[str]]:
    """Rows of a read-only query on the Horde's private PostgreSQL (the harness's cluster, password ``horde``)."""
    out = subprocess.run(
        ["psql", "-X", "-q", "-tA", "-F", "\t", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "-d", "horde"],
        input=query,
        capture_output=True,
        text=True,
        env={**os.environ, "PGPASSWORD": "horde"},
        check=True,
        timeout=30,
    )
    return [line.split("\t") for line in out.stdout.splitlines() if line]


@dataclass(frozen=True)
class WaitingPrompt:
    """A text request as the Horde stored it (``waiting_prompts``)."""

    id: str
    n: int
    max_length: int
    max_context_length: int
    ipaddr: str
    user_id: int


def waiting_prompts(marker: str) -> list[WaitingPrompt]:
    """The Horde's text requests whose prompt holds ``marker`` (the submits one test made), oldest first."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", marker):
        raise ValueError(marker)
    rows = sql(
        "SELECT id, n, max_length, max_context_length, coalesce(ipaddr, ''), coalesce(user_id, -1) FROM waiting_prompts"
        f" WHERE wp_type = 'text' AND prompt LIKE '%{marker}%' ORDER BY created"
    )
    return [WaitingPrompt(r[0], int(r[1]), int(r[2]), int(r[3]), r[4], int(r[5])) for r in rows]


def text_status(horde_url: str, request_id: str) -> dict[str, Any]:
    """``GET /v2/generate/text/status/{id}``: the Horde's own status of a request."""
    body: dict[str, Any] = httpx.get(f"{horde_url}/v2/generate/text/status/{request_id}", timeout=10).json()
    return body


def limiter_keys(pattern: str) -> list[str]:
    """The flask-limiter keys matching ``pattern`` in the Horde's Redis (DB 1), read only."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=HORDE_REDIS_PORT, db=1, socket_timeout=5)
    try:
        return sorted(k.decode() for k in client.scan_iter(match=pattern, count=1000))
    finally:
        client.close()


class SubmitBudget:
    """The lane's share of the Horde's submit limits (module docstring): ``reserve(n)`` before a test that makes
    ``n`` submits waits until they fit under :data:`SUBMITS_PER_MINUTE` in the last 60 s and the gap since the
    previous test has passed; ``finished()`` marks a test's end."""

    def __init__(self) -> None:
        self._times: deque[float] = deque()
        self._last_end = 0.0
        self._lock = threading.Lock()

    def reserve(self, n: int) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                while self._times and now - self._times[0] > 60:
                    self._times.popleft()
                wait = max(0.0, self._last_end + GAP_BETWEEN_TESTS_SECONDS - now)
                if len(self._times) + n > SUBMITS_PER_MINUTE and self._times:
                    wait = max(wait, 60.5 - (now - self._times[0]))
                if wait <= 0:
                    break
                time.sleep(wait)
            self._times.extend([time.monotonic()] * n)

    def finished(self) -> None:
        with self._lock:
            self._last_end = time.monotonic()
