"""The front's routes: chat completions, the model list, health."""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path


async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}`` while the process serves requests (left out of the API description)."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", include("chat.urls")),
    path("", include("models_list.urls")),
    path("healthz", healthz, name="healthz"),
]
