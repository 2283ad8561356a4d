from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat completions"

    def ready(self) -> None:
        """Register the front's system checks (chat.checks)."""
        from chat.checks import register_checks

        register_checks()
