"""URLs of the images app; a host project can ``include("images.urls")``."""

from django.urls import path

from images import views

urlpatterns = [
    path("v1/images/generations", views.image_generations, name="image-generations"),
]
