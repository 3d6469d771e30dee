"""faust's read offsets, which its fetch loop reads as "nothing read yet".

faust's fetch loop (``Consumer._drain_messages``) keeps a read offset per partition and
(1) drops a fetched record below it, as read already, and (2) when a record arrives more
than one past it, marks the offsets in between as processed (a "gap", for the control
records of transactions), so that they are committed without ever being seen. Both assume
the read offset follows the fetch position. A rebalance breaks that: faust's recovery
resumes fetching *before* it seeks the partitions to their committed offsets, and seeking
sets the read offset back while records from past it are still being handed over.

Measured in the scale-out test (a trace of faust's fetch loop and the worker's commits): a
worker took over a partition, fetched records 2–13 of it, then faust's seek set its read
offset back to the committed 2; record 13 had been cleared from the stream's buffer by the
rebalance, and record 14 arrived next, so offsets 3–13 were marked processed as a gap. The
commit went past 13, and that memory was never stored. In other runs the dropped records
left a partition whose committed offset never moved (``wait_applied`` timed out).

memstream writes no transactions, so its topics have no gaps, and every stage is
effectively-once, so a record handled twice changes nothing. ``ReadOffsets`` therefore
answers every read of the fetch loop with None: every fetched record is handed over (after
a seek back, again), and nothing is ever marked processed that was not handled. Commits
still need every offset acked (``streams.runtime.group_commits``). faust's own writes (its
seeks, its bookkeeping) are kept, for anything that reads them with ``get``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from faust.transport.consumer import Consumer
from faust.types import TP

_PATCHED = "_memstream_read_offsets"
log = logging.getLogger("memstream.streams")


class ReadOffsets(defaultdict[TP, int | None]):
    """faust's ``Consumer._read_offset`` whose item reads (the fetch loop's) are None."""

    def __init__(self, *args: Any) -> None:
        super().__init__(lambda: None, *args)

    def __getitem__(self, tp: TP) -> int | None:
        return None


async def seek_uncommitted_to_start(consumer: Consumer) -> None:
    """After faust's seek to committed offsets: seek each assigned stream partition that has
    no committed offset to the start of its log, and count that start as its committed
    offset, so that the first commit needs every record from there acked.

    faust seeks only the partitions with a commit; the others fetch on from wherever the
    consumer stood. faust's fetch loop stops handing over a fetch when the generation
    changes, and the records left of it are not fetched again: traced in the scale-out test,
    a worker that took over a partition with nothing committed handed over its records from
    offset 1, and its first commit went past the record at 0, which was never stored."""
    held = [tp for tp in consumer.assignment()
            if not consumer._is_changelog_tp(tp) and consumer._committed_offset.get(tp) is None]
    if not held:
        return
    try:
        starts = await consumer.earliest_offsets(*held)
    except Exception as exc:  # noqa: BLE001 - faust's own seek stands; the next rebalance retries
        log.warning("could not read where %d partitions start (%s); they fetch on from where "
                    "the consumer stood", len(held), exc)
        return
    sought = {tp: start for tp in held if (start := starts.get(tp)) is not None}
    if not sought:
        return
    # On the consumer's own thread (faust's ``seek_wait``), as faust seeks to committed
    # offsets: ``seek`` from this thread drops the partition's fetched records while the
    # consumer thread may be iterating them (aiokafka's ``fetched_records``), and its
    # KeyError crashed the fetcher of a worker taking partitions over (tests/e2e/test_takeover.py).
    await consumer.seek_wait(sought)
    consumer._committed_offset.update(sought)
    log.debug("sought %d partitions without a commit to the start of their logs", len(held))


def guard_read_offsets() -> None:
    """Give every faust consumer created from now on a ``ReadOffsets``, and have it seek every
    stream partition after a rebalance (``seek_uncommitted_to_start``); once per process."""
    if getattr(Consumer, _PATCHED, False):
        return
    init = Consumer.__init__
    perform_seek = Consumer.perform_seek

    def __init__(self: Consumer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._read_offset = ReadOffsets(self._read_offset)

    async def seek_every_partition(self: Consumer) -> None:
        await perform_seek(self)
        await seek_uncommitted_to_start(self)

    Consumer.__init__ = __init__  # type: ignore[method-assign]
    Consumer.perform_seek = seek_every_partition  # type: ignore[method-assign]
    setattr(Consumer, _PATCHED, True)
