"""The node an ``added`` announcement leaves out, put back from the item that caused it.

The add stage stores a new memory exactly as its item on ``memory.items`` describes it, so
an ``added`` snapshot repeated what the log already kept of every memory (a third of the
retained log, issue 25). Since ``MemoryUpdate`` version 3 the add stage leaves the snapshot
out when the item rebuilds it (``slim``); a reader that needs the node (history, as-of,
explain) fetches the item named by ``cause_event_id`` and calls ``restore``.
"""

from __future__ import annotations

from datetime import timedelta

from memstream.topics.events import Event, ExtractedMemory, MemoryUpdate
from memstream.topics.models import MemoryItem, MemoryMetadata


def node_of_item(item: ExtractedMemory, node_id: str, key: str) -> MemoryItem:
    """The long-term node the add stage stores for ``item``.

    Timestamps come from the event, not the wall clock, so a replay writes the same node;
    items of one chunk are spaced by a microsecond so FIFO order is stable."""
    stamp = item.occurred_at + timedelta(microseconds=item.index)
    return MemoryItem(
        id=node_id,
        memory=item.memory,
        metadata=MemoryMetadata(**{
            **item.description(),
            "key": key,
            "user_id": item.user_id, "cube_id": item.cube_id,
            "memory_type": item.memory_type, "status": "activated",
            "created_at": stamp, "updated_at": stamp,
        }),
    )


def slim(update: MemoryUpdate, item: ExtractedMemory) -> MemoryUpdate:
    """``update`` without its snapshot when ``item``, its cause, rebuilds the node exactly
    (an item without a key got one from the add stage: its snapshot stays), and without its
    ``origin`` when it is the item's."""
    node = update.node
    if (update.action != "added" or node is None or update.cause_event_id != item.event_id
            or not item.key or node_of_item(item, node.id, item.key) != node):
        return update
    origin = None if update.origin == item.origin else update.origin
    return update.model_copy(update={"node": None, "memory_type": node.metadata.memory_type,
                                     "origin": origin})


def is_slim(update: MemoryUpdate) -> bool:
    """An ``added`` whose node is its cause's to rebuild (``slim``)."""
    return (update.action == "added" and update.node is None and update.node_id is not None
            and update.memory_type is not None and update.cause_event_id is not None)


def restore(update: MemoryUpdate, cause: Event | None) -> MemoryUpdate:
    """``update`` with the snapshot ``slim`` left out, rebuilt from ``cause`` (the item it
    names); any other update, or a cause that is not that item, as it is."""
    if not is_slim(update) or not isinstance(cause, ExtractedMemory) \
            or cause.event_id != update.cause_event_id or update.node_id is None:
        return update
    return update.model_copy(update={"node": node_of_item(cause, update.node_id, cause.key),
                                     "origin": update.origin or cause.origin})
