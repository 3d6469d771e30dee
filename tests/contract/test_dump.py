"""Cube dump / load / backup on the embedded stores (FalkorDB + Milvus Lite)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memstream.sinks.dump import (
    backup_cube,
    dump_cube,
    export_cube,
    list_backups,
    load_cube,
    stamp_of,
)
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.ports import StoreError, VectorQuery
from memstream.topics.models import (
    CubeGraph,
    Edge,
    MemoryItem,
    MemoryMetadata,
    SourceRef,
    UsageRecord,
)
from tests.contract.vector_fixtures import CONTRACT_DIM

T0 = datetime(2025, 6, 1, 9, 30, 15, 123456, tzinfo=UTC)


def rich_node(i: int, cube: str = "cube-a") -> MemoryItem:
    return MemoryItem(
        id=f"node-{i}",
        memory=["用户在上海工作", 'The user\'s sister is "Ana"', "likes C:\\tea"][i % 3] + f" #{i}",
        metadata=MemoryMetadata(
            user_id="user-1",
            cube_id=cube,
            session_id="s1" if i % 2 else None,
            memory_type="UserMemory" if i % 2 else "LongTermMemory",
            status="archived" if i == 4 else "activated",
            type="event",
            key=f"key {i}",
            tags=("工作", f"t{i}"),
            entities=("Ana",),
            hierarchy_level="concept" if i == 0 else "fact",
            background="because",
            sources=(SourceRef(message_id=f"m{i}", offset=i),),
            confidence=61.5 + i % 30,
            created_at=T0,
            updated_at=T0 + timedelta(minutes=i),
            memory_time=T0 - timedelta(days=1),
            usage=(UsageRecord(at=T0, requester="agent", query="q"),),
        ),
    )


def vectors_for(n: int) -> list[list[float]]:
    rng = np.random.default_rng(42)
    return [[float(x) for x in rng.standard_normal(CONTRACT_DIM)] for _ in range(n)]


EDGES = (
    Edge(source="node-0", target="node-1", type="PARENT"),
    Edge(source="node-0", target="node-2", type="PARENT", weight=0.5, reason="summary"),
    Edge(source="node-3", target="node-1", type="CAUSE", reason="因为"),
    Edge(source="node-4", target="node-3", type="MERGED_TO"),
)


async def fill(store: MemoryStore, cube: str = "cube-a") -> None:
    nodes = [rich_node(i, cube) for i in range(6)]
    vecs = vectors_for(6)
    await store.write(list(zip(nodes[:5], vecs[:5], strict=True)))
    await store.graph.upsert_nodes(cube, [nodes[5]])  # a node without a vector is kept too
    await store.graph.add_edges(cube, EDGES)


def canonical(cube: CubeGraph) -> tuple[object, ...]:
    return (
        cube.cube_id,
        sorted(cube.nodes, key=lambda n: n.id),
        sorted(cube.edges, key=lambda e: (e.source, e.target, e.type)),
        cube.vectors,
    )


async def test_dump_then_load_reproduces_nodes_edges_and_vectors(
    memory_store: MemoryStore, tmp_path: Path
) -> None:
    await fill(memory_store)
    before = await export_cube(memory_store, "cube-a")
    assert len(before.nodes) == 6 and len(before.edges) == 4 and len(before.vectors) == 5
    path = tmp_path / "dumps" / "cube-a.json"
    written = await dump_cube(memory_store, "cube-a", path)
    assert canonical(written) == canonical(before)
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert on_disk["cube_id"] == "cube-a" and "用户在上海工作 #0" in path.read_text("utf-8")

    await memory_store.clear_cube("cube-a")
    assert (await export_cube(memory_store, "cube-a")).nodes == ()
    await load_cube(memory_store, path)
    await load_cube(memory_store, path)  # idempotent
    after = await export_cube(memory_store, "cube-a")
    assert canonical(after) == canonical(before)
    np.testing.assert_array_equal(
        np.asarray(after.vectors["node-1"], dtype=np.float32),
        np.asarray(vectors_for(6)[1], dtype=np.float32),
    )
    assert await memory_store.vectors.count("cube-a") == 5
    report = await memory_store.repair("cube-a")
    assert (report.nodes_without_vectors, report.vectors_without_nodes, report.stale_vectors) == (
        ("node-5",),  # as dumped
        (),
        (),
    )
    hits = await memory_store.search("cube-a", VectorQuery(vectors_for(6)[2], 1))
    assert [n for n, _ in hits] == [rich_node(2)]


async def test_load_into_another_cube_and_replace(
    memory_store: MemoryStore, tmp_path: Path
) -> None:
    await fill(memory_store)
    path = tmp_path / "a.json"
    await dump_cube(memory_store, "cube-a", path)
    await load_cube(memory_store, path, cube_id="cube-copy")
    copy = await export_cube(memory_store, "cube-copy")
    original = await export_cube(memory_store, "cube-a")
    assert {n.id for n in copy.nodes} == {n.id for n in original.nodes}
    assert all(n.metadata.cube_id == "cube-copy" for n in copy.nodes)
    assert copy.edges == original.edges and copy.vectors == original.vectors

    await memory_store.write([(rich_node(99, "cube-copy"), vectors_for(1)[0])])
    await load_cube(memory_store, path, cube_id="cube-copy", replace=True)
    replaced = await export_cube(memory_store, "cube-copy")
    assert "node-99" not in {n.id for n in replaced.nodes}
    assert await memory_store.vectors.list_ids("cube-copy") == sorted(original.vectors)


async def test_load_rejects_a_file_that_is_not_a_dump(
    memory_store: MemoryStore, tmp_path: Path
) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": "nope"}', encoding="utf-8")
    with pytest.raises(StoreError, match="not a memstream cube dump"):
        await load_cube(memory_store, path)


def ticking(start: datetime, step: timedelta) -> Iterator[datetime]:
    now = start
    while True:
        yield now
        now += step


async def test_backup_keeps_the_last_n_and_drops_the_cube(
    memory_store: MemoryStore, tmp_path: Path
) -> None:
    clock = ticking(datetime(2025, 7, 1, tzinfo=UTC), timedelta(hours=1))
    folder = tmp_path / "backups"
    await memory_store.write([(rich_node(0, "other"), vectors_for(1)[0])])
    await backup_cube(
        memory_store, "other", folder, keep_last=1, drop=False, clock=lambda: next(clock)
    )
    results = []
    for _ in range(4):
        await fill(memory_store)
        results.append(
            await backup_cube(
                memory_store, "cube-a", folder, keep_last=2, clock=lambda: next(clock)
            )
        )
    kept = list_backups(folder, "cube-a")
    assert kept == [results[2].path, results[3].path]
    assert [stamp_of(p) for p in kept] == [
        datetime(2025, 7, 1, 3, tzinfo=UTC),  # hour 0 was the other cube's backup
        datetime(2025, 7, 1, 4, tzinfo=UTC),
    ]
    assert results[3].removed == (results[1].path,)
    assert (results[3].nodes, results[3].edges, results[3].vectors) == (6, 4, 5)
    assert len(list_backups(folder, "other")) == 1  # another cube's backups are untouched
    assert (await export_cube(memory_store, "cube-a")).nodes == ()
    assert await memory_store.vectors.count("cube-a") == 0
    assert len((await export_cube(memory_store, "other")).nodes) == 1  # drop=False kept it

    await load_cube(memory_store, kept[-1])
    restored = await export_cube(memory_store, "cube-a")
    assert len(restored.nodes) == 6 and len(restored.vectors) == 5


async def test_backup_with_a_repeated_clock_reading_keeps_both(
    memory_store: MemoryStore, tmp_path: Path
) -> None:
    frozen = datetime(2025, 7, 1, tzinfo=UTC)
    await fill(memory_store, "cube/../x y")
    first = await backup_cube(
        memory_store, "cube/../x y", tmp_path, 5, drop=False, clock=lambda: frozen
    )
    second = await backup_cube(
        memory_store, "cube/../x y", tmp_path, 5, drop=False, clock=lambda: frozen
    )
    assert first.path != second.path and first.path.parent == second.path.parent == tmp_path
    assert list_backups(tmp_path, "cube/../x y") == [first.path, second.path]
    with pytest.raises(StoreError, match="keep_last"):
        await backup_cube(memory_store, "cube-a", tmp_path, keep_last=0)
