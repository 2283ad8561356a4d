"""The front's operations routes, for the front's own project and for a host project in one include:

    path("", include("front_operations.urls")),

liveness (``/healthz``), readiness (``/readyz``), metrics (``/metrics``, with ``HORDE_OAI_METRICS_ENDPOINT=true``),
the API description (``/openapi.json``, Swagger UI at ``/docs``, ReDoc at ``/redoc``), the guides under ``/docs/``
(:mod:`front_operations.openapi.guides`) and ``/favicon.ico``. The pages carry their own drf-spectacular and REST
framework settings (:class:`front_operations.openapi.pages.OwnSettings`), so they answer the same whatever the host's
``REST_FRAMEWORK`` says; the host lists ``rest_framework``, ``drf_spectacular`` and ``drf_spectacular_sidecar`` in
``INSTALLED_APPS`` (their templates and the pages' static files).
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from chat.settings import front_settings
from front_operations.openapi.assets import favicon, redoc_bundle
from front_operations.openapi.guides import behaviour_guide, clients_guide, guide_page, guide_stylesheet
from front_operations.openapi.pages import FrontSchemaView, OfflineRedocView, OfflineSwaggerView
from front_operations.readiness import readyz
from front_operations.views import not_found


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
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_endpoint, name="metrics"),
    path("openapi.json", FrontSchemaView.as_view(), name="schema"),
    path("docs", OfflineSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("docs/behaviour", behaviour_guide, name="behaviour-guide"),
    path("docs/clients", clients_guide, name="clients-guide"),
    path("docs/assets/redoc.standalone.js", redoc_bundle, name="redoc-bundle"),
    path("docs/assets/guide.css", guide_stylesheet, name="guide-stylesheet"),
    path("docs/<slug:name>", guide_page, name="guide"),
    path("redoc", OfflineRedocView.as_view(url_name="schema"), name="redoc"),
    path("favicon.ico", favicon, name="favicon"),
]
