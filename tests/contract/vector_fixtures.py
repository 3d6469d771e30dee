"""VectorStore fixtures: one contract suite, every adapter.

To add an adapter, add its name to ``VECTOR_BACKENDS``, a ``case`` in ``make_vector_store``
and, if it needs a service, a ``case`` in ``vector_uri``. ``milvus-server`` is a real Milvus
2.3 standalone started once per session (tests/support/milvus_fixtures.py), and only when a
test of that backend runs. ``memory`` is the shipped in-memory double; its "uri" names an
``InMemoryVectorServer`` of the session, so a reopened store sees the same collections.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.ports import VectorStore
from memstream.sinks.vector.cache import CachedVectorStore
from memstream.sinks.vector.memory import InMemoryVectorServer, InMemoryVectorStore
from memstream.sinks.vector.milvus import MilvusVectorStore

VECTOR_BACKENDS = ["milvus-lite", "milvus-lite-cached", "milvus-server", "memory"]
# The consistency unit over each kind of Milvus (the cache is covered by the vector suite).
MEMORY_STORE_BACKENDS = ["milvus-lite", "milvus-server"]
CONTRACT_DIM = 16
_MEMORY_SERVERS: dict[str, InMemoryVectorServer] = {}  # "uri" -> server, for the session


@pytest.fixture(scope="session")
def milvus_lite_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Milvus Lite file for the session; an open anchor keeps its in-process server up."""
    uri = str(tmp_path_factory.mktemp("milvus-lite") / "contract.db")
    anchor = MilvusVectorStore(uri, "anchor", dim=4)
    asyncio.run(anchor.ensure_collection())
    yield uri
    asyncio.run(anchor.close())


def make_vector_store(backend: str, uri: str, collection: str, dim: int) -> VectorStore:
    """The ``backend``'s store on ``uri`` (from the ``vector_uri`` fixture)."""
    match backend:
        case "milvus-lite":
            return MilvusVectorStore(uri, collection, dim=dim)
        case "milvus-lite-cached":
            # waits for loads, so every read of the suite goes through the in-memory index
            inner = MilvusVectorStore(uri, collection, dim=dim)
            return CachedVectorStore(inner, wait_for_load=True)
        case "milvus-server":
            # the production settings of a server: partition key, filter templates (auto)
            return MilvusVectorStore(uri, collection, dim=dim)
        case "memory":
            server = _MEMORY_SERVERS.setdefault(uri, InMemoryVectorServer())
            return InMemoryVectorStore(dim, collection, server)
        case _:
            raise AssertionError(f"unknown vector backend {backend}")


@pytest.fixture(params=VECTOR_BACKENDS)
def vector_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def vector_uri(vector_backend: str, request: pytest.FixtureRequest) -> str:
    """Where the backend's store lives; a server is started only when its tests run."""
    match vector_backend:
        case "milvus-server":
            return str(request.getfixturevalue("milvus_server_uri"))
        case "memory":
            return "memory://contract"
        case _:
            return str(request.getfixturevalue("milvus_lite_uri"))


@pytest.fixture
def vector_collection() -> str:
    return f"contract_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def vector_store(
    vector_backend: str, vector_uri: str, vector_collection: str
) -> AsyncIterator[VectorStore]:
    """A fresh, empty collection per test (cheap: the server is shared)."""
    store = make_vector_store(vector_backend, vector_uri, vector_collection, CONTRACT_DIM)
    await store.ensure_collection()
    yield store
    inner = store.inner if isinstance(store, CachedVectorStore) else store
    if isinstance(inner, MilvusVectorStore | InMemoryVectorStore):
        await inner.drop()
    await store.close()


@pytest.fixture(params=MEMORY_STORE_BACKENDS)
def memory_vector_uri(request: pytest.FixtureRequest) -> str:
    """The Milvus under ``memory_store`` (sync: session fixtures start outside the loop)."""
    fixture = "milvus_server_uri" if request.param == "milvus-server" else "milvus_lite_uri"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
async def memory_store(
    falkordb_uri: str, memory_vector_uri: str, vector_collection: str
) -> AsyncIterator[MemoryStore]:
    """The consistency unit over FalkorDB and a Milvus: a fresh graph + collection."""
    uri = memory_vector_uri
    graph = FalkorDBGraphStore(falkordb_uri, f"contract_{uuid.uuid4().hex[:12]}")
    await graph.ensure_schema()
    vectors = MilvusVectorStore(uri, vector_collection, dim=CONTRACT_DIM)
    await vectors.ensure_collection()
    yield MemoryStore(graph, vectors, backoff_s=0.001)
    await graph.drop_graph()
    await graph.close()
    await vectors.drop()
    await vectors.close()
