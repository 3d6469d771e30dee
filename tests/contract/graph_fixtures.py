"""GraphStore fixtures: one contract suite over every adapter, on real FalkorDB servers.

- ``falkordb``: the native client against a FalkorDB started for the session. Every query
  it sends is first explained: one whose plan reads a whole label (every node of it, then a
  filter) fails the test that sent it, unless it reads the whole graph on purpose
  (``WHOLE_LABEL``). Such a query costs every node of the history: one that moved a merged
  memory's incoming edges took 320-440 ms at 100,000 turns, one per edge type of a merge.
- ``neo4j-bolt``: the Neo4j adapter (official driver) against FalkorDB's Bolt endpoint,
  on a second server of its own (that endpoint can crash the process).
  Bolt speaks FalkorDB's Cypher, so the adapter runs with the FalkorDB dialect (index
  DDL is the only part that differs); its batches stay small to keep every request under
  the endpoint's 4 KB parameter buffer. One driver serves the whole session because a new
  connection after a closed one stalls there.
- ``memory``: the shipped in-memory double (``sinks.graph.memory``), a fresh store per test.

Every test gets fresh cube ids, so tests share the servers and stores without interfering.
Async fixtures and tests of the graph suite run on the session event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from memstream.local.falkordb import FalkorDBServer
from memstream.sinks.graph import cypher
from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.graph.neo4j import Neo4jGraphStore
from memstream.sinks.ports import GraphStore

GRAPH_BACKENDS = ("falkordb", "neo4j-bolt", "memory")
SCANS = ("Node By Label Scan", "All Node Scan")
# Queries that read a whole label on purpose (a fragment of each), and why.
WHOLE_LABEL: dict[str, str] = {
    "RETURN DISTINCT n.cube_id AS cube_id": "list_cubes: every cube of the graph (erase, admin)",
    "max(n.updated_at) AS changed": "recent_cubes: the worker's start warms the newest cubes",
    "MATCH (a:LLMAnswer {cube_id: $cube_id})\nDELETE a": "an erasure drops the cube's answers",
    "MATCH (x:LogRef) WHERE x.node_id STARTS WITH": "an id prefix typed in the CLI, any cube",
}
BOLT_BATCH = 3  # rows per UNWIND over Bolt: ~600 B each, far below the 4 KB buffer


async def _started(data_dir: Path, bolt: bool) -> FalkorDBServer:
    server = FalkorDBServer(data_dir, bolt_port=0 if bolt else None)
    await server.start()
    return server


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def graph_falkordb_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[FalkorDBServer]:
    server = await _started(tmp_path_factory.mktemp("graph-falkordb"), bolt=False)
    yield server
    await server.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def graph_bolt_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[FalkorDBServer]:
    server = await _started(tmp_path_factory.mktemp("graph-bolt"), bolt=True)
    yield server
    await server.stop()


async def plan_checked_store(server: FalkorDBServer) -> AsyncIterator[FalkorDBGraphStore]:
    """A FalkorDB store on a graph of its own that explains each new query before sending
    it and fails one that reads a whole label (see the module docstring)."""
    store = FalkorDBGraphStore(server.uri, f"contract_{uuid.uuid4().hex[:8]}")
    await store.ensure_schema()
    send, explained = store._send, set[str]()

    async def explained_first(query: str, params: Mapping[str, object], read_only: bool) -> Any:
        if query not in explained and not any(f in query for f in WHOLE_LABEL):
            plan = str(await store._graph.explain(query, dict(params)))
            scans = [line.strip() for line in plan.splitlines() if line.strip().startswith(SCANS)]
            assert not scans, f"this query reads a whole label ({scans}):\n{query}\n{plan}"
            explained.add(query)
        return await send(query, params, read_only)

    store._send = explained_first  # type: ignore[method-assign]
    yield store
    await store.drop_graph()
    await store.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def falkordb_graph_store(
    graph_falkordb_server: FalkorDBServer,
) -> AsyncIterator[FalkorDBGraphStore]:
    async for store in plan_checked_store(graph_falkordb_server):
        yield store


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def neo4j_bolt_graph_store(
    graph_bolt_server: FalkorDBServer,
) -> AsyncIterator[Neo4jGraphStore]:
    assert graph_bolt_server.bolt_uri is not None
    store = Neo4jGraphStore(
        graph_bolt_server.bolt_uri,
        None,  # the endpoint takes no credentials (Redis has no password here)
        None,
        None,  # the endpoint ignores database names and serves the graph "falkordb"
        dialect=cypher.FALKORDB,
        batch_size=BOLT_BATCH,
        connection_acquisition_timeout_s=2.0,
    )
    await store.ensure_schema()
    yield store
    await store.close()


@pytest.fixture
def graph_store(request: pytest.FixtureRequest, graph_backend: str) -> GraphStore:
    """The adapter named by ``graph_backend`` (parametrized by the suite's generate hook)."""
    match graph_backend:
        case "falkordb":
            store: GraphStore = request.getfixturevalue("falkordb_graph_store")
        case "neo4j-bolt":
            store = request.getfixturevalue("neo4j_bolt_graph_store")
        case "memory":
            store = InMemoryGraphStore()  # a fresh one per test: it costs nothing
        case _:
            raise AssertionError(f"unknown graph backend {graph_backend}")
    return store


@pytest.fixture
def cube() -> str:
    """A cube id no other test uses."""
    return f"cube-{uuid.uuid4().hex[:10]}"
