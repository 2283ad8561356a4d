"""The front's routes: chat completions and responses, the model list and model retrieve (the apps' own URLs), the
operations routes (:mod:`front_operations.urls`: ``/healthz``, ``/readyz``, ``/metrics``, ``/openapi.json``,
``/docs``, ``/redoc``, the guides under ``/docs/``, ``/favicon.ico``), and ``/``, which redirects to ``/docs``.
"""

from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", include("chat.urls")),
    path("", include("images.urls")),
    path("", include("models_list.urls")),
    path("", include("front_operations.urls")),
    path("", RedirectView.as_view(pattern_name="swagger-ui", permanent=False), name="root"),
]

handler400 = "oaifront.error_pages.bad_request"
handler404 = "front_operations.views.not_found"
handler500 = "front_operations.views.server_error"
