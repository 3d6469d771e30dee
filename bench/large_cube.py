"""``get_all`` of one large cube through a worker, next to the same read in-process.

    python bench/large_cube.py [--nodes 10000]

On the embedded default (noida-db, FalkorDB, Milvus Lite), one cube gets ``--nodes`` memories
written straight through ``MemoryStore`` (the add stage's one consistency unit; random unit
vectors, since ``get_all`` reads no vectors). Then, in this order:

1. in-process: every activated node of the cube read page by page (``page_of_types``, as the
   worker's request lane does, pages of ``limits.page_nodes``), no Kafka; and the cube dumped
   to a file (``dump_cube``: nodes, edges and vectors);
2. through Kafka: ``memstream worker`` in its own process, and ``MemoryClient.get_all`` from
   this one, page after page (replies stay under the broker's limit), three times; the
   first page alone, ten times; and a ``DumpCube`` command (what ``memstream dump`` sends),
   timed from publishing to the worker's commit past it, twice.

Prints the seconds of each, the pages and the ratios. Issue #15's goal: ``get_all`` and
``dump`` of a cube of 10,000 nodes answer in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import WorkerProcess, bench_settings  # noqa: E402
from search import make_nodes, settle_graph  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.sinks.dump import dump_cube  # noqa: E402
from memstream.streams.runtime.stage import Deps  # noqa: E402
from memstream.streams.search.paging import page_of_types  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import DumpCube  # noqa: E402
from memstream.topics.models import MEMORY_TYPES  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

CUBE = "big"


async def in_process_read(deps: Deps, page: int) -> tuple[int, int]:
    """Every activated node of the cube, ``page`` at a time: (nodes, pages)."""
    got, pages, offset = 0, 0, 0
    while True:
        nodes, total = await page_of_types(deps, CUBE, list(MEMORY_TYPES), "activated", offset,
                                           page)
        got, pages, offset = got + len(nodes), pages + 1, offset + len(nodes)
        if not nodes or offset >= total:
            return got, pages


async def run(n: int, data: Path) -> None:
    async with EmbeddedStack(Settings(data_dir=data)) as stack:
        settings = bench_settings(data, "big", stack.bootstrap, stack.graph_uri)
        page = settings.limits.page_nodes
        worker = Worker(settings, stack.bootstrap, stack.graph_uri)
        deps = await worker.open_deps()
        rng = np.random.default_rng(7)
        texts = [f"The user noted item {i}: a {('red', 'green', 'blue')[i % 3]} thing "
                 f"kept in box {i % 97} since week {i % 52}." for i in range(n)]
        nodes = make_nodes(CUBE, texts)
        vectors = rng.normal(size=(n, deps.embedder.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        t0 = time.perf_counter()
        for start in range(0, n, 1000):
            await deps.store.write([(node, v.tolist()) for node, v in
                                    zip(nodes[start:start + 1000], vectors[start:start + 1000],
                                        strict=True)])
        print(f"wrote {n} nodes to cube {CUBE!r} in {time.perf_counter() - t0:.1f}s", flush=True)
        await settle_graph(stack.graph_uri)
        t0 = time.perf_counter()
        got, pages = await in_process_read(deps, page)
        local_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        local_dump = await dump_cube(deps.store, CUBE, data / "local-dump.json")
        local_dump_s = time.perf_counter() - t0
        await worker.stop()  # Milvus Lite's file is the worker process's from here on

        proc = WorkerProcess(settings, data / "worker.log")
        await proc.start()
        try:
            async with MemoryClient(settings, stack.bootstrap) as client:
                await client.get_all_page(CUBE, limit=1)  # the reply partition, warmed
                runs = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    everything = await client.get_all(CUBE, timeout=60)
                    runs.append(time.perf_counter() - t0)
                firsts = []
                for _ in range(10):
                    t0 = time.perf_counter()
                    first = await client.get_all_page(CUBE, limit=page)
                    firsts.append(time.perf_counter() - t0)
                dumps = []
                for n_dump in range(2):
                    target = data / f"kafka-dump-{n_dump}.json"
                    t0 = time.perf_counter()
                    token = await client.command(DumpCube(user_id=CUBE, cube_id=CUBE,
                                                          path=str(target)))
                    await client.wait_applied(token, timeout=600)
                    dumps.append(time.perf_counter() - t0)
                    if (failure := await client.command_failure(token)) is not None:
                        raise SystemExit(f"dump failed: {failure}")
                dumped = json.loads(target.read_bytes())
        finally:
            await proc.stop()
    kafka_s = statistics.median(runs)
    print(f"\nin-process read ({pages} pages of {page}): {got} nodes in {local_s:.2f}s")
    print(f"get_all through Kafka: {len(everything)} nodes (total {first.total}) in "
          f"{', '.join(f'{r:.2f}' for r in runs)} s (median {kafka_s:.2f}s, "
          f"{kafka_s / local_s:.1f}× the in-process read)")
    print(f"first page alone ({len(first.nodes)} nodes, next_offset {first.next_offset}): "
          f"median {statistics.median(firsts) * 1000:.0f} ms, max {max(firsts) * 1000:.0f} ms")
    dump_s = statistics.median(dumps)
    print(f"dump in-process: {len(local_dump.nodes)} nodes, {len(local_dump.vectors)} vectors "
          f"in {local_dump_s:.2f}s")
    print(f"dump through Kafka: {len(dumped['nodes'])} nodes, {len(dumped['vectors'])} vectors "
          f"in {', '.join(f'{r:.2f}' for r in dumps)} s ({dump_s / local_dump_s:.1f}× in-process)")
    if len(everything) != n or got != n:
        print(f"MISMATCH: wrote {n}, read {got} in-process and {len(everything)} through Kafka")
        raise SystemExit(1)
    if len(dumped["nodes"]) != n or len(dumped["vectors"]) != n:
        print(f"MISMATCH: wrote {n}, the worker dumped {len(dumped['nodes'])} nodes and "
              f"{len(dumped['vectors'])} vectors")
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="ms-big-") as tmp:
        asyncio.run(run(args.nodes, Path(tmp)))


if __name__ == "__main__":
    main()
