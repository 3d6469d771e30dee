"""Scale-out: two workers share one broker, one FalkorDB and one real Milvus server.

One worker stops mid-stream; the other takes over its partitions, and every published
memory ends up stored exactly once, as a graph node with its vector.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio
from pymilvus import MilvusClient

from memstream.client.client import MemoryClient
from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.sinks.vector.milvus import MilvusVectorStore
from memstream.streams.worker import Worker
from memstream.topics.events import WriteToken
from memstream.topics.registry import DEAD_LETTER, MEMORY_ITEMS
from memstream.topics.settings import Settings
from tests.support.pipeline import pipeline_settings

CUBES = [f"scale{c}" for c in range(6)]
NAMES = ["Ana", "Bram", "Chidi", "Dorota", "Eamon", "Farah", "Goro", "Hedda", "Ilias", "Jun"]
PLACES = ["Lisbon", "Osaka", "Nairobi", "Quito", "Tallinn", "Perth", "Bergen", "Hanoi"]
HOBBIES = ["chess", "rowing", "pottery", "fencing", "origami", "karaoke", "sailing"]
PARTITIONS = 4


def facts(cube: int) -> list[str]:
    """Distinct facts about different people: nothing for the merge stage to fold together."""
    out = []
    for i, name in enumerate(NAMES):
        out.append(f"{name} {CUBES[cube]} lives in {PLACES[(i + cube) % len(PLACES)]}.")
        out.append(f"{name} {CUBES[cube]} practises {HOBBIES[(i * 3 + cube) % 7]} on Sundays.")
    return out


@dataclass
class Shared:
    settings: Settings
    bootstrap: str
    graph_uri: str

    def worker(self) -> Worker:
        return Worker(self.settings, self.bootstrap, self.graph_uri)

    def items_partitions(self, worker: Worker) -> set[int]:
        """The ``memory.items`` partitions assigned to ``worker``'s consumer right now."""
        assert worker.app is not None
        topic = MEMORY_ITEMS.name(self.settings)
        return {tp.partition for tp in worker.app.consumer.assignment() if tp.topic == topic}

    async def wait_owned(self, worker: Worker, partitions: set[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.items_partitions(worker) != partitions:
            assert time.monotonic() < deadline, (
                f"worker holds {self.items_partitions(worker)} after {timeout}s, not {partitions}")
            await asyncio.sleep(0.1)


@pytest_asyncio.fixture
async def shared(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, milvus_server_uri: str
) -> AsyncIterator[Shared]:
    """Settings both workers use: one consumer group, 4 partitions, the Milvus server."""
    settings = pipeline_settings(
        tmp_path, kafka_broker, falkordb_uri,
        kafka={"partitions": PARTITIONS},
        reorganize={"enabled": False},
    )
    settings = settings.model_copy(update={"vector": settings.vector.model_copy(
        update={"uri": milvus_server_uri})})
    yield Shared(settings, kafka_broker, falkordb_uri)
    milvus = MilvusClient(milvus_server_uri)
    milvus.drop_collection(settings.vector.collection)
    milvus.close()
    graph = FalkorDBGraphStore(falkordb_uri, settings.graph.database)
    await graph.drop_graph()
    await graph.close()


async def publish(client: MemoryClient, rounds: range) -> dict[str, WriteToken]:
    """Two facts per cube per round; the last token of each cube."""
    last: dict[str, WriteToken] = {}
    for r in rounds:
        for c, cube in enumerate(CUBES):
            last[cube] = await client.add_memories(cube, facts(c)[2 * r: 2 * r + 2])
    return last


async def wait_stored(graph: FalkorDBGraphStore, cube: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(await graph.all_of_type(cube, "LongTermMemory", status=None)) >= count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"fewer than {count} memories of {cube} within {timeout}s")


async def check_exactly_once(shared: Shared, tokens: Sequence[WriteToken], client: MemoryClient,
                             dim: int) -> None:
    deadline = time.monotonic() + 60  # for all of them: a stalled partition fails in 60 s
    for token in tokens:
        await client.wait_applied(token, timeout=max(1.0, deadline - time.monotonic()))
    s = shared.settings
    graph = FalkorDBGraphStore(shared.graph_uri, s.graph.database)
    vectors = MilvusVectorStore(s.milvus_uri, s.vector.collection, dim=dim)
    try:
        for c, cube in enumerate(CUBES):
            nodes = await graph.all_of_type(cube, "LongTermMemory", status=None)
            texts = [n.memory for n in nodes]
            lost = sorted(set(facts(c)) - set(texts))
            twice = sorted(t for t in set(texts) if texts.count(t) > 1)
            letters = await client.history(DEAD_LETTER, cube)
            assert not lost and not twice and len(texts) == len(facts(c)), (
                f"{cube}: lost {lost}, stored twice {twice}, dead letters {letters}")
            ids = sorted(n.id for n in nodes)
            stored = await vectors.get(cube, ids)
            assert sorted(r.id for r in stored) == ids, f"{cube}: a node without its vector"
    finally:
        await graph.close()
        await vectors.close()


async def test_a_cleanly_stopped_worker_hands_its_partitions_to_the_other(
    shared: Shared,
) -> None:
    first, second = shared.worker(), shared.worker()
    await first.start()
    await second.start()
    try:
        async with MemoryClient(shared.settings, shared.bootstrap) as client:
            assert first.deps is not None
            everything = set(range(PARTITIONS))
            await shared.wait_owned(first, everything - shared.items_partitions(second), 30)
            assert shared.items_partitions(first), "the group gave the first worker nothing"
            tokens = await publish(client, range(0, 4))
            await wait_stored(first.deps.store.graph, CUBES[0], 2, timeout=60)
            await first.stop()  # mid-stream: its partitions still hold unapplied records
            tokens |= await publish(client, range(4, 10))
            await shared.wait_owned(second, everything, timeout=30)
            assert second.deps is not None
            await check_exactly_once(shared, list(tokens.values()), client,
                                     second.deps.embedder.dim)
    finally:
        await first.stop()
        await second.stop()
