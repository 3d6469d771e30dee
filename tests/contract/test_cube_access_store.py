"""Cube access records (owner and shares) on every graph adapter: absent until written,
then read back as written, upserted in place, and kept apart from the cube's memories."""

from __future__ import annotations

import pytest

from sinks.ports import GraphStore
from topics.access import CubeAccess


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "graph_backend" in metafunc.fixturenames:
        metafunc.parametrize("graph_backend", ["falkordb", "neo4j-bolt", "memory"])


@pytest.mark.asyncio(loop_scope="session")
async def test_access_records_round_trip_and_stay_out_of_the_memories(
    graph_store: GraphStore, cube: str
) -> None:
    assert await graph_store.get_cube_access(cube) is None
    access = CubeAccess(cube_id=cube, owner="alice").shared("bob", "read")
    await graph_store.set_cube_access(access)
    assert await graph_store.get_cube_access(cube) == access
    assert access.may_read("bob") and not access.may_write("bob")

    # (no quotes in names: FalkorDB's Bolt shim pastes parameters into the query, INFRA.md)
    changed = access.shared("bob", "write").shared("carol 朋友", "read")
    await graph_store.set_cube_access(changed)
    back = await graph_store.get_cube_access(cube)
    assert back == changed and back.may_write("bob") and back.may_read("carol 朋友")
    assert await graph_store.get_cube_access(cube + "-other") is None

    await graph_store.set_cube_access(changed.unshared("bob"))
    back = await graph_store.get_cube_access(cube)
    assert back is not None and not back.may_read("bob") and back.owner == "alice"
    assert cube not in await graph_store.list_cubes()  # a record is not a memory
    assert not any((await graph_store.count_by_type(cube, status=None)).values())
