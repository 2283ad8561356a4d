"""The host project's routes: its admin, and the front's apps included as their README section says."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("chat.urls")),
    path("", include("models_list.urls")),
    path("", include("front_operations.urls")),
]
