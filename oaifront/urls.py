"""The front's routes: chat completions and responses, the model list and model retrieve, liveness (/healthz),
readiness (/readyz), optional metrics (/metrics), and the API description (/openapi.json, /docs, /redoc, the
behaviour guide at /docs/behaviour, the guide per client at /docs/clients, /favicon.ico; / redirects to /docs).
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView

from chat.settings import front_settings
from oaifront.openapi.assets import favicon, redoc_bundle
from oaifront.openapi.guides import behaviour_guide, clients_guide, guide_stylesheet
from oaifront.openapi.pages import FrontSchemaView, OfflineRedocView, OfflineSwaggerView
from oaifront.readiness import readyz
from oaifront.views import not_found


async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}`` while the process serves requests (left out of the API description)."""
    return JsonResponse({"status": "ok"})


async def metrics_endpoint(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the front's instruments in Prometheus text format, with ``HORDE_OAI_METRICS_ENDPOINT=true``
    (left out of the API description); otherwise the unknown-route 404.
    """
    if not front_settings().metrics_endpoint:
        return not_found(request)
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest  # noqa: PLC0415 - only when served

    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [
    path("", include("chat.urls")),
    path("", include("images.urls")),
    path("", include("models_list.urls")),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_endpoint, name="metrics"),
    path("openapi.json", FrontSchemaView.as_view(), name="schema"),
    path("docs", OfflineSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("docs/behaviour", behaviour_guide, name="behaviour-guide"),
    path("docs/clients", clients_guide, name="clients-guide"),
    path("docs/assets/redoc.standalone.js", redoc_bundle, name="redoc-bundle"),
    path("docs/assets/guide.css", guide_stylesheet, name="guide-stylesheet"),
    path("redoc", OfflineRedocView.as_view(url_name="schema"), name="redoc"),
    path("favicon.ico", favicon, name="favicon"),
    path("", RedirectView.as_view(pattern_name="swagger-ui", permanent=False), name="root"),
]

handler400 = "oaifront.error_pages.bad_request"
handler404 = "oaifront.views.not_found"
handler500 = "oaifront.views.server_error"
