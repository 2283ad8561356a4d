"""The model list: the live front answers only what /openapi.json describes (reference: Schema generation, API
documentation), for ``GET /v1/models`` and ``GET /v1/models/{model}``.

The run, its scenario and its rules: ``tests/integration/schemathesis_common.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration import schemathesis_common
from tests.integration.schemathesis_common import Operations

pytestmark = pytest.mark.integration

OPERATIONS: Operations = {"path": ["/v1/models", "/v1/models/{model}"]}
"""This file's operations of the document (``tests/unit/test_schemathesis_files.py``: each in exactly one file)."""

front_schema = schemathesis_common.front_schema
schema = schemathesis_common.operations_schema(OPERATIONS)


@schema.parametrize()
def test_every_response_is_described_by_the_document(case: Any) -> None:
    """ref: schema-generation.2, schema-generation.3, schema-generation.8, api-documentation.1"""
    schemathesis_common.check_case(case)
