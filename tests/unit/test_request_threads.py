"""Each request's thread-sensitive work (Django's ``sync_to_async(response.close)``, the cache) runs on a thread reused
from request to request, never on a thread started and joined for that request alone (chat.asgi.RequestThreads;
bench/README.md, "Stop 41: the non-streamed regression"), and a task that outlives its request keeps working."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import httpx
import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.asgi import get_asgi_application
from django.core.signals import request_finished

from chat.asgi import THREAD_NAME_PREFIX, RequestThreads
from chat.horde.budget import single_flight
from oaifront.guards import ASGIApp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def closing_threads() -> Iterator[list[threading.Thread]]:
    """The thread each response was closed on (Django sends ``request_finished`` from ``response.close``)."""
    threads: list[threading.Thread] = []

    def on_finished(sender: object, **kwargs: object) -> None:
        threads.append(threading.current_thread())

    request_finished.connect(on_finished)
    yield threads
    request_finished.disconnect(on_finished)


@pytest.mark.asyncio
async def test_requests_one_after_another_close_their_responses_on_one_reused_thread(
    closing_threads: list[threading.Thread],
) -> None:
    """Five requests in turn: one executor made, every response closed on its one thread."""
    served = RequestThreads(cast("ASGIApp", get_asgi_application()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://testserver") as client:
        statuses = [(await client.get("/healthz")).status_code for _ in range(5)]
    served.shutdown()
    assert statuses == [200] * 5
    assert served.made == 1
    assert len(closing_threads) == 5
    assert all(thread is closing_threads[0] for thread in closing_threads)
    assert closing_threads[0].name == f"{THREAD_NAME_PREFIX}_0"


@pytest.mark.asyncio
async def test_requests_at_once_each_hold_an_executor_and_leave_them_idle_for_the_next() -> None:
    """Three requests at once borrow three executors; three more afterwards reuse them; beyond ``idle_executors``
    an executor given back is shut down."""
    served = RequestThreads(cast("ASGIApp", get_asgi_application()), idle_executors=2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://testserver") as client:
        first = await asyncio.gather(*(client.get("/healthz") for _ in range(3)))
        assert len(served.idle) == 2
        second = await asyncio.gather(*(client.get("/healthz") for _ in range(2)))
    served.shutdown()
    assert [response.status_code for response in first + second] == [200] * 5
    assert served.made == 3
    assert served.idle == []


def test_the_front_serves_django_through_request_threads() -> None:
    """``oaifront.asgi.application`` (what uvicorn serves; built by :func:`chat.asgi.with_front_lifespan`, as a host
    project's is) closes four requests' responses on one reused thread of
    its pool, not on a thread of its own per request as Django's per-request ``ThreadSensitiveContext()`` would.
    Run in a fresh interpreter: importing oaifront.asgi configures the process's logging."""
    program = textwrap.dedent(
        """
        import asyncio, json, threading
        import httpx
        from oaifront import asgi
        from django.core.signals import request_finished

        names = []
        request_finished.connect(lambda sender, **kwargs: names.append(threading.current_thread().name), weak=False)

        async def main():
            transport = httpx.ASGITransport(app=asgi.application)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                for _ in range(4):
                    assert (await client.get("/healthz")).status_code == 200

        asyncio.run(main())
        print(json.dumps({"names": names}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"names": [f"{THREAD_NAME_PREFIX}_0"] * 4}


@pytest.mark.asyncio
async def test_a_shared_read_that_outlives_the_request_that_started_it_still_makes_its_thread_sensitive_calls() -> None:
    """A request starts a single-flight read inside its own executor context and leaves; the read's later
    thread-sensitive call (Django's cache goes through one) runs instead of raising asgiref's RuntimeError, and a
    second caller gets its result."""
    release = asyncio.Event()

    async def read() -> str:
        await release.wait()
        return await sync_to_async(lambda: "kept", thread_sensitive=True)()

    executor = ThreadPoolExecutor(max_workers=1)

    async def request() -> None:
        async with ThreadSensitiveContext(executor=executor):
            await single_flight("outliving-read", read)

    leaving = asyncio.ensure_future(request())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    leaving.cancel()  # the client left: its context exits while the read waits
    with pytest.raises(asyncio.CancelledError):
        await leaving
    staying = asyncio.ensure_future(single_flight("outliving-read", read))
    release.set()
    assert await staying == "kept"
    executor.shutdown()
