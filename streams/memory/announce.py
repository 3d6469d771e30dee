"""What the add stage's announcements leave out (issue 25: the log per turn).

Two cuts, both applied to a batch's outputs after they are decided, so the decisions and
their ids stay what they were:

- ``slim_added``: an ``added`` whose item rebuilds the node carries no snapshot
  (``memstream/history/snapshots.py``); the item is on ``memory.items`` already.
- ``fold_evictions``: the working-memory copies a batch evicts (capacity, oldest first) are
  named on the ``added`` records whose copies pushed them out (``removed_ids``), instead of one
  ``removed`` record per evicted copy; the deletion still waits until they are sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from memstream.history.snapshots import slim
from memstream.sinks.lru import LRU
from memstream.streams.runtime.stage import Outgoing, Record
from memstream.topics.events import ExtractedMemory, MemoryUpdate


class RecentItems:
    """The items of the last batches, by event id: a chunk cut by a batch boundary has its
    first facts announced with the batch that brings its last one, when their items are no
    longer in hand. Only a help: without the item the snapshot stays (``slim`` checks the
    item rebuilds the node, so a stale entry cannot make a wrong announcement)."""

    def __init__(self, size: int = 4096) -> None:
        self.items: LRU[str, ExtractedMemory] = LRU(size)

    def remember(self, records: Sequence[Record[ExtractedMemory]]) -> None:
        for record in records:
            self.items.put(record.value.event_id, record.value)

    def get(self, event_id: str | None) -> ExtractedMemory | None:
        return self.items.peek(event_id or "")


RECENT = RecentItems()


def slim_added(out: Sequence[Outgoing], records: Sequence[Record[ExtractedMemory]],
               recent: RecentItems = RECENT) -> list[Outgoing]:
    """``out`` with each ``added`` whose cause (one of ``records``, or of the last batches)
    rebuilds the node slimmed."""
    recent.remember(records)
    result = []
    for o in out:
        event = o.event
        if isinstance(event, MemoryUpdate) and event.action == "added" \
                and (item := recent.get(event.cause_event_id)) is not None:
            o = dataclasses.replace(o, event=slim(event, item))
        result.append(o)
    return result


def _carriers(out: Sequence[Outgoing], stage: str) -> list[int]:
    """Positions of the ``added`` records of ``stage`` whose memory got a working copy."""
    return [i for i, o in enumerate(out) if isinstance(o.event, MemoryUpdate)
            and o.event.action == "added" and o.event.stage == stage and o.event.related_ids]


def fold_evictions(out: Sequence[Outgoing], evictions: Sequence[Outgoing],
                   stage: str) -> list[Outgoing]:
    """``out`` with the evicted copies of ``evictions`` (``removed`` records, newest first,
    the last one carrying the deletion) named on the ``added`` records of ``stage``: the
    oldest copy on the first new memory that overflowed, one each, any surplus on the first.
    With no such record (every item merged), the ``removed`` records as they are."""
    if not evictions:
        return list(out)
    carriers = _carriers(out, stage)
    if not carriers:
        return [*out, *evictions]
    evicted = [e.event.node_id for e in reversed(evictions)
               if isinstance(e.event, MemoryUpdate) and e.event.node_id]
    then = next((e.then for e in evictions if e.then is not None), None)
    used = carriers[-len(evicted):] if len(evicted) <= len(carriers) else carriers
    surplus = len(evicted) - len(used)
    shares = [evicted[: surplus + 1], *([x] for x in evicted[surplus + 1:])]
    result = list(out)
    for position, share in zip(used, shares, strict=True):
        o = result[position]
        assert isinstance(o.event, MemoryUpdate)  # noqa: S101 - _carriers checked it
        event = o.event.model_copy(update={"removed_ids": (*o.event.removed_ids, *share)})
        last = position == used[-1]
        result[position] = dataclasses.replace(o, event=event, then=then if last else o.then)
    return result
