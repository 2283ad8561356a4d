"""Prompt-only JSON modes through the front and the devhorde: a request whose prompt asks for JSON (instructor's
JSON / MD_JSON modes write the response model's schema into the system message and send no ``response_format``;
LangChain's ``json_mode`` and the AI SDK's ``generateObject`` on ``openai-compatible`` send ``json_object`` and the
schema in the prompt) gets JSON that fits the schema."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.conftest import LiveStack

pytestmark = pytest.mark.integration

MODEL = "devhorde/tiny-1b"
JSON_MODEL = "devhorde/toolsmith-7b"
"""The ``fast`` scenario's model whose workers declare ``json_object``."""


class CityFacts(BaseModel):
    city: str
    population: int


INSTRUCTOR_JSON_SYSTEM = (
    "As a genius expert, your task is to understand the content and provide the parsed objects in json that match "
    f"the following json_schema:\n\n{json.dumps(CityFacts.model_json_schema(), indent=2)}\n\nMake sure to return an "
    "instance of the JSON, not the schema itself"
)
"""instructor's ``Mode.JSON`` system message (instructor ``process_response.handle_json_modes``)."""


@pytest.mark.parametrize("response_format", [None, {"type": "json_object"}], ids=["prompt-only", "json-object"])
def test_a_prompt_schema_is_answered_with_fitting_json(stack: LiveStack, response_format: Any) -> None:
    sdk = openai.OpenAI(base_url=stack.openai_base_url, api_key="0000000000", max_retries=0, timeout=30)
    extra = {"response_format": response_format} if response_format else {}
    completion = sdk.chat.completions.create(
        model=JSON_MODEL if response_format else MODEL,
        messages=[
            {"role": "system", "content": INSTRUCTOR_JSON_SYSTEM},
            {"role": "user", "content": "Paris has about two million people."},
        ],
        max_tokens=200,
        **extra,
    )
    content = completion.choices[0].message.content
    assert content is not None
    facts = CityFacts.model_validate_json(content)
    assert facts.city and facts.population >= 1
