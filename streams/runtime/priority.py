"""A prioritized processor over several topics of one stage: most urgent topic first, within
a topic the partitions in turn, a batch from each.

Each priority topic has a thin agent that hands what it is delivered to the processor's queue
and goes back for more; an event's offset is committed only once the processor has handled
it (the agent holds a reference on each message, the processor acks it after its outputs are
sent: at-least-once). A partition whose backlog came in later is not left without a commit
behind another partition's older backlog, and one cube's flood does not hold the other
cubes' work back. Within a partition events keep their log order.

When urgent events wait in the most urgent topic but have not been delivered yet, the
processor pauses fetching from the less urgent topics' partitions (``consumer.pause``) and
takes the urgent batch as soon as it arrives (at most ``worker.priority_wait_s`` later), then
resumes them: a flood of low-priority work delays a high-priority event by at most the one
batch in progress. The optimizer (``streams/reorganize``) is the stage that uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import faust
from aiokafka import TopicPartition

from memstream.kafka.progress import Progress
from memstream.streams.runtime.batches import BoundTopics, Runner, handle_batch, raw_of
from memstream.streams.runtime.stage import (
    Deps,
    Outgoing,
    RawRecord,
    Record,
    StageStats,
    make_batch_handler,
)
from memstream.streams.runtime.turns import Held, TurnQueue, current_only, hold
from memstream.topics.registry import TopicSpec

log = logging.getLogger("memstream.priority")
SLOW_BATCH_S = 5.0  # a batch that takes this long is logged


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class PriorityProcessor(ABC):
    """Runs held batches one at a time: most urgent first, partitions in turn. ``specs``
    lists the stage's topics, most urgent first; subclasses give the logic."""

    def __init__(self, bound: BoundTopics, deps: Deps, stats: StageStats,
                 progress: Progress, stage: str, specs: Sequence[TopicSpec],
                 sizes: Sequence[int]) -> None:
        self.bound, self.deps, self.stats, self.progress = bound, deps, stats, progress
        self.stage, self.specs = stage, tuple(specs)
        self.high_next: dict[int, int] = {}  # partition → next high offset handled here
        self._queue = TurnQueue(deps.settings.worker.intake_queue)
        self._deferred = False  # the next less urgent batch already waited once
        self._high_arrived = asyncio.Event()
        self._paused: set[Any] = set()  # less urgent partitions not fetched for now
        self.runner = Runner(stage, self._run)
        self._ingested = -1  # ingestion's processed count when the optimizer last looked
        self._sizes = dict(enumerate(sizes))
        # each topic's records decoded (and dead-lettered) as that topic's
        self._handles = {
            priority: make_batch_handler(stage, spec, self.logic, deps.settings.worker,
                                         deps.clock, stats, deps.settings.limits)
            for priority, spec in enumerate(self.specs)}

    async def accept(self, priority: int, items: Sequence[Held]) -> None:
        """Queue delivered records to be handled in turn; waits while the queue is full."""
        self.runner.ensure(self.bound.app)
        await self._queue.put(priority, items)
        if priority == 0:
            self._high_arrived.set()

    async def submit(self, priority: int, raws: Sequence[RawRecord]) -> None:
        """Queue records and wait until they are handled (for callers outside an agent)."""
        loop = asyncio.get_running_loop()
        done = [loop.create_future() for _ in raws]
        await self.accept(priority, [Held(raw, functools.partial(_resolve, f))
                                     for raw, f in zip(raws, done, strict=True)])
        await asyncio.gather(*done)

    def _lower_partitions(self) -> set[Any]:
        settings = self.deps.settings
        names = {spec.name(settings) for spec in self.specs[1:]}
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
        topic = self.specs[0].name(self.deps.settings)
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
            chosen = self._queue.next()
            if chosen is None:
                await self._queue.arrival()
                continue
            priority, (_, partition) = chosen
            if priority > 0 and not self._deferred and await self._high_waiting():
                # Urgent events are in the high topic but not here yet: fetch nothing less
                # urgent meanwhile, and take them first as soon as they are delivered. A batch
                # waits once, so less urgent work is delayed, never starved.
                self._deferred = True
                self._pause_lower()
                self._high_arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._high_arrived.wait(), wait_s)
                continue
            if priority > 0:
                self._deferred = False
            batch = self._queue.take(*chosen, self._sizes[priority])
            started = asyncio.get_running_loop().time()
            kept, _ = current_only(batch)  # the others are fetched again (runtime.turns)
            await self._handle(priority, kept)
            took = asyncio.get_running_loop().time() - started
            if took >= SLOW_BATCH_S:
                log.info("%s: %d events of partition %d (priority %d) took %.1fs",
                         self.stage, len(batch), partition, priority, took)
            if self._paused and (priority > 0 or not await self._high_waiting()):
                self._resume_lower()
            if self.ingesting():  # let extraction and the add stage have the worker too
                worker = self.deps.settings.worker
                await asyncio.sleep(min(took * worker.optimizer_yield_ratio,
                                        worker.optimizer_max_yield_s))

    async def _handle(self, priority: int, batch: Sequence[Held]) -> None:
        """Handle a batch, send its outputs, then ack its records (their offsets may be
        committed). Records a rebalance redelivers anyway were left out by the caller."""
        if not batch:
            return
        raws = [h.raw for h in batch]
        self.stats.in_flight += 1
        try:
            await handle_batch(self.bound, self.stage, self._handles[priority], raws)
        finally:
            self.stats.in_flight -= 1
        if priority == 0:
            for raw in raws:
                seen = self.high_next.get(raw.partition, 0)
                self.high_next[raw.partition] = max(seen, raw.offset + 1)
        for held in batch:
            held.ack()
        self.stats.processed += len(batch)

    def ingesting(self) -> bool:
        """Whether extraction or the add stage is handling a batch now, or handled one since
        the optimizer last asked."""
        stages: Sequence[StageStats] = self.bound.services.get("ingestion", ())
        processed = sum(s.processed for s in stages)
        moved, self._ingested = processed != self._ingested, processed
        return any(s.in_flight for s in stages) or moved

    @abstractmethod
    async def logic(self, records: Sequence[Record[Any]]) -> list[Outgoing]:
        """Handle one cube's records (the stage's own work)."""

    async def stop(self) -> None:
        await self.runner.stop()


def priority_agent(app: faust.App, processor: PriorityProcessor, priority: int, size: int,
           within_s: float) -> Callable[[faust.StreamT[Any]], AsyncIterator[int]]:
    """Hand each delivered batch to the processor (held: committed once handled there) and
    go back for more."""

    async def agent(stream: faust.StreamT[Any]) -> AsyncIterator[int]:
        async for events in stream.take_events(size, within=within_s):  # type: ignore[attr-defined]
            await processor.accept(priority, hold(app, events, raw_of))
            yield len(events)

    return agent


