"""Error bodies that more than one lane pins to the letter: the same refusal asserted against the devhorde
(``tests/integration``) and against the real AI Horde (``tests/realhorde``, which sees none of the suite's fixtures)."""

from __future__ import annotations

from typing import Any

MAX_TOKENS_5000_ON_TEXT_API: dict[str, Any] = {
    "message": "No worker eligible for this request accepts a completion limit of 5000 tokens: the AI Horde's text "
    "generation API generates at most 4096 tokens per request (the server's bound; ask for 4096 or fewer).",
    "type": "invalid_request_error",
    "param": "max_tokens",
    "code": "no_worker_supports_limit",
}
"""The 400's ``error`` for ``max_tokens: 5000`` on the text generation API path: above the server's 4096, so the front
refuses it before any submit, naming the bound."""
