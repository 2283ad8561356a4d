"""Django's registration of the images app."""

from django.apps import AppConfig


class ImagesConfig(AppConfig):
    """The images app (``POST /v1/images/generations``)."""

    name = "images"
    verbose_name = "Images"
