"""Jobs: simulated workers running popped chat requests.

A popped request gets an :class:`~devhorde.chat_queue.Attempt` (its own ``gen``) and one asyncio task. The job waits
``time_to_first_token_seconds``, makes progress posts every ``post_interval_seconds`` (written to the request's Redis
stream when it streams), then submits a reply built with horde_sdk's ``build_chat_reply_submit`` (or a fault with
``build_chat_fault_submit``), restarts, or ends without a generation, as the worker's scenario entry scripts. A job
awaits its own stream writes, so a status that reads ``done`` comes after the attempt's ``ended`` marker. The Horde
the jobs run in is a :class:`JobHost`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Mapping
from contextlib import suppress
from typing import Any, Final, Protocol

from horde_sdk.generation_parameters.text.chat_policy import (
    ChatConformance,
    ChatFeature,
    ChatGuarantee,
    ChatResponseFormatType,
    ChatToolChoiceMode,
)
from horde_sdk.worker.chat_declaration import (
    ChatFaultReason,
    ChatUsage,
    build_chat_fault_submit,
    build_chat_reply_submit,
)

from devhorde.chat_queue import Attempt, ChatQueue, ChatRequest, RequestState
from devhorde.redisbus import RedisBus
from devhorde.replies import (
    ReplyPlan,
    asks_for_json,
    build_tool_calls,
    choose_tools,
    conversation_seed,
    cut_reply,
    json_reply,
    last_user_text,
    prompt_tokens,
    reasoning_text,
    reply_text,
)
from devhorde.scenario import Scenario, WorkerSpec

logger = logging.getLogger("devhorde")

STREAM_WRITE_WAIT_SECONDS: Final[float] = 0.5
"""The longest a job waits for one of its own stream writes before going on (a slow Redis never stalls a job)."""

DIVERGED_PREFIX: Final[str] = "Correction: "
"""Prefix of the submitted content of a worker whose ``final_text_diverges``."""


class JobHost(Protocol):
    """What the jobs need of the Horde they run in (:class:`devhorde.horde.DevHorde`)."""

    @property
    def scenario(self) -> Scenario:
        """The workers and knobs now."""
        ...

    @property
    def bus(self) -> RedisBus:
        """The Redis writer of progress streams and signals."""
        ...

    @property
    def queue(self) -> ChatQueue:
        """The chat requests."""
        ...

    def dispatch(self) -> None:
        """Pop waiting requests onto free threads."""
        ...

    def wake(self) -> None:
        """Ask the dispatcher to run now."""
        ...

    def patch_worker(self, name: str, patch: Mapping[str, Any]) -> WorkerSpec:
        """Merge ``patch`` into one worker (a worker going offline after its jobs)."""
        ...


class Jobs:
    """The simulated jobs of one Horde's chat requests.

    Args:
        host: The Horde: its scenario, Redis bus, queue and dispatcher.
    """

    def __init__(self, host: JobHost) -> None:
        self.host = host
        self.jobs_done: Counter[str] = Counter()
        """Finished jobs per worker name (``offline_after_jobs``)."""

    def pop(self, request: ChatRequest, worker: WorkerSpec) -> None:
        """Start a new attempt of ``request`` on ``worker``: the request is processing, its job task runs."""
        streams = request.stream and worker.posts_progress and self.host.bus.enabled
        attempt = Attempt(
            gen=str(uuid.uuid4()),
            worker_name=worker.name,
            worker_id=worker.worker_id,
            model=worker.model,
            streams=streams,
        )
        request.attempts.append(attempt)
        self.host.queue.set_state(request, RequestState.PROCESSING)
        request.stream_progress = request.stream_progress or streams
        self.host.bus.signal(request.id, "processing")
        request.task = asyncio.get_running_loop().create_task(
            self._job_main(request, worker, attempt),
            name=f"devhorde-job-{request.id}",
        )

    def stop_task(self, request: ChatRequest) -> None:
        """Cancel the request's running job, unless the caller is that job."""
        task, request.task = request.task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def end_attempt(self, request: ChatRequest, reason: str) -> asyncio.Future[None] | None:
        """Mark the current attempt ended and queue its ``ended`` marker (with ``gen`` and optional ``reason``)."""
        attempt = request.attempt
        if attempt is None or attempt.ended is not None:
            return None
        attempt.ended = reason
        if not attempt.streams:
            return None
        worker = self.host.scenario.worker(attempt.worker_name)
        fields = {"gen": attempt.gen, "ended": "1"}
        if worker is None or worker.ended_reason:
            fields["reason"] = reason
        return self.host.bus.xadd(request.id, fields, request.expires_epoch_ms)

    def restart(self, request: ChatRequest, *, counted_for: str | None) -> None:
        """End the current attempt as restarted and put the request back in the queue at its original place."""
        self.stop_task(request)
        self.end_attempt(request, "restarted")
        request.restarted += 1
        if counted_for is not None:
            request.restart_counts[counted_for] += 1
        self.host.queue.set_state(request, RequestState.WAITING)
        self.host.dispatch()
        self.host.wake()

    def _job_finished(self, worker_name: str) -> None:
        self.jobs_done[worker_name] += 1
        worker = self.host.scenario.worker(worker_name)
        if (
            worker is not None
            and worker.offline_after_jobs is not None
            and self.jobs_done[worker_name] >= worker.offline_after_jobs
            and worker.online
        ):
            self.host.patch_worker(worker_name, {"online": False})
            return
        self.host.dispatch()

    def _plan(self, request: ChatRequest, worker: WorkerSpec) -> ReplyPlan | ChatFaultReason:
        """Compose the attempt's reply (or a prompt overflow fault) from the conversation and the worker."""
        payload = request.payload
        params = payload.get("params") or {}
        messages = list(payload["messages"])
        traits = request.requirements.traits
        tools = list(payload.get("tools") or []) if traits.forwards_tools else []
        prompt = prompt_tokens(messages, tools)
        context = min(request.max_context_length or worker.max_context_length, worker.max_context_length)
        if prompt > context and ChatGuarantee.PROMPT_OVERFLOW_REFUSED.value in worker.declared_values:
            return ChatFaultReason.PROMPT_OVERFLOW
        effort = params.get("reasoning_effort")
        seed = conversation_seed(
            messages,
            tools,
            payload.get("tool_choice"),
            payload.get("response_format"),
            params.get("seed"),
            effort,
        )
        reasons = worker.reasoning == "always" or (
            worker.reasoning == "auto" and ChatFeature.REASONING_EFFORT.value in worker.declared_values
        )
        reasoning = reasoning_text(messages, effort) if reasons else ""
        tool_calls: list[dict[str, Any]] | None = None
        if tools and worker.tool_calls != "never":
            tool_choice = payload.get("tool_choice")
            forced = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
            chosen = choose_tools(tools, traits.tool_choice_mode, forced, messages, traits.parallel_tool_calls)
            if worker.tool_calls == "invalid":
                chosen = [{"type": "function", "function": {"name": "undefined_function", "parameters": {}}}]
            tool_calls = build_tool_calls(chosen, messages, seed) or None
        content: str | None
        response_format = payload.get("response_format") or {}
        if tool_calls:
            content = None
        elif response_format.get("type") in {kind.value for kind in ChatResponseFormatType} or asks_for_json(messages):
            content = json_reply(response_format, messages, seed)
        elif worker.reply_style == "echo":
            content = "You said: " + last_user_text(messages)
        elif worker.reply_style == "fixed":
            content = worker.fixed_reply
        else:
            content = reply_text(messages, words=worker.reply_words, seed=seed)
        if worker.reasoning_only:
            content = "" if not tool_calls else content
            reasoning = reasoning or reasoning_text(messages, None)
        if worker.empty_reply:
            content, reasoning, tool_calls = "", "", None
        return cut_reply(
            reasoning,
            content,
            tool_calls,
            max_length=min(request.max_length, worker.max_length),
            stop=params.get("stop_sequence"),
            prompt=prompt,
        )

    async def _write(self, request: ChatRequest, fields: dict[str, str]) -> None:
        await self._await_marker(self.host.bus.xadd(request.id, fields, request.expires_epoch_ms))

    async def _post(
        self,
        request: ChatRequest,
        worker: WorkerSpec,
        attempt: Attempt,
        seq: int,
        reasoning: str,
        text: str,
    ) -> None:
        if not attempt.streams or worker.skip_seq == seq:
            return
        fields = {"gen": attempt.gen, "seq": str(seq), "text": text, "reasoning": reasoning}
        if not worker.omit_model_in_deltas:
            fields["model"] = worker.model
        if not worker.omit_worker_in_deltas:
            fields["worker"] = worker.worker_id
        await self._write(request, fields)

    @staticmethod
    async def _await_marker(future: asyncio.Future[None] | None) -> None:
        """Wait for a queued stream write, at most ``STREAM_WRITE_WAIT_SECONDS``."""
        if future is not None:
            with suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(future), STREAM_WRITE_WAIT_SECONDS)

    async def _job_main(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt) -> None:
        try:
            await self._run_job(request, worker, attempt)
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - a simulator bug faults the request instead of hanging it
            logger.exception("job of request %s failed", request.id)
            if request.attempt is attempt and request.state is RequestState.PROCESSING:
                await self._fault(request, worker, attempt, ChatFaultReason.GENERATION_ERROR)

    async def _run_job(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt) -> None:
        """Simulate one attempt: first token delay, progress posts, then reply, fault, restart or empty end."""
        await asyncio.sleep(worker.time_to_first_token_seconds)
        plan = self._plan(request, worker)
        if isinstance(plan, ChatFaultReason):
            await self._fault(request, worker, attempt, plan)
            return
        pieces = [("r", token) for token in plan.reasoning_tokens_list] + [
            ("c", token) for token in plan.content_tokens_list
        ]
        per_post = max(1, round(worker.tokens_per_second * worker.post_interval_seconds))
        posts = [pieces[start : start + per_post] for start in range(0, len(pieces), per_post)]
        interval = worker.post_interval_seconds
        restart_after = (
            worker.restart_after_posts
            if worker.restart_after_posts is not None and request.restart_counts[worker.name] < worker.restarts
            else None
        )
        for seq, post in enumerate(posts, start=1):
            if worker.fault_reason is not None and seq > worker.fault_after_posts:
                await self._fault(request, worker, attempt, worker.fault_reason)
                return
            if restart_after is not None and seq > restart_after:
                self.restart(request, counted_for=worker.name)
                return
            if seq > 1 and interval:
                await asyncio.sleep(interval)
            reasoning = "".join(token for kind, token in post if kind == "r")
            text = "".join(token for kind, token in post if kind == "c")
            await self._post(request, worker, attempt, seq, reasoning, text)
            attempt.posts = seq
            attempt.tokens += len(post)
        if worker.fault_reason is not None:
            await self._fault(request, worker, attempt, worker.fault_reason)
            return
        if restart_after is not None:
            self.restart(request, counted_for=worker.name)
            return
        if plan.tool_call_tokens:
            await asyncio.sleep(plan.tool_call_tokens / worker.tokens_per_second)
        if worker.done_without_generation:
            await self._await_marker(self.end_attempt(request, "completed"))
            self.host.queue.set_state(request, RequestState.DONE)
            request.task = None
            self.host.bus.signal(request.id, "done")
            self._job_finished(worker.name)
            return
        await self._complete(request, worker, attempt, plan)

    async def _fault(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt, reason: ChatFaultReason) -> None:
        submit = build_chat_fault_submit(attempt.gen, worker.model, reason)
        await self._await_marker(self.end_attempt(request, "faulted"))
        self.host.queue.set_state(request, RequestState.FAULTED)
        request.fault_reason = submit["fault_reason"]
        request.task = None
        self.host.bus.signal(request.id, "faulted")
        self._job_finished(worker.name)

    @staticmethod
    def _verify(request: ChatRequest, submit: Mapping[str, Any]) -> bool:
        """The Horde's checks of a reply under ``strict`` conformance; False refuses it (``reply_refused``)."""
        if request.requirements.conformance is not ChatConformance.STRICT:
            return True
        traits = request.requirements.traits
        calls = submit["message"].get("tool_calls") or []
        offered = {tool["function"]["name"] for tool in request.payload.get("tools") or []}
        if calls and (not traits.forwards_tools or any(call["function"]["name"] not in offered for call in calls)):
            return False
        forced = traits.forwards_tools and traits.tool_choice_mode in (
            ChatToolChoiceMode.REQUIRED,
            ChatToolChoiceMode.FUNCTION,
        )
        return not (forced and not calls)

    async def _complete(self, request: ChatRequest, worker: WorkerSpec, attempt: Attempt, plan: ReplyPlan) -> None:
        message: dict[str, Any] = {"content": plan.content}
        if plan.content and worker.final_text_diverges:
            message["content"] = DIVERGED_PREFIX + plan.content
        if plan.tool_calls:
            message["tool_calls"] = plan.tool_calls
        if plan.reasoning:
            message["reasoning_content"] = plan.reasoning
        reported = set(worker.report_usage)
        usage = ChatUsage(
            prompt_tokens=plan.prompt_tokens if "prompt_tokens" in reported else None,
            completion_tokens=plan.completion_tokens if "completion_tokens" in reported else None,
            reasoning_tokens=plan.reasoning_tokens if "reasoning_tokens" in reported and plan.reasoning else None,
        )
        submit = build_chat_reply_submit(
            attempt.gen,
            worker.model,
            message,
            plan.finish_reason,
            usage,
            native_finish_reason=plan.native_finish_reason,
        )
        if not self._verify(request, submit):
            await self._fault(request, worker, attempt, ChatFaultReason.REPLY_REFUSED)
            return
        traits = request.requirements.traits
        calls = submit["message"].get("tool_calls")
        if calls and not traits.parallel_tool_calls and request.requirements.conformance is ChatConformance.STRICT:
            submit["message"]["tool_calls"] = calls[:1]
        generation: dict[str, Any] = {
            "id": submit["id"],
            "worker_id": worker.worker_id,
            "worker_name": worker.name,
            "model": submit["model_id"],
        }
        generation.update({key: value for key, value in submit.items() if key not in ("id", "model_id")})
        await self._await_marker(self.end_attempt(request, "completed"))
        request.generations = [generation]
        request.kudos_consumed = round(plan.completion_tokens * self.host.scenario.kudos_per_token, 2)
        self.host.queue.set_state(request, RequestState.DONE)
        request.task = None
        self.host.bus.signal(request.id, "done")
        self._job_finished(worker.name)
