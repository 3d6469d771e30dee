"""Optimizer agents: ``reorganize.high`` / ``.normal`` / ``.low`` → one prioritized processor.

The queueing, pausing and turn-taking are ``streams.runtime.priority.PriorityProcessor``'s
(most urgent topic first, partitions in turn, at-least-once acks); this module gives it the
optimizer's work: ``add`` and ``remove`` events, then ``merge``, then ``end``, each applied to
the scopes the optimizer restructures. These agents are separate consumers from ingestion,
which they never block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from memstream.kafka.progress import Progress
from memstream.streams.reorganize.asof import FACT_TYPES
from memstream.streams.reorganize.logic import STAGE, on_add, on_merge, on_remove
from memstream.streams.reorganize.optimize import Scopes, run_scopes, run_windows
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.priority import PriorityProcessor, priority_agent
from memstream.streams.runtime.stage import Deps, Outgoing, Record, StageStats
from memstream.topics.events import ReorganizeEvent
from memstream.topics.registry import REORGANIZE_HIGH, REORGANIZE_LOW, REORGANIZE_NORMAL

log = logging.getLogger("memstream.reorganize")
SPECS = (REORGANIZE_HIGH, REORGANIZE_NORMAL, REORGANIZE_LOW)  # most urgent first
Observer = Callable[[ReorganizeEvent], None]


class Processor(PriorityProcessor):
    """The optimizer: reorganize events by priority, with the scopes it optimizes."""

    def __init__(self, bound: BoundTopics, deps: Deps, stats: StageStats,
                 progress: Progress) -> None:
        worker = deps.settings.worker
        super().__init__(bound, deps, stats, progress, STAGE, SPECS,
                         (worker.high_priority_batch, worker.low_priority_batch,
                          worker.low_priority_batch))
        self.scopes = Scopes()
        self.observers: list[Observer] = []  # told of each event handled, in order

    async def logic(self, records: Sequence[Record[Any]]) -> list[Outgoing]:
        """Handle one cube's records. Where the optimizer's windows stand is part of what an
        attempt changes: a failed attempt (its outputs never sent) leaves them as it found
        them, so the retry runs the same optimizations again and announces them."""
        windows = dict(self.scopes.windows)
        try:
            return await self._logic(records)
        except BaseException:
            self.scopes.windows = windows
            raise

    async def _logic(self, records: Sequence[Record[Any]]) -> list[Outgoing]:
        deps = self.deps
        out: list[Outgoing] = []
        adds: list[ReorganizeEvent] = []  # consecutive adds: organized with one model call
        for n, record in enumerate(records):
            event: ReorganizeEvent = record.value
            match event.op:
                case "add":
                    out += await run_windows(deps, self.scopes, event)
                    adds.append(event)
                    following = records[n + 1].value if n + 1 < len(records) else None
                    if following is None or following.op != "add":
                        out += await on_add(adds, deps)
                        adds = []
                case "remove":
                    out += await on_remove(event, deps)
                case "merge":
                    out += await on_merge(event, deps)
                case "end":  # everything the log added before the end, whatever ran before
                    out += await run_scopes(deps, self.scopes, [
                        (event.cube_id, event.user_id, t) for t in FACT_TYPES],
                        event.occurred_at)
            for observe in self.observers:
                observe(event)
        return out


def register(
    bound: BoundTopics, deps: Deps, progress: Progress
) -> tuple[StageStats, Processor]:
    stats = StageStats()
    processor = Processor(bound, deps, stats, progress)
    # most urgent first, on purpose: a less urgent partition waiting while the optimizer
    # works is not stalled (streams.runtime.stalls)
    bound.stalls.watch(STAGE, [spec.name(deps.settings) for spec in SPECS], stats,
                       together=True)
    worker = deps.settings.worker
    for priority, spec in enumerate(SPECS):
        size = worker.high_priority_batch if priority == 0 else worker.low_priority_batch
        agent = priority_agent(bound.app, processor, priority, size, worker.batch_within_s)
        bound.app.agent(bound[spec], name=f"reorganize-{spec.suffix.split('.')[-1]}")(agent)
    return stats, processor
