"""``python -m devhorde --host 127.0.0.1 --port 7001 [--scenario FILE] [--redis-url URL] [--stream-redis-db N]``.

Serves the development Horde with uvicorn; the API root is ``http://HOST:PORT/api`` (the front's ``HORDE_URL``).
Each option falls back to its environment variable: ``DEVHORDE_SCENARIO``, ``DEVHORDE_REDIS_URL``,
``DEVHORDE_STREAM_REDIS_DB``. ``--scenario`` takes a file path or a bundled scenario's name (``default``, ``fast``,
...).
"""

from __future__ import annotations

import argparse
import logging
import os

import uvicorn

from devhorde.app import ENV_REDIS_URL, ENV_SCENARIO, ENV_STREAM_REDIS_DB, create_app
from devhorde.scenario import load_scenario


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m devhorde", description="The development Horde (native chat).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEVHORDE_PORT") or 7001))
    parser.add_argument("--scenario", default=os.environ.get(ENV_SCENARIO) or None)
    parser.add_argument("--redis-url", default=os.environ.get(ENV_REDIS_URL) or None)
    parser.add_argument("--stream-redis-db", type=int, default=int(os.environ.get(ENV_STREAM_REDIS_DB) or 0))
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app = create_app(load_scenario(args.scenario), redis_url=args.redis_url, stream_redis_db=args.stream_redis_db)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on")


if __name__ == "__main__":
    main()
