"""The front's log lines are in UTC and say so: ``TIME_ZONE = "UTC"`` (Django sets the process's ``TZ`` from it; its
default, America/Chicago, put the front's lines six hours off the devhorde's) and an offset in every plain-text line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime

from django.conf import settings

from tests.conftest import ROOT, UNREACHABLE_HORDE_URL

LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d) \| INFO     \| __main__:<module>:\d+ - probe$"
)
PROBE = "import oaifront.asgi\nfrom loguru import logger\nlogger.info('probe')\n"


def test_the_front_runs_on_utc() -> None:
    assert settings.TIME_ZONE == "UTC"


def test_a_log_line_carries_the_utc_time_with_its_offset_on_a_host_in_another_zone() -> None:
    """The process starts with ``TZ=America/Chicago``, as on a machine set to that zone."""
    env = {**os.environ, "TZ": "America/Chicago", "HORDE_URL": UNREACHABLE_HORDE_URL}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    before = datetime.now(UTC).replace(microsecond=0)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    after = datetime.now(UTC)
    (stamp,) = [match.group(1) for line in result.stderr.splitlines() if (match := LINE.match(line))]
    assert stamp.endswith("+00:00"), stamp
    assert before <= datetime.fromisoformat(stamp) <= after
