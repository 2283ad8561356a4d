"""The chat completions app (``POST /v1/chat/completions``)."""

from django.apps import AppConfig
from django.core import checks


class ChatConfig(AppConfig):
    """Django's registration of the chat completions app."""

    name = "chat"
    verbose_name = "Chat completions"

    def ready(self) -> None:
        """Register the browser-access checks of :mod:`chat.checks` (``manage.py check``)."""
        from chat.checks import check_browser_access  # noqa: PLC0415 - reads Django's settings: import once apps load

        checks.register(check_browser_access, checks.Tags.security)
