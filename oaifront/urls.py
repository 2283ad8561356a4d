"""The front's routes: chat completions, the model list and model retrieve, health, and the API description
(/openapi.json, /docs, /redoc, the behaviour guide at /docs/behaviour, the guide per client at /docs/clients,
/favicon.ico; / redirects to /docs).
"""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView

from oaifront.openapi import (
    FrontSchemaView,
    OfflineRedocView,
    OfflineSwaggerView,
    behaviour_guide,
    clients_guide,
    favicon,
    redoc_bundle,
)


async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}`` while the process serves requests (left out of the API description)."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", include("chat.urls")),
    path("", include("models_list.urls")),
    path("healthz", healthz, name="healthz"),
    path("openapi.json", FrontSchemaView.as_view(), name="schema"),
    path("docs", OfflineSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("docs/behaviour", behaviour_guide, name="behaviour-guide"),
    path("docs/clients", clients_guide, name="clients-guide"),
    path("docs/assets/redoc.standalone.js", redoc_bundle, name="redoc-bundle"),
    path("redoc", OfflineRedocView.as_view(url_name="schema"), name="redoc"),
    path("favicon.ico", favicon, name="favicon"),
    path("", RedirectView.as_view(pattern_name="swagger-ui", permanent=False), name="root"),
]

handler404 = "oaifront.views.not_found"
handler500 = "oaifront.views.server_error"
