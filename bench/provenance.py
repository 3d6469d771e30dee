"""``history``, ``explain`` and ``as_of`` of a small cube on a small log and on a large one.

    python bench/provenance.py [--big 3000] [--small 100] [--repeats 5]

On the embedded default (noida-db, FalkorDB, Milvus Lite, the local e5 embedder, ``rules``)
with erasure on (every value sealed with its cube's key, as ``memstream up`` runs it), a
worker in this process ingests ``--small`` memories into cube ``small`` through
``add_memories`` (the add stage: embedding, merge judging, working-memory copies; the
optimizer and scheduler are off to keep the run short), plus a near-duplicate so one of its
memories is added, merged and archived. The calls are timed (1) on that log, then (2) after
cube ``big`` got ``--big`` memories: their nodes and vectors written straight to the stores
(as ``bench/large_cube.py`` does) and, for each, three sealed ``memory.updates`` records
(``added`` with its snapshot, ``linked`` with a ``FOLLOWS`` edge, ``updated``) published to
the log, so the log is many times larger. Each call ``--repeats`` times, median printed:

- the baseline, measured in the same run: reading every record of the topics provenance uses
  up to their ends (what the client did before issue #27, for every call);
- ``memory_history`` and ``explain`` of a memory (with and without the cube), ``as_of`` of
  the cube: the small cube's before and after the big cube arrived, and the big cube's;
- ``get_all`` and a ``dump`` of the big cube (issue #27 point 3: "in seconds").

What must hold: the small cube's calls cost about the same on the large log as on the small
one, while the baseline grows with the log.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import bench_settings  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.history.log_index import INDEXED  # noqa: E402
from memstream.history.provenance import read_log  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import DumpCube, MemoryUpdate  # noqa: E402
from memstream.topics.ids import stable_id  # noqa: E402
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata  # noqa: E402
from memstream.topics.registry import MEMORY_UPDATES  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

THINGS = ["hiking", "jazz", "sushi", "chess", "tea", "yoga", "opera", "sailing", "baking",
          "cycling", "poetry", "pottery", "surfing", "karaoke", "gardening", "climbing"]
PLACES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Hanoi", "Quebec", "Tbilisi", "Perth",
          "Accra", "Quito", "Riga", "Sapporo", "Tunis", "Bergen", "Cusco", "Malmo"]
FRIENDS = ["Ana", "Bo", "Chen", "Dara", "Emil", "Fatou", "Goran", "Hana", "Ivo", "Jun"]


def texts(n: int, seed: int) -> list[str]:
    """Distinct statements (different numbers, names and places: nothing to merge)."""
    out = []
    for i in range(n):
        j = i + seed
        out.append(f"In week {j % 52 + 1} of {2000 + j // 52} I went {THINGS[j % 16]} in "
                   f"{PLACES[(j // 16) % 17]} with {FRIENDS[(j // 7) % 10]} and spent "
                   f"{j * 7 % 500 + 10} euros on item number {j}.")
    return out


async def ingest(client: MemoryClient, cube: str, items: list[str]) -> None:
    token = None
    for start in range(0, len(items), 100):
        token = await client.add_memories(cube, items[start:start + 100])
    assert token is not None
    await client.wait_applied(token, timeout=3600)


async def timed(repeats: int, call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    runs, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = await call()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


async def run(big: int, small: int, repeats: int, data: Path) -> None:
    async with EmbeddedStack(Settings(data_dir=data)) as stack:
        settings = bench_settings(data, "prov", stack.bootstrap, stack.graph_uri)
        settings = settings.model_copy(update={
            "erasure": settings.erasure.model_copy(update={"enabled": True}),
            "reorganize": settings.reorganize.model_copy(update={"enabled": False}),
            "scheduler": settings.scheduler.model_copy(update={"enabled": False})})
        worker = Worker(settings, stack.bootstrap, stack.graph_uri)
        await worker.start()
        try:
            async with MemoryClient(settings, stack.bootstrap) as client:
                t0 = time.perf_counter()
                await ingest(client, "small", texts(small, 100_000))
                twin = "I went hiking in Lisbon with Ana and loved the view."
                await ingest(client, "small", [twin])
                await ingest(client, "small", ["I really went hiking in Lisbon with Ana and "
                                               "loved the view."])
                print(f"ingested {small} + 2 memories into 'small' in "
                      f"{time.perf_counter() - t0:.0f}s", flush=True)
                assert worker.deps is not None
                graph = worker.deps.store.graph
                (archived,) = [n for n in await graph.all_of_type("small", "LongTermMemory",
                                                                  status=None)
                               if n.memory == twin]
                await client.memory_history(archived.id, "small")  # the index caught up
                before = await measure(client, "small", archived.id, repeats)
                t0 = time.perf_counter()
                big_node = await add_big_cube(client, worker, big)
                print(f"wrote {big} memories and ~{3 * big} updates of 'big' in "
                      f"{time.perf_counter() - t0:.0f}s", flush=True)
                t0 = time.perf_counter()
                await client.memory_history(big_node, "big")
                print(f"first call after that (the index catching up): "
                      f"{time.perf_counter() - t0:.2f}s", flush=True)
                after = await measure(client, "small", archived.id, repeats)
                on_big = await measure(client, "big", big_node, repeats)
                actions = [c.update.action for c in
                           await client.memory_history(archived.id, "small")]
                s_all, nodes = await timed(repeats, lambda: client.get_all("big", timeout=60))
                dumps = []
                for i in range(2):
                    t0 = time.perf_counter()
                    token = await client.command(DumpCube(user_id="big", cube_id="big",
                                                          path=str(data / f"dump-{i}.json")))
                    await client.wait_applied(token, timeout=600)
                    dumps.append(time.perf_counter() - t0)
        finally:
            await worker.stop()
    print(f"\nthe small cube's archived memory: {' -> '.join(actions)}")
    print(f"{'':30}{'small, small log':>18}{'small, large log':>18}{'big, large log':>16}")
    for name in before:
        b, a, g = before[name], after[name], on_big[name]
        print(f"{name:30}{b[0] * 1000:>13.0f} ms{a[0] * 1000:>15.0f} ms{g[0] * 1000:>13.0f} ms"
              f"   {b[1]} / {a[1]} / {g[1]}")
    print("small cube, large log / small log: " + ", ".join(
        f"{name} {after[name][0] / before[name][0]:.2f}x" for name in before))
    print(f"get_all of big: {len(nodes)} nodes in {s_all:.2f}s (median of {repeats})")
    print(f"dump of big through the worker: {', '.join(f'{d:.2f}' for d in dumps)} s")


async def measure(client: MemoryClient, cube: str, node: str,
                  repeats: int) -> dict[str, tuple[float, str]]:
    """Median seconds (and a note) of each call, and of the baseline log scan."""
    async def scan() -> int:
        found = await read_log(client, INDEXED, None)
        return sum(len(v) for v in found.values())

    out: dict[str, tuple[float, str]] = {}
    s, n = await timed(repeats, scan)
    out["baseline: read the whole log"] = (s, f"{n} records")
    now = datetime.now(UTC)
    s, h = await timed(repeats, lambda: client.memory_history(node, cube))
    out["history (--cube)"] = (s, f"{len(h)} changes")
    s, h = await timed(repeats, lambda: client.memory_history(node))
    out["history (no cube)"] = (s, f"{len(h)}")
    s, e = await timed(repeats, lambda: client.explain(node, cube))
    out["explain (--cube)"] = (s, f"{len(e.sources)} src, {len(e.lineage)} lineage")
    s, e = await timed(repeats, lambda: client.explain(node))
    out["explain (no cube)"] = (s, f"{len(e.sources)} src")
    s, held = await timed(repeats, lambda: client.as_of(cube, now))
    out["as_of"] = (s, f"{len(held)} memories")
    return out


async def add_big_cube(client: MemoryClient, worker: Worker, n: int) -> str:
    """``n`` memories of cube ``big``: stored with random unit vectors, and announced on
    ``memory.updates`` (sealed, as every producer writes) three times each."""
    assert worker.deps is not None
    rng = np.random.default_rng(7)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    nodes = [MemoryItem(id=stable_id("bench-prov", i), memory=text, metadata=MemoryMetadata(
        user_id="big", cube_id="big", memory_type="LongTermMemory",
        created_at=base + timedelta(seconds=i), updated_at=base + timedelta(seconds=i)))
        for i, text in enumerate(texts(n, 0))]
    vectors = rng.normal(size=(n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for start in range(0, n, 500):
        await worker.deps.store.write([(node, v.tolist()) for node, v in zip(
            nodes[start:start + 500], vectors[start:start + 500], strict=True)])
    updates: list[MemoryUpdate] = []
    for i, node in enumerate(nodes):
        common: dict[str, Any] = {"user_id": "big", "cube_id": "big", "stage": "bench",
                                  "node_id": node.id}
        updates.append(MemoryUpdate(action="added", node=node, **common))
        if i:
            updates.append(MemoryUpdate(action="linked", edges=(Edge(
                source=nodes[i - 1].id, target=node.id, type="FOLLOWS"),), **common))
        updates.append(MemoryUpdate(action="updated", node=node, **common))
    for start in range(0, len(updates), 200):
        await asyncio.gather(*(client.publish(MEMORY_UPDATES, u)
                               for u in updates[start:start + 200]))
    return nodes[n // 2].id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=3000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="ms-prov-") as tmp:
        asyncio.run(run(args.big, args.small, args.repeats, Path(tmp)))


if __name__ == "__main__":
    main()
