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


def every_builder() -> list[errors.OpenAIError]:
    """One error from each builder of the front's refusals, including the ones whose headers are computed."""
    from chat.horde.native import HordeRefusal, NativeStatus
    from chat.horde.real_horde_answers import kudos_upfront_error
    from chat.horde.refusals import error_from_refusal
    from chat.waiting import availability
    from oaifront.guards import at_capacity_error, body_timeout_error, too_large_error

    waiting = NativeStatus(eligible_worker_threads=0, wait_time=40)
    return [
        availability.faulted_error(NativeStatus(faulted=True, fault_reason="prompt_overflow"), "r1"),
        availability.faulted_error(NativeStatus(faulted=True, fault_reason="backend crashed"), "r1"),
        availability.queue_unavailable_error(
            availability.NO_ELIGIBLE_THREADS, waiting, remaining_seconds=12.5, request_id="r1"
        ),
        availability.grace_error(60, "r1"),
        availability.no_generation_error("r1"),
        at_capacity_error(2, per_client=True),
        body_timeout_error(10),
        too_large_error(1024),
        kudos_upfront_error("Due to heavy demand, ...", None),
        error_from_refusal(HordeRefusal(429, "2 per 1 second", None, headers={"Retry-After": "1"})),
        error_from_refusal(HordeRefusal(401, "No user matching sent API Key.", "InvalidAPIKey")),
        errors.no_eligible_worker("No worker."),
        errors.front_shutting_down("abc"),
        errors.horde_unavailable("HTTP 500 Internal Server Error", reached=True),
        errors.kudos_cap_error("The cap."),
    ]


@pytest.mark.parametrize("error", every_builder(), ids=lambda error: f"{error.code}-{sorted(error.headers())}")
def test_every_builder_sends_only_the_headers_its_catalogue_row_declares(error: errors.OpenAIError) -> None:
    """The OpenAPI document lists a status's retry headers from the catalogue (front_operations.openapi.error_table), so
    a builder that sent a header its row does not declare would make the document wrong: each builder's headers are
    among its row's, with its status and type."""
    failure = errors.FAILURES[str(error.code)]
    assert (error.status, error.type) == (failure.status, failure.type)
    declared = {
        header
        for header, sent in (
            (errors.RETRY_AFTER_HEADER, failure.sends_retry_after),
            (errors.SHOULD_RETRY_HEADER, failure.sends_should_retry),
        )
        if sent
    }
    assert set(error.headers()) <= declared, (error.code, error.headers())
