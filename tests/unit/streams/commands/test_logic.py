"""Commands (streams/commands/logic.py): update, delete, delete_cube, dump/load, backup,
replace_working_memory."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstream.sinks.ports import VectorQuery
from memstream.streams.commands.logic import CommandRejected, run_commands
from memstream.streams.core.retrieval import search
from memstream.streams.core.working_memory import UnknownWorkingMemoryIds
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import (
    BackupCube,
    DeleteCube,
    DeleteNodes,
    DumpCube,
    Event,
    ExtractedMemory,
    LoadCube,
    MemoryUpdate,
    ReorganizeEvent,
    ReplaceWorkingMemory,
    SearchRequest,
    UpdateNode,
)
from memstream.topics.ids import working_copy_id
from memstream.topics.models import Edge, MemoryItem
from tests.support.doubles import events_of, memory_deps, record, records, remember

CUBE = "carol"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}
LATER = datetime(2026, 6, 1, 12, tzinfo=UTC)
FACTS = ("The user is allergic to peanuts.",
         "The user's sister plays the violin in an orchestra.",
         "The user works as a nurse at a hospital in Oslo.")


async def run(deps: Deps, *commands: Event) -> list[Outgoing]:
    return await run_commands(records(commands), deps)


async def top(deps: Deps, query: str, **fields: Any) -> list[MemoryItem]:
    found, _ = await search(SearchRequest(**ME, query=query, **fields), deps)
    return [s.item for s in found]


async def node(deps: Deps, node_id: str) -> MemoryItem:
    got = await deps.query.get_node(CUBE, node_id)
    assert got is not None
    return got


async def test_a_new_text_is_re_embedded_and_found_by_its_new_meaning(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    target = nodes[2]
    (before,) = await deps.query.vectors(CUBE, [target.id])
    out = await run(deps, UpdateNode(**ME, node_id=target.id, occurred_at=LATER,
                                     memory="The user is a pilot flying for an airline."))
    (update,) = events_of(out, MemoryUpdate)
    assert update.action == "updated" and update.node_id == target.id
    assert update.node is not None and update.node.memory.startswith("The user is a pilot")
    stored = await node(deps, target.id)
    assert stored.memory == "The user is a pilot flying for an airline."
    assert stored.metadata.updated_at == LATER
    (after,) = await deps.query.vectors(CUBE, [target.id])
    assert not np.allclose(before.vector, after.vector)
    assert [n.id for n in await top(deps, "Who flies planes?", top_k=1)] == [target.id]


async def test_new_tags_reach_the_vector_metadata_without_re_embedding(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    target = nodes[0]
    (before,) = await deps.query.vectors(CUBE, [target.id])
    await run(deps, UpdateNode(**ME, node_id=target.id, tags=("health", "food"), key="Allergy"))
    stored = await node(deps, target.id)
    assert stored.memory == target.memory
    assert (stored.metadata.tags, stored.metadata.key) == (("health", "food"), "Allergy")
    (after,) = await deps.query.vectors(CUBE, [target.id])
    assert after.tags == ("health", "food") and after.key == "Allergy"
    assert np.allclose(before.vector, after.vector)
    # a tag filter, which the vector index applies, now finds it
    tagged = await top(deps, "allergy", search_filter={"tags": {"contains": "health"}})
    assert [n.id for n in tagged] == [target.id]


async def test_an_archived_memory_is_no_longer_found(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    await run(deps, UpdateNode(**ME, node_id=nodes[0].id, status="archived"))
    assert (await node(deps, nodes[0].id)).metadata.status == "archived"
    (vector,) = await deps.query.vectors(CUBE, [nodes[0].id])
    assert vector.status == "archived"
    assert nodes[0].id not in {n.id for n in await top(deps, "peanut allergy")}


async def test_an_archived_memory_leaves_working_memory(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add_memories(records([ExtractedMemory(**ME, memory=text) for text in FACTS]), deps)
    (target,) = [n for n in await deps.query.all_of_type(CUBE, "LongTermMemory")
                 if "peanuts" in n.memory]
    await run(deps, UpdateNode(**ME, node_id=target.id, status="archived"))
    assert "peanuts" not in " ".join(n.memory for n in await top(deps, "peanut allergy"))
    working = await deps.query.all_of_type(CUBE, "WorkingMemory")
    assert target.id not in {w.metadata.origin_id for w in working}


async def test_a_corrected_text_reaches_working_memory(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add_memories([record(ExtractedMemory(**ME, memory=FACTS[0]))], deps)
    (target,) = await deps.query.all_of_type(CUBE, "LongTermMemory")
    await run(deps, UpdateNode(**ME, node_id=target.id, memory="The user is allergic to cashews."))
    working = await deps.query.all_of_type(CUBE, "WorkingMemory")
    assert [w.memory for w in working] == ["The user is allergic to cashews."]


async def test_a_frozen_memory_refuses_changes_until_unfrozen(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    target = nodes[0].id
    await run(deps, UpdateNode(**ME, node_id=target, frozen=True))
    with pytest.raises(CommandRejected, match="frozen"):
        await run(deps, UpdateNode(**ME, node_id=target, memory="The user likes peanuts."))
    with pytest.raises(CommandRejected, match="frozen"):
        await run(deps, DeleteNodes(**ME, node_ids=(target,)))
    assert (await node(deps, target)).memory == FACTS[0]
    await run(deps, UpdateNode(**ME, node_id=target, frozen=False, tags=("ok",)))
    assert (await node(deps, target)).metadata.tags == ("ok",)


async def test_a_redelivered_freezing_update_is_applied_again(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    command = UpdateNode(**ME, node_id=nodes[0].id, frozen=True, tags=("health",))
    first = await run(deps, command)
    again = await run(deps, command)
    assert [o.event.event_id for o in again] == [o.event.event_id for o in first]


async def test_updating_a_missing_memory_is_rejected(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    with pytest.raises(CommandRejected, match="not found"):
        await run(deps, UpdateNode(**ME, node_id="nope", tags=("x",)))


async def test_a_deleted_memory_goes_with_its_vector_copy_and_edges(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    out = await add_memories(records([ExtractedMemory(**ME, memory=t, index=i)
                                      for i, t in enumerate(FACTS)]), deps)
    ids = [u.node_id for u in events_of(out, MemoryUpdate) if u.action == "added"]
    gone, other = ids[0], ids[1]
    assert gone is not None and other is not None
    await deps.store.add_edges(CUBE, [Edge(source=gone, target=other, type="RELATE_TO")])
    command = DeleteNodes(**ME, node_ids=(gone, "unknown"))
    out = await run(deps, command)
    deleted = [u for u in events_of(out, MemoryUpdate) if u.action == "deleted"]
    assert [u.node_id for u in deleted] == [gone]  # an unknown id is no deletion
    (reorganize,) = events_of(out, ReorganizeEvent)
    assert reorganize.op == "remove" and reorganize.node_ids == (gone,)
    copy = working_copy_id(gone)
    assert not await deps.query.get_nodes(CUBE, [gone, copy])
    assert not await deps.query.vectors(CUBE, [gone, copy])
    assert not await deps.query.edges_of(CUBE, other)
    assert "peanuts" not in " ".join(n.memory for n in await top(deps, "peanut allergy"))
    # the same command again deletes nothing more and announces nothing
    assert await run(deps, command) == []
    assert len(await deps.query.all_of_type(CUBE, "LongTermMemory")) == 2


async def test_delete_cube_erases_the_cube_and_only_it(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    kept = await remember(deps, "dave", "Dave collects stamps.")
    out = await run(deps, DeleteCube(**ME))
    (update,) = events_of(out, MemoryUpdate)
    assert update.action == "deleted" and update.reason == (
        "cube erased: 3 nodes, 3 vectors, 0 cached embeddings; left: 0 nodes, 0 vectors, "
        "0 cached embeddings")
    assert await deps.query.count_by_type(CUBE, status=None) == {}
    anywhere = VectorQuery([1.0] + [0.0] * 383, 10, status=None)
    assert not await deps.query.vector_search(CUBE, anywhere)
    assert [n.id for n in await deps.query.all_of_type("dave", "LongTermMemory")] == [kept[0].id]


async def test_a_dumped_cube_loads_back_searchable(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    await deps.store.add_edges(CUBE, [Edge(source=nodes[0].id, target=nodes[1].id,
                                           type="RELATE_TO")])
    path = tmp_path / "carol.json"
    assert await run(deps, DumpCube(**ME, path=str(path))) == []
    before = await deps.query.export_cube(CUBE)
    await run(deps, DeleteCube(**ME))
    out = await run(deps, LoadCube(**ME, path=str(path)))
    updates = events_of(out, MemoryUpdate)
    assert [u.action for u in updates] == ["updated"] + ["added"] * 3  # each node announced
    assert sorted(u.node_id or "" for u in updates[1:]) == sorted(n.id for n in nodes)
    after = await deps.query.export_cube(CUBE)
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert after.edges == before.edges
    assert [n.id for n in await top(deps, "Which food could make her ill?", top_k=1)] == [
        nodes[0].id]


async def test_a_dump_loads_into_another_cube(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    path = tmp_path / "carol.json"
    await run(deps, DumpCube(**ME, path=str(path)))
    await run(deps, LoadCube(user_id="erin", cube_id="erin", path=str(path)))
    copied = await deps.query.all_of_type("erin", "LongTermMemory")
    assert sorted(n.memory for n in copied) == sorted(FACTS)
    assert {n.metadata.cube_id for n in copied} == {"erin"}


async def test_a_backup_is_written_and_the_cube_dropped(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    backups = tmp_path / "backups"
    out = await run(deps, BackupCube(**ME, directory=str(backups)))
    written_update, dropped = events_of(out, MemoryUpdate)
    assert written_update.action == "updated" and "backup written" in written_update.reason
    assert dropped.action == "deleted" and "erased after its backup" in dropped.reason
    (written,) = backups.iterdir()
    assert await deps.query.count_by_type(CUBE, status=None) == {}
    await run(deps, LoadCube(**ME, path=str(written)))
    assert len(await deps.query.all_of_type(CUBE, "LongTermMemory")) == 3


async def test_working_memory_is_replaced_by_the_ids_given_in_order(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add_memories([record(ExtractedMemory(**ME, memory=FACTS[0]))], deps)
    nodes = await remember(deps, CUBE, *FACTS[1:])
    out = await run(deps, ReplaceWorkingMemory(**ME, node_ids=(nodes[1].id, nodes[0].id)))
    (update,) = events_of(out, MemoryUpdate)
    assert update.action == "working_memory_replaced"
    working = await deps.query.all_of_type(CUBE, "WorkingMemory")  # newest first
    assert [w.metadata.origin_id for w in working] == [nodes[1].id, nodes[0].id]
    assert list(update.related_ids) == [w.id for w in working]
    vectors = await deps.query.vectors(CUBE, [w.id for w in working])
    assert {v.id for v in vectors} == {w.id for w in working}


async def test_replacing_working_memory_with_an_unknown_id_changes_nothing(
    tmp_path: Path,
) -> None:
    deps = memory_deps(tmp_path)
    await add_memories([record(ExtractedMemory(**ME, memory=FACTS[0]))], deps)
    nodes = await remember(deps, CUBE, *FACTS[1:])
    before = await deps.query.all_of_type(CUBE, "WorkingMemory")
    with pytest.raises(UnknownWorkingMemoryIds, match="nope"):
        await run(deps, ReplaceWorkingMemory(**ME, node_ids=(nodes[0].id, "nope")))
    assert await deps.query.all_of_type(CUBE, "WorkingMemory") == before
