"""Every request gets a reply: a result over the broker's message limit still reaches the
client (in pages that fit, sealed as they are sent), and a request no worker can answer
fails within seconds naming the cause — real broker, FalkorDB, Milvus Lite, erasure on."""

from __future__ import annotations

import base64
import random
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from memstream.client.client import ClientError, MemoryClient
from memstream.topics.models import MemoryItem, MemoryMetadata
from memstream.topics.registry import REPLIES
from memstream.topics.sealing import is_sealed
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

CUBE = "wide"


@pytest_asyncio.fixture
async def sealed(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                 ) -> AsyncIterator[Pipeline]:
    """The pipeline as the embedded default runs it: every value sealed with its cube's key,
    and the default limits (900,000-byte events, pages of 500 nodes)."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 erasure={"enabled": True}, reorganize={"enabled": False},
                                 scheduler={"enabled": False})
    async for p in run_pipeline(settings):
        yield p


@pytest_asyncio.fixture
async def lingering(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                    ) -> AsyncIterator[Pipeline]:
    """A worker whose producer waits a second for more records before it sends a batch."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri, kafka={"linger_ms": 1000},
                                 reorganize={"enabled": False}, scheduler={"enabled": False})
    async for p in run_pipeline(settings):
        yield p


async def test_a_reply_does_not_wait_for_the_batching_of_the_workers_outputs(
    lingering: Pipeline,
) -> None:
    """The worker's producer holds a stage's outputs ``kafka.linger_ms`` so that they share a
    compressed batch; a reply leaves at once (the request lane's own producer). With a linger
    of a second, every search would take more than a second; each reply comes well before."""
    p = lingering
    nodes = wide_nodes(5, 200)
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(len(nodes), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await p.deps.store.write([(n, v.tolist()) for n, v in zip(nodes, vectors, strict=True)])
    await p.client.search(CUBE, "a note", top_k=3)  # the model and the caches loaded
    took = []
    for _ in range(3):
        started = time.monotonic()
        hits = await p.client.search(CUBE, "a note", top_k=3)
        took.append(time.monotonic() - started)
        assert len(hits) == 3
    assert max(took) < 0.9, took


def wide_nodes(count: int, chars: int) -> list[MemoryItem]:
    """Texts of random words: replies are compressed, and a repeated sentence would fit."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    rng = random.Random(3)

    def text(i: int) -> str:
        said = base64.b64encode(rng.randbytes(chars * 3 // 4)).decode()
        return f"Note {i}: " + " ".join(said[j:j + 8] for j in range(0, len(said), 8))

    return [MemoryItem(id=f"wide-{i:04d}", memory=text(i),
                       metadata=MemoryMetadata(
                           user_id=CUBE, cube_id=CUBE, memory_type="LongTermMemory",
                           created_at=base + timedelta(seconds=i),
                           updated_at=base + timedelta(seconds=i)))
            for i in range(count)]


async def test_get_all_of_a_result_larger_than_the_broker_limit_returns_every_node(
    sealed: Pipeline,
) -> None:
    """300 nodes of ~5,600 characters that do not compress: one page of them is 1.8 MB of
    JSON and about 1.3 MB compressed and sealed, over the broker's 1 MB message limit (the
    reply that was dropped with MessageSizeTooLargeError in issue #27). Every node still
    arrives, each page under the limit as sealed."""
    nodes = wide_nodes(300, 5_000)
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(len(nodes), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await sealed.deps.store.write([(n, v.tolist()) for n, v in zip(nodes, vectors, strict=True)])
    assert sum(len(n.model_dump_json()) for n in nodes) > 1_100_000

    client = sealed.client
    first = await client.get_all_page(CUBE, limit=500, timeout=20)
    assert first.total == 300 and first.truncated and 0 < len(first.nodes) < 300
    started = time.monotonic()
    every = await client.get_all(CUBE, timeout=20)
    assert sorted(n.id for n in every) == [n.id for n in nodes]
    assert [n.memory for n in sorted(every, key=lambda n: n.id)] == [n.memory for n in nodes]
    assert time.monotonic() - started < 20

    # what went over the wire: sealed replies, none over the limit
    replies = await client.history(REPLIES)
    assert replies  # read back through the keys
    raw = await _raw_replies(sealed)
    assert raw and all(is_sealed(v) for v in raw)
    assert max(len(v) for v in raw) <= sealed.settings.limits.event_bytes


async def _raw_replies(p: Pipeline) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=p.bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    try:
        name = REPLIES.name(p.settings)
        tps = [TopicPartition(name, i) for i in sorted(consumer.partitions_for_topic(name)
                                                         or await _parts(consumer, name))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[bytes] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        while remaining:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                out += [r.value for r in records if r.value is not None]
            remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
        return out
    finally:
        await consumer.stop()


async def _parts(consumer: object, name: str) -> set[int]:
    await consumer.topics()  # type: ignore[attr-defined]
    return consumer.partitions_for_topic(name) or set()  # type: ignore[attr-defined,no-any-return]


async def test_a_request_no_worker_answers_fails_within_five_seconds_naming_the_cause(
    tmp_path: Path, kafka_broker: str,
) -> None:
    settings = pipeline_settings(tmp_path, kafka_broker, "redis://127.0.0.1:1")
    async with MemoryClient(settings, kafka_broker) as client:
        for call in (lambda: client.search("nobody", "anything"),
                     lambda: client.get_all("nobody")):
            started = time.monotonic()
            with pytest.raises(ClientError, match=r"no worker is running: the consumer group "
                               rf"'{settings.app_id}-requests' that answers requests has no "
                               r"members; start one with `memstream up`"):
                await call()
            assert time.monotonic() - started < 5
        # provenance waits for the worker's index of the log: with none running, it says so
        await client.add_memories("nobody", ["The user likes kites."])
        started = time.monotonic()
        with pytest.raises(ClientError, match=r"no worker is running to index the log: the "
                           r"consumer group '.*-requests' that answers requests has no members"):
            await client.memory_history("0123456789abcdef", "nobody")
        assert time.monotonic() - started < 5
