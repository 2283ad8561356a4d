"""The configuration guide's table (``docs/configuration.md``) lists every environment variable the front and
``make run`` read, with the front's true defaults (every environment variable documented with its default)."""

from __future__ import annotations

import re
from pathlib import Path

from chat.settings import FrontSettings, environment_variable

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `([A-Z_]+)` \| (.*?) \| ")


def table() -> dict[str, str]:
    """The configuration guide's rows: variable -> default cell."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        match = ROW.match(line)
        if match is not None:
            assert match.group(1) not in rows, f"{match.group(1)} is listed twice"
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_front_setting_is_listed_with_its_default() -> None:
    rows = table()
    for name, field in FrontSettings.model_fields.items():
        variable = environment_variable(name)
        assert variable in rows, variable
        default = field.default
        if default is None:
            continue  # computed (the stream database) or unset (the Redis URL): worded in the cell
        shown = re.match(r"`([^`]*)`", rows[variable])
        assert shown is not None, (variable, rows[variable])
        if isinstance(default, bool):
            assert shown.group(1) == str(default).lower(), variable
        elif isinstance(default, str):
            assert shown.group(1) == default, variable
        else:
            assert float(shown.group(1)) == float(default), variable


def test_every_variable_the_code_and_make_run_read_is_listed() -> None:
    rows = table()
    read: set[str] = set()
    for path in ("oaifront/settings.py", "devhorde/__main__.py"):
        read |= set(re.findall(r"(?:os\.environ\.get|whole_seconds)\(\"([A-Z_]+)\"", (ROOT / path).read_text()))
    read |= set(re.findall(r"\$\{?([A-Z_]{3,})", (ROOT / "bin/run").read_text()))
    assert {
        "DJANGO_SECRET_KEY",
        "DJANGO_SECURE_HSTS_SECONDS",
        "WORKERS",
        "REDIS_PORT",
        "GRACEFUL_SHUTDOWN_SECONDS",
    } <= read
    assert sorted(read - set(rows)) == []


def test_the_devhorde_scenario_row_names_every_bundled_scenario() -> None:
    """``DEVHORDE_SCENARIO``'s row lists the bundled scenarios ``make run`` accepts by name (devhorde/scenarios/), the
    same names its one-line refusal of an unknown name lists (issue 25: the README matches what the commands do).
    """
    from devhorde.scenario import SCENARIOS_DIR

    bundled = sorted(path.stem for path in SCENARIOS_DIR.glob("*.json"))
    (row,) = [
        line
        for line in (ROOT / "docs" / "configuration.md").read_text().splitlines()
        if line.startswith("| `DEVHORDE_SCENARIO`")
    ]
    listed = re.search(r"a bundled name \(([^;]*);", row)
    assert listed is not None
    assert sorted(re.findall(r"`([a-z-]+)`", listed.group(1))) == bundled
