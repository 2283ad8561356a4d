from django.apps import AppConfig


class ModelsListConfig(AppConfig):
    name = "models_list"
    verbose_name = "Model list"
