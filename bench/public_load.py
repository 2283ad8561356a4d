"""``python -m bench.public_load``: the front as a public deployment in front of the REAL AI Horde (the
public-deployment load test, at a size of your choosing).

Needs a harness of ../shared/realhorde of your own (``--keys-env``, default ``$RH_KEYS_ENV``: ``HORDE_URL``,
``CLIENT_KEY``, ``ADMIN_KEY``, ``WORKER_KEY``, ``PROXY_PASSKEY``), never the shared one, whose other users its
workers and its load would disturb; without one answering it prints why and exits 0 (``make bench`` skips it
without ``RH_KEYS_ENV``).

What runs, all on loopback:

- a **logging reverse proxy** (this module, :class:`CountingProxy`) between everything and the Horde, counting the
  calls by route and status, and timing each request's submit (``POST /v2/generate/text/async``) and its
  generation's end (the worker's ``POST /v2/generate/text/submit``), matched through a marker in the prompt;
- a **worker fleet**: ``--fleet`` simulated text workers (the harness's ``worker.py``, one job at a time each), with
  reply delays spread over ``--delays`` seconds;
- the **front**: ``WORKERS=--front-workers`` uvicorn processes sharing ``--redis-url`` (pacing, caches), trusting
  ``X-Forwarded-For`` (``HORDE_OAI_CLIENT_ADDRESS_HEADER``), with the proxy passkey unless ``--no-passkey``;
- ``--users`` users with distinct addresses arriving over ``--arrival`` seconds, each ``--turns`` turns with their
  history, ``--think`` seconds apart; every other user streams; ``max_tokens`` 64-300; a fifth of them with a key of
  their own (users registered at the harness's ``/register`` page the first time, their keys kept in
  ``bench-users.env`` beside ``keys.env`` for the next runs), a tenth on one shared key (``CLIENT_KEY``), the rest
  anonymous.

It prints one JSON object: the served share, the statuses and codes the users got, end-to-end and added time
(end to end minus the Horde's own submit-to-done) p50/p95/p99, the front's time before its submit reaches the Horde
and after the Horde's generation is done, the Horde calls by route and per waiting request per second, the Horde's
429s by route (and every other answer above 299 by route and status) and the front's CPU seconds per request and
peak RSS. ``--logs DIR`` keeps the front's and the workers' logs there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from devhorde.launch import free_port, wait_http
from oaifront.serve import UVICORN_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
REALHORDE = Path(os.environ.get("REALHORDE_DIR", ROOT.parent / "shared" / "realhorde"))
"""The harness beside the checkout (``../shared/realhorde``), or ``REALHORDE_DIR``."""
MODEL = "koboldcpp/Qwen2.5-7B-Instruct"
MARKER = re.compile(r"\[m:(u\d+t\d+)\]")
STATUS_PATH = re.compile(r"^/api/v2/generate/text/status/[^/]+$")
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"})


def route_of(method: str, path: str) -> str:
    """A path with the request id taken out: one counter per route."""
    if STATUS_PATH.match(path):
        return f"{method} /v2/generate/text/status/{{id}}"
    return f"{method} {path.removeprefix('/api')}"


def last_marker(text: str) -> str | None:
    found = MARKER.findall(text)
    return found[-1] if found else None


class CountingProxy:
    """An HTTP/1.1 reverse proxy on loopback (keep-alive, ``Content-Length`` bodies) that forwards to ``upstream``
    and counts each call by caller (``front`` or ``worker``), route and status."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/api")
        self.calls: Counter[tuple[str, str, int]] = Counter()
        self.submitted_at: dict[str, float] = {}
        self.done_at: dict[str, float] = {}
        self._generation_marker: dict[str, str] = {}
        self._client = httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=200))
        self.port = free_port()

    async def serve(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=1024)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: list[tuple[str, str]] = []
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, value = header.decode("latin-1").split(":", 1)
                    headers.append((name.strip(), value.strip()))
                length = int(next((v for n, v in headers if n.lower() == "content-length"), "0"))
                body = await reader.readexactly(length) if length else b""
                status, out_headers, content = await self._forward(method, target, headers, body)
                head = [f"HTTP/1.1 {status} X"] + [f"{n}: {v}" for n, v in out_headers]
                head.append(f"Content-Length: {len(content)}")
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + content)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()

    async def _forward(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        path = target.split("?", 1)[0]
        caller = "worker" if path.endswith(("/text/pop", "/text/submit")) else "front"
        arrived = time.monotonic()
        sent = [(n, v) for n, v in headers if n.lower() not in HOP_HEADERS and n.lower() != "host"]
        try:
            response = await self._client.request(method, self.upstream + target, headers=sent, content=body)
        except httpx.HTTPError:
            self.calls[(caller, route_of(method, path), 502)] += 1
            return 502, [], b"{}"
        self.calls[(caller, route_of(method, path), response.status_code)] += 1
        self._observe(method, path, body, response, arrived)
        kept = [(n, v) for n, v in response.headers.items() if n.lower() not in HOP_HEADERS]
        return response.status_code, kept, response.content

    def _observe(self, method: str, path: str, body: bytes, response: httpx.Response, arrived: float) -> None:
        if method != "POST" or response.status_code >= 300:
            return
        try:
            sent = json.loads(body) if body else {}
            answer = response.json()
        except ValueError:
            return
        if path.endswith("/generate/text/async") and isinstance(sent, dict) and not sent.get("dry_run"):
            marker = last_marker(str(sent.get("prompt", "")))
            if marker is not None:
                self.submitted_at.setdefault(marker, arrived)
        elif path.endswith("/text/pop") and isinstance(answer, dict) and answer.get("id"):
            marker = last_marker(str((answer.get("payload") or {}).get("prompt", "")))
            if marker is not None:
                self._generation_marker[str(answer["id"])] = marker
        elif path.endswith("/text/submit") and isinstance(sent, dict):
            marker = self._generation_marker.get(str(sent.get("id")))
            if marker is not None:
                self.done_at.setdefault(marker, time.monotonic())


def load_keys(path: Path) -> dict[str, str]:
    keys: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            name, value = line.split("=", 1)
            keys[name.strip()] = value.strip()
    return keys


def own_keys(keys: dict[str, str], count: int, keys_env: Path) -> list[str]:
    """``count`` API keys of distinct registered users: read from ``bench-users.env`` beside ``keys_env``, the
    missing ones registered at the Horde's ``/register`` page (as a person does; a new user has 0 kudos) and added."""
    store = keys_env.parent / "bench-users.env"
    found = [line.strip() for line in store.read_text().splitlines() if line.strip()] if store.exists() else []
    site = keys["HORDE_URL"].removesuffix("/api")
    while len(found) < count:
        page = httpx.post(f"{site}/register", data={"username": f"bench-user-{len(found)}"}, timeout=30)
        key = re.search(r'<code class="ah-api-key">([^<]+)</code>', page.text)
        if key is None:
            raise RuntimeError(f"/register answered {page.status_code} without an API key")
        found.append(key.group(1))
        store.write_text("".join(f"{k}\n" for k in found))
    return found[:count]


def start_fleet(api: str, keys: dict[str, str], size: int, delays: tuple[float, float], work: Path) -> list[Any]:
    """``size`` workers named ``bench-worker-<n>`` (the same names every run: the Horde keeps every worker it saw).
    The Horde lets an untrusted user have 3 workers, so the worker account is made trusted first (``ADMIN_KEY``)."""
    if size > 3:
        user = f"{keys['HORDE_URL']}/v2/users/{keys['WORKER_ID']}"
        httpx.put(user, json={"trusted": True}, headers={"apikey": keys["ADMIN_KEY"]}, timeout=30).raise_for_status()
    fleet = []
    for index in range(size):
        delay = delays[0] + (delays[1] - delays[0]) * (index / max(1, size - 1))
        args = [sys.executable, "-u", str(REALHORDE / "worker.py"), "--horde-url", api, "--key", keys["WORKER_KEY"]]
        args += ["--name", f"bench-worker-{index}", "--models", MODEL, "--delay", f"{delay:.1f}"]
        args += ["--idle-sleep", "0.5", "--stop-file", str(work / "stop"), "--jobs-log", str(work / "jobs.jsonl")]
        args += ["--text", " Fine, thanks. {prompt_tail}"]
        log = (work / f"worker-{index}.log").open("wb")
        fleet.append(subprocess.Popen(args, stdout=log, stderr=log))
    return fleet


def start_front(env: dict[str, str], work: Path, workers: int, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "oaifront.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    args += [*UVICORN_OPTIONS, "--workers", str(workers), "--no-access-log"]
    log = (work / "front.log").open("wb")
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(args, cwd=root, env=full_env, stdout=log, stderr=log, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", process, 60 * workers)
    return process, base


def front_usage(process: subprocess.Popen[bytes]) -> tuple[float, int]:
    """CPU seconds and summed RSS (kB) of the front's processes (the uvicorn parent and its workers)."""
    pids = [process.pid]
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    if children.exists():
        pids += [int(pid) for pid in children.read_text().split()]
    cpu, rss = 0.0, 0
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / ticks
            status = Path(f"/proc/{pid}/status").read_text()
            rss += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
        except (OSError, StopIteration, ValueError):
            continue
    return cpu, rss


async def user(
    index: int, base: str, apikey: str | None, key_kind: str, turns: int, think: float, results: list[dict[str, Any]]
) -> None:
    """One user's ``turns`` turns; ``key_kind`` is ``own``, ``shared`` or ``none`` (anonymous), kept in each record."""
    rng = random.Random(index)
    address = f"10.88.{index // 250}.{index % 250 + 1}"
    headers = {"X-Forwarded-For": address, **({"Authorization": f"Bearer {apikey}"} if apikey else {})}
    history: list[dict[str, str]] = []
    stream = index % 2 == 1
    async with httpx.AsyncClient(timeout=600) as client:
        for turn in range(turns):
            marker = f"u{index}t{turn}"
            history.append({"role": "user", "content": f"Turn {turn}: how are you? [m:{marker}]"})
            body = {"model": MODEL, "messages": history, "max_tokens": rng.randint(64, 300), "stream": stream}
            started = time.monotonic()
            record: dict[str, Any] = {"marker": marker, "stream": stream, "sent": started, "key": key_kind}
            reply = ""
            try:
                if stream:
                    async with client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as r:
                        record["headers_after"] = time.monotonic() - started
                        record["status"] = r.status_code
                        if r.status_code >= 400:
                            record["code"] = json.loads(await r.aread() or b"{}").get("error", {}).get("code")
                        else:
                            async for line in r.aiter_lines():
                                if line.startswith("data: {"):
                                    event = json.loads(line[6:])
                                    if "error" in event:
                                        record["code"] = event["error"].get("code")
                                    for choice in event.get("choices", []):
                                        reply += (choice.get("delta") or {}).get("content") or ""
                else:
                    r = await client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
                    record["status"] = r.status_code
                    if r.status_code == 200:
                        reply = r.json()["choices"][0]["message"]["content"] or ""
                    else:
                        record["code"] = r.json().get("error", {}).get("code")
            except (httpx.HTTPError, ValueError) as error:
                record["status"], record["code"] = 0, type(error).__name__
            record["done"] = time.monotonic()
            results.append(record)
            history.append({"role": "assistant", "content": reply or "..."})
            await asyncio.sleep(think)


def percentiles(values: list[float]) -> dict[str, float] | None:
    if len(values) < 2:
        return None
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(cuts[49], 3), "p95": round(cuts[94], 3), "p99": round(cuts[98], 3), "n": len(values)}


async def run(options: argparse.Namespace, keys: dict[str, str], work: Path) -> dict[str, Any]:
    proxy = CountingProxy(keys["HORDE_URL"])
    server = await proxy.serve()
    api = f"http://127.0.0.1:{proxy.port}/api"
    for leftover in ("stop", "jobs.jsonl"):
        (work / leftover).unlink(missing_ok=True)
    fleet = start_fleet(api, keys, options.fleet, options.delays, work)
    env = {
        "HORDE_URL": api,
        "HORDE_OAI_REDIS_URL": options.redis_url,
        "HORDE_OAI_CLIENT_ADDRESS_HEADER": "X-Forwarded-For",
        "HORDE_OAI_MAX_IN_FLIGHT_PER_CLIENT": "8",
    }
    if not options.no_passkey:
        env["HORDE_OAI_PROXY_PASSKEY"] = keys["PROXY_PASSKEY"]
    front, base = start_front(env, work, options.front_workers, options.front_root)
    results: list[dict[str, Any]] = []
    try:
        await asyncio.sleep(options.warmup)  # the fleet's first pops put the model in the Horde's list
        cpu_before, _ = front_usage(front)
        own = iter(own_keys(keys, sum(1 for i in range(options.users) if i % 10 in (0, 5)), options.keys_env))
        tasks = []
        for index in range(options.users):
            kind = "own" if index % 10 in (0, 5) else "shared" if index % 10 == 3 else "none"
            apikey = next(own) if kind == "own" else keys["CLIENT_KEY"] if kind == "shared" else None
            tasks.append(asyncio.create_task(user(index, base, apikey, kind, options.turns, options.think, results)))
            await asyncio.sleep(options.arrival / options.users)
        started = time.monotonic()
        await asyncio.gather(*tasks)
        cpu_after, rss = front_usage(front)
        wall = time.monotonic() - started
    finally:
        (work / "stop").touch()
        front.terminate()
        front.wait(60)
        for worker in fleet:
            try:
                worker.wait(10)  # it stops at its next pop
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        server.close()
        await proxy.aclose()
    return summarize(options, proxy, results, cpu_after - cpu_before, rss, wall)


def summarize(
    options: argparse.Namespace, proxy: CountingProxy, results: list[dict[str, Any]], cpu: float, rss: int, wall: float
) -> dict[str, Any]:
    served = [r for r in results if r.get("status") == 200 and not r.get("code")]
    e2e = [r["done"] - r["sent"] for r in served]
    before, after, added, waited = [], [], [], 0.0
    before_by_key: dict[str, list[float]] = {"own": [], "shared": [], "none": []}
    for r in served:
        submit, done = proxy.submitted_at.get(r["marker"]), proxy.done_at.get(r["marker"])
        if submit is None or done is None:
            continue
        before.append(submit - r["sent"])
        before_by_key[r["key"]].append(submit - r["sent"])
        after.append(r["done"] - done)
        added.append((r["done"] - r["sent"]) - (done - submit))
        waited += r["done"] - submit
    front_calls: Counter[str] = Counter()
    horde_429: Counter[str] = Counter()
    horde_errors: Counter[str] = Counter()
    for (caller, route, status), count in proxy.calls.items():
        if caller == "front":
            front_calls[route] += count
            if status == 429:
                horde_429[route] += count
            elif status >= 300:
                horde_errors[f"{route} {status}"] += count
    status_reads = front_calls["GET /v2/generate/text/status/{id}"]
    return {
        "users": options.users,
        "turns": options.turns,
        "passkey": not options.no_passkey,
        "requests": len(results),
        "served_share": round(len(served) / max(1, len(results)), 4),
        "answers": Counter(f"{r.get('status')} {r.get('code') or ''}".strip() for r in results),
        "users_served_nothing": len(
            {r["marker"].split("t")[0] for r in results} - {r["marker"].split("t")[0] for r in served}
        ),
        "end_to_end_s": percentiles(e2e),
        "added_s": percentiles(added),
        "before_submit_s": percentiles(before),
        "before_submit_own_key_s": percentiles(before_by_key["own"]),
        "before_submit_shared_key_s": percentiles(before_by_key["shared"]),
        "before_submit_anonymous_s": percentiles(before_by_key["none"]),
        "after_done_s": percentiles(after),
        "stream_headers_s": percentiles([r["headers_after"] for r in results if "headers_after" in r]),
        "horde_calls_by_route": dict(front_calls.most_common()),
        "status_reads_per_waiting_request_per_s": round(status_reads / waited, 3) if waited else None,
        "horde_429_by_route": dict(horde_429),
        "horde_other_errors": dict(horde_errors),
        "user_429": sum(1 for r in results if r.get("status") == 429 or r.get("code") == "rate_limit_exceeded"),
        "front_cpu_s_per_request": round(cpu / max(1, len(results)), 4),
        "front_rss_mb": round(rss / 1024, 1),
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_keys = os.environ.get("RH_KEYS_ENV")
    parser.add_argument("--keys-env", type=Path, default=Path(default_keys) if default_keys else None)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--arrival", type=float, default=20.0, help="seconds over which the users arrive")
    parser.add_argument("--think", type=float, default=2.0, help="seconds between a user's turns")
    parser.add_argument("--fleet", type=int, default=6, help="simulated text workers (one job at a time each)")
    parser.add_argument("--delays", type=float, nargs=2, default=(4.0, 12.0), help="reply delays, first to last")
    parser.add_argument("--front-workers", type=int, default=2)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/7")
    parser.add_argument("--no-passkey", action="store_true")
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--logs", type=Path, default=None, help="keep the front's and the workers' logs here")
    parser.add_argument("--front-root", type=Path, default=ROOT, help="the checkout whose front runs (a before run)")
    options = parser.parse_args(argv)
    if options.keys_env is None:
        print("public_load: skipped (RH_KEYS_ENV unset: name the keys.env of a real-Horde harness of your own)")
        return
    if not options.keys_env.exists() or not (REALHORDE / "worker.py").exists():
        print(f"public_load: skipped (no real-Horde harness: {options.keys_env}, {REALHORDE / 'worker.py'})")
        return
    keys = load_keys(options.keys_env)
    try:
        httpx.get(f"{keys['HORDE_URL']}/v2/status/heartbeat", timeout=5).raise_for_status()
    except (httpx.HTTPError, KeyError) as error:
        print(f"public_load: skipped (the harness's Horde does not answer: {type(error).__name__})")
        return
    if options.logs is not None:
        options.logs.mkdir(parents=True, exist_ok=True)
        print(json.dumps(asyncio.run(run(options, keys, options.logs)), indent=1))
        return
    with tempfile.TemporaryDirectory(prefix="public-load-") as work:
        print(json.dumps(asyncio.run(run(options, keys, Path(work))), indent=1))


if __name__ == "__main__":
    main()
