"""The ``rules`` provider: every task answered by its deterministic stand-in, no model.

It lets the whole pipeline run on a laptop without an LLM endpoint. It is not a
language model, so it says so loudly when it starts.
"""

from __future__ import annotations

import logging

from streams.llm.port import Ctx, LLMError, LLMUsage, Resp, Task

log = logging.getLogger(__name__)


class RulesLLM:
    """Runs ``task.rules(ctx)``; failures of a stand-in surface as ``LLMError`` like a model's."""

    name = "rules"

    def __init__(self) -> None:
        self.usage = LLMUsage()
        self.usage_by_task: dict[str, LLMUsage] = {}
        log.warning(
            "LLM provider 'rules': a deterministic rule-based stand-in answers every LLM task; "
            "this is not a language model. Set MEMSTREAM_LLM__BASE_URL (and API key) to use one."
        )

    async def run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        per_task = self.usage_by_task.setdefault(task.name, LLMUsage())
        self.usage.calls += 1
        per_task.calls += 1
        try:
            answer = task.rules(ctx)
            if not isinstance(answer, task.response):
                raise TypeError(
                    f"rules returned {type(answer).__name__}, expected {task.response.__name__}"
                )
        except Exception as exc:
            self.usage.failures += 1
            per_task.failures += 1
            log.warning("rules stand-in for task %s failed: %s", task.name, exc)
            raise LLMError(task.name, f"rules stand-in failed: {exc}") from exc
        return answer

    async def close(self) -> None:
        return None
