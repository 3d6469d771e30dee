"""Filling bench/tenancy.py's stores, and keeping a filled stack for the next run.

The cubes go straight through ``MemoryStore.write`` (graph, then vectors), as the add stage
writes them, not through the pipeline. One thread builds the cubes' nodes, ahead of the
writers: built on the event loop, a cube of 18,000 memories held it for seconds on a busy
machine, and the other writers' FalkorDB calls timed out waiting for their replies (5 s,
redis-py's default), every fill's first minute. Each write takes at most ``rows_per_write``
nodes, so one that fails is retried alone and one call holds neither store for long.

A filled stack is kept with ``--keep DIR``: ``DIR/filled.json`` records the shape it was
filled with and what the filling run measured, and a later run with the same shape starts
on those stores instead of filling them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tenancy_data import CubeData, CubePlan, PoolChunk, cube_data, pool_texts

from memstream.sinks.graph.factory import create_graph_store
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.vector.milvus import MilvusVectorStore
from memstream.streams.embed.local import LOCAL_DIM, LocalEmbedder
from memstream.topics.settings import Settings

T = TypeVar("T")
FILLED = "filled.json"


async def pool_vectors(pool: list[PoolChunk], cache: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """Episode and statement vectors of the pool (passages, as the add stage embeds them),
    from ``cache`` when it holds the same texts."""
    episodes, facts = pool_texts(pool)
    digest = hashlib.sha256("\x1e".join(episodes + facts).encode()).hexdigest()
    if cache is not None and cache.exists():
        saved = np.load(cache)
        if str(saved["digest"]) == digest:
            return saved["episodes"], saved["facts"]
    embedder = LocalEmbedder()
    t0 = time.perf_counter()
    ep = np.asarray(await embedder.embed_passages(episodes), dtype=np.float32)
    fa = np.asarray(await embedder.embed_passages(facts), dtype=np.float32)
    print(f"embedded the pool ({len(episodes)} episodes, {len(facts)} statements) in "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    if cache is not None:
        np.savez(cache, digest=digest, episodes=ep, facts=fa)
    return ep, fa


def slices(rows: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


async def fill(settings: Settings, graph_uri: str, plans: list[CubePlan], pool: list[PoolChunk],
               ep: np.ndarray, fa: np.ndarray, concurrency: int, rows_per_write: int) -> float:
    """Every cube written through ``MemoryStore`` (``concurrency`` cubes at once, at most
    ``rows_per_write`` nodes a write, its provenance edges after its nodes); returns the
    seconds, flush, indexing and the graph's snapshot included."""
    graph = create_graph_store(settings, graph_uri)
    # one flush at the end instead of the adapter's flush every 1,000 rows: a fill of 1M rows
    # would otherwise leave a thousand small segments for the server to compact
    vectors = MilvusVectorStore(settings.milvus_uri, settings.vector.collection, LOCAL_DIM,
                                flush_after_rows=2**62)
    store = MemoryStore(graph, vectors)
    await graph.ensure_schema()
    await vectors.ensure_collection()
    t0 = time.perf_counter()
    written = 0
    queue: asyncio.Queue[tuple[CubePlan, CubeData] | None] = asyncio.Queue(maxsize=concurrency)

    async def writer() -> None:
        nonlocal written
        while (item := await queue.get()) is not None:
            plan, data = item
            for part in slices(data.rows, rows_per_write):
                await store.write([(node, vec.tolist()) for node, vec in part])
                written += len(part)
            for edges in slices(data.edges, rows_per_write):
                await store.add_edges(plan.cube, edges)

    async def progress() -> None:
        while True:
            await asyncio.sleep(30)
            rate = written / (time.perf_counter() - t0)
            print(f"  … {written:,} memories in {time.perf_counter() - t0:.0f}s "
                  f"({rate:,.0f}/s)", flush=True)

    workers = [asyncio.create_task(writer()) for _ in range(concurrency)]
    ticker = asyncio.create_task(progress())
    try:
        for plan in plans:  # built off the event loop, one cube at a time, ahead of the writers
            await queue.put((plan, await asyncio.to_thread(cube_data, plan, pool, ep, fa)))
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    finally:
        ticker.cancel()
        for task in workers:
            task.cancel()
    write_s = time.perf_counter() - t0
    await vectors.flush()
    await indexed(settings.milvus_uri, settings.vector.collection)
    await graph.close()
    await vectors.close()
    await saved(graph_uri)
    total = time.perf_counter() - t0
    print(f"filled {written:,} memories in {total:.0f}s ({write_s:.0f}s writing, "
          f"{total - write_s:.0f}s flush, index and graph save)", flush=True)
    return total


async def saved(uri: str, timeout_s: float = 3600) -> None:
    """FalkorDB's snapshot of the filled graph written, in the background (``BGSAVE``: a
    ``SAVE`` of a million nodes outlasts the client's socket timeout), and no snapshot or
    log rewrite left running, so that the fill's aftermath is not timed as search."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(uri, socket_timeout=None)

    async def busy() -> bool:
        info = await client.info("persistence")
        return bool(info.get("rdb_bgsave_in_progress") or info.get("aof_rewrite_in_progress"))

    try:
        deadline = time.monotonic() + timeout_s
        while await busy() and time.monotonic() < deadline:
            await asyncio.sleep(1)
        with contextlib.suppress(redis.ResponseError):  # one started meanwhile: waited for
            await client.bgsave()
        await asyncio.sleep(1)
        while await busy() and time.monotonic() < deadline:
            await asyncio.sleep(1)
    finally:
        await client.aclose()


async def indexed(uri: str, collection: str, timeout_s: float = 3600) -> None:
    """Wait until the Milvus server has indexed every row of the collection."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = client.describe_index(collection, "vector")
            if int(info.get("pending_index_rows", 0)) == 0 and \
                    int(info.get("indexed_rows", 0)) >= int(info.get("total_rows", 0)):
                return
            await asyncio.sleep(2)
        raise TimeoutError(f"{collection} not indexed after {timeout_s:.0f}s: {info}")
    finally:
        client.close()


# --- a kept stack -----------------------------------------------------------------------


@dataclass
class Filled:
    """What a kept stack holds (``shape``: the arguments that decide its contents) and what
    the run that filled it measured."""

    shape: dict[str, Any]
    fill_s: float = 0.0
    rss: dict[str, float] = field(default_factory=dict)
    stores: str = ""


def kept(keep: Path, shape: dict[str, Any]) -> Filled | None:
    """The filled stack in ``keep`` when it holds this shape; None when ``keep`` is new or
    empty; ``SystemExit`` when it holds another shape or an unfinished fill."""
    record = keep / FILLED
    if record.exists():
        filled = Filled(**json.loads(record.read_text("utf-8")))
        if filled.shape != shape:
            raise SystemExit(f"{keep} holds a stack filled as {filled.shape}, not {shape}: "
                             "give another --keep DIR")
        return filled
    if keep.exists() and any(keep.iterdir()):
        raise SystemExit(f"{keep} holds no finished fill ({FILLED} is missing): remove it")
    return None


def keep_filled(keep: Path, filled: Filled) -> None:
    (keep / FILLED).write_text(json.dumps(asdict(filled), indent=1), "utf-8")
