"""The kudos cap refusal's numbers (``native-horde-chat.md``, "Submit": ``ChatKudosCapExceeded``): the devhorde writes
them as plain decimals, never rounded and never with an exponent, so the front's ``KUDOS_CAP_EXCESS_PATTERN`` reads
them back."""

from __future__ import annotations

import pytest
from devhorde_helpers import chat, scenario, submit, worker

from chat.errors import KUDOS_CAP_EXCESS_PATTERN, kudos_cap_error
from devhorde.answers import format_number


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.001, "0.001"),
        (1, "1"),
        (1.0, "1"),
        (215, "215"),
        (215.0, "215"),
        (12.5, "12.5"),
        (1234567.5, "1234567.5"),
        (1_000_000.0, "1000000"),
        (1e-7, "0.0000001"),
    ],
)
def test_format_number_is_the_shortest_exact_decimal(value: float, text: str) -> None:
    assert format_number(value) == text
    assert float(text) == value


def message(estimate: str, cap: str) -> str:
    return (
        f"The request's kudos estimate at current pricing is {estimate}, above its horde.max_kudos of {cap}. "
        "The estimate assumes the full max_tokens is generated."
    )


# The estimate is round(max_length * kudos_per_token, 2): 860 * 0.25 = 215, 1024 * 2469135/2048 = 1234567.5 and
# 1024 * 2469136/2048 = 1234568 (the prices are exact binary fractions, so the products are exact).
CASES = [
    (860, 0.25, 0.001, "215", "0.001"),
    (860, 0.25, 1, "215", "1"),
    (1024, 2469135 / 2048, 215, "1234567.5", "215"),
    (1024, 2469136 / 2048, 1234567.5, "1234568", "1234567.5"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("max_length", "kudos_per_token", "max_kudos", "estimate", "cap"), CASES)
async def test_kudos_cap_message_writes_exact_plain_numbers(
    make_client, max_length: int, kudos_per_token: float, max_kudos: float, estimate: str, cap: str
) -> None:
    """The devhorde's refusal, and the front's pattern reading its numbers back.

    ref: kudos-cap.2"""
    client = await make_client(scenario(worker("w1", max_length=2048), kudos_per_token=kudos_per_token))
    response = await submit(client, chat(params={"max_length": max_length}, max_kudos=max_kudos))
    assert response.status_code == 400
    assert response.json() == {"message": message(estimate, cap), "rc": "ChatKudosCapExceeded"}
    match = KUDOS_CAP_EXCESS_PATTERN.search(response.json()["message"])
    assert match is not None
    assert (float(match["kudos_estimate"]), float(match["max_kudos"])) == (max_length * kudos_per_token, max_kudos)


@pytest.mark.parametrize("estimate", [0.001, 1, 215, 1234567.5])
@pytest.mark.parametrize("cap", [0.001, 1, 215, 1234567.5])
def test_front_reads_the_numbers_back(estimate: float, cap: float) -> None:
    """The front's pattern reads both numbers of a message the devhorde formats, and its error carries them as
    numbers (reference: Kudos cap).

    ref: kudos-cap.2, kudos-cap.5"""
    text = message(format_number(estimate), format_number(cap))
    match = KUDOS_CAP_EXCESS_PATTERN.search(text)
    assert match is not None
    assert (match["kudos_estimate"], match["max_kudos"]) == (format_number(estimate), format_number(cap))
    metadata = kudos_cap_error(text).metadata
    assert metadata is not None
    assert (metadata["kudos_estimate"], metadata["max_kudos"]) == (estimate, cap)
    assert type(metadata["kudos_estimate"]) is type(estimate)
    assert type(metadata["max_kudos"]) is type(cap)
