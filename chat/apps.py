"""The chat completions app (``POST /v1/chat/completions``)."""

from django.apps import AppConfig


class ChatConfig(AppConfig):
    """Django's registration of the chat completions app."""

    name = "chat"
    verbose_name = "Chat completions"

    def ready(self) -> None:
        """Register the front's system checks (chat.checks)."""
        from chat.checks import register_checks  # noqa: PLC0415 - the checks import the settings, ready once apps load

        register_checks()
