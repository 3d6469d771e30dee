"""The ``memory.commands`` a user sends — update, delete, delete_cube, freeze, dump, load,
backup — end to end: real broker, FalkorDB and Milvus Lite, a worker in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from memstream.client.client import MemoryServiceError
from memstream.sinks.dump import list_backups
from memstream.topics.events import (
    BackupCube,
    DeleteCube,
    DeleteNodes,
    DumpCube,
    Event,
    FreezeNodes,
    LoadCube,
    MemoryUpdate,
    UpdateNode,
)
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import read_topic


@pytest_asyncio.fixture
async def quiet(tmp_path: Path, kafka_broker: str, falkordb_uri: str) -> AsyncIterator[Pipeline]:
    """Without the optimizer and scheduler: the stores hold what the add stage and the
    commands wrote, so whole cubes can be compared."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"enabled": False}, scheduler={"enabled": False})
    async for p in run_pipeline(settings):
        yield p


async def remember(p: Pipeline, cube: str, *texts: str) -> list[MemoryItem]:
    token = await p.client.add_memories(cube, list(texts))
    await p.client.wait_applied(token, timeout=60)
    nodes = await p.deps.store.graph.all_of_type(cube, "LongTermMemory")
    return sorted(nodes, key=lambda n: texts.index(n.memory))


async def run(p: Pipeline, command: Event) -> str | None:
    """Send a command, wait until it is applied; its failure (the reason) or None."""
    token = await p.client.command(command)
    await p.client.wait_applied(token, timeout=60)
    return await p.client.command_failure(token)


async def updates(p: Pipeline, cube: str) -> list[MemoryUpdate]:
    return [u for u in await read_topic(p.settings, p.bootstrap, MEMORY_UPDATES)
            if u.cube_id == cube]


async def vector_ids(p: Pipeline, cube: str, ids: list[str]) -> set[str]:
    return {r.id for r in await p.deps.store.vectors.get(cube, ids)}


def cube_view(nodes: tuple[MemoryItem, ...], vectors: dict[str, list[float]]) -> Any:
    return (sorted((n.id, n.memory, n.metadata.status, n.metadata.memory_type) for n in nodes),
            sorted(vectors))


async def test_update_rewrites_text_tags_and_vector(quiet: Pipeline) -> None:
    p = quiet
    (car,) = await remember(p, "cu", "The user drives a red car.")
    assert await run(p, UpdateNode(user_id="cu", node_id=car.id, memory="The user drives a "
                                   "blue bicycle.", tags=("transport",))) is None
    node = await p.deps.store.graph.get_node("cu", car.id)
    assert node is not None
    assert (node.memory, node.metadata.tags) == ("The user drives a blue bicycle.", ("transport",))
    (record,) = await p.deps.store.vectors.get("cu", [car.id])
    expected = (await p.deps.embedder.embed_passages(["The user drives a blue bicycle."]))[0]
    assert np.allclose(np.asarray(record.vector), expected, atol=1e-5)
    found = await p.client.search("cu", "bicycle", memory_type="LongTermMemory", top_k=1)
    assert [s.item.memory for s in found] == ["The user drives a blue bicycle."]
    (updated,) = [u for u in await updates(p, "cu") if u.action == "updated"]
    assert updated.node_id == car.id and updated.node is not None
    assert updated.node.memory == "The user drives a blue bicycle."
    # a node that does not exist: refused with the reason, nothing written
    failure = await run(p, UpdateNode(user_id="cu", node_id="nope", memory="x"))
    assert failure is not None and "nope not found" in failure


async def test_delete_removes_nodes_copies_and_vectors_but_never_a_frozen_node(
    quiet: Pipeline,
) -> None:
    p = quiet
    keep, gone, held = await remember(p, "cd", "The user likes jazz.", "The user owns a boat.",
                                      "The user was born in Lyon.")
    assert await run(p, FreezeNodes(user_id="cd", node_ids=(held.id,))) is None
    assert await run(p, DeleteNodes(user_id="cd", node_ids=(gone.id,))) is None
    assert await p.deps.store.graph.get_node("cd", gone.id) is None
    assert await p.deps.store.graph.get_node("cd", working_copy_id(gone.id)) is None
    assert await vector_ids(p, "cd", [gone.id, working_copy_id(gone.id)]) == set()
    assert await p.deps.store.graph.get_node("cd", keep.id) is not None
    assert [u.node_id for u in await updates(p, "cd") if u.action == "deleted"] == [gone.id]
    found = await p.client.search("cd", "boat", top_k=5)
    assert gone.id not in {s.item.id for s in found}
    failure = await run(p, DeleteNodes(user_id="cd", node_ids=(held.id, keep.id)))
    assert failure is not None and "frozen" in failure and held.id in failure
    assert await p.deps.store.graph.get_node("cd", held.id) is not None
    assert await p.deps.store.graph.get_node("cd", keep.id) is not None  # nothing half-done
    # freezing an unknown id names it
    failure = await run(p, FreezeNodes(user_id="cd", node_ids=("ghost",)))
    assert failure is not None and "ghost" in failure


async def test_delete_cube_erases_one_cube_and_leaves_the_other(quiet: Pipeline) -> None:
    p = quiet
    mine = await remember(p, "erase-me", "The user's PIN is secret.", "The user likes tea.")
    other = await remember(p, "keep-me", "The user likes coffee.")
    assert await run(p, DeleteCube(user_id="erase-me")) is None
    erased = await p.deps.store.graph.export_cube("erase-me")
    assert erased.nodes == () and erased.edges == ()
    assert await p.deps.store.vectors.count("erase-me") == 0
    assert await vector_ids(p, "erase-me", [n.id for n in mine]) == set()
    with pytest.raises(MemoryServiceError):
        await p.client.search("erase-me", "tea")
    kept = await p.deps.store.graph.export_cube("keep-me")
    assert {n.id for n in kept.nodes} >= {n.id for n in other}
    assert await p.deps.store.vectors.count("keep-me") == len(kept.nodes)
    (deleted,) = [u for u in await updates(p, "erase-me") if u.action == "deleted"]
    assert deleted.node_id is None and "cube erased" in deleted.reason
    assert await p.client.as_of("erase-me", deleted.occurred_at) == []


async def test_dump_load_and_backup_round_trip(quiet: Pipeline, tmp_path: Path) -> None:
    p = quiet
    await remember(p, "bk", "The user speaks Portuguese.", "The user has two daughters.")
    before = await p.deps.store.graph.export_cube("bk")
    vectors = {r.id: list(r.vector) for r in await p.deps.store.vectors.all_records("bk")}

    # dump, then load into another cube: the same nodes, vectors and texts
    dump = tmp_path / "bk.json"
    assert await run(p, DumpCube(user_id="bk", path=str(dump))) is None
    assert await run(p, LoadCube(user_id="bk", cube_id="bk-copy", path=str(dump))) is None
    copy = await p.deps.store.graph.export_cube("bk-copy")
    copy_vectors = {r.id: list(r.vector) for r in await p.deps.store.vectors.all_records("bk-copy")}
    assert cube_view(copy.nodes, copy_vectors) == cube_view(before.nodes, vectors)
    assert all(np.allclose(copy_vectors[i], vectors[i]) for i in vectors)
    assert all(n.metadata.cube_id == "bk-copy" for n in copy.nodes)
    # the load is announced node by node, so the log alone knows what the copy holds
    loaded = await p.client.as_of("bk-copy", (await updates(p, "bk-copy"))[-1].occurred_at)
    assert sorted(n.id for n in loaded) == sorted(
        n.id for n in copy.nodes if n.metadata.memory_type != "WorkingMemory")

    # backups rotate (keep the last 2), and a backup with drop empties the cube
    folder = tmp_path / "backups"
    for _ in range(3):
        assert await run(p, BackupCube(user_id="bk", directory=str(folder), keep_last=2,
                                       drop=False)) is None
    assert len(list_backups(folder, "bk")) == 2
    assert await run(p, BackupCube(user_id="bk", directory=str(folder), keep_last=2)) is None
    assert (await p.deps.store.graph.export_cube("bk")).nodes == ()
    assert await p.deps.store.vectors.count("bk") == 0
    assert any(u.action == "deleted" and u.node_id is None for u in await updates(p, "bk"))
    # restoring the newest backup brings back exactly what was there
    newest = list_backups(folder, "bk")[-1]
    assert await run(p, LoadCube(user_id="bk", path=str(newest))) is None
    restored = await p.deps.store.graph.export_cube("bk")
    restored_vectors = {r.id: list(r.vector) for r in await p.deps.store.vectors.all_records("bk")}
    assert cube_view(restored.nodes, restored_vectors) == cube_view(before.nodes, vectors)
    assert sorted(restored.edges, key=str) == sorted(before.edges, key=str)
    # a load of a file that is not a dump is refused with the reason
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": 3}', encoding="utf-8")
    failure = await run(p, LoadCube(user_id="bk", path=str(bad)))
    assert failure is not None and "not a memstream cube dump" in failure
