"""Whose call a call to the Horde is: the client's address and the proxy headers (real-horde.md "Rate limits").

With ``HORDE_OAI_PROXY_PASSKEY`` (a service account's proxy passkey), every call carries ``Proxy-Authorization:
<passkey>`` and ``Proxied-For: <client address>``, so the Horde counts each end user's own address instead of the
front's. The address is the one the admission guards cap (:func:`scope_client_address`: the connection's peer, or the
first entry of ``HORDE_OAI_CLIENT_ADDRESS_HEADER`` behind a trusted proxy), carried from the ASGI boundary (chat.asgi)
in :data:`CLIENT_ADDRESS`. A call made outside any request (none known) sends no ``Proxied-For``. The passkey is never
logged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

CLIENT_ADDRESS: ContextVar[str | None] = ContextVar("horde_oai_client_address", default=None)
"""The address of the client whose request is being served (set by chat.asgi for each HTTP request); the
``Proxied-For`` of every call made for it, and its address budget at the Horde."""

PROXY_AUTHORIZATION: Final[str] = "Proxy-Authorization"
PROXIED_FOR: Final[str] = "Proxied-For"


def address_header_name(header: str | None) -> bytes | None:
    """``HORDE_OAI_CLIENT_ADDRESS_HEADER`` as an ASGI header name (lower-case bytes), or None when unset."""
    return header.lower().encode("latin-1") if header else None


def scope_client_address(scope: Mapping[str, Any], header: bytes | None) -> str:
    """The client address of an ASGI HTTP scope: the first entry of the trusted ``header`` when configured and
    present, else the connection's peer address ("" when the server gives none). The admission guards' per-client
    cap and the ``Proxied-For`` header both use it.
    """
    if header is not None:
        for name, value in scope.get("headers") or ():
            if name.lower() == header:
                first = str(value.decode("latin-1")).split(",")[0].strip()
                if first:
                    return first
    peer = scope.get("client")
    return str(peer[0]) if peer else ""


@contextmanager
def serving_client(address: str | None) -> Iterator[None]:
    """Within the block, calls to the Horde are made for ``address`` (:data:`CLIENT_ADDRESS`)."""
    token = CLIENT_ADDRESS.set(address or None)
    try:
        yield
    finally:
        CLIENT_ADDRESS.reset(token)


def proxy_headers(passkey: str | None) -> dict[str, str]:
    """``Proxy-Authorization: <passkey>`` and ``Proxied-For`` for the current client (:data:`CLIENT_ADDRESS`, left out
    when none is known), or nothing without a passkey.
    """
    if passkey is None:
        return {}
    headers = {PROXY_AUTHORIZATION: passkey}
    address = CLIENT_ADDRESS.get()
    if address:
        headers[PROXIED_FOR] = address
    return headers
