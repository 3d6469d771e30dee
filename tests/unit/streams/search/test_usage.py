"""Uses of returned memories (streams/search/usage.py) are written per cube in batches, held
for at most ``search.usage_cubes`` cubes in between: a use in one more cube writes the least
recently searched cube's uses at once, so nothing held is ever dropped."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstream.streams.runtime.stage import Deps
from memstream.streams.search.usage import UsageWriter
from memstream.topics.events import SearchRequest
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.doubles import ManualClock, memory_deps


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


async def test_a_search_makes_its_cube_one_a_restarted_worker_warms_first(
        tmp_path: Path) -> None:
    """``recent_cubes`` counts a cube's last search, not only its last change (a worker
    starting warms those first), noted at most once a minute per cube."""
    deps = memory_deps(tmp_path, search={"usage_flush_s": 3600})
    nodes = await stored(deps, 3)
    graph = deps.store.graph
    newest_change = await graph.recent_cubes(1)
    oldest = next(c for c in nodes if c not in newest_change)
    clock = deps.clock
    assert isinstance(clock, ManualClock)
    clock.now = datetime.now(UTC) + timedelta(hours=1)  # after every change
    writer = UsageWriter(deps)
    searched(writer, nodes[oldest], "where do I live?")
    await writer.flush()
    assert await graph.recent_cubes(1) == [oldest]
    notes: list[str] = []
    mark = graph.mark_used

    async def noting(cube_id: str, at: datetime) -> None:
        notes.append(cube_id)
        await mark(cube_id, at)

    graph.mark_used = noting  # type: ignore[method-assign]
    clock.advance(seconds=30)
    searched(writer, nodes[oldest], "and now?")
    await writer.flush()
    assert notes == []  # the same minute: not written again
    clock.advance(minutes=2)
    searched(writer, nodes[oldest], "and later?")
    await writer.flush()
    assert notes == [oldest]
    await writer.close()
