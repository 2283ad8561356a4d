"""A front stopped with SIGTERM while requests are open ends each one properly, then exits.

A real uvicorn process serves the front (its own, so stopping it leaves the shared stack alone), beside its own
devhorde and the Redis on 127.0.0.1:6379. Three requests are open when SIGTERM arrives: a relayed stream in the middle
of its text, a stream still waiting for a worker (keepalives only) and a non-streamed request waiting for a worker.
Each must end at once: the streams with the ``FrontShuttingDown`` error event and ``data: [DONE]``, the waiting request
with a 503 JSON error and ``Retry-After``; every native request is cancelled at the Horde; the process exits cleanly.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

import httpx
import pytest

from tests.conftest import start_devhorde, start_front
from tests.polling import eventually

pytestmark = pytest.mark.integration

API_KEY = "0000000000"
STRICT = "prompt_overflow_refused"
SHUTDOWN_SCENARIO: dict[str, Any] = {
    "name": "shutdown",
    "description": "A slow streaming worker and a stuck one (tests/integration/test_sigterm_shutdown.py).",
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "slow-1",
            "model": "shut/slow-7b",
            "features": [STRICT],
            "threads": 2,
            "reply_words": 400,
            "time_to_first_token_seconds": 0.05,
            "tokens_per_second": 8,
            "post_interval_seconds": 0.25,
        },
        {
            "name": "stuck-1",
            "model": "shut/stuck-2b",
            "features": [STRICT],
            "threads": 4,
            "time_to_first_token_seconds": 600,
            "tokens_per_second": 1,
            "post_interval_seconds": 1,
        },
    ],
}
EXPECTED_ERROR_KEYS = ["message", "type", "param", "code", "metadata"]
MESSAGE = (
    "The front is stopping, so it gave up waiting for this request and cancelled it at the Horde. "
    "Retry in a few seconds."
)
STOP_BUDGET_SECONDS = 30.0
"""How long the stopped front may take to exit: its own work is immediate (the cancels are a few loopback calls);
the margin covers a loaded machine."""


class StreamReader(threading.Thread):
    """Streams one request with httpx and keeps each ``data:`` payload as it arrives."""

    def __init__(self, base_url: str, model: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.model = model
        self.events: list[str] = []
        self.status: int | None = None
        self.failure: BaseException | None = None

    def run(self) -> None:
        body = {
            "model": self.model,
            "stream": True,
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": f"Tell me a long story. [{self.model}]"}],
        }
        try:
            with httpx.stream(
                "POST",
                f"{self.base_url}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {API_KEY}"},
                timeout=60,
            ) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line.removeprefix("data: "))
        except BaseException as failure:  # noqa: BLE001 - reported by the test
            self.failure = failure

    def contents(self) -> int:
        return sum('"content"' in event for event in self.events)


class PlainRequest(threading.Thread):
    """One non-streamed request with httpx; keeps the response."""

    def __init__(self, base_url: str, model: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.model = model
        self.response: httpx.Response | None = None

    def run(self) -> None:
        self.response = httpx.post(
            f"{self.base_url}/v1/chat/completions",
            json={"model": self.model, "messages": [{"role": "user", "content": f"Hi. [{self.model}]"}]},
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=60,
        )


def test_sigterm_ends_every_open_request_properly_and_cancels_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ref: stream-errors.2, stream-errors.3, final-reply-reconciliation.8, cancel-outcomes.1"""
    tmp = tmp_path_factory.mktemp("shutdown")
    devhorde, horde_url = start_devhorde(tmp, scenario=None)
    control = horde_url.removesuffix("/api") + "/_devhorde"
    front = None
    try:
        httpx.put(f"{control}/scenario", json=SHUTDOWN_SCENARIO, timeout=5).raise_for_status()
        front, base = start_front(tmp, horde_url)
        relayed = StreamReader(base, "shut/slow-7b")
        waiting_stream = StreamReader(base, "shut/stuck-2b")
        waiting_plain = PlainRequest(base, "shut/stuck-2b")
        for thread in (relayed, waiting_stream, waiting_plain):
            thread.start()

        def natives() -> list[dict[str, Any]]:
            return httpx.get(f"{control}/requests", timeout=5).json()

        eventually(lambda: relayed.contents() >= 3, timeout=20.0, what="the relayed stream's text to flow")
        eventually(
            lambda: len(natives()) == 3 and waiting_stream.status == 200, timeout=20.0, what="three open requests"
        )
        assert all(request["state"] in ("waiting", "processing") for request in natives())

        front.popen.send_signal(signal.SIGTERM)
        for thread in (relayed, waiting_stream, waiting_plain):
            thread.join(STOP_BUDGET_SECONDS)
            assert not thread.is_alive()
        # uvicorn re-raises the captured SIGTERM once its shutdown is complete, so the exit status is -SIGTERM.
        assert front.popen.wait(STOP_BUDGET_SECONDS) in (0, -signal.SIGTERM), front.log()
        assert "Application shutdown complete." in front.log()

        ids = {
            request["payload"]["models"][0] + ("-stream" if request["payload"].get("stream") else ""): request["id"]
            for request in natives()
        }
        for reader in (relayed, waiting_stream):
            assert reader.failure is None, reader.failure
            assert reader.status == 200
            assert reader.events[-1] == "[DONE]"
            error = json.loads(reader.events[-2])["error"]
            assert list(error) == EXPECTED_ERROR_KEYS  # no x_horde
            assert (error["type"], error["code"], error["param"], error["message"]) == (
                "api_error",
                "FrontShuttingDown",
                None,
                MESSAGE,
            )
            assert error["metadata"] == {"request_id": ids[f"{reader.model}-stream"], "retry_after": 5}
            assert not any('"error"' in event for event in reader.events[:-2])
        assert relayed.contents() >= 3  # it was cut in the middle of its text

        response = waiting_plain.response
        assert response is not None and response.status_code == 503
        assert response.headers["Retry-After"] == "5"
        assert "x-should-retry" not in response.headers
        assert response.json() == {
            "error": {
                "message": MESSAGE,
                "type": "api_error",
                "param": None,
                "code": "FrontShuttingDown",
                "metadata": {"request_id": ids["shut/stuck-2b"]},
            }
        }
        ended = natives()
        assert [(r["state"], r["cancelled"]) for r in ended] == [("cancelled", True)] * 3, ended
    finally:
        if front is not None:
            front.stop()
        devhorde.stop()


IMAGE_SHUTDOWN_SCENARIO: dict[str, Any] = {
    "name": "image-shutdown",
    "description": "An image worker that holds its job for ten minutes (tests/integration/test_sigterm_shutdown.py).",
    "queue_position_delay_seconds": 0,
    "workers": [],
    "images": {"workers": [{"name": "stuck-painter", "models": ["stable_diffusion"], "seconds_per_image": 600}]},
}


def test_sigterm_cancels_a_waiting_image_request_at_the_horde(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An image request waiting when SIGTERM arrives gets 503 ``FrontShuttingDown`` with ``Retry-After: 5`` and is
    cancelled at the Horde before the process exits (issue 39). The cancel goes out during the graceful wait; that the
    lifespan shutdown also drains the image route's queue (a failed cancel tried once more) is pinned in process by
    tests/unit/test_images.py::test_the_image_cancel_queue_is_drained_when_the_runtime_closes."""
    tmp = tmp_path_factory.mktemp("image-shutdown")
    devhorde, horde_url = start_devhorde(tmp, scenario=None)
    control = horde_url.removesuffix("/api") + "/_devhorde"
    front = None
    try:
        httpx.put(f"{control}/scenario", json=IMAGE_SHUTDOWN_SCENARIO, timeout=5).raise_for_status()
        front, base = start_front(tmp, horde_url)
        answers: list[httpx.Response] = []
        request = threading.Thread(
            target=lambda: answers.append(
                httpx.post(
                    f"{base}/v1/images/generations",
                    json={"model": "stable_diffusion", "prompt": "a lighthouse", "size": "512x512"},
                    headers={"Authorization": f"Bearer {API_KEY}"},
                    timeout=60,
                )
            ),
            daemon=True,
        )
        request.start()

        def image_requests() -> list[dict[str, Any]]:
            return list(httpx.get(f"{control}/images", timeout=5).json()["requests"])

        eventually(lambda: len(image_requests()) == 1, timeout=20.0, what="the image request at the Horde")
        front.popen.send_signal(signal.SIGTERM)
        request.join(STOP_BUDGET_SECONDS)
        assert not request.is_alive()
        assert front.popen.wait(STOP_BUDGET_SECONDS) in (0, -signal.SIGTERM), front.log()
        (response,) = answers
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "5"
        error = response.json()["error"]
        assert (error["code"], error["message"]) == ("FrontShuttingDown", MESSAGE)
        assert [entry["cancelled"] for entry in image_requests()] == [True]
    finally:
        if front is not None:
            front.stop()
        devhorde.stop()
