"""The provenance index (``LogRef``) on every graph adapter: refs kept once per position,
found by node (in a cube or any), by id prefix, by event and by topic, in log order, and
kept apart from the cube's memories."""

from __future__ import annotations

import pytest

from memstream.history.log_index import LogRef, LogRefQuery
from memstream.sinks.ports import GraphStore


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "graph_backend" in metafunc.fixturenames:
        metafunc.parametrize("graph_backend", ["falkordb", "neo4j-bolt", "memory"])


@pytest.mark.asyncio(loop_scope="session")
async def test_log_refs_round_trip(graph_store: GraphStore, cube: str) -> None:
    other = cube + "-other"
    node, twin = f"{cube}-node-0001", f"{cube}-node-0002"
    refs = [
        LogRef(cube, "memory.updates", 1, 7, "e7", node),
        LogRef(cube, "memory.updates", 1, 3, "e3", node),
        LogRef(cube, "memory.updates", 1, 3, "e3", twin),  # one record naming two memories
        LogRef(cube, "memory.updates", 1, 9, "e9", ""),  # a record naming no memory
        LogRef(cube, "memory.items", 1, 2, "i2", ""),
        LogRef(other, "memory.updates", 0, 5, "x5", f"{other}-node"),
    ]
    await graph_store.add_log_refs(refs)
    await graph_store.add_log_refs(refs[:2])  # redelivered: nothing new
    assert await graph_store.log_refs(LogRefQuery(cube_id=cube, node_id=node)) == [
        refs[1], refs[0]]
    assert await graph_store.log_refs(LogRefQuery(node_id=node)) == [refs[1], refs[0]]
    assert await graph_store.log_refs(LogRefQuery(cube_id=other, node_id=node)) == []
    everything = await graph_store.log_refs(LogRefQuery(cube_id=cube, topic="memory.updates"))
    assert [(r.offset, r.node_id) for r in everything] == [(3, node), (3, twin), (7, node),
                                                           (9, "")]
    assert await graph_store.log_refs(LogRefQuery(cube_id=cube, topic="memory.updates",
                                                  node_less=True)) == [refs[3]]
    assert await graph_store.log_refs(LogRefQuery(cube_id=cube, event_ids=("i2", "x5"))) == [
        refs[4]]
    found = await graph_store.log_refs(LogRefQuery(cube_id=cube, node_prefix=f"{cube}-node-"))
    assert sorted(r.node_id for r in found) == [node, twin]
    one = await graph_store.log_refs(LogRefQuery(node_prefix=f"{cube}-node-0002"))
    assert [(r.cube_id, r.node_id) for r in one] == [(cube, twin)]
    assert not any((await graph_store.count_by_type(cube, status=None)).values())
    assert await graph_store.drop_log_refs(cube) == 5  # the cube's erasure
    assert await graph_store.log_refs(LogRefQuery(node_id=node)) == []
    assert await graph_store.log_refs(LogRefQuery(cube_id=other, topic="memory.updates")) == [
        refs[5]]
