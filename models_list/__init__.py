"""``GET /v1/models``: the Horde's text models with online chat workers, as OpenAI/OpenRouter model cards."""
