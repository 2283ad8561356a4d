"""Images: the live front answers only what /openapi.json describes (reference: Schema generation, API
documentation), for ``POST /v1/images/generations``: the coverage phase.

The run is two files: the front paces image submits as the AI Horde limits an address (2 a second, 90 a minute:
``chat.horde.pacing.PER_ADDRESS``), so the coverage phase's 220-odd valid bodies take over two minutes alone.

The run, its scenario and its rules: ``tests/integration/schemathesis_common.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration import schemathesis_common
from tests.integration.schemathesis_common import Operations

pytestmark = [pytest.mark.integration, pytest.mark.starts_first]

OPERATIONS: Operations = {"path": "/v1/images/generations"}
"""This file's operations of the document (``tests/unit/test_schemathesis_files.py``: each in exactly one file)."""

PHASES = ("coverage",)
"""This file's phases of them (``test_schemathesis_images.py`` runs the others)."""

front_schema = schemathesis_common.front_schema
schema = schemathesis_common.operations_schema(OPERATIONS)


@schema.parametrize()
def test_every_response_is_described_by_the_document(case: Any) -> None:
    """ref: schema-generation.2, schema-generation.3, schema-generation.8, api-documentation.1"""
    schemathesis_common.check_case(case)
