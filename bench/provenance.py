"""``history``, ``explain`` and ``as_of`` on a large cube next to a small one, on sealed records.

    python bench/provenance.py [--big 3000] [--small 100] [--repeats 5]

On the embedded default (noida-db, FalkorDB, Milvus Lite, the local e5 embedder, ``rules``)
with erasure on (every value sealed with its cube's key, as ``memstream up`` runs it), a
worker in this process ingests ``--big`` memories into cube ``big`` and ``--small`` into cube
``small`` through ``add_memories`` (the add stage: embedding, merge judging, working-memory
copies; the optimizer and scheduler are off to keep the run short), plus a near-duplicate in
``small`` so one of its memories is added, merged and archived. Then, each ``--repeats``
times (median printed):

- the baseline, measured in the same run: reading every record of the topics provenance uses
  up to their ends (what the client did before issue #27, for every call);
- ``memory_history`` and ``explain`` of a memory of each cube (with and without the cube),
  and ``as_of`` of each cube;
- ``get_all`` and a ``dump`` of the big cube (issue #27 point 3: "in seconds").

The small cube's calls must not follow the log's size: their ratio to the baseline is
printed, and the big cube's calls next to them.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import bench_settings  # noqa: E402

from memstream.stack import EmbeddedStack  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.client import MemoryClient  # noqa: E402
from memstream.topics.events import DumpCube  # noqa: E402
from memstream.topics.log_index import INDEXED  # noqa: E402
from memstream.topics.provenance import read_log  # noqa: E402
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
                await ingest(client, "big", texts(big, 0))
                twin = "I went hiking in Lisbon with Ana and loved the view."
                await ingest(client, "small", [twin])
                await ingest(client, "small", ["I really went hiking in Lisbon with Ana and "
                                               "loved the view."])
                print(f"ingested {big} + {small} + 2 memories in "
                      f"{time.perf_counter() - t0:.0f}s", flush=True)
                await report(client, worker, repeats, data, twin)
        finally:
            await worker.stop()


async def report(client: MemoryClient, worker: Worker, repeats: int, data: Path,
                 twin: str) -> None:
    graph = worker.deps.store.graph if worker.deps is not None else None
    assert graph is not None
    counts = {c: sum((await graph.count_by_type(c, status=None)).values())
              for c in ("big", "small")}
    small_nodes = await graph.all_of_type("small", "LongTermMemory", status=None)
    (archived,) = [n for n in small_nodes if n.memory == twin]
    big_node = (await graph.all_of_type("big", "LongTermMemory"))[len(small_nodes) // 2]
    t0 = time.perf_counter()
    await client.memory_history(archived.id, "small")  # waits for the index to catch up
    print(f"first call (index catching up): {time.perf_counter() - t0:.2f}s")

    async def scan() -> int:
        found = await read_log(client, INDEXED, "small")
        return sum(len(v) for v in found.values())

    base_s, small_records = await timed(repeats, scan)
    every = await read_log(client, INDEXED, None)
    log_records = sum(len(v) for v in every.values())
    now = datetime.now(UTC)
    rows: list[tuple[str, float, str]] = []
    for cube, node in (("small", archived.id), ("big", big_node.id)):
        s, h = await timed(repeats, lambda n=node, c=cube: client.memory_history(n, c))
        rows.append((f"history {cube} (--cube)", s, f"{len(h)} changes"))
        s, h = await timed(repeats, lambda n=node: client.memory_history(n))
        rows.append((f"history {cube} (no cube)", s, f"{len(h)} changes"))
        s, e = await timed(repeats, lambda n=node, c=cube: client.explain(n, c))
        rows.append((f"explain {cube} (--cube)", s, f"{len(e.sources)} sources, "
                     f"{len(e.lineage)} lineage"))
        s, e = await timed(repeats, lambda n=node: client.explain(n))
        rows.append((f"explain {cube} (no cube)", s, ""))
        s, held = await timed(repeats, lambda c=cube: client.as_of(c, now))
        rows.append((f"as_of {cube}", s, f"{len(held)} memories"))
    history = await client.memory_history(archived.id, "small")
    actions = [c.update.action for c in history]

    s_all, nodes = await timed(repeats, lambda: client.get_all("big", timeout=60))
    dumps = []
    for i in range(2):
        t0 = time.perf_counter()
        token = await client.command(DumpCube(user_id="big", cube_id="big",
                                              path=str(data / f"dump-{i}.json")))
        await client.wait_applied(token, timeout=600)
        dumps.append(time.perf_counter() - t0)

    print(f"\ncubes: big {counts['big']} nodes, small {counts['small']} nodes (working-memory "
          f"copies and episodes included); the log: {log_records} records in the indexed "
          f"topics, {small_records} of them the small cube's")
    print(f"small cube's archived memory: {' → '.join(actions)}")
    print(f"baseline, reading the whole log (old client, every call): {base_s * 1000:.0f} ms")
    print(f"{'call':28} {'median':>9} {'× baseline':>11}")
    for name, s, note in rows:
        print(f"{name:28} {s * 1000:7.0f} ms {s / base_s:10.2f}×  {note}")
    by = {name: s for name, s, _ in rows}
    for what in ("history", "explain", "as_of"):
        key = " (--cube)" if what != "as_of" else ""
        print(f"{what}: big / small = {by[f'{what} big{key}'] / by[f'{what} small{key}']:.1f}×")
    print(f"get_all of big: {len(nodes)} nodes in {s_all:.2f}s (median of {repeats})")
    print(f"dump of big through the worker: {', '.join(f'{d:.2f}' for d in dumps)} s")


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
