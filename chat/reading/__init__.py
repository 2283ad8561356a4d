"""Bytes -> a validated request, per API: body parsing, screening, validation wording and the shared request rules."""
