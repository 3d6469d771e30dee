"""Replay throughput next to live ingestion of the same log, in the same run.

    python bench/replay.py [--cubes 4] [--chunks 40] [--no-embed-cache]

Runs on the embedded default (noida-db broker, FalkorDB, Milvus Lite, rules LLM, local e5
embedder, optimizer on with its default windows: chunks an hour apart enter a new window
each, in the live run and in the replay) in a temporary directory. Live: publish the chat
chunks and wait until extraction, the add stage and the optimizer's add events are all
done. Replay: drop every cube's views and rebuild them from the log with `replay` commands
(run by the same worker), then check the stores hold the same nodes. Prints memories/s for
both and the ratio (goal: replay ≥ 2× live, since a replay batches and skips extraction).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ingest  # noqa: E402 - bench/ingest.py, beside this script
from aiokafka import TopicPartition  # noqa: E402
from embedded import embedded_stack  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.kafka.progress import Progress  # noqa: E402
from memstream.sinks.dump import export_cube  # noqa: E402
from memstream.streams.embed.cache import CachedEmbedder  # noqa: E402
from memstream.streams.runtime.stage import Deps  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import DropViews, Message, ReplayCube, WriteToken  # noqa: E402
from memstream.topics.registry import REORGANIZE_HIGH  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402


def chunk_messages(i: int, base: datetime) -> list[Message]:
    """The synthetic load of ``bench/ingest.py``, chunk ``i`` an hour after chunk ``i - 1``."""
    return ingest.chunk_messages(i, base + timedelta(hours=i), prefix="r")


async def optimizer_done(settings: Settings, bootstrap: str) -> None:
    """Every reorganize add event published so far is handled."""
    progress = Progress(settings, bootstrap)
    try:
        for partition in range(settings.kafka.partitions):
            tp = TopicPartition(REORGANIZE_HIGH.name(settings), partition)
            if end := await progress.end_offset(tp):
                await progress.wait_applied(
                    WriteToken(topic=tp.topic, partition=partition, offset=end - 1), timeout=900)
    finally:
        await progress.close()


async def memories(deps: Deps, cubes: list[str]) -> tuple[int, dict[str, set[str]]]:
    """Stored memories (long-term nodes of every kind, not working copies) and node ids."""
    ids: dict[str, set[str]] = {}
    count = 0
    for cube in cubes:
        graph = await export_cube(deps.store, cube)
        ids[cube] = {f"{n.id} {n.metadata.memory_type} {n.metadata.status} {n.memory[:60]}"
                     for n in graph.nodes}
        count += sum(1 for n in graph.nodes if n.metadata.memory_type != "WorkingMemory")
    return count, ids


async def run(settings: Settings, bootstrap: str, graph_uri: str, n_cubes: int,
              n_chunks: int) -> None:
    cubes = [f"cube{c}" for c in range(n_cubes)]
    async with Worker(settings, bootstrap, graph_uri) as worker, \
            MemoryClient(settings, bootstrap) as client:
        assert worker.deps is not None
        base = datetime(2026, 1, 1, tzinfo=UTC)
        t0 = time.perf_counter()
        tokens = [await client.add_messages(cubes[i % n_cubes], chunk_messages(i, base))
                  for i in range(n_chunks * n_cubes)]
        for token in tokens:
            await client.wait_applied(token, timeout=900)
        await optimizer_done(settings, bootstrap)
        live_s = time.perf_counter() - t0
        live_count, live_ids = await memories(worker.deps, cubes)

        for cube in cubes:
            await client.wait_applied(await client.command(DropViews(user_id=cube)), timeout=60)
        assert (await memories(worker.deps, cubes))[0] == 0
        cache = worker.deps.embedder if isinstance(worker.deps.embedder, CachedEmbedder) \
            else None
        before = (cache.hits, cache.misses) if cache else (0, 0)
        t0 = time.perf_counter()
        replays = [await client.command(ReplayCube(user_id=cube)) for cube in cubes]
        for token in replays:
            await client.wait_applied(token, timeout=900)
        replay_s = time.perf_counter() - t0
        replay_count, replay_ids = await memories(worker.deps, cubes)
        failures = [f for t in replays if (f := await client.command_failure(t))]
        hits, misses = (cache.hits - before[0], cache.misses - before[1]) if cache else (0, 0)

    live_rate, replay_rate = live_count / live_s, replay_count / replay_s
    print(f"{n_cubes} cubes × {n_chunks} chunks × 3 messages: {live_count} memories "
          f"(episodes included)")
    print(f"{'path':<44}{'seconds':>10}{'memories/s':>12}")
    print(f"{'live: extraction + add + optimizer events':<44}{live_s:>10.1f}{live_rate:>12.1f}")
    print(f"{'replay: drop views, rebuild from the log':<44}{replay_s:>10.1f}"
          f"{replay_rate:>12.1f}")
    print(f"replay / live: {replay_rate / live_rate:.2f}× (goal ≥ 2×)")
    print(f"embedding cache during the replay: {hits} passages read back, {misses} embedded"
          if cache else "embedding cache off: the replay embedded every passage again")
    same = replay_ids == live_ids and replay_count == live_count and not failures
    for cube in cubes:
        for line in sorted(live_ids[cube] ^ replay_ids[cube]):
            print(f"  {cube} {'live only' if line in live_ids[cube] else 'replay only'}: {line}")
    print("stores after replay: " + ("the same nodes as the live run" if same else
                                     f"DIFFERENT ({replay_count} vs {live_count}; {failures})"))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cubes", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=40, help="chat chunks per cube")
    parser.add_argument("--no-embed-cache", action="store_true",
                        help="embed every passage again (embedder.cache off)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    async with embedded_stack() as (data, stack):
        b, g = stack.bootstrap, stack.graph_uri
        settings = ingest.make_settings(data, "replay", b, g,
                                        embedder={"cache": not args.no_embed_cache})
        await run(settings, b, g, args.cubes, args.chunks)


if __name__ == "__main__":
    asyncio.run(main())
