"""A stage's held records are taken a batch per partition in turn, most urgent lane first,
each partition in log order, a slot per partition under way; the queue holds a bounded
number."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from memstream.streams.runtime.stage import RawRecord
from memstream.streams.runtime.turns import Held, TurnQueue, current_only, hold, pending, serve


def held(topic: str, partition: int, offset: int, acked: list[int] | None = None) -> Held:
    def ack() -> None:
        if acked is not None:
            acked.append(offset)

    return Held(RawRecord(topic, partition, offset, b"k", b"{}"), ack)


def drain(queue: TurnQueue, size: int) -> list[list[tuple[str, int, int]]]:
    out = []
    while (chosen := queue.next()) is not None:
        out.append([(h.raw.topic, h.raw.partition, h.raw.offset)
                    for h in queue.take(*chosen, size)])
    return out


async def test_partitions_are_taken_in_turn_each_in_log_order() -> None:
    queue = TurnQueue(limit=100)
    await queue.put(0, [held("t", 2, i) for i in range(5)])
    await queue.put(0, [held("t", 0, i) for i in range(3)])
    await queue.put(0, [held("u", 0, 7)])
    assert drain(queue, 2) == [
        [("t", 0, 0), ("t", 0, 1)], [("t", 2, 0), ("t", 2, 1)], [("u", 0, 7)],
        [("t", 0, 2)], [("t", 2, 2), ("t", 2, 3)], [("t", 2, 4)]]
    assert queue.size == 0


async def test_a_more_urgent_lane_goes_first() -> None:
    queue = TurnQueue(limit=100)
    await queue.put(2, [held("low", 0, 0)])
    await queue.put(0, [held("high", 1, 0), held("high", 1, 1)])
    assert drain(queue, 10) == [[("high", 1, 0), ("high", 1, 1)], [("low", 0, 0)]]


async def test_a_full_queue_makes_the_delivery_wait_for_room() -> None:
    queue = TurnQueue(limit=2)
    await queue.put(0, [held("t", 0, 0), held("t", 0, 1)])
    more = asyncio.create_task(queue.put(0, [held("t", 0, 2)]))
    await asyncio.sleep(0.05)
    assert not more.done() and queue.size == 2
    queue.take(0, ("t", 0), 1)
    await asyncio.wait_for(more, 1)
    assert queue.size == 2


async def test_arrival_wakes_a_waiting_runner() -> None:
    queue = TurnQueue(limit=10)
    waiting = asyncio.create_task(queue.arrival())
    await asyncio.sleep(0.02)
    assert not waiting.done()
    await queue.put(0, [held("t", 0, 0)])
    await asyncio.wait_for(waiting, 1)


async def test_a_partition_with_a_batch_under_way_is_passed_over() -> None:
    queue = TurnQueue(limit=100)
    await queue.put(0, [held("t", 1, i) for i in range(3)])
    await queue.put(0, [held("t", 0, i) for i in range(2)])
    await queue.put(1, [held("low", 0, 0)])

    assert queue.next() == (0, ("t", 0))
    assert queue.next(busy={("t", 0)}) == (0, ("t", 1))
    # every partition of the urgent lane busy: the next lane's
    assert queue.next(busy={("t", 0), ("t", 1)}) == (1, ("low", 0))


async def test_serve_refills_a_slot_as_soon_as_its_batch_is_done() -> None:
    """A slow batch of one partition holds up only that partition: the other partition's
    batches run one after another beside it, each partition in log order."""
    queue = TurnQueue(limit=100)
    await queue.put(0, [held("t", 0, i) for i in range(4)])
    await queue.put(0, [held("t", 1, i) for i in range(6)])
    slow = asyncio.Event()
    handled: list[tuple[int, list[int]]] = []
    under_way: set[int] = set()
    most = 0

    async def handle(batch: list[Held]) -> None:
        nonlocal most
        partition = batch[0].raw.partition
        assert partition not in under_way  # one batch per partition at a time
        under_way.add(partition)
        most = max(most, len(under_way))
        if partition == 0:
            await slow.wait()
        await asyncio.sleep(0)
        handled.append((partition, [h.raw.offset for h in batch]))
        under_way.discard(partition)

    server = asyncio.create_task(serve(queue, 2, 2, handle))
    for _ in range(100):
        await asyncio.sleep(0)
    # partition 1 went through all its batches while partition 0's first was under way
    assert handled == [(1, [0, 1]), (1, [2, 3]), (1, [4, 5])]
    slow.set()
    for _ in range(100):
        await asyncio.sleep(0)
    assert [h for h in handled if h[0] == 0] == [(0, [0, 1]), (0, [2, 3])]
    assert most == 2
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)


async def test_a_stopped_server_leaves_its_batches_under_way_unacked() -> None:
    queue = TurnQueue(limit=100)
    acked: list[int] = []
    await queue.put(0, [held("t", 0, i, acked) for i in range(2)])
    started = asyncio.Event()

    async def handle(batch: list[Held]) -> None:
        started.set()
        await asyncio.sleep(60)
        for h in batch:
            h.ack()

    server = asyncio.create_task(serve(queue, 10, 2, handle))
    await asyncio.wait_for(started.wait(), 1)
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)
    assert server.cancelled()
    assert acked == []  # redelivered to the partition's next owner


def test_a_record_is_current_only_in_the_generation_it_was_fetched_in() -> None:
    """A record an agent had buffered when a rebalance began is fetched again from the last
    commit; the buffered copy, held after the rebalance, must not be handled and acked
    ahead of the records before it."""
    app = SimpleNamespace(consumer_generation_id=3)

    def event(offset: int, fetched_in: int | None) -> SimpleNamespace:
        message = SimpleNamespace(generation_id=fetched_in, incref=lambda: None)
        return SimpleNamespace(message=message, ack=lambda: None, offset=offset)

    def raw(e: Any) -> RawRecord:
        return RawRecord("t", 0, e.offset, b"k", b"{}")

    buffered, fetched, unstamped = hold(app, [event(7, 2), event(5, 3), event(6, None)],  # type: ignore[arg-type,list-item]
                                        raw)
    assert not buffered.current()
    assert fetched.current() and unstamped.current()
    app.consumer_generation_id = 4  # the next rebalance: none of them is handled any more
    assert not fetched.current() and not unstamped.current()


def test_a_partition_is_pending_until_its_held_records_are_handled_or_dropped() -> None:
    """``group_commits`` fetches a partition again only when nothing of it is held: records
    past its committed offset may be handled first after a rebalance, while the one at that
    offset still waits its turn."""
    app = SimpleNamespace(consumer_generation_id=3)
    acked: list[int] = []

    def event(offset: int, fetched_in: int) -> SimpleNamespace:
        message = SimpleNamespace(generation_id=fetched_in, incref=lambda: None)
        return SimpleNamespace(message=message, ack=lambda: acked.append(offset), offset=offset)

    def raw(e: Any) -> RawRecord:
        return RawRecord("t", 1, e.offset, b"k", b"{}")

    stale, first, second = hold(app, [event(4, 2), event(5, 3), event(6, 3)],  # type: ignore[arg-type,list-item]
                                raw)
    assert pending(app)[("t", 1)] == 3  # type: ignore[arg-type]
    kept, gone = current_only([stale, first])
    assert kept == [first] and gone == [stale]
    assert pending(app)[("t", 1)] == 2  # type: ignore[arg-type]
    first.ack()
    first.ack()  # acked twice: released once
    assert pending(app)[("t", 1)] == 1 and acked == [5, 5]  # type: ignore[arg-type]
    second.ack()
    assert ("t", 1) not in pending(app)  # type: ignore[arg-type]
