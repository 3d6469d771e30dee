"""The LLM port over any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp).

Retries are ours, not the client's: a bad answer is retried with the
validation error shown to the model so it can correct itself, which the
client's transport retries cannot do.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import openai
from openai import AsyncOpenAI
from pydantic import ValidationError

from memstream.streams import metering
from memstream.streams.llm.jsonfix import JSONRecoveryError, recover_json
from memstream.streams.llm.openai_client import openai_client, status_message
from memstream.streams.llm.pacing import Pacer, retry_after_s
from memstream.streams.llm.port import ChatMessage, Ctx, LLMError, LLMUsage, Resp, Task
from memstream.topics.settings import LLMSettings

log = logging.getLogger(__name__)

# Client errors that no retry can fix (bad key, unknown model, malformed request).
_PERMANENT_STATUS = frozenset({400, 401, 403, 404, 405, 413, 422})
# Keeps a long bad answer from bloating the correction turn.
_ECHO_CHARS = 2000


class _Attempt(Exception):
    """One failed attempt; ``feedback`` is shown to the model on the next one."""

    def __init__(self, reason: str, *, feedback: str | None = None, bad_answer: str | None = None,
                 retry_after_s: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.feedback = feedback
        self.bad_answer = bad_answer
        self.retry_after_s = retry_after_s  # the server said when to ask again


class _Permanent(Exception):
    """A failure that retrying cannot fix."""


class OpenAILLM:
    """Chat completions in JSON mode, answers repaired, validated and retried.

    ``usage.calls`` counts requests sent to the endpoint, ``usage.failures``
    failed attempts; ``usage_by_task`` holds the same per task name.
    """

    name = "openai"

    def __init__(self, settings: LLMSettings, *, client: AsyncOpenAI | None = None) -> None:
        self._settings = settings
        self._client = client or openai_client(settings.base_url, settings.api_key,
                                               settings.timeout_s)
        # Flipped off once the server rejects response_format (many local servers do).
        self._json_mode = True
        self._pacer = Pacer(settings.concurrency, settings.max_retry_after_s)
        self.usage = LLMUsage()
        self.usage_by_task: dict[str, LLMUsage] = {}

    async def run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        base = list(task.render(ctx))
        conversation = list(base)
        attempts = self._settings.max_retries + 1
        reason = "no attempt made"
        last_answer: str | None = None
        told: float | None = None  # the last refusal's Retry-After (the pacer holds for it)
        for attempt in range(1, attempts + 1):
            if attempt > 1 and told is None:
                await asyncio.sleep(self._settings.backoff_s * 2 ** (attempt - 2))
            try:
                return await self._attempt(task, conversation)
            except _Permanent as exc:
                self._count_failure(task.name)
                log.warning("LLM task %s failed permanently: %s", task.name, exc)
                raise LLMError(task.name, str(exc), attempt) from exc
            except _Attempt as exc:
                reason = exc.reason
                told = exc.retry_after_s
                last_answer = exc.bad_answer or last_answer
                self._count_failure(task.name)
                log.warning(
                    "LLM task %s attempt %d/%d failed: %s", task.name, attempt, attempts, reason
                )
                conversation = list(base)
                if exc.feedback is not None:
                    conversation.append(
                        {"role": "assistant", "content": (exc.bad_answer or "")[:_ECHO_CHARS]}
                    )
                    conversation.append({"role": "user", "content": exc.feedback})
        raise LLMError(task.name, reason, attempts, last_answer)

    @property
    def model(self) -> str:
        return self._settings.model

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ internals

    async def _attempt(self, task: Task[Ctx, Resp], conversation: list[ChatMessage]) -> Resp:
        content = await self._complete(task.name, conversation)
        if not content or not content.strip():
            raise _Attempt("the model returned an empty answer")
        try:
            value = recover_json(content)
        except JSONRecoveryError as exc:
            raise _Attempt(
                f"unparsable answer: {exc}",
                bad_answer=content,
                feedback=(
                    "Your previous answer could not be parsed as JSON. Answer again with one "
                    "JSON object only, no prose and no markdown fences."
                ),
            ) from exc
        try:
            return task.response.model_validate(value)
        except ValidationError as exc:
            errors = _describe(exc)
            raise _Attempt(
                f"answer does not match {task.response.__name__}: {errors}",
                bad_answer=content,
                feedback=(
                    "Your previous answer did not match the required JSON structure:\n"
                    f"{errors}\nAnswer again with one corrected JSON object only."
                ),
            ) from exc

    async def _complete(self, task_name: str, conversation: list[ChatMessage]) -> str | None:
        """One request; a 400 in JSON mode is retried at once without ``response_format``."""
        use_json_mode = self._json_mode
        while True:
            try:
                completion = await self._request(task_name, conversation, use_json_mode)
            except openai.BadRequestError as exc:
                if use_json_mode:
                    log.warning(
                        "LLM task %s: server rejected response_format (%s); "
                        "retrying without JSON mode",
                        task_name,
                        status_message(exc),
                    )
                    use_json_mode = False
                    continue
                raise _Permanent(f"HTTP 400: {status_message(exc)}") from exc
            if not use_json_mode:
                self._json_mode = False
            break
        usage = completion.usage
        if usage is not None:
            for counter in (self.usage, self._task_usage(task_name)):
                counter.prompt_tokens += usage.prompt_tokens or 0
                counter.completion_tokens += usage.completion_tokens or 0
            metering.add_tokens(usage.prompt_tokens or 0, usage.completion_tokens or 0)
        if not completion.choices:
            raise _Attempt("the answer has no choices")
        content: str | None = completion.choices[0].message.content
        return content

    async def _request(
        self, task_name: str, conversation: list[ChatMessage], json_mode: bool
    ) -> Any:
        extra: dict[str, Any] = {}
        if json_mode:
            extra["response_format"] = {"type": "json_object"}
        self.usage.calls += 1
        self._task_usage(task_name).calls += 1
        timeout = self._settings.timeout_s
        try:
            async with self._pacer.slot(), asyncio.timeout(timeout):
                return await self._client.chat.completions.create(
                    model=self._settings.model,
                    messages=conversation,  # type: ignore[arg-type]
                    temperature=self._settings.temperature,
                    max_tokens=self._settings.max_tokens,
                    timeout=timeout,
                    **extra,
                )
        except (TimeoutError, openai.APITimeoutError) as exc:
            raise _Attempt(f"no answer within {timeout:g} s") from exc
        except openai.BadRequestError:
            raise
        except openai.APIStatusError as exc:
            message = f"HTTP {exc.status_code}: {status_message(exc)}"
            if exc.status_code in _PERMANENT_STATUS:
                raise _Permanent(message) from exc
            wait = retry_after_s(exc.response.headers)
            if wait is not None:
                wait = self._pacer.hold(wait)
                message += f" (retry after {wait:g} s)"
            raise _Attempt(message, retry_after_s=wait) from exc
        except openai.APIConnectionError as exc:
            raise _Attempt(f"cannot reach {self._settings.base_url}: {exc}") from exc
        except openai.APIError as exc:  # malformed response body and the like
            raise _Attempt(f"API error: {exc}") from exc

    def _task_usage(self, task_name: str) -> LLMUsage:
        return self.usage_by_task.setdefault(task_name, LLMUsage())

    def _count_failure(self, task_name: str) -> None:
        self.usage.failures += 1
        self._task_usage(task_name).failures += 1


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors()[:10]:
        where = ".".join(str(part) for part in err["loc"]) or "(root)"
        lines.append(f"- {where}: {err['msg']}")
    return "\n".join(lines)
