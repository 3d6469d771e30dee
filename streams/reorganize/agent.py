"""Optimizer agents: ``reorganize.high`` / ``.normal`` / ``.low`` → one prioritized processor.

Each priority topic has a thin agent that hands its batch to a single processor and
waits for it before acking (at-least-once). The processor always takes the most
urgent batch waiting. When urgent events wait in the high topic but have not been
delivered yet, it pauses fetching from the less urgent topics' partitions
(``consumer.pause``) and takes the urgent batch as soon as it arrives (at most
``worker.priority_wait_s`` later), then resumes them: a flood of low-priority work delays
a high-priority event by at most the one batch in progress (``worker.low_priority_batch``
events). These agents are separate consumers from ingestion, which they never block.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import TopicPartition

from memstream.streams.app import BoundTopics, register_batch_agent
from memstream.streams.reorganize.asof import FACT_TYPES
from memstream.streams.reorganize.logic import STAGE, on_add, on_merge, on_remove
from memstream.streams.reorganize.optimize import Scopes, run_scopes, run_windows
from memstream.streams.runtime import (
    Deps,
    Outgoing,
    RawRecord,
    Record,
    StageStats,
    make_batch_handler,
)
from memstream.topics.events import ReorganizeEvent
from memstream.topics.progress import Progress
from memstream.topics.registry import REORGANIZE_HIGH, REORGANIZE_LOW, REORGANIZE_NORMAL

log = logging.getLogger("memstream.reorganize")
PRIORITY = {REORGANIZE_HIGH.suffix: 0, REORGANIZE_NORMAL.suffix: 1, REORGANIZE_LOW.suffix: 2}
Observer = Callable[[ReorganizeEvent], None]


class Processor:
    """Runs submitted batches one at a time, most urgent first."""

    def __init__(self, bound: BoundTopics, deps: Deps, stats: StageStats,
                 progress: Progress) -> None:
        self.bound, self.deps, self.stats, self.progress = bound, deps, stats, progress
        self.high_next: dict[int, int] = {}  # partition → next high offset handled here
        self.scopes = Scopes()
        self.observers: list[Observer] = []  # told of each event handled, in order
        self._queue: asyncio.PriorityQueue[tuple[int, int, Any]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        self._deferred: set[int] = set()  # lower-priority batches already made to wait once
        self._high_arrived = asyncio.Event()
        self._paused: set[Any] = set()  # less urgent partitions not fetched for now
        self._task: asyncio.Task[None] | None = None
        self._ingested = -1  # ingestion's processed count when the optimizer last looked
        # each topic's records decoded (and dead-lettered) as that topic's
        self._handles = {
            PRIORITY[spec.suffix]: make_batch_handler(STAGE, spec, self.logic,
                                                      deps.settings.worker, deps.clock, stats,
                                                      deps.settings.limits)
            for spec in (REORGANIZE_HIGH, REORGANIZE_NORMAL, REORGANIZE_LOW)}

    async def submit(self, priority: int, raws: Sequence[RawRecord]) -> list[Outgoing]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="memstream-reorganize")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((priority, next(self._seq), (raws, done)))
        if priority == 0:
            self._high_arrived.set()
        await done
        return []

    def _lower_partitions(self) -> set[Any]:
        settings = self.deps.settings
        names = {REORGANIZE_NORMAL.name(settings), REORGANIZE_LOW.name(settings)}
        return {tp for tp in self.bound.app.consumer.assignment() if tp.topic in names}

    def _pause_lower(self) -> None:
        """Stop fetching less urgent events while urgent ones wait to be delivered."""
        lower = self._lower_partitions() - self._paused
        if lower:
            log.debug("urgent events pending: pausing %d less urgent partitions", len(lower))
            self.bound.app.consumer.pause_partitions(lower)
            self._paused |= lower

    def _resume_lower(self) -> None:
        if self._paused:
            # only those still assigned: a rebalance forgets pauses of revoked partitions
            log.debug("urgent events handled: resuming %d partitions", len(self._paused))
            self.bound.app.consumer.resume_partitions(self._paused & self._lower_partitions())
            self._paused.clear()

    async def _high_waiting(self) -> bool:
        """Whether this worker's high-priority partitions hold events not handled yet
        (fetched or not): checked before less urgent work, which then lets them go first."""
        topic = REORGANIZE_HIGH.name(self.deps.settings)
        for tp in self.bound.app.consumer.assignment():
            if tp.topic != topic:
                continue
            kafka_tp = TopicPartition(tp.topic, tp.partition)
            end = await self.progress.end_offset(kafka_tp)
            done = max(await self.progress.committed(kafka_tp), self.high_next.get(tp.partition, 0))
            if end > done:
                return True
        return False

    async def _run(self) -> None:
        wait_s = self.deps.settings.worker.priority_wait_s
        while True:
            item = await self._queue.get()
            priority, seq, (raws, done) = item
            if priority > 0 and seq not in self._deferred and await self._high_waiting():
                # Urgent events are in the high topic but not here yet: fetch nothing less
                # urgent meanwhile, and take them first as soon as they are delivered. A batch
                # waits once, so less urgent work is delayed, never starved.
                self._deferred.add(seq)
                self._pause_lower()
                self._high_arrived.clear()
                await self._queue.put(item)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._high_arrived.wait(), wait_s)
                continue
            self._deferred.discard(seq)
            started = asyncio.get_running_loop().time()
            try:
                await self.bound.send(await self._handles[priority](raws))
                if priority == 0:
                    for raw in raws:
                        seen = self.high_next.get(raw.partition, 0)
                        self.high_next[raw.partition] = max(seen, raw.offset + 1)
                if not done.done():  # the submitting agent may have been stopped meanwhile
                    done.set_result(None)
            except Exception as exc:  # noqa: BLE001 - the agent logs it and carries on
                if not done.done():
                    done.set_exception(exc)
            if self._paused and (priority > 0 or not await self._high_waiting()):
                self._resume_lower()
            if self.ingesting():  # let extraction and the add stage have the worker too
                took = asyncio.get_running_loop().time() - started
                worker = self.deps.settings.worker
                await asyncio.sleep(min(took * worker.optimizer_yield_ratio,
                                        worker.optimizer_max_yield_s))

    def ingesting(self) -> bool:
        """Whether extraction or the add stage is handling a batch now, or handled one since
        the optimizer last asked."""
        stages: Sequence[StageStats] = self.bound.services.get("ingestion", ())
        processed = sum(s.processed for s in stages)
        moved, self._ingested = processed != self._ingested, processed
        return any(s.in_flight for s in stages) or moved

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
        for record in records:
            event: ReorganizeEvent = record.value
            match event.op:
                case "add":
                    out += await run_windows(deps, self.scopes, event)
                    out += await on_add(event, deps)
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

    async def stop(self) -> None:
        for task in (self._task,):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def register(
    bound: BoundTopics, deps: Deps, progress: Progress
) -> tuple[StageStats, Processor]:
    stats = StageStats()
    processor = Processor(bound, deps, stats, progress)
    for spec in (REORGANIZE_HIGH, REORGANIZE_NORMAL, REORGANIZE_LOW):
        priority = PRIORITY[spec.suffix]

        async def hand_over(raws: Sequence[RawRecord], p: int = priority) -> list[Outgoing]:
            return await processor.submit(p, raws)

        size = deps.settings.worker.high_priority_batch if priority == 0 else \
            deps.settings.worker.low_priority_batch
        register_batch_agent(bound, spec, f"reorganize-{spec.suffix.split('.')[-1]}",
                             hand_over, stats, size, deps.settings.worker.batch_within_s)
    return stats, processor
