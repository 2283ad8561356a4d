"""The images app: OpenAI's ``POST /v1/images/generations`` over the Horde's image workers (docs/images.md)."""
