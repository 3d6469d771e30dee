"""Optimizer agents: ``reorganize.high`` / ``.normal`` / ``.low`` → one prioritized processor.

Each priority topic has a thin agent that hands its batch to a single processor and
waits for it before acking (at-least-once). The processor always takes the most
urgent batch waiting, so a flood of low-priority work delays a high-priority event by
at most the one batch in progress. These agents are separate consumers from
ingestion, which they never block. A timer runs structure optimization per period.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from streams.app import BoundTopics, register_batch_agent
from streams.reorganize.logic import STAGE, on_add, on_merge, on_remove
from streams.reorganize.optimize import Scopes, run_scopes
from streams.runtime import Deps, Outgoing, RawRecord, Record, StageStats, make_batch_handler
from topics.events import ReorganizeEvent
from topics.progress import Progress
from topics.registry import REORGANIZE_HIGH, REORGANIZE_LOW, REORGANIZE_NORMAL

log = logging.getLogger("memstream.reorganize")
PRIORITY = {REORGANIZE_HIGH.suffix: 0, REORGANIZE_NORMAL.suffix: 1, REORGANIZE_LOW.suffix: 2}
LOW_BATCH = 10  # bounds how long an urgent event can wait behind less urgent work
HIGH_WAIT_S = 0.5  # how long a less urgent batch waits for pending urgent events to arrive
# High-priority batches are small: a batch is committed only once all of it is handled, and
# an add event took 1-3 s on a busy machine, so a batch of 32 left its partition 100 s
# without a commit (bench/load.py); a few events per batch commit every few seconds.
HIGH_BATCH = 4
# While ingestion (extraction, add) has a batch in hand, the optimizer rests after each
# batch for YIELD_RATIO times as long as the batch took (at most MAX_YIELD_S): it gets at
# most 1/(1 + YIELD_RATIO) of the worker, ingestion the rest, and neither stops.
YIELD_RATIO = 1.0
MAX_YIELD_S = 5.0


class Processor:
    """Runs submitted batches one at a time, most urgent first."""

    def __init__(self, bound: BoundTopics, deps: Deps, stats: StageStats,
                 progress: Progress) -> None:
        self.bound, self.deps, self.stats, self.progress = bound, deps, stats, progress
        self.high_next: dict[int, int] = {}  # partition → next high offset handled here
        self.scopes = Scopes()
        self.handled: list[str] = []  # "op:event_id" in processing order (recent)
        self._queue: asyncio.PriorityQueue[tuple[int, int, Any]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        self._deferred: set[int] = set()  # lower-priority batches already made to wait once
        self._task: asyncio.Task[None] | None = None
        self._ingested = -1  # ingestion's processed count when the optimizer last looked
        self._handle = make_batch_handler(STAGE, REORGANIZE_HIGH, self.logic,
                                          deps.settings.worker, deps.clock, stats,
                                          deps.settings.limits)

    async def submit(self, priority: int, raws: Sequence[RawRecord]) -> list[Outgoing]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="memstream-reorganize")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((priority, next(self._seq), (raws, done)))
        await done
        return []

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
        while True:
            item = await self._queue.get()
            priority, seq, (raws, done) = item
            if priority > 0 and seq not in self._deferred and await self._high_waiting():
                # Give the urgent events a moment to be delivered, then take them first.
                self._deferred.add(seq)
                await self._queue.put(item)
                await asyncio.sleep(HIGH_WAIT_S)
                continue
            self._deferred.discard(seq)
            started = asyncio.get_running_loop().time()
            try:
                await self.bound.send(await self._handle(raws))
                if priority == 0:
                    for raw in raws:
                        seen = self.high_next.get(raw.partition, 0)
                        self.high_next[raw.partition] = max(seen, raw.offset + 1)
                if not done.done():  # the submitting agent may have been stopped meanwhile
                    done.set_result(None)
            except Exception as exc:  # noqa: BLE001 - the agent logs it and carries on
                if not done.done():
                    done.set_exception(exc)
            if self.ingesting():
                took = asyncio.get_running_loop().time() - started
                await asyncio.sleep(min(took * YIELD_RATIO, MAX_YIELD_S))

    def ingesting(self) -> bool:
        """Whether extraction or the add stage is handling a batch now, or handled one since
        the optimizer last asked."""
        stages: Sequence[StageStats] = self.bound.services.get("ingestion", ())
        processed = sum(s.processed for s in stages)
        moved, self._ingested = processed != self._ingested, processed
        return any(s.in_flight for s in stages) or moved

    async def logic(self, records: Sequence[Record[Any]]) -> list[Outgoing]:
        deps = self.deps
        out: list[Outgoing] = []
        for record in records:
            event: ReorganizeEvent = record.value
            match event.op:
                case "add":
                    out += await on_add(event, deps)
                    if event.memory_type is not None:
                        self.scopes.mark((event.cube_id, event.user_id, event.memory_type))
                case "remove":
                    out += await on_remove(event, deps)
                case "merge":
                    out += await on_merge(event, deps)
                case "end":
                    out += await run_scopes(deps, self.scopes, self.scopes.of_cube(event.cube_id))
            self.handled.append(f"{event.op}:{event.event_id}")
            del self.handled[:-5000]
        return out

    async def periodic(self) -> None:
        """Optimize the scopes that received nodes since their last run, every period."""
        while True:
            await asyncio.sleep(self.deps.settings.reorganize.optimize_interval_s)
            try:
                await self.bound.send(await run_scopes(self.deps, self.scopes,
                                                       sorted(self.scopes.dirty)))
            except Exception:  # noqa: BLE001 - next period tries again
                log.exception("periodic optimization failed")

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

        size = HIGH_BATCH if priority == 0 else LOW_BATCH
        register_batch_agent(bound, spec, f"reorganize-{spec.suffix.split('.')[-1]}",
                             hand_over, stats, size, deps.settings.worker.batch_within_s)
    if deps.settings.reorganize.enabled:
        bound.app.task(processor.periodic)
    return stats, processor
