"""The front's own error pages: every route answers in OpenAI's error envelope, never Django's HTML pages."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from chat.errors import OpenAIError


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for a path the front does not serve, such as ``/v1/embeddings``, as ``not_found_error``."""
    return OpenAIError(
        status=404,
        message=(
            f"Unknown route: {request.method} {request.path}. The front serves POST /v1/chat/completions, "
            "POST /v1/responses, POST /v1/completions, POST /v1/images/generations, GET /v1/models and "
            "GET /v1/models/{model}; /docs describes them."
        ),
        code="unknown_url",
    ).to_response()


def server_error(request: HttpRequest) -> HttpResponse:
    """500 as ``api_error`` without any traceback (the details go to the log)."""
    return OpenAIError(
        status=500, message="The front failed to serve this request.", code="internal_error"
    ).to_response()
