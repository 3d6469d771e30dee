"""faust's fetch loop against a rebalance that overtakes it (``streams.runtime.read_offsets``).

The loop is faust's own ``Consumer._drain_messages``, fed records by hand: the race needs a
rebalance inside the hand-off of one record, which a broker cannot be made to time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from memstream.streams.app import create_app
from memstream.streams.runtime.read_offsets import ReadOffsets, guard_read_offsets
from memstream.topics.settings import Settings

TOPIC_PARTITION = TP("t.memory.items", 1)


async def _drain(tmp_path: Path, offsets: list[int], rebalance_at: int,
                 committed: int) -> int | None:
    """Run faust's fetch loop over records at ``offsets`` of one partition; while the record
    at ``rebalance_at`` is handed over, the partition is revoked and assigned back at
    ``committed`` (what faust's revoke and its seek to committed offsets do). Returns the
    read offset the loop leaves."""
    settings = Settings(data_dir=tmp_path)
    app, _ = create_app(settings, "127.0.0.1:9")
    consumer: Any = app.consumer
    stopped = asyncio.Event()
    served = False

    async def getmany(timeout: float) -> AsyncIterator[tuple[TP, Any]]:
        nonlocal served
        if served:
            stopped.set()
            return
        served = True
        for offset in offsets:
            yield TOPIC_PARTITION, SimpleNamespace(offset=offset, key=None, value=None,
                                                   topic=TOPIC_PARTITION.topic)

    async def callback(message: Any) -> None:
        if message.offset == rebalance_at:
            consumer._read_offset.pop(TOPIC_PARTITION, None)  # revoked
            await asyncio.sleep(0)
            consumer._read_offset.update({TOPIC_PARTITION: committed})  # assigned, sought

    consumer.getmany = getmany
    consumer.callback = callback
    await consumer._drain_messages(SimpleNamespace(_stopped=stopped))
    left: int | None = consumer._read_offset.get(TOPIC_PARTITION)
    return left


async def test_a_rebalance_during_a_hand_off_leaves_the_sought_offset(tmp_path: Path) -> None:
    guard_read_offsets()
    # records 50..55 read; the rebalance lands while 55 is handed over, and the group's
    # committed offset is 50: the records from 50 on must be read again, not dropped
    assert await _drain(tmp_path, list(range(50, 56)), 55, 50) == 50


async def test_without_a_rebalance_the_loop_records_what_it_read(tmp_path: Path) -> None:
    guard_read_offsets()
    assert await _drain(tmp_path, list(range(50, 56)), -1, 50) == 55


def test_other_writes_go_through() -> None:
    offsets = ReadOffsets()
    assert offsets[TOPIC_PARTITION] is None  # read
    offsets.pop(TOPIC_PARTITION, None)  # a rebalance
    offsets[TOPIC_PARTITION] = 7  # a seek, not the fetch loop
    assert offsets[TOPIC_PARTITION] == 7
