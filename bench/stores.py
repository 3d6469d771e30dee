"""Store benchmarks on the embedded stores, each next to a baseline measured in the same run.

    python bench/stores.py [--quick]

1. Graph (FalkorDB started by the launcher): batch insert of 10k nodes through
   ``FalkorDBGraphStore.upsert_nodes``; 2-hop ``subgraph`` p50/p95 next to a
   pure-Python adjacency-dict BFS over the same nodes and edges.
2. Vectors (Milvus Lite in a temporary directory): 50 cubes x 2,000 random unit
   vectors (dim 384); search within one cube with cube + type + status filters,
   next to numpy exact top-k over that cube and over all 100k, for index types
   FLAT / HNSW and cube scoping by partition per cube / partition key / filter only.
   Recall@10 against the exact filtered top-10 is reported for each.
3. ``MemoryStore.search`` (vector search joined with graph nodes) on the default layout.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstream.local.falkordb import FalkorDBServer  # noqa: E402
from memstream.sinks.graph.falkordb import FalkorDBGraphStore  # noqa: E402
from memstream.sinks.memory_store import MemoryStore  # noqa: E402
from memstream.sinks.ports import VectorQuery, VectorRecord  # noqa: E402
from memstream.sinks.vector.milvus import MilvusVectorStore, Partitioning  # noqa: E402
from memstream.sinks.vector.schema import IndexType  # noqa: E402
from memstream.topics.models import MEMORY_TYPES, Edge, MemoryItem, MemoryMetadata, MemoryType  # noqa: E402

DIM = 384
T0 = datetime(2025, 1, 1, tzinfo=UTC)
SEARCH_TYPES: list[MemoryType] = ["LongTermMemory", "UserMemory"]


@dataclass(frozen=True)
class Scale:
    graph_nodes: int
    edges_per_node: int
    cubes: int
    per_cube: int
    queries: int
    configs: tuple[tuple[IndexType, Partitioning], ...]


FULL = Scale(10_000, 3, 50, 2_000, 200, (
    ("FLAT", "cube"), ("FLAT", "none"), ("FLAT", "key"), ("HNSW", "cube"), ("HNSW", "none"),
))  # fmt: skip
QUICK = Scale(2_000, 3, 10, 500, 40, (("FLAT", "cube"), ("FLAT", "none")))


@dataclass
class Row:
    name: str
    p50_ms: float
    p95_ms: float
    baseline: str = ""
    base_p50_ms: float | None = None
    note: str = ""


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def timed(fn: Callable[[int], Awaitable[object]], n: int, warmup: int = 5) -> list[float]:
    for i in range(warmup):
        await fn(i)
    out = []
    for i in range(n):
        start = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - start)
    return out


def sync_timed(fn: Callable[[int], object], n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


def node(node_id: str, cube: str, i: int) -> MemoryItem:
    return MemoryItem(
        id=node_id,
        memory=f"memory {i}: the user mentioned topic {i % 97} on day {i % 365}",
        metadata=MemoryMetadata(
            user_id="bench",
            cube_id=cube,
            memory_type=MEMORY_TYPES[i % 3],
            status="archived" if i % 10 == 0 else "activated",
            tags=(f"t{i % 50}", f"t{i % 7}"),
            key=f"key {i}",
            created_at=T0,
            updated_at=T0 + timedelta(seconds=i),
        ),
    )


# -- graph -----------------------------------------------------------------------------


async def bench_graph(scale: Scale, graph: FalkorDBGraphStore, rows: list[Row]) -> None:
    cube = "graph-bench"
    rng = np.random.default_rng(1)
    nodes = [node(f"g{i}", cube, i) for i in range(scale.graph_nodes)]
    start = time.perf_counter()
    await graph.upsert_nodes(cube, nodes)
    insert_s = time.perf_counter() - start
    rows.append(Row(f"graph insert {len(nodes):,} nodes", insert_s * 1000, insert_s * 1000,
                    note=f"{len(nodes) / insert_s:,.0f} nodes/s"))  # fmt: skip
    n = len(nodes)
    edges = [
        Edge(source=f"g{i}", target=f"g{int(j)}", type="RELATE_TO")
        for i in range(n)
        for j in rng.choice(n, scale.edges_per_node, replace=False)
        if int(j) != i
    ]
    start = time.perf_counter()
    await graph.add_edges(cube, edges)
    edge_s = time.perf_counter() - start
    rows.append(Row(f"graph add {len(edges):,} edges", edge_s * 1000, edge_s * 1000,
                    note=f"{len(edges) / edge_s:,.0f} edges/s"))  # fmt: skip

    by_id = {x.id: x for x in nodes}
    adj: dict[str, list[Edge]] = {x.id: [] for x in nodes}
    for e in edges:
        adj[e.source].append(e)
        adj[e.target].append(e)

    def bfs(center: str, depth: int = 2) -> tuple[list[MemoryItem], set[Edge]]:
        seen, frontier, found = {center}, [center], set()
        for _ in range(depth):
            nxt = []
            for nid in frontier:
                for e in adj[nid]:
                    found.add(e)
                    other = e.target if e.source == nid else e.source
                    if other not in seen:
                        seen.add(other)
                        nxt.append(other)
            frontier = nxt
        return [by_id[i] for i in seen], found  # edges on paths of <= depth hops

    activated = [x.id for x in nodes if x.metadata.status == "activated"]
    centers = [str(c) for c in rng.choice(activated, scale.queries, replace=False)]
    sizes = []

    async def sub(i: int) -> None:
        result = await graph.subgraph(cube, centers[i % len(centers)], depth=2)
        sizes.append(len(result.nodes))

    samples = await timed(sub, len(centers))
    base = sync_timed(lambda i: bfs(centers[i]), len(centers))
    rows.append(Row("graph 2-hop subgraph", pct(samples, .5), pct(samples, .95),
                    "python dict BFS", pct(base, .5),
                    note=f"~{statistics.mean(sizes):.0f} nodes/subgraph"))  # fmt: skip


# -- vectors ---------------------------------------------------------------------------


def make_vectors(scale: Scale) -> np.ndarray:
    v = np.random.default_rng(2).standard_normal((scale.cubes * scale.per_cube, DIM))
    unit: np.ndarray = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return unit


def record(vectors: np.ndarray, scale: Scale, idx: int) -> VectorRecord:
    cube, i = divmod(idx, scale.per_cube)
    return VectorRecord(
        id=f"c{cube}-{i}", cube_id=f"cube{cube}", user_id="bench",
        memory_type=MEMORY_TYPES[i % 3], status="archived" if i % 10 == 0 else "activated",
        vector=vectors[idx], updated_at=(T0 + timedelta(seconds=i)).isoformat(),
    )  # fmt: skip


async def load(store: MilvusVectorStore, vectors: np.ndarray, scale: Scale) -> float:
    start = time.perf_counter()
    for cube in range(scale.cubes):
        lo = cube * scale.per_cube
        await store.upsert([record(vectors, scale, j) for j in range(lo, lo + scale.per_cube)])
        if (cube + 1) % max(1, scale.cubes // 5) == 0:
            done = (cube + 1) * scale.per_cube
            print(f"    loaded {done:,} vectors ({time.perf_counter() - start:.1f} s)", flush=True)
    await store.flush()
    return time.perf_counter() - start


def exact(
    vectors: np.ndarray, mask: np.ndarray, query: np.ndarray, k: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    scores = vectors @ query
    scores = np.where(mask, scores, -np.inf)
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])], scores


async def bench_vectors(
    scale: Scale, tmp: Path, graph: FalkorDBGraphStore, rows: list[Row]
) -> None:
    vectors = make_vectors(scale)
    n = len(vectors)
    i_in_cube = np.arange(n) % scale.per_cube
    filt = (i_in_cube % 3 != 0) & (i_in_cube % 10 != 0)  # LT/UM (not Working), activated
    cube_of = np.arange(n) // scale.per_cube
    queries = np.random.default_rng(3).standard_normal((scale.queries, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    target = [q % scale.cubes for q in range(scale.queries)]
    slices = [vectors[c * scale.per_cube : (c + 1) * scale.per_cube] for c in range(scale.cubes)]
    slice_mask = filt[: scale.per_cube]
    truth = [
        {f"c{target[q]}-{int(j)}" for j in exact(slices[target[q]], slice_mask, queries[q])[0]}
        for q in range(scale.queries)
    ]
    base_cube = sync_timed(
        lambda q: exact(slices[target[q]], slice_mask, queries[q]), scale.queries
    )
    base_all = sync_timed(
        lambda q: exact(vectors, filt & (cube_of == target[q]), queries[q]), scale.queries
    )
    rows.append(Row(f"numpy exact top-10, one cube ({scale.per_cube:,})",
                    pct(base_cube, .5), pct(base_cube, .95)))  # fmt: skip
    rows.append(Row(f"numpy exact top-10, all {n:,}", pct(base_all, 0.5), pct(base_all, 0.95)))

    for index_type, partitioning in scale.configs:
        name = f"{index_type}-{partitioning}"
        print(f"  milvus lite {name}: loading {n:,} x {DIM}", flush=True)
        store = MilvusVectorStore(str(tmp / f"{name}.db"), "bench", DIM, index_type=index_type,
                                  partitioning=partitioning)  # fmt: skip
        load_s = await load(store, vectors, scale)
        recalls: list[float] = []

        async def search(
            q: int, store: MilvusVectorStore = store, recalls: list[float] = recalls
        ) -> None:
            query = VectorQuery(queries[q].tolist(), 10, SEARCH_TYPES)
            hits = await store.search(f"cube{target[q]}", query)
            recalls.append(len({h.id for h in hits} & truth[q]) / 10)

        samples = await timed(search, scale.queries, warmup=0)
        rows.append(Row(f"milvus lite search {name}", pct(samples, .5), pct(samples, .95),
                        "numpy one cube", pct(base_cube, .5),
                        note=f"recall@10 {statistics.mean(recalls):.3f}; "
                        f"load {n / load_s:,.0f} vec/s"))  # fmt: skip
        if (index_type, partitioning) == scale.configs[0]:
            await bench_memory_store(scale, store, graph, vectors, queries, rows)
        await store.drop()
        await store.close()
        gc.collect()


async def bench_memory_store(
    scale: Scale,
    vectors_store: MilvusVectorStore,
    graph: FalkorDBGraphStore,
    vectors: np.ndarray,
    queries: np.ndarray,
    rows: list[Row],
) -> None:
    """Vector search + graph join for one cube whose nodes are also in the graph."""
    await graph.upsert_nodes("cube0", [node(f"c0-{i}", "cube0", i) for i in range(scale.per_cube)])
    store = MemoryStore(graph, vectors_store)

    async def search(q: int) -> None:
        await store.search("cube0", VectorQuery(queries[q].tolist(), 10, SEARCH_TYPES))

    samples = await timed(search, scale.queries)
    vec_only = await timed(
        lambda q: vectors_store.search("cube0", VectorQuery(queries[q].tolist(), 10, SEARCH_TYPES)),
        scale.queries,
    )
    rows.append(Row("MemoryStore.search (vector + graph join)", pct(samples, .5), pct(samples, .95),
                    "vector search alone", pct(vec_only, .5)))  # fmt: skip


def print_table(rows: list[Row]) -> None:
    print()
    head = (
        f"{'measurement':44} {'p50 ms':>9} {'p95 ms':>9}  "
        f"{'baseline':22} {'base p50':>9} {'ratio':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        base = f"{r.base_p50_ms:9.3f}" if r.base_p50_ms is not None else " " * 9
        ratio = f"{r.p50_ms / r.base_p50_ms:7.1f}x" if r.base_p50_ms else " " * 8
        print(
            f"{r.name:44} {r.p50_ms:9.2f} {r.p95_ms:9.2f}  {r.baseline:22} {base} {ratio}  {r.note}"
        )


async def main(quick: bool) -> None:
    scale = QUICK if quick else FULL
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="memstream-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        async with FalkorDBServer(tmp / "falkordb") as server:
            graph = FalkorDBGraphStore(server.uri, "bench")
            await graph.ensure_schema()
            print(f"graph: FalkorDB at {server.uri}", flush=True)
            await bench_graph(scale, graph, rows)
            print("vectors: Milvus Lite in", tmp, flush=True)
            await bench_vectors(scale, tmp, graph, rows)
            await graph.close()
    print_table(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small scale, two configs")
    asyncio.run(main(parser.parse_args().quick))
