"""What ``oaifront.asgi`` has done once imported, before any request (issue 23: refusals before work)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, UNREACHABLE_HORDE_URL

PROBE = (
    "import sys\n"
    "import oaifront.asgi\n"
    "print(sorted(name for name in ('oaifront.urls', 'chat.views.chat_completions', 'chat.views.responses',"
    " 'models_list.views') if name in sys.modules))\n"
)


def test_the_urlconf_and_the_views_are_imported_at_startup_not_by_the_first_request() -> None:
    """Django imports the URLconf lazily, on the first request it resolves; that import (the views, the wire models)
    took about half a second of the loop and held every request of a burst behind the first one, refusals included.
    The ASGI module imports it while the process starts."""
    env = {**os.environ, "HORDE_URL": UNREACHABLE_HORDE_URL}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == str(
        sorted(["oaifront.urls", "chat.views.chat_completions", "chat.views.responses", "models_list.views"])
    ), result.stderr
