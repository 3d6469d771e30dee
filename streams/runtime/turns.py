"""Partitions in turn: how every stage takes its delivered records (see docs/delivery.md).

faust hands an agent its topic's records in the order they were fetched, and a fetch
brings one partition's backlog in a long run (hundreds of records). A stage slower than
its input then works through one partition's run while another partition's records, all
there, wait without a commit: under a long load a partition sat over a minute behind
another's older backlog, and one cube's burst held every cube that shares the stage.

So an agent only takes its records in (``hold``) and goes back for more; a runner handles
them a batch per partition in turn, each partition in log order. A held message carries one
more reference than faust's own, so faust acking it after the agent's batch does not let its
offset be committed: the runner acks it once it is handled and its outputs are sent
(at-least-once, as before). A worker that stops, or loses the partition in a rebalance,
with records still held has not acked them: they are redelivered to the partition's next
owner, and the ones held from before a rebalance are not handled here
(``Held.current``): after a rebalance every partition is sought to its committed offset, or
to its log's start when it has none (``runtime.read_offsets``), which is before every record
not yet handled, so they are fetched again in order. (Seeking a partition here instead, to
the first dropped record, could move it past records of the new generation not yet handled:
the scale-out trace showed a partition's commit held below them for good.)
``lanes`` order urgency (lower first): the optimizer takes its high
topic before its normal and low ones.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import AppT, EventT

from memstream.streams.runtime.stage import RawRecord


def _always() -> bool:
    return True


def _nothing() -> None:
    return None


Key = tuple[str, int]  # (topic, partition)
log = logging.getLogger("memstream.streams")


@dataclass(frozen=True)
class Held:
    """A delivered record waiting its turn."""

    raw: RawRecord
    ack: Callable[[], object] = _nothing  # once handled: lets its offset be committed
    current: Callable[[], bool] = _always  # False once a rebalance redelivers it anyway
    release: Callable[[], None] = _nothing  # no longer pending (``ack`` releases it too)

    @property
    def key(self) -> Key:
        return (self.raw.topic, self.raw.partition)


_PENDING = "_memstream_pending"


def pending(app: AppT) -> Counter[Key]:
    """Records of ``app`` held and neither handled nor dropped yet, by partition: a partition
    with none is idle here (``group_commits`` reads it before fetching one again)."""
    counts: Counter[Key] | None = getattr(app, _PENDING, None)
    if counts is None:
        counts = Counter()
        setattr(app, _PENDING, counts)
    return counts


class _Claim:
    """One held record's place in its partition's pending count, given back once."""

    __slots__ = ("counts", "key", "event", "open")

    def __init__(self, counts: Counter[Key], key: Key, event: EventT[Any]) -> None:
        self.counts, self.key, self.event, self.open = counts, key, event, True
        counts[key] += 1

    def release(self) -> None:
        if self.open:
            self.open = False
            self.counts[self.key] -= 1
            if self.counts[self.key] <= 0:
                del self.counts[self.key]

    def ack(self) -> object:
        self.release()
        return self.event.ack()


def hold(app: faust.App, events: Sequence[EventT[Any]],
         raw_of: Callable[[EventT[Any]], RawRecord]) -> list[Held]:
    """``events`` as held records: committed only once ``Held.ack`` is called.

    A record is current while the group is in the generation it was *fetched* in (faust
    stamps each message), not the one it is held in: records an agent had buffered when a
    rebalance began are fetched again from the last commit, and handling (and acking) the
    buffered copies first would ack offsets after a gap, which faust may commit past."""
    held = []
    counts = pending(app)
    for event in events:
        event.message.incref()  # faust's ack after the agent's batch leaves this one
        fetched_in = event.message.generation_id
        raw = raw_of(event)
        claim = _Claim(counts, (raw.topic, raw.partition), event)
        held.append(Held(raw, claim.ack, _in_generation(
            app, app.consumer_generation_id if fetched_in is None else fetched_in),
            claim.release))
    return held


def current_only(batch: Sequence[Held]) -> tuple[list[Held], list[Held]]:
    """The records of ``batch`` still current, and those left to be read again (no longer
    pending)."""
    kept: list[Held] = []
    gone: list[Held] = []
    for h in batch:
        (kept if h.current() else gone).append(h)
    for h in gone:
        h.release()
    if gone:
        log.debug("%s[%s]: %d records from before a rebalance left to be read again "
                  "(offsets %s-%s)", gone[0].raw.topic, gone[0].raw.partition, len(gone),
                  gone[0].raw.offset, gone[-1].raw.offset)
    return kept, gone


def _in_generation(app: faust.App, generation: int) -> Callable[[], bool]:
    def current() -> bool:
        return bool(app.consumer_generation_id == generation)
    return current


@dataclass
class TurnQueue:
    """Held records by lane, then partition, each in log order; at most ``limit`` held
    (``put`` waits meanwhile)."""

    limit: int
    lanes: dict[int, dict[Key, deque[Held]]] = field(default_factory=dict)
    served: dict[int, Key] = field(default_factory=dict)  # lane → partition taken last
    size: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _room: asyncio.Event = field(default_factory=asyncio.Event)

    async def put(self, lane: int, items: Sequence[Held]) -> None:
        while self.size >= self.limit:
            self._room.clear()
            await self._room.wait()
        for item in items:
            self.lanes.setdefault(lane, {}).setdefault(item.key, deque()).append(item)
        self.size += len(items)
        self._arrived.set()

    def next(self, busy: Collection[Key] = ()) -> tuple[int, Key] | None:
        """The (lane, partition) to take next: the most urgent lane holding records of a
        partition not ``busy`` (one with a batch under way), and of its partitions the one
        after the partition taken last (in turn)."""
        for lane in sorted(self.lanes):
            keys = [k for k in sorted(self.lanes[lane]) if k not in busy]
            if keys:
                last = self.served.get(lane)
                after = (k for k in keys if last is None or k > last)
                return lane, next(after, keys[0])
        return None

    def take(self, lane: int, key: Key, limit: int) -> list[Held]:
        waiting = self.lanes[lane][key]
        batch = [waiting.popleft() for _ in range(min(limit, len(waiting)))]
        if not waiting:
            del self.lanes[lane][key]
        self.served[lane] = key
        self.size -= len(batch)
        self._room.set()
        return batch

    def holds(self, lane: int) -> bool:
        return bool(self.lanes.get(lane))

    async def arrival(self) -> None:
        """Wait until records are put (returns at once if some came since the last wait)."""
        await self._arrived.wait()
        self._arrived.clear()


async def serve(queue: TurnQueue, batch_size: int, slots: int,
                handle: Callable[[list[Held]], Coroutine[Any, Any, None]]) -> None:
    """Hand ``queue``'s records to ``handle`` a batch (at most ``batch_size``) per partition
    at a time (the most urgent lane first), up to ``slots`` partitions at once, each slot
    refilled as soon as its batch is done: one partition's embedding runs while another's
    batch does its store work, and a slow batch holds up only its own partition's next one
    (a partition's batches stay in log order). Records held from before a rebalance are
    fetched again, not handled (``current_only``). Cancelled, it cancels the batches under
    way (not acked, so redelivered); a failure escaping ``handle`` is raised once the other
    batches are done."""
    running: dict[Key, asyncio.Task[None]] = {}
    arrived: asyncio.Task[None] | None = None
    try:
        while True:
            while len(running) < slots and (chosen := queue.next(running)) is not None:
                batch = current_only(queue.take(*chosen, batch_size))[0]
                if batch:
                    running[chosen[1]] = asyncio.create_task(handle(batch))
            arrived = arrived or asyncio.create_task(queue.arrival())
            await asyncio.wait([*running.values(), arrived], return_when=asyncio.FIRST_COMPLETED)
            for key, task in list(running.items()):
                if task.done():
                    del running[key]
                    task.result()
            if arrived.done():
                arrived = None
    except asyncio.CancelledError:
        for task in running.values():
            task.cancel()
        raise
    finally:
        if arrived is not None:
            arrived.cancel()
        if running:
            await asyncio.wait(running.values())
