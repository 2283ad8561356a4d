"""The devhorde's options and variables checked up front, shared by ``python -m devhorde`` and
``uvicorn devhorde.asgi:application``: a value it cannot use raises :class:`InvalidOptionError` whose message is the
one line to print after :data:`INVALID_CONFIGURATION` (``DEVHORDE_SCENARIO='buzy': no such scenario file, ...``).
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import ValidationError
from redis.connection import parse_url

from devhorde.scenario import Scenario, ScenarioNotFoundError, load_scenario

INVALID_CONFIGURATION: Final[str] = "Invalid devhorde configuration: "
"""The prefix of the one line an entry point prints (status 1) for an :class:`InvalidOptionError`."""


class InvalidOptionError(ValueError):
    """One option or variable the devhorde cannot use; the message is its one line."""


def whole_number(value: str | None, name: str, default: int, lowest: int) -> int:
    """``value`` as an integer of at least ``lowest`` (``default`` when None).

    Raises:
        InvalidOptionError: ``<name>='<value>': expected a whole number, <lowest> or more``.
    """
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = lowest - 1
    if number < lowest:
        raise InvalidOptionError(f"{name}={value!r}: expected a whole number, {lowest} or more")
    return number


def scenario_option(value: str | None, name: str) -> Scenario:
    """The scenario ``value`` names: a file, a bundled scenario's name, or the default one when None.

    Raises:
        InvalidOptionError: No such file or bundled name, a file that is not JSON, or not a valid scenario.
    """
    try:
        return load_scenario(value)
    except ScenarioNotFoundError as missing:
        raise InvalidOptionError(f"{name}={value!r}: {missing}") from None
    except json.JSONDecodeError as not_json:
        raise InvalidOptionError(f"{name}={value!r}: the file is not JSON ({not_json})") from None
    except ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise InvalidOptionError(
            f"{name}={value!r}: not a valid scenario ({invalid.error_count()} error(s); {where}: {first['msg']})"
        ) from None


def redis_url_option(value: str | None, name: str) -> str | None:
    """``value`` when redis-py can parse it as a Redis URL (None stays None: no Redis).

    Raises:
        InvalidOptionError: ``<name>='<value>': expected a Redis URL such as redis://127.0.0.1:6379/0: ...``.
    """
    if value is None:
        return None
    try:
        parse_url(value)  # type: ignore[no-untyped-call]
    except ValueError as invalid:
        raise InvalidOptionError(
            f"{name}={value!r}: expected a Redis URL such as redis://127.0.0.1:6379/0: {invalid}"
        ) from None
    return value
