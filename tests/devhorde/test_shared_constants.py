"""The Horde constants that both the front (``chat/``) and the development Horde (``devhorde/``) define.

The two copies are separate on purpose: the devhorde simulates the other side of the contract
(``native-horde-chat.md``), so it must not import the front, and the front must not import its test double. This test
keeps the two copies equal, so a change to one side that the other does not follow fails here instead of hiding
behind a simulator that agrees with the front by construction.

horde-sdk publishes none of them but the anonymous key (``horde_sdk.generic_api.consts.ANON_API_KEY``), which both
copies must also equal.
"""

from __future__ import annotations

import pytest
from horde_sdk.generic_api.consts import ANON_API_KEY

import chat.horde.native
import chat.limits
import devhorde.limits


@pytest.mark.parametrize(
    ("name", "front_module"),
    [
        ("DEFAULT_CHAT_MAX_TOKENS", chat.limits),
        ("MAX_CHAT_MODEL_COUNT", chat.limits),
        ("HORDE_CHAT_REQUEST_EXPIRY_SECONDS", chat.limits),
        ("ANONYMOUS_API_KEY", chat.horde.native),
    ],
)
def test_front_and_devhorde_copies_are_equal(name: str, front_module: object) -> None:
    """The front's copy of a Horde constant equals the devhorde's (contract: Submit, Status; reference: Model
    selection)."""
    front = getattr(front_module, name)
    simulated = getattr(devhorde.limits, name)
    assert type(front) is type(simulated)
    assert front == simulated


def test_anonymous_key_is_horde_sdks() -> None:
    """Both copies of the anonymous key are horde-sdk's ``ANON_API_KEY``."""
    assert chat.horde.native.ANONYMOUS_API_KEY == devhorde.limits.ANONYMOUS_API_KEY == ANON_API_KEY
