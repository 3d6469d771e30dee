"""A stage's held records are taken a batch per partition in turn, most urgent lane first,
each partition in log order; the queue holds a bounded number."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from memstream.streams.runtime.stage import RawRecord
from memstream.streams.runtime.turns import Held, TurnQueue, current_only, hold, pending


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


async def test_a_round_takes_one_batch_from_each_partition_of_the_most_urgent_lane() -> None:
    queue = TurnQueue(limit=100)
    await queue.put(0, [held("t", 1, i) for i in range(3)])
    await queue.put(0, [held("t", 0, i) for i in range(2)])
    await queue.put(1, [held("low", 0, 0)])

    def offsets(batches: list[list[Held]]) -> list[list[tuple[int, int]]]:
        return [[(h.raw.partition, h.raw.offset) for h in b] for b in batches]

    assert offsets(queue.take_round(2, partitions=4)) == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]
    assert offsets(queue.take_round(2, partitions=4)) == [[(1, 2)]]
    assert offsets(queue.take_round(2, partitions=4)) == [[(0, 0)]]  # then the lower lane
    assert queue.take_round(2, partitions=4) == []
    await queue.put(0, [held("t", p, 0) for p in range(3)])
    assert len(queue.take_round(5, partitions=2)) == 2


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
