"""Ingest throughput: extraction + add through Kafka vs the same writes in-process.

    python bench/ingest.py [--chunks 150] [--latency-chunks 50]

Runs on the embedded default (noida-db broker, FalkorDB, Milvus Lite, rules LLM,
local e5 embedder) in a temporary directory. Prints memories/s for both paths and
their ratio, and the p50/p95 time from publishing one chunk to its `added` update.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedded import embedded_stack  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.streams.extraction.logic import extract_chunk  # noqa: E402
from memstream.streams.memory.logic import add_memories  # noqa: E402
from memstream.streams.runtime.stage import RawRecord, Record  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import (  # noqa: E402
    ConversationChunk,
    ExtractedMemory,
    MemoryUpdate,
    Message,
    Origin,
)
from memstream.topics.settings import Settings  # noqa: E402

SUBJECTS = ["hiking", "jazz", "sushi", "chess", "painting", "cycling", "tea", "poetry",
            "gardening", "sailing", "photography", "baking", "yoga", "skiing", "opera"]
CITIES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Quebec", "Hanoi", "Tbilisi"]


def chunk_messages(i: int, base: datetime, prefix: str = "b") -> list[Message]:
    """Chunk ``i`` of the synthetic load: three first-person sentences said at ``base``."""
    s, c = SUBJECTS[i % len(SUBJECTS)], CITIES[i % len(CITIES)]
    texts = [
        f"I really love {s} and I practise it every week, session {i}.",
        f"My friend Sam {i} moved to {c} in March to study architecture.",
        f"We plan to visit {c} together next month for project {i}.",
    ]
    return [Message(id=f"{prefix}{i}-{j}", role="user", content=t,
                    timestamp=base + timedelta(seconds=j))
            for j, t in enumerate(texts)]


def make_settings(data: Path, label: str, bootstrap: str, graph_uri: str,
                  conflicts: bool = True, optimizer: bool = True, **sections: Any) -> Settings:
    """A bench run's settings on the embedded stack: its own topics, graph and collection
    (named after ``label``), quick batches and commits; ``sections``: more settings."""
    tag = f"{label}{uuid.uuid4().hex[:6]}"
    return Settings(
        data_dir=data, app_id=f"bench-{tag}",
        kafka={"bootstrap_servers": bootstrap, "topic_prefix": f"{tag}.", "partitions": 4},
        graph={"uri": graph_uri, "database": f"bench_{tag}"},
        vector={"uri": str(data / f"{tag}.db"), "collection": f"bench_{tag}"},
        worker={"batch_within_s": 0.05, "commit_interval_s": 0.2},
        memory={"conflict_detection": conflicts},
        reorganize={"enabled": optimizer},
        **sections,
    )


async def kafka_path(settings: Settings, bootstrap: str, graph_uri: str, n: int) -> float:
    """Memories/s through the real pipeline: publish n chunks, wait until all are applied."""
    async with Worker(settings, bootstrap, graph_uri) as worker, \
            MemoryClient(settings, bootstrap) as client:
        base = datetime(2026, 1, 1, tzinfo=UTC)
        t0 = time.perf_counter()
        tokens = [await client.add_messages(f"cube{i % 10}", chunk_messages(i, base))
                  for i in range(n)]
        for token in tokens:
            await client.wait_applied(token, timeout=600)
        elapsed = time.perf_counter() - t0
        assert worker.deps is not None
        stored = sum([await worker.deps.store.vectors.count(f"cube{c}") for c in range(10)])
    return stored / 2 / elapsed  # each memory is a long-term node + a working-memory copy


async def in_process_path(settings: Settings, bootstrap: str, graph_uri: str, n: int) -> float:
    """The same extraction and writes, called directly (no Kafka)."""
    worker = Worker(settings, bootstrap, graph_uri)
    deps = await worker.open_deps()  # the same stores and providers a worker uses
    base = datetime(2026, 1, 1, tzinfo=UTC)
    t0 = time.perf_counter()
    total = 0
    pending: dict[str, list[Record[ExtractedMemory]]] = {}
    for i in range(n):
        cube = f"cube{i % 10}"
        chunk = ConversationChunk(user_id=cube, messages=tuple(chunk_messages(i, base)))
        origin = Origin(topic="bench", partition=0, offset=i)
        items = await extract_chunk(chunk, origin, deps)
        raw = RawRecord("bench", 0, i, cube.encode(), None)
        pending.setdefault(cube, []).extend(Record(it, origin, raw) for it in items)
        if sum(len(v) for v in pending.values()) >= settings.worker.batch_size:
            for records in pending.values():
                await add_memories(records, deps)
                total += len(records)
            pending.clear()
    for records in pending.values():
        await add_memories(records, deps)
        total += len(records)
    elapsed = time.perf_counter() - t0
    await worker.stop()
    return total / elapsed


async def latency(settings: Settings, bootstrap: str, graph_uri: str, n: int) -> list[float]:
    """Seconds from publishing one chunk to the first update it causes (added or merged)."""
    out: list[float] = []
    async with Worker(settings, bootstrap, graph_uri), MemoryClient(settings, bootstrap) as client:
        base = datetime(2026, 2, 1, tzinfo=UTC)
        queue: asyncio.Queue[tuple[float, MemoryUpdate]] = asyncio.Queue()

        async def follow() -> None:
            async for update in client.updates():
                queue.put_nowait((time.perf_counter(), update))

        follower = asyncio.create_task(follow())
        await asyncio.sleep(1.0)  # the follower is positioned at the end
        for i in range(n):
            t0 = time.perf_counter()
            token = await client.add_messages("latency", chunk_messages(1000 + i, base))
            while True:
                at, update = await asyncio.wait_for(queue.get(), timeout=60)
                origin = update.origin
                if (update.action in ("added", "merged") and origin is not None
                        and (origin.partition, origin.offset) == (token.partition, token.offset)):
                    out.append(at - t0)
                    break
            await client.wait_applied(token, timeout=60)  # one chunk at a time
        follower.cancel()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=150)
    parser.add_argument("--latency-chunks", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    async with embedded_stack() as (data, stack):
        b, g = stack.bootstrap, stack.graph_uri
        print(f"embedded stack: kafka {b}, graph {g}; {args.chunks} chunks × 3 messages")
        n = args.chunks
        plain = await in_process_path(make_settings(data, "plain", b, g, conflicts=False),
                                      b, g, n)
        base_rate = await in_process_path(make_settings(data, "inproc", b, g), b, g, n)
        alone = await kafka_path(make_settings(data, "alone", b, g, optimizer=False), b, g, n)
        kafka_rate = await kafka_path(make_settings(data, "kafka", b, g), b, g, n)
        lat = await latency(make_settings(data, "lat", b, g), b, g, args.latency_chunks)
    q = statistics.quantiles(lat, n=20)
    print(f"{'path':<52}{'memories/s':>12}")
    print(f"{'in-process, no conflict detection':<52}{plain:>12.1f}")
    print(f"{'in-process, with conflict detection (default)':<52}{base_rate:>12.1f}")
    print(f"{'through Kafka, optimizer off':<52}{alone:>12.1f}")
    print(f"{'through Kafka, optimizer on (default)':<52}{kafka_rate:>12.1f}")
    print(f"conflict detection costs {1000 / base_rate - 1000 / plain:.1f} ms per memory "
          f"(throughput ratio {base_rate / plain:.2f})")
    print(f"optimizer on / off through Kafka: {kafka_rate / alone:.2f} (goal ≥ 0.80)")
    print(f"ratio kafka / in-process (both with defaults): {kafka_rate / base_rate:.2f}")
    p50, p95 = statistics.median(lat) * 1000, q[18] * 1000
    print(f"publish → added latency over {len(lat)} chunks: p50 {p50:.0f} ms, p95 {p95:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
