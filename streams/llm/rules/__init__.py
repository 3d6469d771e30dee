"""The ``rules`` provider: every task answered by its deterministic stand-in, no model.

It lets the whole pipeline run on a laptop without an LLM endpoint (and tests run without
one). It is not a language model, so it says so loudly when it starts.

The stand-ins live here, one module per prompt module, and ``STAND_INS`` maps each task
name to its stand-in: the prompt modules (``streams.prompts``) describe what is asked of a
model and import nothing from this package. A production fallback for a failing model
(``fallback_key``, ``fallback_keywords``, ``fallback_decision``, ``fallback_ids_from_text``)
stays with its prompt, named as such; a stand-in may reuse one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from memstream.streams.llm.port import Ctx, LLMError, LLMUsage, Resp, Task
from memstream.streams.llm.rules import (
    aggregate,
    conflict,
    extraction,
    fusion,
    inference,
    organize,
    relations,
    review,
    scheduler,
    search,
    summaries,
    summary,
)
from memstream.streams.prompts import aggregate as aggregate_prompt
from memstream.streams.prompts import conflict as conflict_prompt
from memstream.streams.prompts import extraction as extraction_prompt
from memstream.streams.prompts import fusion as fusion_prompt
from memstream.streams.prompts import inference as inference_prompt
from memstream.streams.prompts import organize as organize_prompt
from memstream.streams.prompts import relations as relations_prompt
from memstream.streams.prompts import review as review_prompt
from memstream.streams.prompts import scheduler as scheduler_prompt
from memstream.streams.prompts import search as search_prompt
from memstream.streams.prompts import summaries as summaries_prompt
from memstream.streams.prompts import summary as summary_prompt

log = logging.getLogger(__name__)

# Task name → its deterministic stand-in (a test checks every task of streams.prompts has one).
STAND_INS: dict[str, Callable[[Any], Any]] = {
    extraction_prompt.EXTRACTION.name: extraction.rules,
    conflict_prompt.RELATION_JUDGE.name: conflict.rules,
    fusion_prompt.FUSION.name: fusion.rules,
    relations_prompt.RELATION_DETECTOR.name: relations.rules,
    inference_prompt.INFERENCE.name: inference.rules,
    aggregate_prompt.AGGREGATE.name: aggregate.rules,
    # the batched tasks the pipeline asks (one per chunk), built from the per-pair stand-ins
    review_prompt.REVIEW.name: review.rules,
    organize_prompt.ORGANIZE.name: organize.rules,
    summaries_prompt.CLUSTER_SUMMARIES.name: summaries.rules,
    summary_prompt.CLUSTER_SUMMARY.name: summary.rules,
    search_prompt.GOAL_PARSER.name: search.rules_goal,
    search_prompt.REASONER.name: search.rules_reasoner,
    scheduler_prompt.KEYWORDS.name: scheduler.rules_keywords,
    scheduler_prompt.RETRIEVAL_DECISION.name: scheduler_prompt.fallback_decision,
    scheduler_prompt.RERANK.name: scheduler.rules_rerank,
    scheduler_prompt.FILTER.name: scheduler.rules_filter,
}


def stand_in(task: Task[Ctx, Resp]) -> Callable[[Ctx], Resp]:
    """The deterministic stand-in for ``task`` (``KeyError`` naming it when there is none)."""
    try:
        return STAND_INS[task.name]
    except KeyError:
        raise KeyError(f"no rules stand-in for task {task.name!r}") from None


_warned = False


def warn_once() -> None:
    """Say once per process that no model answers (a replay's shadow or a second worker in
    the same process builds another stand-in; the user needs to read it once)."""
    global _warned  # noqa: PLW0603 - one flag per process is the point
    if _warned:
        return
    _warned = True
    log.warning(
        "LLM provider 'rules': a deterministic rule-based stand-in answers every LLM task; "
        "this is not a language model. Set MEMSTREAM_LLM__BASE_URL (and API key) to use one."
    )


class RulesLLM:
    """Runs the task's stand-in; failures of a stand-in surface as ``LLMError`` like a model's."""

    name = "rules"

    def __init__(self) -> None:
        self.usage = LLMUsage()
        self.usage_by_task: dict[str, LLMUsage] = {}
        warn_once()

    async def run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        per_task = self.usage_by_task.setdefault(task.name, LLMUsage())
        self.usage.calls += 1
        per_task.calls += 1
        try:
            answer = stand_in(task)(ctx)
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
