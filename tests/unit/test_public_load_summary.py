"""``bench.public_load.summarize``: the load test's figures from its records and the counting proxy's counts."""

from __future__ import annotations

import argparse
import http.server
import threading
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

from bench.public_load import CountingProxy, own_keys, summarize


def record(
    marker: str, key: str, sent: float, done: float, status: int = 200, code: str | None = None
) -> dict[str, Any]:
    return {"marker": marker, "key": key, "sent": sent, "done": done, "status": status, "code": code, "stream": False}


def test_before_submit_is_told_apart_by_key_kind_and_users_served_nothing_are_counted() -> None:
    proxy = CountingProxy("http://127.0.0.1:9/api")
    proxy.submitted_at = {"u0t0": 10.5, "u0t1": 61.5, "u1t0": 22.0, "u2t0": 30.25}
    proxy.done_at = {"u0t0": 15.0, "u0t1": 64.0, "u1t0": 27.0, "u2t0": 33.0}
    proxy.calls = Counter(
        {
            ("front", "POST /v2/generate/text/async", 200): 3,
            ("front", "POST /v2/generate/text/async", 429): 2,
            ("front", "GET /v2/generate/text/status/{id}", 503): 4,
            ("worker", "POST /v2/generate/text/pop", 500): 7,
        }
    )
    results = [
        record("u0t0", "own", 10.0, 15.5),
        record("u0t1", "own", 60.0, 64.5),
        record("u1t0", "shared", 20.0, 27.75),
        record("u2t0", "none", 30.0, 33.5),
        record("u3t0", "none", 40.0, 40.1, 429, "rate_limit_exceeded"),
        record("u3t1", "none", 42.0, 42.1, 429, "rate_limit_exceeded"),
        record("u2t1", "none", 50.0, 50.1, 429, "rate_limit_exceeded"),
    ]
    options = argparse.Namespace(users=4, turns=2, no_passkey=False)
    summary = summarize(options, proxy, results, cpu=1.2, rss=2048, wall=60.0)
    assert summary["served_share"] == round(4 / 7, 4)
    assert summary["users_served_nothing"] == 1  # u3: both turns refused; u2 was served once
    assert summary["before_submit_own_key_s"] == {"p50": 1.0, "p95": 1.45, "p99": 1.49, "n": 2}  # 0.5 s and 1.5 s
    assert summary["before_submit_shared_key_s"] is None  # one value (2.0 s): no percentiles
    assert summary["answers"] == Counter({"200": 4, "429 rate_limit_exceeded": 3})
    assert summary["horde_429_by_route"] == {"POST /v2/generate/text/async": 2}
    assert summary["horde_other_errors"] == {"GET /v2/generate/text/status/{id} 503": 4}  # the workers' are theirs
    assert summary["user_429"] == 3
    assert summary["front_cpu_s_per_request"] == round(1.2 / 7, 4)
    assert summary["front_rss_mb"] == 2.0


def test_own_keys_are_read_from_the_store_before_any_registration(tmp_path: Path) -> None:
    (tmp_path / "bench-users.env").write_text("key-a\nkey-b\n\nkey-c\n")
    keys = {"HORDE_URL": "http://127.0.0.1:9/api"}  # nothing answers there: a registration would raise
    assert own_keys(keys, 2, tmp_path / "keys.env") == ["key-a", "key-b"]
    assert own_keys(keys, 3, tmp_path / "keys.env") == ["key-a", "key-b", "key-c"]


def test_missing_own_keys_are_registered_at_the_register_page_and_kept(tmp_path: Path) -> None:
    """Each missing key comes from one ``POST /register`` (the page's ``ah-api-key`` code) and is added to the store."""
    names: list[str] = []

    class RegisterPage(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            names.append(form["username"][0])
            page = f'<p>Your key:</p><code class="ah-api-key">key-of-{names[-1]}</code>'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            """Quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RegisterPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "bench-users.env").write_text("key-a\n")
        keys = {"HORDE_URL": f"http://127.0.0.1:{server.server_address[1]}/api"}
        assert own_keys(keys, 3, tmp_path / "keys.env") == ["key-a", "key-of-bench-user-1", "key-of-bench-user-2"]
    finally:
        server.shutdown()
    assert names == ["bench-user-1", "bench-user-2"]
    assert (tmp_path / "bench-users.env").read_text() == "key-a\nkey-of-bench-user-1\nkey-of-bench-user-2\n"
