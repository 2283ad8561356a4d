"""URLs of the chat app; a host project can ``include("chat.urls")``."""

from django.urls import path

from chat import legacy_completions, views

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="chat-completions"),
    path("v1/responses", views.responses, name="responses"),
    path("v1/completions", legacy_completions.completions, name="completions"),
]
