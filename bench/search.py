"""Fast-mode search latency through Kafka request/reply vs an in-process baseline.

    python bench/search.py [--cubes 50] [--per-cube 2000] [--queries 300]

Loads cubes × memories straight into the embedded stores (FalkorDB + Milvus Lite;
loading is not what is measured), starts a worker, and times `client.search()`
from publish to reply, the same queries twice: from a client in a process of its
own (how an agent calls memstream) and from one sharing the worker's process and
event loop. The baseline, in the same run: embed the query with the same local
model + numpy exact top-k over that cube's vectors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.sinks.vector.cache import CachedVectorStore  # noqa: E402
from memstream.streams.core.working_memory import working_copy  # noqa: E402
from memstream.streams.embed.local import LocalEmbedder  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.ids import stable_id  # noqa: E402
from memstream.topics.models import MemoryItem, MemoryMetadata  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goro", "Hana", "Ivan", "Jia"]
THINGS = ["hiking", "jazz", "sushi", "chess", "tea", "yoga", "opera", "sailing", "baking",
          "cycling", "poetry", "tennis", "gardening", "painting", "skiing", "knitting"]
PLACES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Hanoi", "Quebec", "Tbilisi", "Perth"]
QUERIES = ["what does the user like to do on weekends?", "where does Ana live?",
           "which sport does the user play?", "what food does the user enjoy?",
           "when is the trip to Kyoto?", "who plays the piano?", "用户喜欢喝什么？",
           "what did Ben recommend?", "does the user have allergies?", "travel plans"]


def memory_texts(n: int) -> list[str]:
    out = []
    for i in range(n):
        p, t, c = PEOPLE[i % 10], THINGS[(i // 10) % 16], PLACES[(i // 160) % 9]
        match i % 4:
            case 0:
                out.append(f"The user enjoys {t} with {p} in {c} (note {i}).")
            case 1:
                out.append(f"{p} told the user that {t} classes in {c} start in week {i % 52}.")
            case 2:
                out.append(f"The user plans a trip to {c} to try {t}, item {i}.")
            case _:
                out.append(f"用户和{p}在{c}一起练习{t}，第{i}条。")
    return out


def make_nodes(cube: str, texts: list[str]) -> list[MemoryItem]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    return [MemoryItem(id=stable_id("bench", cube, i), memory=text, metadata=MemoryMetadata(
        user_id=cube, cube_id=cube, memory_type="UserMemory" if i % 3 == 0 else "LongTermMemory",
        key=" ".join(text.split()[:4]), tags=(THINGS[(i // 10) % 16], PLACES[(i // 160) % 9]),
        created_at=base + timedelta(seconds=i), updated_at=base + timedelta(seconds=i)))
        for i, text in enumerate(texts)]


async def settle_graph(uri: str) -> None:
    """Let FalkorDB finish the snapshot and log rewrite that loading set off, then save, so
    the loading's aftermath (a fork serialising 100k nodes) is not timed as search."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(uri, socket_timeout=None)
    try:
        while True:
            info = await client.info("persistence")
            if not info.get("rdb_bgsave_in_progress") and not info.get("aof_rewrite_in_progress"):
                break
            await asyncio.sleep(0.2)
        await client.save()
    finally:
        await client.aclose()


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000, q))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cubes", type=int, default=50)
    parser.add_argument("--per-cube", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="memstream-bench-") as tmp:
        settings = Settings(data_dir=Path(tmp), kafka={"partitions": 4})
        async with EmbeddedStack(settings) as stack:
            worker = Worker(settings, stack.bootstrap, stack.graph_uri)
            deps = await worker.open_deps()
            texts = memory_texts(args.per_cube)
            t0 = time.perf_counter()
            vectors = await deps.embedder.embed_passages(texts)
            print(f"embedded {len(texts)} texts in {time.perf_counter() - t0:.1f}s; loading "
                  f"{args.cubes} cubes × {args.per_cube} …", flush=True)
            t0 = time.perf_counter()
            for c in range(args.cubes):
                nodes = make_nodes(f"cube{c}", texts)
                rows = [(n, v.tolist()) for n, v in zip(nodes, vectors, strict=True)]
                wm = [(working_copy(n), v) for n, v in rows[-20:]]
                await deps.store.write(rows + wm)
            print(f"loaded in {time.perf_counter() - t0:.0f}s", flush=True)
            await worker.stop()
            await settle_graph(stack.graph_uri)

            baseline_embedder = LocalEmbedder()
            base: list[float] = []
            for _ in range(args.queries):
                q = rng.choice(QUERIES)
                t0 = time.perf_counter()
                qv = (await baseline_embedder.embed_queries([q]))[0]
                scores = vectors @ qv
                np.argpartition(-scores, 10)[:10]
                base.append(time.perf_counter() - t0)

            jobs = [(f"cube{rng.randrange(args.cubes)}", rng.choice(QUERIES))
                    for _ in range(args.queries)]
            async with Worker(settings, stack.bootstrap, stack.graph_uri) as live:
                assert live.deps is not None
                t0 = time.perf_counter()
                if isinstance(live.deps.store.vectors, CachedVectorStore):  # steady state: all warm
                    for c in range(args.cubes):
                        await live.deps.store.vectors.warm(f"cube{c}")
                print(f"warmed the in-memory vector index in {time.perf_counter() - t0:.0f}s")
                own = await client_in_own_process(settings, stack.bootstrap, jobs)
                async with MemoryClient(settings, stack.bootstrap) as client:
                    shared = await timed_searches(client, jobs)
    b50, b95 = pct(base, 50), pct(base, 95)
    print(f"{'path':<52}{'p50 ms':>8}{'p95 ms':>8}{'× p50':>7}{'× p95':>7}")
    print(f"{'in-process: embed + numpy exact (one cube)':<52}{b50:>8.1f}{b95:>8.1f}")
    for label, lat in (("Kafka request/reply, client in its own process", own),
                       ("Kafka request/reply, client in the worker's process", shared)):
        p50, p95 = pct(lat, 50), pct(lat, 95)
        print(f"{label:<52}{p50:>8.1f}{p95:>8.1f}{p50 / b50:>7.2f}{p95 / b95:>7.2f}")
    print(f"goal: p50 ≤ 60 ms, p95 ≤ 150 ms, ≤ 2× baseline; n={len(own)} queries each, "
          f"fast mode, top_k=10")


async def timed_searches(client: MemoryClient, jobs: list[tuple[str, str]]) -> list[float]:
    for cube, _ in jobs[:10]:  # warm up: reply partition, metadata
        await client.search(cube, "warm up", top_k=10)
    lat: list[float] = []
    for cube, query in jobs:
        t0 = time.perf_counter()
        found = await client.search(cube, query, top_k=10)
        lat.append(time.perf_counter() - t0)
        assert found and all(s.item.metadata.cube_id == cube for s in found)
    return lat


async def client_in_own_process(settings: Settings, bootstrap: str,
                                jobs: list[tuple[str, str]]) -> list[float]:
    """The same searches from a separate process, as an agent calling memstream would."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    request = {"settings": settings.model_dump(mode="json"), "bootstrap": bootstrap,
               "jobs": jobs}
    out, _ = await proc.communicate(json.dumps(request).encode())
    if proc.returncode != 0:
        raise RuntimeError(f"the client process failed with exit code {proc.returncode}")
    return list(json.loads(out.decode().strip().splitlines()[-1]))


async def client_process() -> None:
    request = json.loads(sys.stdin.read())
    settings = Settings.model_validate(request["settings"])
    async with MemoryClient(settings, request["bootstrap"]) as client:
        lat = await timed_searches(client, [tuple(j) for j in request["jobs"]])
    print(json.dumps(lat))


if __name__ == "__main__":
    asyncio.run(client_process() if sys.argv[1:] == ["--client"] else main())
