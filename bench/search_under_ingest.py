"""Search latency while the same worker is ingesting, against the same searches when idle.

    python bench/search_under_ingest.py [--memories 2000] [--queries 100]

One worker on the embedded default (noida-db, FalkorDB, Milvus Lite, rules LLM,
local e5): a cube of memories is loaded straight into the stores, then fast-mode
searches run first on an idle worker (the baseline, same run), then while a
client publishes a conversation chunk every 20 ms to ten other cubes, more than
the worker can extract and add, so ingestion never pauses. Prints p50 / p95 / max
of both and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedded import embedded_stack  # noqa: E402
from ingest import chunk_messages, make_settings  # noqa: E402
from search import QUERIES, make_nodes, memory_texts, pct  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402

CUBE = "searched"


async def timed_searches(client: MemoryClient, n: int, rng: random.Random) -> list[float]:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        found = await client.search(CUBE, rng.choice(QUERIES), top_k=10)
        lat.append(time.perf_counter() - t0)
        assert found and all(s.item.metadata.cube_id == CUBE for s in found)
    return lat


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rng = random.Random(11)
    async with embedded_stack() as (data, stack):
        b, g = stack.bootstrap, stack.graph_uri
        settings = make_settings(data, "mixed", b, g)
        async with Worker(settings, b, g) as worker, MemoryClient(settings, b) as client:
            assert worker.deps is not None
            texts = memory_texts(args.memories)
            vectors = await worker.deps.embedder.embed_passages(texts)
            await worker.deps.store.write(
                [(n, v.tolist()) for n, v in zip(make_nodes(CUBE, texts), vectors,
                                                 strict=True)])
            await timed_searches(client, 10, rng)  # warm: reply partition, cube index
            idle = await timed_searches(client, args.queries, rng)

            stop = asyncio.Event()
            published = 0

            async def ingest() -> None:
                nonlocal published
                base = datetime(2026, 1, 1, tzinfo=UTC)
                while not stop.is_set():
                    await client.add_messages(f"cube{published % 10}",
                                              chunk_messages(published, base))
                    published += 1
                    await asyncio.sleep(0.02)

            feeder = asyncio.create_task(ingest())
            await asyncio.sleep(3)  # ingestion under way
            busy = await timed_searches(client, args.queries, rng)
            stop.set()
            await feeder
            added = sum([await worker.deps.store.vectors.count(f"cube{c}") for c in range(10)])
    print(f"{'searches (fast, top_k 10)':<34}{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}")
    for label, lat in (("idle worker (baseline)", idle), ("while ingesting", busy)):
        print(f"{label:<34}{pct(lat, 50):>8.1f}{pct(lat, 95):>8.1f}{max(lat) * 1000:>8.0f}")
    print(f"ratio while ingesting / idle: p50 {pct(busy, 50) / pct(idle, 50):.2f}×, "
          f"p95 {pct(busy, 95) / pct(idle, 95):.2f}×; n={args.queries} each; "
          f"{published} chunks published, {added} memories stored meanwhile")


if __name__ == "__main__":
    asyncio.run(main())
