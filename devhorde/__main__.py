"""``python -m devhorde --host 127.0.0.1 --port 7001 [--scenario FILE] [--redis-url URL] [--stream-redis-db N]``.

Serves the development Horde with uvicorn; the API root is ``http://HOST:PORT/api`` (the front's ``HORDE_URL``).
Each option falls back to its environment variable: ``DEVHORDE_PORT``, ``DEVHORDE_SCENARIO``, ``DEVHORDE_REDIS_URL``,
``DEVHORDE_STREAM_REDIS_DB``. ``--scenario`` takes a file path or a bundled scenario's name (``default``, ``fast``,
...). A value it cannot use ends it with one line naming the option or variable, the value and what is expected
(``Invalid devhorde configuration: DEVHORDE_SCENARIO='buzy': ... one of aihorde, busy, default, ...``), status 1;
``--check`` validates everything and exits (``make run`` does so before it starts anything).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NamedTuple

import uvicorn

from devhorde.app import ENV_REDIS_URL, ENV_SCENARIO, ENV_STREAM_REDIS_DB, create_app
from devhorde.options import (
    INVALID_CONFIGURATION,
    InvalidOptionError,
    redis_url_option,
    scenario_option,
    whole_number,
)
from devhorde.scenario import Scenario

ENV_PORT = "DEVHORDE_PORT"
"""The environment variable of ``--port``."""


class Options(NamedTuple):
    """The validated options."""

    host: str
    port: int
    scenario: Scenario
    redis_url: str | None
    stream_redis_db: int
    log_level: str


def _given(value: str | None, flag: str, variable: str) -> tuple[str | None, str]:
    """The value of an option (else its environment variable's) and the name to quote in an error."""
    if value is not None:
        return value, flag
    return os.environ.get(variable) or None, variable


def parse_options(argv: list[str] | None = None) -> tuple[Options, bool]:
    """The validated options and whether ``--check`` was given.

    Raises:
        InvalidOptionError: A value the devhorde cannot use.
    """
    parser = argparse.ArgumentParser(prog="python -m devhorde", description="The development Horde (native chat).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default=None, help=f"default: ${ENV_PORT}, else 7001")
    parser.add_argument("--scenario", default=None, help=f"a file or a bundled name; default: ${ENV_SCENARIO}")
    parser.add_argument("--redis-url", default=None, help=f"default: ${ENV_REDIS_URL}")
    parser.add_argument("--stream-redis-db", default=None, help=f"default: ${ENV_STREAM_REDIS_DB}, else 0")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--check", action="store_true", help="validate the options and exit")
    args = parser.parse_args(argv)
    options = Options(
        host=args.host,
        port=whole_number(*_given(args.port, "--port", ENV_PORT), default=7001, lowest=0),
        scenario=scenario_option(*_given(args.scenario, "--scenario", ENV_SCENARIO)),
        redis_url=redis_url_option(*_given(args.redis_url, "--redis-url", ENV_REDIS_URL)),
        stream_redis_db=whole_number(
            *_given(args.stream_redis_db, "--stream-redis-db", ENV_STREAM_REDIS_DB), default=0, lowest=0
        ),
        log_level=args.log_level,
    )
    return options, args.check


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until interrupted."""
    try:
        options, check_only = parse_options(argv)
    except InvalidOptionError as invalid:
        sys.exit(f"{INVALID_CONFIGURATION}{invalid}")
    if check_only:
        return
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app = create_app(options.scenario, redis_url=options.redis_url, stream_redis_db=options.stream_redis_db)
    uvicorn.run(app, host=options.host, port=options.port, log_level=options.log_level, lifespan="on")


if __name__ == "__main__":
    main()
