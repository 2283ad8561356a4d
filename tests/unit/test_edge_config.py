"""deploy/nginx.conf answers as the front answers (issue 34; docs/edge.md): its refusal bodies are byte for byte the
admission guards' own, its body limit is the front's, and it sets the client address header the front reads.

The lane in tests/edge runs it under nginx; this reads the file, so it holds wherever nginx is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

from chat.settings import DEFAULT_MAX_BODY_BYTES, FrontSettings
from oaifront.guards import at_capacity_error, refusal_answer, too_large_error

CONFIG = (Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf").read_text()


def returned(status: int) -> bytes:
    """The body of the config's ``return <status> '...';`` (nginx's single-quoted string, ``\\'`` unescaped)."""
    [body] = re.findall(rf"return {status} '((?:[^'\\]|\\.)*)';", CONFIG)
    return body.replace("\\'", "'").encode()


def directive(name: str) -> list[str]:
    return re.findall(rf"^\s*{name}\s+([^;]+);", CONFIG, flags=re.MULTILINE)


def test_the_503_is_the_guards_front_at_capacity_body() -> None:
    assert returned(503) == refusal_answer(at_capacity_error(1, per_client=True))[1]
    assert "add_header Retry-After 1 always;" in CONFIG
    assert "add_header x-should-retry true always;" in CONFIG
    assert FrontSettings.model_fields["capacity_retry_after_seconds"].default == 1


def test_the_413_is_the_guards_body_at_the_fronts_limit() -> None:
    assert returned(413) == refusal_answer(too_large_error(DEFAULT_MAX_BODY_BYTES))[1]
    assert directive("client_max_body_size") == [str(DEFAULT_MAX_BODY_BYTES)]


def test_the_limits_timeouts_and_proxying() -> None:
    assert directive("limit_conn") == [
        f"per_address_conn {FrontSettings.model_fields['max_in_flight_per_client'].default}"
    ]
    assert directive("limit_conn_status") == directive("limit_req_status") == ["503"]
    assert directive("client_header_timeout") == ["10s"]
    assert directive("client_body_timeout") == ["30s"]
    assert directive("keepalive_timeout") == ["5s", "4s"]  # clients; the upstream's, under uvicorn's 5 s
    assert directive("proxy_buffering") == ["off"]
    assert directive("proxy_set_header X-Forwarded-For") == ["$remote_addr"]
    assert directive("proxy_set_header Connection") == ['""']
    assert directive("keepalive") == ["64"]
    # Longer than the longest silent wait of a non-streamed request and than a stream's whole time.
    fields = FrontSettings.model_fields
    longest = max(fields["nonstream_timeout_seconds"].default, fields["stream_timeout_seconds"].default)
    assert directive("proxy_read_timeout") == [f"{int(longest) + 60}s"]
