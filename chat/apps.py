from django.apps import AppConfig
from django.core import checks


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat completions"

    def ready(self) -> None:
        from chat.checks import check_browser_access

        checks.register(check_browser_access, checks.Tags.security)
