"""The LLM port: one typed call per task.

A ``Task`` bundles what a stage needs from a model: a typed context, a ``render`` that turns
it into chat messages, and the pydantic model the answer must validate against. Tasks and
their message types live with the prompts (``streams.prompts.promptkit``) and are named here
too, for the providers. The ``openai`` provider renders and calls a model; the ``rules``
provider calls the deterministic stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memstream.streams.prompts.promptkit import ChatMessage as ChatMessage
from memstream.streams.prompts.promptkit import Ctx as Ctx
from memstream.streams.prompts.promptkit import Resp as Resp
from memstream.streams.prompts.promptkit import Task as Task


class LLMError(RuntimeError):
    """The model could not produce a valid answer after retries (timeout, HTTP error, bad JSON)."""

    def __init__(
        self, task: str, message: str, attempts: int = 1, last_answer: str | None = None
    ) -> None:
        super().__init__(f"LLM task {task!r} failed after {attempts} attempt(s): {message}")
        self.task = task
        self.attempts = attempts
        # The model's last unparsable answer, for callers with a free-text fallback.
        self.last_answer = last_answer


@dataclass
class LLMUsage:
    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class LLM(Protocol):
    """Runs tasks. Implementations: ``streams.llm.openai_llm`` and ``streams.llm.rules``."""

    name: str
    usage: LLMUsage

    async def run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        """The validated answer, or ``LLMError``."""
        ...

    async def close(self) -> None: ...
