"""URLs of the model list app; a host project can ``include("models_list.urls")``."""

from django.urls import path

from models_list import views

urlpatterns = [
    path("v1/models", views.list_models, name="models-list"),
    # Model ids contain slashes (``org/name``): the path converter keeps them.
    path("v1/models/<path:model>", views.retrieve_model, name="models-retrieve"),
]
