"""The chat completions app (``POST /v1/chat/completions``)."""

from django.apps import AppConfig


class ChatConfig(AppConfig):
    """Django's registration of the chat completions app."""

    name = "chat"
    verbose_name = "Chat completions"

    def ready(self) -> None:
        """Disconnect django.db's per-request signal receivers: the front has no database (``DATABASES`` is empty),
        and under ASGI each sync receiver costs every request a hop to a worker thread. Register the front's system
        checks of :mod:`chat.checks` (``manage.py check``): settings, reachability, limits and browser access.
        """
        from django.core import signals  # noqa: PLC0415 -- apps import in ready(), after the registry is populated
        from django.db import close_old_connections, reset_queries  # noqa: PLC0415 -- same

        signals.request_started.disconnect(reset_queries)
        signals.request_started.disconnect(close_old_connections)
        signals.request_finished.disconnect(close_old_connections)

        from chat.checks import register_checks  # noqa: PLC0415 -- the checks read the settings, ready once apps load

        register_checks()
