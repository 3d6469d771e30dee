"""The in-memory graph and vector doubles, chosen by settings, run the whole pipeline on a
real broker: what users' own tests get without a FalkorDB or Milvus (nothing is kept after
the worker stops)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from memstream.samples import DEMO_USER
from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.vector.memory import InMemoryVectorStore
from tests.e2e.test_walking_skeleton import publish_sample
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline


@pytest_asyncio.fixture
async def in_memory(tmp_path: Path, kafka_broker: str) -> AsyncIterator[Pipeline]:
    settings = pipeline_settings(tmp_path, kafka_broker, "memory://",
                                 graph={"backend": "memory"}, vector={"backend": "memory"})
    async for p in run_pipeline(settings):
        yield p


async def test_the_pipeline_runs_on_the_in_memory_stores(in_memory: Pipeline) -> None:
    store = in_memory.deps.store
    assert isinstance(store.graph, InMemoryGraphStore)
    assert isinstance(store.vectors, InMemoryVectorStore)
    assert not (in_memory.settings.data_dir / "milvus.db").exists()

    await publish_sample(in_memory)
    facts = await store.query.all_of_type(DEMO_USER, "LongTermMemory") + \
        await store.query.all_of_type(DEMO_USER, "UserMemory")
    assert len(facts) >= 6
    assert len(await store.query.vectors(DEMO_USER, [f.id for f in facts])) == len(facts)

    hits = await in_memory.client.search(DEMO_USER, "Where am I travelling to?", top_k=5)
    texts = [h.item.memory for h in hits]
    assert any("Lisbon" in t for t in texts[:3]), texts
