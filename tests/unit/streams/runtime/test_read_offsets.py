"""faust's fetch loop against a rebalance that seeks back under it (``runtime.read_offsets``).

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
from memstream.streams.runtime.read_offsets import (
    ReadOffsets,
    guard_read_offsets,
    seek_uncommitted_to_start,
)
from memstream.topics.settings import Settings

TOPIC_PARTITION = TP("t.memory.items", 1)


class _Message:
    """What faust's ack reads of a message."""

    def __init__(self, offset: int) -> None:
        self.acked, self.tp, self.offset, self.topic = False, TOPIC_PARTITION, offset, \
            TOPIC_PARTITION.topic


async def _drain(tmp_path: Path, offsets: list[int], seek_at: int,
                 committed: int) -> tuple[list[int], Any]:
    """Run faust's fetch loop over records at ``offsets`` of one partition; while the record
    at ``seek_at`` is handed over, the partition is revoked and assigned back at
    ``committed`` (what faust's revoke and its seek to committed offsets do). Returns the
    offsets handed over and the consumer."""
    settings = Settings(data_dir=tmp_path)
    app, _ = create_app(settings, "127.0.0.1:9")
    consumer: Any = app.consumer
    stopped = asyncio.Event()
    served = False
    handed: list[int] = []

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
        handed.append(message.offset)
        if message.offset == seek_at:
            consumer._read_offset.pop(TOPIC_PARTITION, None)  # revoked
            await asyncio.sleep(0)
            consumer._read_offset.update({TOPIC_PARTITION: committed})  # assigned, sought

    consumer.getmany = getmany
    consumer.callback = callback
    app.topics.acks_enabled_for = lambda topic: True
    await consumer._drain_messages(SimpleNamespace(_stopped=stopped))
    return handed, consumer


async def test_records_fetched_again_after_a_seek_back_are_handed_over_again(
    tmp_path: Path,
) -> None:
    guard_read_offsets()
    # records 50..55 read; the rebalance lands while 55 is handed over and seeks back to the
    # committed 50: the records fetched again from 50 must reach the stream, not be dropped
    offsets = [*range(50, 56), *range(50, 56)]
    handed, _ = await _drain(tmp_path, offsets, 55, 50)
    assert handed == offsets


async def test_a_seek_back_marks_no_offset_processed_that_was_not_handed_over(
    tmp_path: Path,
) -> None:
    guard_read_offsets()
    # the scale-out trace: records 2..12 handed over, the seek to the committed 2 lands, 13
    # was cleared from the stream's buffer, 14 comes next; faust took 3..13 for a gap of the
    # log and committed past 13, which no stage had seen
    offsets = [*range(2, 13), *range(14, 20)]
    handed, consumer = await _drain(tmp_path, offsets, 12, 2)
    assert handed == offsets
    assert not consumer._gap[TOPIC_PARTITION], "offsets marked processed that never came"
    for offset in handed:  # every handled record acked: the commit stops before 13
        consumer.ack(_Message(offset))
    assert consumer._new_offset(TOPIC_PARTITION) == 13
    consumer._committed_offset[TOPIC_PARTITION] = 13  # committed; 14.. acked, 13 is not
    assert consumer._new_offset(TOPIC_PARTITION) is None, "committed past the unacked 13"
    consumer.ack(_Message(13))  # 13 comes back and is handled
    assert consumer._new_offset(TOPIC_PARTITION) == 20


def test_faust_still_keeps_the_offsets_it_writes() -> None:
    offsets = ReadOffsets()
    offsets[TOPIC_PARTITION] = 7  # a seek
    assert offsets.get(TOPIC_PARTITION) == 7
    assert offsets[TOPIC_PARTITION] is None  # as the fetch loop reads it


async def test_after_a_rebalance_a_partition_without_a_commit_is_read_from_its_start() -> None:
    committed_tp, fresh_tp, changelog_tp = TP("t.memory.items", 0), TOPIC_PARTITION, \
        TP("t-changelog", 0)
    sought: dict[TP, int] = {}

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 3)  # the log's start (records before it were deleted)

    async def seek_wait(partitions: dict[TP, int]) -> None:
        sought.update(partitions)

    consumer: Any = SimpleNamespace(
        assignment=lambda: {committed_tp, fresh_tp, changelog_tp},
        _is_changelog_tp=lambda tp: tp == changelog_tp,
        _committed_offset={committed_tp: 40}, earliest_offsets=earliest_offsets,
        seek_wait=seek_wait)
    await seek_uncommitted_to_start(consumer)
    # sought back even if the consumer had fetched past its first records; a commit then
    # needs every record from 3 acked; faust's recovery owns the changelog's position
    assert sought == {fresh_tp: 3}
    assert consumer._committed_offset == {committed_tp: 40, fresh_tp: 3}
