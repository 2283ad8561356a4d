"""The model list app (``GET /v1/models`` and ``GET /v1/models/{model}``)."""

from django.apps import AppConfig


class ModelsListConfig(AppConfig):
    """Django's registration of the model list app."""

    name = "models_list"
    verbose_name = "Model list"
