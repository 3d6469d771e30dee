"""VectorStore fixtures: one contract suite, every adapter.

To add an adapter, add its name to ``VECTOR_BACKENDS`` and a ``case`` in
``make_vector_store`` (e.g. ``milvus-server``: a Milvus started by a session fixture
on a free loopback port; it cannot be installed on the CI machine today).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from sinks.falkordb import FalkorDBGraphStore
from sinks.memory_store import MemoryStore
from sinks.milvus import MilvusVectorStore
from sinks.ports import VectorStore
from sinks.vector_cache import CachedVectorStore

VECTOR_BACKENDS = ["milvus-lite", "milvus-lite-cached"]
CONTRACT_DIM = 16


@pytest.fixture(scope="session")
def milvus_lite_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Milvus Lite file for the session; an open anchor keeps its in-process server up."""
    uri = str(tmp_path_factory.mktemp("milvus-lite") / "contract.db")
    anchor = MilvusVectorStore(uri, "anchor", dim=4)
    asyncio.run(anchor.ensure_collection())
    yield uri
    asyncio.run(anchor.close())


def make_vector_store(backend: str, milvus_lite_uri: str, collection: str, dim: int) -> VectorStore:
    match backend:
        case "milvus-lite":
            return MilvusVectorStore(milvus_lite_uri, collection, dim=dim)
        case "milvus-lite-cached":
            # waits for loads, so every read of the suite goes through the in-memory index
            inner = MilvusVectorStore(milvus_lite_uri, collection, dim=dim)
            return CachedVectorStore(inner, wait_for_load=True)
        case _:
            raise AssertionError(f"unknown vector backend {backend}")


@pytest.fixture(params=VECTOR_BACKENDS)
def vector_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def vector_collection() -> str:
    return f"contract_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def vector_store(
    vector_backend: str, milvus_lite_uri: str, vector_collection: str
) -> AsyncIterator[VectorStore]:
    """A fresh, empty collection per test (cheap: the server is shared)."""
    store = make_vector_store(vector_backend, milvus_lite_uri, vector_collection, CONTRACT_DIM)
    await store.ensure_collection()
    yield store
    inner = store.inner if isinstance(store, CachedVectorStore) else store
    if isinstance(inner, MilvusVectorStore):
        await inner.drop()
    await store.close()


@pytest.fixture
async def memory_store(
    falkordb_uri: str, milvus_lite_uri: str, vector_collection: str
) -> AsyncIterator[MemoryStore]:
    """The consistency unit over the embedded stores: a fresh FalkorDB graph + Milvus collection."""
    graph = FalkorDBGraphStore(falkordb_uri, f"contract_{uuid.uuid4().hex[:12]}")
    await graph.ensure_schema()
    vectors = MilvusVectorStore(milvus_lite_uri, vector_collection, dim=CONTRACT_DIM)
    await vectors.ensure_collection()
    yield MemoryStore(graph, vectors, backoff_s=0.001)
    await graph.drop_graph()
    await graph.close()
    await vectors.drop()
    await vectors.close()
