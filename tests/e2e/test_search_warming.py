"""A restarted worker loads the search caches of the cubes that changed or were searched
last, before anyone searches them, so their first search is not a cold one
(``search.warm_cubes``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memstream.sinks.vector.cache import CachedVectorStore
from memstream.streams.core.episode_index import indexes_for
from memstream.topics.settings import Settings
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

MESSAGES = [{"role": "user", "content": "I'm allergic to shellfish."},
            {"role": "assistant", "content": "Noted, no shrimp then."}]


async def ingest(settings: Settings, cubes: list[str]) -> None:
    async for p in run_pipeline(settings):
        for cube in cubes:
            token = await p.client.add_messages(cube, MESSAGES, cube_id=cube)
            await p.client.wait_applied(token, timeout=60)


def warmed(p: Pipeline, cube: str) -> bool:
    vectors = p.deps.store.vectors
    assert isinstance(vectors, CachedVectorStore)  # Milvus Lite: the in-memory index
    return vectors.loaded(cube) and indexes_for(p.deps.query).held(cube)


async def test_a_restarted_worker_warms_the_latest_cubes_before_any_search(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str
) -> None:
    # nothing rewrites a cube after its add (optimizer, scheduler): the order is the adds'
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri, search={"warm_cubes": 2},
                                 reorganize={"enabled": False}, scheduler={"enabled": False})
    await ingest(settings, ["alice", "bob", "carol"])  # carol changed last, alice first
    async for p in run_pipeline(settings):
        for _ in range(300):
            if warmed(p, "carol") and warmed(p, "bob"):
                break
            await asyncio.sleep(0.1)
        assert warmed(p, "carol") and warmed(p, "bob")
        assert not warmed(p, "alice")  # beyond warm_cubes: loads on its first search
        hits = await p.client.search("alice", "what can't I eat?", cube_id="alice")
        assert "shellfish" in hits[0].item.memory
    async for p in run_pipeline(settings):  # alice was searched last: she comes first now
        for _ in range(300):
            if warmed(p, "alice") and warmed(p, "carol"):
                break
            await asyncio.sleep(0.1)
        assert warmed(p, "alice") and warmed(p, "carol")
        assert not warmed(p, "bob")


async def test_warming_can_be_turned_off(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str
) -> None:
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 search={"warm_cubes": 0})
    await ingest(settings, ["dora"])
    async for p in run_pipeline(settings):
        await asyncio.sleep(2)  # a warming worker has loaded a two-memory cube by now
        assert not warmed(p, "dora")
