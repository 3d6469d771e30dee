"""The working-memory sink (streams/core/working_memory.py): a list of memories becomes the
cube's working memory, copies stamped newest first, within capacity."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstream.streams.core.working_memory import apply_working_memory, target_copies
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ExtractedMemory
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.doubles import memory_deps, records, remember
from tests.support.facts import FACTS_WITH_DIET as FACTS

CUBE = "dana"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}


async def working(deps: Deps) -> list[str]:
    """The cube's working memory as an agent reads it: newest (first in the list) first."""
    return [w.memory for w in await deps.query.all_of_type(CUBE, "WorkingMemory")]


async def test_a_replacement_applied_twice_writes_nothing_more(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    at = deps.clock()
    first = await apply_working_memory(deps, CUBE, [nodes[4].id, nodes[5].id], at)
    again = await apply_working_memory(deps, CUBE, [nodes[4].id, nodes[5].id], at)
    assert (first.written, first.deleted) == (2, 0)
    assert (again.written, again.deleted) == (0, 0)
    assert again.copy_ids == first.copy_ids
    assert await working(deps) == [FACTS[4], FACTS[5]]


async def test_a_new_list_replaces_the_old_one(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add_memories(records([ExtractedMemory(**ME, memory=t, index=i)
                                for i, t in enumerate(FACTS[:3])]), deps)
    assert len(await working(deps)) == 3
    nodes = await remember(deps, CUBE, *FACTS[3:])
    applied = await apply_working_memory(deps, CUBE, [nodes[2].id, "unknown", nodes[0].id],
                                         deps.clock())
    assert applied.deleted == 3 and applied.missing == ["unknown"]
    assert await working(deps) == [FACTS[5], FACTS[3]]


T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


# --------------------------------------------------------------------------- sink targets


def node(node_id: str, memory_type: str = "LongTermMemory", status: str = "activated",
         origin: str | None = None) -> MemoryItem:
    return MemoryItem(id=node_id, memory=f"memory {node_id}", metadata=MemoryMetadata(
        user_id="u", cube_id="c", memory_type=memory_type, status=status,  # type: ignore[arg-type]
        origin_id=origin, updated_at=T0))


def test_sink_targets_are_copies_stamped_newest_first_within_capacity() -> None:
    copy_of_b = node(working_copy_id("b"), "WorkingMemory", origin="b")
    nodes = {n.id: n for n in [node("a"), node("b"), copy_of_b, node("old", status="archived"),
                               node("wm", "WorkingMemory"), node("z")]}
    refs = ["a", "ghost", copy_of_b.id, "b", "old", "wm", "z"]
    targets, missing = target_copies(refs, nodes, T0, capacity=3)
    copies = [t for t, _ in targets]
    assert [c.id for c in copies] == [working_copy_id("a"), copy_of_b.id, "wm"]
    assert [v for _, v in targets] == ["a", copy_of_b.id, "wm"]  # where each vector comes from
    assert all(c.metadata.memory_type == "WorkingMemory" for c in copies)
    assert copies[0].metadata.origin_id == "a"
    stamps = [c.metadata.updated_at for c in copies]
    assert stamps == sorted(stamps, reverse=True) and stamps[0] == T0
    assert missing == ["ghost", "old"]  # "z" is beyond the capacity, not missing
