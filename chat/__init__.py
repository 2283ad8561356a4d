"""The chat completions app: ``POST /v1/chat/completions`` over the Horde's native chat routes."""
