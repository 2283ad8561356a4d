"""A chat completion and its chunk stream -> OpenAI's Responses API: the ``response`` object and the typed events.

The request was read by chat.reading.responses and ran as a chat completion; its results are rewritten here:

- :func:`build_response`: a ``chat.completion`` becomes a ``response`` object: ``output`` holds a ``reasoning`` item
  (summary text) when the worker reasons, a ``message`` item with ``output_text``, and ``function_call`` items;
  ``usage`` holds ``input_tokens``, ``output_tokens`` and ``output_tokens_details.reasoning_tokens``; a ``length``
  stop is ``status: incomplete`` with ``incomplete_details.reason: max_output_tokens``.
- :class:`ResponseEventWriter`: the ``chat.completion.chunk`` stream (buffered or relayed live) becomes OpenAI's typed
  events in OpenAI's order (:func:`response_events`): ``response.created``, ``response.in_progress``, per item
  ``response.output_item.added``, its parts and deltas and their ``...done`` events, ``response.output_item.done``,
  then ``response.completed`` (or ``response.incomplete``). Keepalive and progress comments pass through, a progress
  chunk becomes a repeated ``response.in_progress`` with ``x_horde.queue``; a stream error becomes one ``error``
  event, which ends the stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

from horde_sdk.worker.chat_declaration import ChatFinishReason

from chat.protocol.responses_api import (
    ResponsesRequest,
)
from chat.reading.responses import responses_message, responses_param
from chat.rendering.progress import is_progress_chunk
from chat.rendering.sse import typed_event


def response_id(request_id: str) -> str:
    """``resp_`` + ``request_id``: the response's own random id (chat.views.responses.public_response_id), never the
    native request id the log lines carry.
    """
    return f"resp_{request_id}"


def _echoed_settings(request: ResponsesRequest) -> dict[str, Any]:
    """The request's settings a response echoes (OpenAI's defaults where the request has none)."""
    text = request.text.model_dump(exclude_none=True, by_alias=True) if request.text is not None else {}
    text.setdefault("format", {"type": "text"})
    tool_choice: Any = "auto"
    if isinstance(request.tool_choice, str):
        tool_choice = request.tool_choice
    elif request.tool_choice is not None:
        tool_choice = request.tool_choice.model_dump()
    reasoning = request.reasoning
    return {
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": dict(request.metadata or {}),
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "tool_choice": tool_choice,
        "tools": [tool.model_dump(exclude_none=True) for tool in request.tools or []],
        "text": text,
        "reasoning": {
            "effort": reasoning.effort.value if reasoning is not None and reasoning.effort is not None else None,
            "summary": reasoning.summary if reasoning is not None else None,
        },
        "previous_response_id": request.previous_response_id,
        "store": request.store is not False,
        "background": False,
        "truncation": "disabled",
        "service_tier": "default",
        "user": request.user,
    }


def response_shell(request: ResponsesRequest, request_id: str, model: str, created_at: int) -> dict[str, Any]:
    """The ``response`` of the ``response.created`` and ``response.in_progress`` events: ``in_progress``, no output,
    no usage.
    """
    return {
        "id": response_id(request_id),
        "object": "response",
        "created_at": created_at,
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
        "usage": None,
        **_echoed_settings(request),
    }


INCOMPLETE_REASONS: Final[Mapping[str, str]] = {
    ChatFinishReason.LENGTH.value: "max_output_tokens",
    ChatFinishReason.CONTENT_FILTER.value: "content_filter",
}
"""The chat ``finish_reason`` values that make a response ``incomplete``, and its ``incomplete_details.reason``."""


def output_items(completion: Mapping[str, Any], request_id: str) -> list[dict[str, Any]]:
    """The ``output`` of a completion, in order: the ``reasoning`` item when the message has ``reasoning_content``;
    the ``message`` item when the reply has text, or has neither calls nor reasoning (an empty reply); one
    ``function_call`` item per tool call. A message item is ``incomplete`` when the reply stopped at the limit.
    """
    choice = completion["choices"][0]
    message = choice["message"]
    incomplete = choice.get("finish_reason") in INCOMPLETE_REASONS
    items: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        items.append(
            {
                "id": f"rs_{request_id}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": reasoning}],
                "status": "completed",
            }
        )
    text = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if text or not (calls or reasoning):
        items.append(
            {
                "id": f"msg_{request_id}",
                "type": "message",
                "role": "assistant",
                "status": "incomplete" if incomplete else "completed",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }
        )
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        items.append(
            {
                "id": f"fc_{request_id}_{index}",
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
                "status": "completed",
            }
        )
    return items


def response_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A chat ``usage`` in the Responses shape: ``input_tokens`` (prompt), ``output_tokens`` (completion),
    ``output_tokens_details.reasoning_tokens`` (0 without a count), ``total_tokens``; no cached tokens.
    """
    details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
        "total_tokens": usage["total_tokens"],
    }


def build_response(
    request: ResponsesRequest, completion: Mapping[str, Any], request_id: str, created_at: int, completed_at: int
) -> dict[str, Any]:
    """The ``response`` object of a completion (:func:`chat.rendering.completion.build_completion`, or one a stream
    rebuilt).

    ``status`` is ``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` for a ``length`` stop
    (``content_filter`` for a filtered one), else ``completed``; ``output`` is :func:`output_items`; ``usage`` is
    :func:`response_usage`; ``x_horde`` is the completion's, left out when it has none.
    """
    finish_reason = completion["choices"][0].get("finish_reason")
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    response = response_shell(request, request_id, completion["model"], created_at)
    response |= {
        "completed_at": completed_at,
        "status": "incomplete" if reason else "completed",
        "incomplete_details": {"reason": reason} if reason else None,
        "output": output_items(completion, request_id),
        "usage": response_usage(completion["usage"]),
    }
    if completion.get("x_horde"):
        response["x_horde"] = completion["x_horde"]
    return response


# ---------------------------------------------------------------------------------------------------------------------
# The event stream


class ResponseEventWriter:
    """Turns a chat completion's chunks into OpenAI's Responses events, in OpenAI's order.

    Feed the chunks in order (:meth:`chunk`); :meth:`start` gives the first two events, :meth:`finish` the rest once
    the chunks end, :meth:`error` the ``error`` event of a failed stream. Every event carries ``sequence_number``
    from 0. Text and reasoning deltas are sent as they come (live when the relay runs); an item is closed
    (``...done`` events) when the next item starts or, for the last one, at :meth:`finish`, with its final status.
    Items the chunks did not open (an empty reply's message item) are sent whole at :meth:`finish`, so the items
    streamed are always the final response's ``output``.
    """

    def __init__(self, request: ResponsesRequest, request_id: str, created_at: int, model: str) -> None:
        self.request = request
        self.request_id = request_id
        self.created_at = created_at
        self.model = model
        self.sequence = 0
        self.open_kind: str | None = None
        """``reasoning`` or ``message`` while that item takes deltas, else None."""
        self.opened: list[str] = []
        """The item ids sent so far (``output_item.added``), in output order."""
        self.closed: set[str] = set()
        self.reasoning = ""
        self.text = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.finish_chunk: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None

    # ------------------------------------------------------------------ framing

    def _event(self, event_type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": event_type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        """``response.created`` then ``response.in_progress``, each with the ``in_progress`` response."""
        shell = response_shell(self.request, self.request_id, self.model, self.created_at)
        return [self._event("response.created", response=shell), self._event("response.in_progress", response=shell)]

    def in_progress(self, x_horde: Mapping[str, Any]) -> dict[str, Any]:
        """A repeated ``response.in_progress`` (the ``in_progress`` response) with the queue progress as the event's
        ``x_horde``: the Responses form of a progress chunk (chat.streaming.progress). Clients read this event type
        and nothing in it but ``response``, so a repeat changes nothing for them.
        """
        shell = response_shell(self.request, self.request_id, self.model, self.created_at)
        return self._event("response.in_progress", response=shell, x_horde=dict(x_horde))

    # ------------------------------------------------------------------ items

    @property
    def _reasoning_id(self) -> str:
        return f"rs_{self.request_id}"

    @property
    def _message_id(self) -> str:
        return f"msg_{self.request_id}"

    def _open_reasoning(self) -> list[dict[str, Any]]:
        events = self._close_open()
        item = {"id": self._reasoning_id, "type": "reasoning", "summary": [], "status": "in_progress"}
        index = len(self.opened)
        self.opened.append(self._reasoning_id)
        self.open_kind = "reasoning"
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        events.append(
            self._event(
                "response.reasoning_summary_part.added",
                item_id=self._reasoning_id,
                output_index=index,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
        )
        return events

    def _open_message(self) -> list[dict[str, Any]]:
        events = self._close_open()
        item = {"id": self._message_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        index = len(self.opened)
        self.opened.append(self._message_id)
        self.open_kind = "message"
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        events.append(
            self._event(
                "response.content_part.added",
                item_id=self._message_id,
                output_index=index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            )
        )
        return events

    def _close_reasoning(self, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = self.opened.index(self._reasoning_id)
        text = item["summary"][0]["text"]
        self.closed.add(self._reasoning_id)
        return [
            self._event(
                "response.reasoning_summary_text.done",
                item_id=self._reasoning_id,
                output_index=index,
                summary_index=0,
                text=text,
            ),
            self._event(
                "response.reasoning_summary_part.done",
                item_id=self._reasoning_id,
                output_index=index,
                summary_index=0,
                part={"type": "summary_text", "text": text},
            ),
            self._event("response.output_item.done", output_index=index, item=dict(item)),
        ]

    def _close_message(self, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = self.opened.index(self._message_id)
        part = item["content"][0]
        self.closed.add(self._message_id)
        return [
            self._event(
                "response.output_text.done",
                item_id=self._message_id,
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=[],
            ),
            self._event(
                "response.content_part.done", item_id=self._message_id, output_index=index, content_index=0, part=part
            ),
            self._event("response.output_item.done", output_index=index, item=dict(item)),
        ]

    def _function_call(self, item: Mapping[str, Any]) -> list[dict[str, Any]]:
        index = len(self.opened)
        self.opened.append(item["id"])
        self.closed.add(item["id"])
        added = {**item, "arguments": "", "status": "in_progress"}
        events = [self._event("response.output_item.added", output_index=index, item=added)]
        if item["arguments"]:
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=item["arguments"],
                )
            )
        events.append(
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        )
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def _close_open(self, final: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Close the item taking deltas: with its final form when ``final`` (by id) has it, else as streamed."""
        kind, self.open_kind = self.open_kind, None
        if kind == "reasoning":
            streamed = {
                "id": self._reasoning_id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": self.reasoning}],
                "status": "completed",
            }
            return self._close_reasoning((final or {}).get(self._reasoning_id, streamed))
        if kind == "message":
            streamed = {
                "id": self._message_id,
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}],
            }
            return self._close_message((final or {}).get(self._message_id, streamed))
        return []

    # ------------------------------------------------------------------ input

    def chunk(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events of one ``chat.completion.chunk``: reasoning and text deltas open their item when it is not
        open yet and send ``response.reasoning_summary_text.delta`` / ``response.output_text.delta``; tool calls
        close the open item; the finish chunk and the usage chunk are kept for :meth:`finish`.
        """
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if chunk.get("usage") is not None:
            self.usage = dict(chunk["usage"])
        choices = chunk.get("choices") or []
        if not choices:
            return []
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_chunk = dict(choice)
            return []
        delta = choice.get("delta") or {}
        events: list[dict[str, Any]] = []
        reasoning = delta.get("reasoning_content")
        if reasoning:
            if self.open_kind != "reasoning":
                events += self._open_reasoning()
            self.reasoning += reasoning
            events.append(
                self._event(
                    "response.reasoning_summary_text.delta",
                    item_id=self._reasoning_id,
                    output_index=self.opened.index(self._reasoning_id),
                    summary_index=0,
                    delta=reasoning,
                )
            )
        content = delta.get("content")
        if content:
            if self.open_kind != "message":
                events += self._open_message()
            self.text += content
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self._message_id,
                    output_index=self.opened.index(self._message_id),
                    content_index=0,
                    delta=content,
                    logprobs=[],
                )
            )
        if delta.get("tool_calls"):
            events += self._close_open()
            self.tool_calls += [
                {key: value for key, value in call.items() if key != "index"} for call in delta["tool_calls"]
            ]
        return events

    def completion(self) -> dict[str, Any]:
        """The completion the chunks describe (the shape :func:`build_response` reads)."""
        finish = self.finish_chunk or {}
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        completion: dict[str, Any] = {
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish.get("finish_reason")}],
            "usage": self.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        if finish.get("x_horde"):
            completion["x_horde"] = finish["x_horde"]
        return completion

    def finish(self, completed_at: int) -> list[dict[str, Any]]:
        """The events after the last chunk: the open item closed with its final status, the function calls and any
        item not streamed yet (whole), then ``response.completed``, or ``response.incomplete`` when the reply
        stopped at the limit, with the whole response.
        """
        response = build_response(self.request, self.completion(), self.request_id, self.created_at, completed_at)
        final = {item["id"]: item for item in response["output"]}
        events = self._close_open(final)
        for item in response["output"]:
            if item["id"] in self.opened:
                continue
            if item["type"] == "function_call":
                events += self._function_call(item)
            elif item["type"] == "message":
                events += self._open_message()
                self.open_kind = None
                events += self._close_message(item)
            elif item["type"] == "reasoning":
                events += self._open_reasoning()
                self.open_kind = None
                events += self._close_reasoning(item)
        terminal = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append(self._event(terminal, response=response))
        return events

    def error(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """The ``error`` event of a stream error (``{"error": {...}}``): ``code``, ``message``, ``param`` and the
        error's ``metadata`` when it has some.
        """
        body = envelope.get("error") or {}
        event = self._event("error", code=body.get("code"), message=body.get("message"), param=body.get("param"))
        if body.get("metadata"):
            event["metadata"] = body["metadata"]
        return event


def read_chat_events(raw: bytes) -> list[Any]:
    """The JSON payloads of the ``data:`` lines of chat completion SSE bytes (``[DONE]`` left out)."""
    payloads = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            payloads.append(json.loads(line[len(b"data: ") :]))
    return payloads


async def response_events(
    writer: ResponseEventWriter,
    chat_events: AsyncIterator[bytes],
    sources: list[str],
    clock: Callable[[], float],
    on_complete: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """A Responses event stream from a chat completion event stream (buffered or relayed, chat.streaming.buffered).

    ``response.created`` and ``response.in_progress`` go out at once; comments pass through; a progress chunk
    becomes another ``response.in_progress`` (:meth:`ResponseEventWriter.in_progress`); each chunk's
    events follow it; after the last chunk come :meth:`ResponseEventWriter.finish`'s events. A chat stream error
    (``data: {"error": ...}``) becomes one ``error`` event (its ``param`` at the Responses path) and ends the stream.
    ``clock`` gives Unix seconds for ``completed_at``. ``on_complete`` receives the final response (the one of
    ``response.completed`` or ``response.incomplete``) before those last events go out, so a client that reads the
    terminal event finds it stored; a stream that errs or is abandoned never calls it.
    """
    try:
        for event in writer.start():
            yield typed_event(event)
        async for raw in chat_events:
            if raw.startswith(b":"):  # a keepalive or progress comment (chat.streaming.progress)
                yield raw
                continue
            for payload in read_chat_events(raw):
                if is_progress_chunk(payload):
                    yield typed_event(writer.in_progress(payload["x_horde"]))
                    continue
                if isinstance(payload, dict) and "error" in payload:
                    error = dict(payload["error"])
                    if isinstance(error.get("message"), str):
                        error["message"] = responses_message(error["message"], error.get("param"), sources)
                    error["param"] = responses_param(error.get("param"), sources)
                    yield typed_event(writer.error({"error": error}))
                    return
                for event in writer.chunk(payload):
                    yield typed_event(event)
        finished = writer.finish(int(clock()))
        if on_complete is not None:
            await on_complete(finished[-1]["response"])
        for event in finished:
            yield typed_event(event)
    finally:
        if isinstance(chat_events, AsyncGenerator):
            await chat_events.aclose()  # its own finally ends the wait and the relay (and cancels when not terminal)


def output_text(response: Mapping[str, Any]) -> str:
    """The text of a response's message items, joined (as the SDKs' ``output_text``)."""
    return "".join(
        part["text"]
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    )


def event_types(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ``type`` of each event, in order."""
    return [str(event["type"]) for event in events]
