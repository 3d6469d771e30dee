"""Uses of returned memories (streams/search/usage.py) are written per cube in batches, held
for at most ``search.usage_cubes`` cubes in between: a use in one more cube writes the least
recently searched cube's uses at once, so nothing held is ever dropped."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memstream.streams.runtime.stage import Deps
from memstream.streams.search.usage import UsageWriter
from memstream.topics.events import SearchRequest
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.doubles import memory_deps


async def stored(deps: Deps, cubes: int) -> dict[str, MemoryItem]:
    """One memory per cube, in the graph."""
    nodes = {}
    for c in range(cubes):
        cube = f"cube{c}"
        node = MemoryItem(id=f"{cube}-fact", memory=f"fact of {cube}", metadata=MemoryMetadata(
            user_id=cube, cube_id=cube, memory_type="LongTermMemory"))
        await deps.store.graph.upsert_nodes(cube, [node])
        nodes[cube] = node
    return nodes


def searched(writer: UsageWriter, node: MemoryItem, query: str) -> None:
    cube = node.metadata.cube_id
    writer.add(SearchRequest(user_id=cube, cube_id=cube, query=query, requester="agent"),
               [node])


async def uses_in_store(deps: Deps, node: MemoryItem) -> list[str | None]:
    (found,) = await deps.query.get_nodes(node.metadata.cube_id, [node.id])
    return [u.query for u in found.metadata.usage]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_it_holds_at_most_its_bound_of_cubes_and_every_use_is_written(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, search={"usage_cubes": 3, "usage_flush_s": 3600})
    nodes = await stored(deps, 40)
    writer = UsageWriter(deps)
    for round_ in range(2):
        for node in nodes.values():
            searched(writer, node, f"q{round_}")
            assert writer.pending_cubes <= 3
    await settle()
    # the 37 cubes let go were written as they left, long before the hour's flush
    written = [n for n in nodes.values() if await uses_in_store(deps, n) == ["q0", "q1"]]
    assert len(written) == 37
    await writer.close()
    assert [await uses_in_store(deps, n) for n in nodes.values()] == [["q0", "q1"]] * 40
    assert writer.pending_cubes == 0


async def test_the_least_recently_searched_cube_is_written_first(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, search={"usage_cubes": 3, "usage_flush_s": 3600})
    nodes = await stored(deps, 4)
    writer = UsageWriter(deps)
    for c in (0, 1, 2, 0):  # cube0 searched again: cube1 is the oldest
        searched(writer, nodes[f"cube{c}"], f"about {c}")
    searched(writer, nodes["cube3"], "about 3")
    await settle()
    assert [await uses_in_store(deps, nodes[f"cube{c}"]) for c in range(4)] == \
        [[], ["about 1"], [], []]
    await writer.close()
    assert await uses_in_store(deps, nodes["cube0"]) == ["about 0", "about 0"]
