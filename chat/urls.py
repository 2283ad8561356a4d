"""URLs of the chat app; a host project can ``include("chat.urls")``."""

from django.urls import path

from chat.views import chat_completions, completions, responses

urlpatterns = [
    path("v1/chat/completions", chat_completions.chat_completions, name="chat-completions"),
    path("v1/responses", responses.responses, name="responses"),
    path("v1/responses/<str:response_id>", responses.stored_response, name="stored-response"),
    path("v1/completions", completions.completions, name="completions"),
]
