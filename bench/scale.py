"""Scale-out: one worker vs two sharing one broker, FalkorDB and a Milvus standalone server.

    python bench/scale.py [--chunks 120] [--cubes 8] [--partitions 4]

Starts the embedded broker and FalkorDB, and a real Milvus 2.3 standalone server (the
``milvus`` package's ``milvus-server``, as tests/support/milvus_fixtures.py does), all
under a temporary directory. Each round has its own topics, graph and collection; the
workers are ``memstream worker`` processes (bench/load.py's ``WorkerProcess``) in one
consumer group.

1. one worker: publish ``--chunks`` conversation chunks (bench/ingest.py's three-message
   chunks) over ``--cubes`` cubes at once, wait until every cube's last chunk is applied:
   chunks/s and memories/s;
2. two workers: the same load;
3. takeover: two workers, the load published, and once both are consuming one is stopped
   (SIGTERM, or SIGKILL with ``--kill``): the seconds until every ingestion partition
   (``conversations``, ``memory.items``) that held records not yet committed gets a commit
   again (from the other worker), and the seconds until the whole load is applied. Every
   round compares each cube's stored facts with the one-worker round (nothing lost,
   nothing twice; the rules extraction is deterministic).

On a 2-core machine two workers share the same cores, so the second does not double the
throughput; the rounds show what sharing costs and how fast partitions move.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest import chunk_messages  # noqa: E402
from load import WorkerProcess, bench_settings, group_offsets, stored_memories  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.local.milvus_server import MilvusServer  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.topics.events import WriteToken  # noqa: E402
from memstream.topics.registry import CONVERSATIONS, MEMORY_ITEMS  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402


@dataclass
class Round:
    label: str
    seconds: float
    memories: int
    per_cube: dict[str, int]
    takeover_s: float | None = None


def cubes_of(n: int) -> list[str]:
    return [f"scale{c}" for c in range(n)]


async def publish(client: MemoryClient, chunks: int, cubes: list[str]) -> dict[str, WriteToken]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    last: dict[str, WriteToken] = {}
    for i in range(chunks):
        cube = cubes[i % len(cubes)]
        last[cube] = await client.add_messages(cube, chunk_messages(i, base))
    return last


async def per_cube(settings: Settings, graph_uri: str, cubes: list[str]) -> dict[str, int]:
    return {c: await stored_memories(settings, graph_uri, [c]) for c in cubes}


async def run_round(label: str, data: Path, bootstrap: str, graph_uri: str, milvus_uri: str,
                    args: argparse.Namespace, workers: int, stop_one: int | None = None,
                    ) -> Round:
    settings = bench_settings(data, label, bootstrap, graph_uri)
    settings = settings.model_copy(update={
        "vector": settings.vector.model_copy(update={"uri": milvus_uri}),
        "kafka": settings.kafka.model_copy(update={"partitions": args.partitions}),
    })
    env = {"MEMSTREAM_KAFKA__PARTITIONS": str(args.partitions)}
    procs = [WorkerProcess(settings.model_copy(update={"data_dir": settings.data_dir / f"w{i}"}),
                           data / f"{label}-worker{i}.log", env) for i in range(workers)]
    cubes = cubes_of(args.cubes)
    takeover: float | None = None
    try:
        for proc in procs:  # one after the other: each start loads the embedding model
            await proc.start()
        async with MemoryClient(settings, bootstrap) as client, \
                group_offsets(settings, bootstrap) as read:
            await asyncio.sleep(3)  # let the group settle on its members
            t0 = time.perf_counter()
            last = await publish(client, args.chunks, cubes)
            if stop_one is not None:
                await asyncio.sleep(args.stop_after)  # both consuming, records still pending
                before = await read()
                ingest = {CONVERSATIONS.name(settings), MEMORY_ITEMS.name(settings)}
                pending = {tp: c for tp, (c, e) in before.items() if e > c and tp[0] in ingest}
                t_stop = time.perf_counter()
                await procs[1].stop(stop_one)
                while pending:
                    now = await read()
                    pending = {tp: c for tp, c in pending.items() if now[tp][0] == c}
                    if time.perf_counter() - t_stop > 600:
                        raise TimeoutError(f"partitions {sorted(pending)} got no commit in 600s")
                    await asyncio.sleep(0.2)
                takeover = time.perf_counter() - t_stop
            for token in last.values():
                await client.wait_applied(token, timeout=3600)
            elapsed = time.perf_counter() - t0
    finally:
        for proc in procs:
            await proc.stop()
    counts = await per_cube(settings, graph_uri, cubes)
    return Round(label, elapsed, sum(counts.values()), counts, takeover)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=120)
    parser.add_argument("--cubes", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--stop-after", type=float, default=5.0,
                        help="seconds after publishing before one worker is stopped")
    parser.add_argument("--kill", action="store_true",
                        help="stop the worker with SIGKILL instead of SIGTERM")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="ms-scale-") as tmp:
        data = Path(tmp)
        milvus = MilvusServer(data / "milvus", startup_timeout_s=300, stop_timeout_s=20)
        t = time.perf_counter()
        milvus_uri = milvus.start()
        print(f"Milvus standalone at {milvus_uri} (ready in {time.perf_counter() - t:.0f}s)",
              flush=True)
        try:
            async with EmbeddedStack(Settings(data_dir=data)) as stack:
                b, g = stack.bootstrap, stack.graph_uri
                rounds = []
                for label, n, stop in (("one", 1, None), ("two", 2, None),
                                       ("takeover", 2,
                                        signal.SIGKILL if args.kill else signal.SIGTERM)):
                    r = await run_round(label, data, b, g, milvus_uri, args, n, stop)
                    print(f"round {label}: {r.seconds:.1f}s, {r.memories} memories", flush=True)
                    rounds.append(r)
        finally:
            with contextlib.suppress(Exception):
                milvus.stop()
    base = rounds[0]
    print(f"\n{args.chunks} chunks × 3 messages over {args.cubes} cubes, "
          f"{args.partitions} partitions per topic; vectors on the Milvus server")
    print(f"{'round':<34}{'seconds':>9}{'chunks/s':>10}{'memories':>10}{'memories/s':>12}")
    names = {"one": "one worker", "two": "two workers",
             "takeover": f"two, one {'killed' if args.kill else 'stopped'} mid-stream"}
    for r in rounds:
        print(f"{names[r.label]:<34}{r.seconds:>9.1f}{args.chunks / r.seconds:>10.2f}"
              f"{r.memories:>10}{r.memories / r.seconds:>12.2f}")
    print(f"two workers / one: {base.seconds / rounds[1].seconds:.2f}× throughput")
    taken = rounds[2].takeover_s
    print(f"takeover: every ingestion partition with pending records got a commit again "
          f"{taken:.1f}s after the stop")
    for r in rounds[1:]:
        diff = {c: (base.per_cube[c], n) for c, n in r.per_cube.items() if n != base.per_cube[c]}
        print(f"{names[r.label]}: "
              + ("same memories per cube as one worker" if not diff else
                 f"per cube (one worker, this round) differ: {diff}"))


if __name__ == "__main__":
    asyncio.run(main())
