"""Picks the VectorStore implementation once, from settings."""

from __future__ import annotations

from memstream.sinks.ports import VectorStore
from memstream.sinks.vector.cache import CachedVectorStore
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.sinks.vector.milvus import MilvusVectorStore
from memstream.topics.settings import Settings


def create_vector_store(settings: Settings, dim: int) -> VectorStore:
    """Milvus: a Lite file under ``data_dir`` or the configured server URI; or the in-memory
    double when ``vector.backend`` is "memory".

    ``load_collection`` happens lazily; call ``ensure_collection`` at startup to fail fast
    on a dimension mismatch.
    """
    vector = settings.vector
    if vector.backend == "memory":  # a test double: this process only, gone when it stops
        return InMemoryVectorStore(dim)
    token = vector.token.get_secret_value() if vector.token is not None else None
    store = MilvusVectorStore(
        uri=settings.milvus_uri,
        collection=vector.collection,
        dim=dim,
        token=token,
        index_type=vector.index_type,
        relaxed_consistency=vector.search_consistency,
    )
    if store.is_lite and vector.lite_cache_max_vectors > 0:
        return CachedVectorStore(store, max_vectors=vector.lite_cache_max_vectors,
                                 max_cubes=vector.lite_cache_max_cubes,
                                 load_after_s=vector.lite_cache_load_after_s)
    return store
