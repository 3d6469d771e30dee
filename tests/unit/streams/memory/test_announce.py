"""What the add stage's announcements leave out (issue 25): an ``added`` without the snapshot
its item rebuilds, and working-memory evictions named on the ``added`` that caused them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstream.history.provenance import fold, live_ids, with_snapshots
from memstream.history.snapshots import is_slim, restore
from memstream.streams.memory.logic import add_memories, node_id_for
from memstream.topics.events import ExtractedMemory, MemoryUpdate
from memstream.topics.ids import working_copy_id
from memstream.topics.registry import MEMORY_UPDATES
from tests.support.doubles import events_of, memory_deps, records, sent

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
CUBE = "alice"


def item(text: str, index: int = 0, **fields: Any) -> ExtractedMemory:
    return ExtractedMemory(user_id=CUBE, memory=text, occurred_at=T0, index=index,
                           count=3, key=f"key {index}", **fields)


async def test_an_added_memory_is_announced_without_the_node_its_item_rebuilds(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    items = [item("I adopted a grey cat called Miso.", tags=("cat",)),
             item("My sister plays the violin.", 1), item("I work as a nurse.", 2,
                                                          memory_type="UserMemory")]
    out = await sent(await add_memories(records(items), deps))
    added = [u for u in events_of(out, MemoryUpdate) if u.action == "added"]
    assert len(added) == 3 and all(is_slim(u) and u.node is None for u in added)
    assert [u.memory_type for u in added] == ["LongTermMemory", "LongTermMemory", "UserMemory"]
    # what the log keeps: ids and the kind of memory, no text
    full = [restore(u, i) for u, i in zip(added, items, strict=True)]
    for u, f, i in zip(added, full, items, strict=True):
        assert i.memory.encode() not in MEMORY_UPDATES.plain(u)
        assert len(MEMORY_UPDATES.plain(u)) + len(i.memory) < len(MEMORY_UPDATES.plain(f))
    # a reader puts back exactly the stored node, and folds it
    stored = {n.id: n for n in await deps.query.get_nodes(CUBE, [u.node_id or "" for u in added])}
    assert {f.node_id: f.node for f in full} == stored
    decoded = [MEMORY_UPDATES.decode(MEMORY_UPDATES.encode(u)) for u in added]
    events = {i.event_id: ("memory.items", i) for i in items}
    assert isinstance(decoded[0], MemoryUpdate)
    assert fold(with_snapshots([d for d in decoded if isinstance(d, MemoryUpdate)],
                               events)) == stored
    assert fold(added) == {} and live_ids(added) == set(stored)  # not put back: ids only
    assert restore(added[0], items[1]) == added[0]  # another item rebuilds nothing


async def test_an_item_without_a_key_keeps_its_snapshot(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    one = item("I adopted a grey cat called Miso.").model_copy(update={"key": ""})
    out = await sent(await add_memories(records([one]), deps))
    (added,) = [u for u in events_of(out, MemoryUpdate) if u.action == "added"]
    assert added.node is not None and added.node.metadata.key  # titled by the add stage
    assert not is_slim(added)


async def test_evicted_working_copies_ride_on_the_added_records_that_pushed_them_out(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, memory={"working_memory_capacity": 3})
    first = [item(t, i) for i, t in enumerate(
        ["I adopted a grey cat called Miso.", "My sister plays the violin.",
         "I work as a nurse in Oslo."])]
    later = [ExtractedMemory(user_id=CUBE, memory=t, occurred_at=T0 + timedelta(days=1),
                             index=i, count=2, key=f"later {i}") for i, t in enumerate(
        ["I drive a red bicycle to work.", "I grow tomatoes on my balcony."])]
    await sent(await add_memories(records(first), deps))
    out = await sent(await add_memories(records(later), deps))
    updates = events_of(out, MemoryUpdate)
    assert not [u for u in updates if u.action == "removed"]  # no record per evicted copy
    added = [u for u in updates if u.action == "added"]
    # the two oldest copies, oldest first, one on each new memory
    assert [u.removed_ids for u in added] == [(working_copy_id(node_id_for(first[0])),),
                                              (working_copy_id(node_id_for(first[1])),)]
    assert out[-1].then is None and any(o.then is not None for o in out)  # deletion after
    working = await deps.query.all_of_type(CUBE, "WorkingMemory")
    assert len(working) == 3
    gone = [i for u in added for i in u.removed_ids]
    assert len(gone) == 2 and not await deps.query.get_nodes(CUBE, gone)
    assert not await deps.query.vectors(CUBE, gone)
