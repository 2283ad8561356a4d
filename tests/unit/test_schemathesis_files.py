"""The schemathesis run leaves no documented operation out.

The run is spread over ``tests/integration/test_schemathesis_*.py`` so that pytest-xdist's ``--dist loadfile`` can
give its files to several workers; each file fuzzes the operations its ``OPERATIONS`` names (schemathesis's
``include`` filters, ``tests/integration/schemathesis_common.py``) in the phases its ``PHASES`` names (default: every
one of ``schemathesis_common.PHASES``). Here the document comes from the front's own ``/openapi.json`` view (Django's
test client, as ``tests/unit/test_openapi.py`` reads it) and schemathesis applies each file's filters to it: every
phase of every (method, path) of the document must be run by exactly one file.
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import schemathesis

from tests.integration import schemathesis_common
from tests.integration.schemathesis_common import PHASES, Operations

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
FILES = sorted(INTEGRATION.glob("test_schemathesis*.py"))
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def documented(document: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (method, path) of the document, read straight from its ``paths``."""
    return {
        (method.upper(), path) for path, item in document["paths"].items() for method in item if method in HTTP_METHODS
    }


def selected(document: dict[str, Any], operations: Operations) -> set[tuple[str, str]]:
    """The (method, path) pairs schemathesis runs for ``operations``."""
    schema = schemathesis.openapi.from_dict(document).include(**operations)
    return {(operation.method.upper(), operation.path) for operation in (r.ok() for r in schema.get_all_operations())}


def test_the_schemathesis_run_is_spread_over_several_files() -> None:
    assert len(FILES) > 1, [file.name for file in FILES]


def test_every_documented_operation_is_fuzzed_in_every_phase_by_exactly_one_schemathesis_file(
    document: dict[str, Any],
) -> None:
    """ref: schema-generation.2, api-documentation.1"""
    files_of: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for file in FILES:
        module = importlib.import_module(f"tests.integration.{file.stem}")
        operations = selected(document, module.OPERATIONS)
        phases = getattr(module, "PHASES", PHASES)
        assert operations, f"{file.name} selects no operation"
        assert phases, f"{file.name} runs no phase"
        assert set(phases) <= set(PHASES), f"{file.name}: {phases}"
        for method, path in operations:
            for phase in phases:
                files_of[method, path, phase].append(file.name)
    assert {run: files for run, files in files_of.items() if len(files) != 1} == {}
    assert set(files_of) == {(method, path, phase) for method, path in documented(document) for phase in PHASES}
    assert len(documented(document)) >= 8


@pytest.mark.parametrize("file", FILES, ids=lambda file: file.stem)
def test_each_file_runs_what_it_declares(file: Path) -> None:
    """A file's run is built from its own ``OPERATIONS`` and ``PHASES``: the shared fixture and filter, and a
    configuration that enables exactly its phases."""
    module = importlib.import_module(f"tests.integration.{file.stem}")
    assert module.front_schema is schemathesis_common.front_schema
    assert "schema = schemathesis_common.operations_schema(OPERATIONS)" in file.read_text()
    phases = getattr(module, "PHASES", PHASES)
    enabled = schemathesis_common.config(phases).projects.default.phases
    assert {phase: getattr(enabled, phase).enabled for phase in PHASES} == {phase: phase in phases for phase in PHASES}
