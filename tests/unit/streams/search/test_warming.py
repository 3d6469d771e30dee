"""Warming a worker's search caches (streams/search/warming.py) loads no more cubes than the
caches hold: a cube warmed beyond them would only push out one warmed before."""

from __future__ import annotations

from pathlib import Path

from memstream.streams.core.episode_index import indexes_for
from memstream.streams.search.warming import warm_recent_cubes
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.doubles import memory_deps


async def test_warming_stops_at_what_the_episode_indexes_hold(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, search={"episode_index_cubes": 2})
    for c in range(5):
        cube = f"cube{c}"
        await deps.store.graph.upsert_nodes(cube, [MemoryItem(
            id=f"{cube}-e", memory=f"Ana: hello from {cube}", metadata=MemoryMetadata(
                user_id=cube, cube_id=cube, memory_type="EpisodicMemory"))])
    warmed = await warm_recent_cubes(deps, 8)
    assert len(warmed) == 2
    assert all(indexes_for(deps.query).held(cube) for cube in warmed)
