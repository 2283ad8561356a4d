"""The live front answers only what /openapi.json describes (reference: Schema generation, API documentation): what the
``test_schemathesis_*.py`` files share.

schemathesis loads the document from the running front (the ``live_stack`` fixture: uvicorn with the devhorde behind
it and Redis) and sends generated requests, valid and invalid, to every documented operation. Every response must be
described by the document (status, content type, body schema, headers) and none may be a 5xx; invalid requests must be
refused with a 4xx. The run is bounded (:data:`MAX_EXAMPLES` per operation and phase, no shrinking, a request timeout).

The devhorde serves one model with every capability and guarantee horde-sdk defines, at machine speed, so a valid
request gets a completion instead of a by-design refusal. Generated ``model`` and ``models`` values are replaced by
that model in every valid request, and ``horde.workers`` (a list of worker ids to serve on) is dropped from it: a
random worker id is a valid request that no worker can serve, which the front answers with 503
``no_eligible_worker`` by design, and a random model name only meets 400 ``UnknownModel``.

The operations are spread over several files (pytest-xdist's ``--dist loadfile`` runs one file on one worker).
Each file names its operations in ``OPERATIONS`` (the
keyword arguments of schemathesis's ``include``) and runs them with :func:`check_case` through
:func:`operations_schema`, in every phase of :data:`PHASES` or in those its own ``PHASES`` names;
``tests/unit/test_schemathesis_files.py`` checks that every phase of every operation of the document is in exactly
one file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import pytest
import schemathesis
from horde_sdk.generation_parameters.text.chat_policy import ChatFeature, ChatGuarantee
from horde_sdk.worker.chat_declaration import ChatImageTransport
from schemathesis.config import SchemathesisConfig
from schemathesis.generation import GenerationMode

from tests.conftest import LiveStack

if TYPE_CHECKING:
    from schemathesis.pytest.lazy import LazySchema

SERVED_MODEL = "schemathesis/omni-8b"
"""The one model the devhorde serves during the run."""

SERVED_IMAGE_MODEL = "stable_diffusion"
"""The one image model: every size, ``nsfw`` or not; also what a request without ``model`` gets (the ``dall-e-2``
alias)."""

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "50"))
"""Generated requests per operation in the fuzzing phase (the coverage and examples phases add their own):
``SCHEMATHESIS_MAX_EXAMPLES``, default 50 (the suite's bound); a hostile-input run raises it to hundreds, which makes
thousands of cases over the routes."""

REQUEST_TIMEOUT_SECONDS = 30
"""The longest one request may take; a served request takes milliseconds."""

OMNI_SCENARIO: dict[str, Any] = {
    "name": "schemathesis",
    "description": "One model served by a worker declaring every feature and guarantee, at machine speed.",
    "queue_position_delay_seconds": 0,
    "workers": [
        {
            "name": "omni-1",
            "model": SERVED_MODEL,
            "features": [feature.value for feature in ChatFeature] + [guarantee.value for guarantee in ChatGuarantee],
            "image_transports": [transport.value for transport in ChatImageTransport],
            "max_context_length": 131072,
            "max_length": 16384,
            "threads": 8,
            "time_to_first_token_seconds": 0.01,
            "tokens_per_second": 5000,
            "post_interval_seconds": 0.01,
            "reply_words": 20,
        }
    ],
    "images": {
        "workers": [
            {
                "name": "painter-omni-1",
                "models": ["stable_diffusion"],
                "max_pixels": 3072 * 3072,
                "nsfw": True,
                "threads": 10,
                # 0: every image is in at the front's first check. With 0.01 the first check still said
                # "processing" and the front's second check waited its turn (one check a request per 1.05 s,
                # chat.horde.pacing.STATUS_READS): about 70 s of the run spent waiting on finished images.
                "seconds_per_image": 0,
            }
        ]
    },
}

MIN_CONTEXT_LENGTH = 4096
"""The smallest ``horde.max_context_length`` sent. A context too small for the prompt is a valid request that the
worker faults (``prompt_overflow``), which the front answers with 502 ``ChatRequestFaulted`` by design (reference:
Error attributes)."""

PHASES: tuple[str, ...] = ("examples", "coverage", "fuzzing")
"""Every phase of the run. A file runs them all on its operations unless its ``PHASES`` names some of them (then
another file runs the rest of them on the same operations)."""


def config(phases: Sequence[str] = PHASES) -> SchemathesisConfig:
    """The run's configuration with only ``phases`` enabled (:data:`CONFIG` with every phase)."""
    return SchemathesisConfig.from_dict(
        {
            "generation": {"mode": "all", "max-examples": MAX_EXAMPLES, "no-shrink": True, "database": "none"},
            "phases": {phase: {"enabled": phase in phases} for phase in PHASES},
            # A body the schema accepts can still break a rule across fields that JSON Schema cannot state
            # (tool_choice or parallel_tool_calls without tools, OpenAI's tool history rule, strict json_schema
            # rules, the json guard, a limit above what the model's workers declare): the front refuses it with a
            # documented 400.
            "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "429"]}},
            "request-timeout": REQUEST_TIMEOUT_SECONDS,
        }
    )


CONFIG = config()


class Operations(TypedDict, total=False):
    """Which operations of the document one file runs: keyword arguments of schemathesis's ``include``."""

    method: str | list[str]
    path: str | list[str]


def serve_on_the_served_model(body: Any, path: str = "") -> Any:
    """Point a valid generated chat body (or image body, on ``/v1/images/generations``: at
    :data:`SERVED_IMAGE_MODEL`) at the served model (see the module docstring).

    The result is as valid as the input: a string ``model`` stays a string, distinct ``models`` stay distinct, and
    ``horde.workers`` is optional; a ``horde.max_context_length`` below :data:`MIN_CONTEXT_LENGTH` is raised to it.
    """
    if not isinstance(body, dict):
        return body
    body = dict(body)
    if isinstance(body.get("model"), str):
        body["model"] = SERVED_IMAGE_MODEL if path == "/v1/images/generations" else SERVED_MODEL
    if isinstance(body.get("models"), list) and body["models"]:
        body["models"] = [SERVED_MODEL]
    horde = body.get("horde")
    if isinstance(horde, dict):
        horde = {key: value for key, value in horde.items() if key != "workers"}
        if isinstance(horde.get("max_context_length"), int) and horde["max_context_length"] < MIN_CONTEXT_LENGTH:
            horde["max_context_length"] = MIN_CONTEXT_LENGTH
        body["horde"] = horde
    return body


@pytest.fixture
def front_schema(stack: LiveStack, request: pytest.FixtureRequest) -> Any:
    """The live front's document, with the devhorde serving :data:`SERVED_MODEL`, run with the requesting file's
    ``PHASES`` (default: all); a file takes it with ``front_schema = schemathesis_common.front_schema``."""
    # schemathesis 4.32's lazy-schema runner renames the test node through ``_nodeid``, which pytest 9.2 no longer
    # has (it keeps a structured ``_id``); give it the attribute so the runner works (reporting keeps pytest's id).
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid
    stack.put_scenario(OMNI_SCENARIO)
    phases: Sequence[str] = getattr(request.module, "PHASES", PHASES)
    return schemathesis.openapi.from_url(f"{stack.front_url}/openapi.json", config=config(phases))


def operations_schema(operations: Operations) -> LazySchema:
    """The live front's document (the ``front_schema`` fixture) narrowed to ``operations``."""
    return schemathesis.pytest.from_fixture("front_schema").include(**operations)


def check_case(case: Any) -> None:
    """Send one generated case and check its response against the document."""
    # Every phase (examples, coverage, fuzzing) comes through here; only valid bodies are pointed at the served
    # model, so an invalid body stays exactly as invalid as schemathesis made it.
    if case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE:
        case.body = serve_on_the_served_model(case.body, case.path)
    case.call_and_validate()
