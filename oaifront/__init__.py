"""The Django project of the OpenAI-compatible chat front of the AI Horde."""
