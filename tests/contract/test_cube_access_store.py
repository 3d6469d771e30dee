"""Cube access records (owner and shares) on every graph adapter: absent until written,
then read back as written, upserted in place, and kept apart from the cube's memories."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from memstream.local.falkordb import FalkorDBServer
from memstream.security.access import CubeAccess
from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.ports import GraphStore


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

    # (no quotes in names: FalkorDB's Bolt shim pastes parameters into the query)
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


@pytest_asyncio.fixture(loop_scope="session", params=["falkordb", "memory"])
async def spend_store(
    request: pytest.FixtureRequest, graph_falkordb_server: FalkorDBServer
) -> AsyncIterator[GraphStore]:
    """A graph of its own: dropping a period deletes nodes, and FalkorDB reuses deleted node
    ids, which moves the full-text scores that tests/contract/test_keyword_search.py pins
    on the shared graph. (The Bolt endpoint serves one graph only, so it is left out; the
    statements are the same Cypher.)"""
    if request.param == "memory":
        yield InMemoryGraphStore()
        return
    store = FalkorDBGraphStore(graph_falkordb_server.uri, f"spend_{uuid.uuid4().hex[:8]}")
    await store.ensure_schema()
    yield store
    await store.drop_graph()
    await store.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_llm_spend_is_kept_per_call_and_period(spend_store: GraphStore, cube: str) -> None:
    graph_store = spend_store
    assert await graph_store.llm_spend(cube, "2026-11-23") == {}
    await graph_store.record_llm_spend(cube, "2026-11-23", "a", 40)
    await graph_store.record_llm_spend(cube, "2026-11-23", "a", 40)  # a redelivery: same call
    await graph_store.record_llm_spend(cube, "2026-11-23", "b", 25)
    await graph_store.record_llm_spend(cube + "-x", "2026-11-23", "a", 7)
    assert await graph_store.llm_spend(cube, "2026-11-23") == {"a": 40, "b": 25}
    assert await graph_store.llm_spend(cube + "-x", "2026-11-23") == {"a": 7}
    # a new period starts empty and the old one is dropped
    assert await graph_store.llm_spend(cube, "2026-11-24") == {}
    assert await graph_store.llm_spend(cube, "2026-11-23") == {}
    assert cube not in await graph_store.list_cubes()
