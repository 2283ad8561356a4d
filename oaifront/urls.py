"""The front's routes: chat completions, the model list and model retrieve, health, and the API description
(/openapi.json, /docs, /redoc; / redirects to /docs).
"""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularJSONAPIView

from oaifront.openapi import OfflineRedocView, OfflineSwaggerView


async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}`` while the process serves requests (left out of the API description)."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", include("chat.urls")),
    path("", include("models_list.urls")),
    path("healthz", healthz, name="healthz"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="schema"),
    path("docs", OfflineSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("redoc", OfflineRedocView.as_view(url_name="schema"), name="redoc"),
    path("", RedirectView.as_view(pattern_name="swagger-ui", permanent=False), name="root"),
]

handler404 = "oaifront.views.not_found"
handler500 = "oaifront.views.server_error"
