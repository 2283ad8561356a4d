"""Readiness, a disallowed Host and Django's debug pages, through uvicorn.

``GET /readyz`` answers 200 when the Horde answers its heartbeat and, when configured, Redis answers; 200
``degraded`` when only Redis is down (503 with ``HORDE_OAI_READINESS_STRICT=true``); else 503 naming what failed,
without any address or password. A disallowed ``Host`` is a JSON 400 without a traceback in the
log; ``DJANGO_DEBUG`` never turns the API's 404 into HTML.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import REDIS_URL, free_port, start_devhorde, start_front

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def devhorde(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, horde_url = start_devhorde(tmp_path_factory.mktemp("ready"), redis=False)
    try:
        yield horde_url
    finally:
        process.stop()


def test_ready_when_the_horde_and_redis_answer(devhorde: str, tmp_path: pytest.TempPathFactory) -> None:
    front, url = start_front(tmp_path, devhorde, env={"HORDE_OAI_REDIS_URL": REDIS_URL})  # type: ignore[arg-type]
    try:
        response = httpx.get(f"{url}/readyz", timeout=10)
        assert response.status_code == 200
        assert response.json() == {"status": "ready", "checks": {"horde": "ok", "redis": "ok"}}
        assert httpx.get(f"{url}/readyz", timeout=10).json()["status"] == "ready"
        assert "/readyz" not in httpx.get(f"{url}/openapi.json", timeout=10).json()["paths"]
    finally:
        front.stop()


def test_not_ready_names_what_failed_without_secrets(tmp_path: pytest.TempPathFactory) -> None:
    dead = free_port()
    redis_url = f"redis://:s3cret-password@127.0.0.1:{free_port()}/0"
    front, url = start_front(
        tmp_path,  # type: ignore[arg-type]
        f"http://127.0.0.1:{dead}/api",
        redis=False,
        env={"HORDE_OAI_REDIS_URL": redis_url, "HORDE_OAI_READINESS_CACHE_SECONDS": "0"},
    )
    try:
        response = httpx.get(f"{url}/readyz", timeout=20)
        assert response.status_code == 503
        assert response.json() == {
            "status": "not_ready",
            "checks": {"horde": "unreachable", "redis": "unreachable (ConnectionError)"},
        }
        assert "s3cret" not in response.text
    finally:
        front.stop()
    assert "s3cret" not in front.log()


def test_redis_down_alone_is_degraded_and_still_serves(devhorde: str, tmp_path: pytest.TempPathFactory) -> None:
    """Readiness means "can serve": a front whose Redis does not answer serves streams whole, so it stays ready."""
    redis_url = f"redis://:s3cret-password@127.0.0.1:{free_port()}/0"
    front, url = start_front(
        tmp_path,  # type: ignore[arg-type]
        devhorde,
        redis=False,
        env={"HORDE_OAI_REDIS_URL": redis_url, "HORDE_OAI_READINESS_CACHE_SECONDS": "0"},
    )
    try:
        response = httpx.get(f"{url}/readyz", timeout=20)
        assert response.status_code == 200
        assert response.json() == {
            "status": "degraded",
            "checks": {"horde": "ok", "redis": "degraded"},
            "degraded": {"redis": {"reason": "unreachable (ConnectionError)", "fallback": "buffered"}},
        }
        assert "s3cret" not in response.text
        model = httpx.get(f"{url}/v1/models", timeout=20).json()["data"][0]["id"]
        served = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "Hi."}], "stream": True},
            timeout=30,
        )
        assert served.status_code == 200
        assert served.text.rstrip().endswith("data: [DONE]")
    finally:
        front.stop()


def test_strict_readiness_makes_redis_down_not_ready(devhorde: str, tmp_path: pytest.TempPathFactory) -> None:
    """``HORDE_OAI_READINESS_STRICT=true``: Redis down is a 503, as before the degraded mode."""
    front, url = start_front(
        tmp_path,  # type: ignore[arg-type]
        devhorde,
        redis=False,
        env={
            "HORDE_OAI_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "HORDE_OAI_READINESS_CACHE_SECONDS": "0",
            "HORDE_OAI_READINESS_STRICT": "true",
        },
    )
    try:
        response = httpx.get(f"{url}/readyz", timeout=20)
        assert response.status_code == 503
        assert response.json() == {
            "status": "not_ready",
            "checks": {"horde": "ok", "redis": "unreachable (ConnectionError)"},
        }
    finally:
        front.stop()


@pytest.mark.parametrize("debug", ["false", "true"])
def test_horde_only_readiness_disallowed_host_and_unknown_routes_are_json(
    devhorde: str, tmp_path: pytest.TempPathFactory, debug: str
) -> None:
    front, url = start_front(
        tmp_path,  # type: ignore[arg-type]
        devhorde,
        redis=False,
        env={"DJANGO_ALLOWED_HOSTS": "127.0.0.1", "DJANGO_DEBUG": debug},
    )
    try:
        assert httpx.get(f"{url}/readyz", timeout=10).json() == {"status": "ready", "checks": {"horde": "ok"}}
        refused = httpx.get(f"{url}/v1/models", headers={"Host": "evil.example"}, timeout=10)
        assert refused.status_code == 400
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"]["code"] == "BadRequest"
        missing = httpx.get(f"{url}/v1/embeddings", timeout=10)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "unknown_url"
    finally:
        front.stop()
    log: str = front.log()
    assert "Traceback" not in log
    assert "Bad Request: /v1/models" not in log
