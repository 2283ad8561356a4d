"""chat.errors' failure catalogue: the table in its docstring is :data:`chat.errors.FAILURES`, and the builders send
what the catalogue says (status, type, ``Retry-After``, ``x-should-retry``)."""

from __future__ import annotations

import re

import pytest

from chat import errors


def docstring_table() -> dict[str, tuple[int, str, str, str]]:
    """The rows of the module docstring's table: code -> (status, type, Retry-After, x-should-retry)."""
    doc = errors.__doc__ or ""
    rows: dict[str, tuple[int, str, str, str]] = {}
    for line in doc.splitlines():
        match = re.match(r"^(\w+)\s+(\d{3})\s+(\w+)\s+(the Horde's|computed|\d+|-)\s+(true|false|computed|-)\s*$", line)
        if match:
            rows[match[1]] = (int(match[2]), match[3], match[4], match[5])
    return rows


def test_the_docstring_table_is_the_catalogue() -> None:
    table = docstring_table()
    assert set(table) == set(errors.FAILURES)
    for code, failure in errors.FAILURES.items():
        status, type_, retry_after, should_retry = table[code]
        assert (status, type_) == (failure.status, failure.type), code
        if failure.retry_after is not None:
            assert retry_after == str(failure.retry_after), code
        else:
            computed = errors.RETRY_AFTER_HEADER in failure.computed
            assert retry_after in ({"computed", "the Horde's"} if computed else {"-"}), code
        if failure.should_retry is not None:
            assert should_retry == str(failure.should_retry).lower(), code
        else:
            assert should_retry == ("computed" if errors.SHOULD_RETRY_HEADER in failure.computed else "-"), code


def test_every_coded_leaf_of_the_tree_is_in_the_catalogue() -> None:
    tree = (errors.__doc__ or "").split("::", 1)[1].split("A Horde refusal", 1)[0]
    leaves = re.findall(r"[├└]── (\w+) [.\d]", tree)
    assert set(leaves) == set(errors.FAILURES)


@pytest.mark.parametrize(
    ("error", "status", "headers"),
    [
        (errors.no_eligible_worker("No worker."), 503, {"Retry-After": "30", "x-should-retry": "false"}),
        (errors.front_shutting_down("abc"), 503, {"Retry-After": "5"}),
        (errors.horde_unavailable("HTTP 500 Internal Server Error", reached=True), 502, {}),
        (errors.kudos_cap_error("The cap."), 400, {}),
    ],
)
def test_builders_send_the_catalogue_status_and_headers(
    error: errors.OpenAIError, status: int, headers: dict[str, str]
) -> None:
    failure = errors.FAILURES[str(error.code)]
    assert (error.status, error.type) == (failure.status, failure.type) == (status, failure.type)
    assert error.headers() == headers


def test_method_not_allowed_reads_the_catalogue() -> None:
    response = errors.method_not_allowed("POST")
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response.content == (
        b'{"error":{"message":"Method not allowed. Use POST.","type":"invalid_request_error","param":null,'
        b'"code":"method_not_allowed"}}'
    )
