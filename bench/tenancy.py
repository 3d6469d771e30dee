"""Thousands of cubes on one worker: search latency, a cold cube's first search, worker RSS.

    python bench/tenancy.py [--cubes 200] [--memories 20000] [--searches 400]
    python bench/tenancy.py --cubes 1000 --memories 100000 --searches 1500
    python bench/tenancy.py --cubes 10000 --memories 1000000 --searches 3000   # issue #40
    python bench/tenancy.py ... --keep DIR   # fill once into DIR; later runs search it again

The stack a deployment of this size runs (docs/operations.md, "A worker serving thousands of
cubes"), started under a temporary directory (``--tmp``): the embedded broker and FalkorDB as
``memstream up`` starts them, and a real Milvus 2.3 standalone server (the ``milvus``
package's ``milvus-server``, as tests/support/milvus_fixtures.py starts it: its own ports and
data dir) as ``VECTOR__URI``. One ``memstream worker`` process at default settings.

1. The worker starts on the empty stores (its RSS).
2. Fill: ``--cubes`` cubes holding ``--memories`` memories in all, written by this process
   straight through the store adapters (``MemoryStore.write``, ``--rows-per-write`` nodes a
   call, a few cubes at once, the graph's provenance edges with them), not through the
   pipeline; then the vectors are flushed and indexed and FalkorDB saves
   (bench/tenancy_fill.py). What the cubes hold, and how a pool of generated chats embedded
   once (local e5 model) is reused under new ids, is in bench/tenancy_data.py. The worker's
   RSS after filling. With ``--keep DIR`` the stack lives in DIR and is kept; a later run
   with the same DIR and shape skips steps 1-2 and reports what the filling run measured
   (its searches have added usage records to the nodes they returned; nothing else changed).
3. The worker is restarted on the filled stores (a deployment's restart; its own warming of
   the ``search.warm_cubes`` cubes changed or searched last runs; nothing is warmed by hand).
4. ``--searches`` fast searches (top 10), one at a time through ``MemoryClient`` from this
   process, of cubes drawn with a Zipf law (``--zipf`` exponent, default 1.0: the cube of
   rank r is picked with probability ∝ 1/r, over a random ranking of the cubes), each a
   question about something the cube holds. A search of a cube searched before in the run is
   *warm*; the first search of a cube is *cold* (the worker holds nothing of it). The
   worker's RSS is sampled every second.
5. Baseline, same run: right after memstream answers, the same question is asked the way a
   competent user would without memstream — embed it with the same model, a top-10 cosine
   search of the cube's activated vectors on the Milvus server (the same collection: a
   ``cube_id`` filter, as memstream's adapter lays cubes out on Milvus 2.3; ``Bounded``),
   and one FalkorDB read of those nodes — so both run under the same load (the machine is
   shared). The CPU each process spends beyond its rest is charged to the search running.

Prints p50/p95/max of warm and cold searches next to the baseline's, where memstream's time
goes (the worker's own handling, from its /metrics, and the ways there and back), CPU per
search by process, the worker's RSS at each step, the fill's time, and the goals (issue #40:
warm p95 ≤ 150 ms and max ≤ 500 ms, a cold cube's first search ≤ 300 ms, worker RSS ≤ 1.5 GB).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from load import RSSWatch, WorkerProcess, cpu_seconds, dir_mb, pct, profiling, rss_mb  # noqa: E402
from tenancy_data import (  # noqa: E402
    CubePlan,
    PoolChunk,
    cube_sizes,
    iter_jobs,
    make_pool,
    plan_cubes,
    zipf_order,
)
from tenancy_fill import Filled, fill, keep_filled, kept, pool_vectors  # noqa: E402

from memstream.client.client import ClientError, MemoryClient  # noqa: E402
from memstream.local.milvus_server import MilvusServer, group_members  # noqa: E402
from memstream.local.services import recorded_worker  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.sinks.graph import cypher  # noqa: E402
from memstream.streams.embed.local import LocalEmbedder  # noqa: E402
from memstream.topics.events import SearchRequest, SearchResult  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

GOAL_WARM_P95_MS, GOAL_WARM_MAX_MS, GOAL_COLD_MS, GOAL_RSS_MB = 150, 500, 300, 1536
TOP_K = 10


# --- searching --------------------------------------------------------------------------


@dataclass
class Timed:
    cube: str
    cold: bool
    seconds: float
    hits: int
    error: str = ""
    back: float = 0.0  # from the reply's stamp in the worker to its arrival here


async def memstream_search(client: MemoryClient, cube: str, question: str, cold: bool
                           ) -> Timed:
    """What ``client.search`` sends, through the same call, keeping the reply's stamp."""
    req = SearchRequest(user_id=cube, cube_id=cube, query=question, top_k=TOP_K)
    t0 = time.perf_counter()
    try:
        reply = await client.request(req, 30.0)
    except ClientError as exc:
        return Timed(cube, cold, time.perf_counter() - t0, 0, str(exc)[:200])
    took = time.perf_counter() - t0
    assert isinstance(reply.result, SearchResult)
    return Timed(cube, cold, took, len(reply.result.memories),
                 back=(datetime.now(UTC) - reply.occurred_at).total_seconds())


class Baseline:
    """The same question without memstream, as a competent user asks it: embed it with the
    same model, a top-k cosine search of the cube's activated vectors on the Milvus server
    (``Bounded``, memstream's consistency for such a search), one FalkorDB read of the nodes."""

    READ = "MATCH (n:Memory) WHERE n.node_key IN $keys RETURN n.id, n.memory, n.memory_type"

    def __init__(self, settings: Settings, graph_uri: str) -> None:
        from falkordb import FalkorDB
        from pymilvus import MilvusClient

        self.collection = settings.vector.collection
        self.embedder = LocalEmbedder()
        self.milvus = MilvusClient(uri=settings.milvus_uri)
        graph = FalkorDB.from_url(graph_uri, socket_timeout=None)
        self.graph = graph.select_graph(settings.graph.database)

    async def search(self, cube: str, question: str, cold: bool) -> Timed:
        t0 = time.perf_counter()
        vec = (await self.embedder.embed_queries([question]))[0]
        hits = self.milvus.search(
            self.collection, data=[np.asarray(vec).tolist()], limit=TOP_K,
            filter=f'cube_id == "{cube}" and status == "activated"', output_fields=["id"],
            search_params={"metric_type": "COSINE"}, consistency_level="Bounded")[0]
        keys = [cypher.node_key(cube, h["entity"]["id"]) for h in hits]
        rows = self.graph.ro_query(self.READ, {"keys": keys}).result_set
        return Timed(cube, cold, time.perf_counter() - t0, len(rows))


@dataclass
class Ledger:
    """CPU seconds beyond rest of each process, charged to memstream or the baseline by
    whose search was running (the worker's and the broker's always to memstream: what they
    do during a baseline search is memstream's work after its reply)."""

    pids: dict[str, list[int]]
    rest: dict[str, float]  # cores each uses with nothing asked of it
    spent: dict[str, dict[str, float]] = field(default_factory=dict)

    def charge(self, side: str, before: dict[str, float], seconds: float) -> None:
        for name, now in cpu_of(self.pids).items():
            to = "memstream" if name in ("worker", "broker") else side
            book = self.spent.setdefault(to, {})
            book[name] = book.get(name, 0.0) + now - before[name] - self.rest[name] * seconds


async def interleaved(client: MemoryClient, baseline: Baseline,
                      jobs: list[tuple[str, str, bool]], ledger: Ledger
                      ) -> tuple[list[Timed], list[Timed]]:
    """Each question asked of memstream, then of the baseline: both under the same load."""
    ours, base = [], []
    for n, (cube, question, cold) in enumerate(jobs, start=1):
        before, t0 = cpu_of(ledger.pids), time.perf_counter()
        ours.append(await memstream_search(client, cube, question, cold))
        ledger.charge("memstream", before, time.perf_counter() - t0)
        before, t0 = cpu_of(ledger.pids), time.perf_counter()
        base.append(await baseline.search(cube, question, cold))
        ledger.charge("baseline", before, time.perf_counter() - t0)
        if n % 250 == 0:
            print(f"  … {n} searches", flush=True)
    return ours, base


async def warmed(log: Path, timeout_s: float = 600) -> str:
    """The worker's line saying it warmed its search caches (``search.warm_cubes``), once it
    is written: the warming is the worker's own start, not a search."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if "warmed the search caches" in line or "search caches not warmed" in line:
                return line.split("memstream.search.warming", 1)[-1].strip(" :-")
        await asyncio.sleep(1)
    return f"no warming reported within {timeout_s:.0f}s"


def cpu_of(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far of each named group of processes."""
    return {name: sum(cpu_seconds(p) for p in group) for name, group in pids.items()}


def handled(data_dir: Path) -> tuple[float, int]:
    """Seconds and count of the searches the worker handled (its /metrics): the time from
    taking a request to its reply, without the ways there and back."""
    info = recorded_worker(data_dir) or {}
    url = str(info.get("metrics") or "")
    if not url:
        return 0.0, 0
    text = urllib.request.urlopen(url, timeout=10).read().decode()  # noqa: S310 - loopback
    total, count = 0.0, 0
    for line in text.splitlines():
        if line.startswith("memstream_search_seconds_sum"):
            total += float(line.split()[-1])
        elif line.startswith("memstream_search_seconds_count"):
            count += int(float(line.split()[-1]))
    return total, count


# --- the run ----------------------------------------------------------------------------


def row(label: str, ours: list[Timed], base: list[Timed]) -> str:
    a = [t.seconds * 1000 for t in ours if not t.error]
    b = [t.seconds * 1000 for t in base if not t.error]
    if not a:
        return f"{label:<28} {'-':>6}"
    return (f"{label:<28} {len(a):>6} {pct(a, 50):>7.0f} {pct(a, 95):>7.0f} {max(a):>7.0f}   "
            f"{pct(b, 50):>7.1f} {pct(b, 95):>7.1f} {max(b):>7.1f}   "
            f"{pct(a, 50) / pct(b, 50):>5.1f}× {pct(a, 95) / pct(b, 95):>5.1f}×")


def shape_of(args: argparse.Namespace) -> dict[str, object]:
    """The arguments that decide what the stores hold (a kept stack must match them)."""
    return {k: getattr(args, k) for k in ("cubes", "memories", "size_exponent", "pool_chunks",
                                          "seed")}


async def filled_stores(args: argparse.Namespace, data: Path, settings: Settings,
                        stack: EmbeddedStack, milvus: MilvusServer, pool: list[PoolChunk],
                        plans: list[CubePlan], filled: Filled | None) -> Filled:
    """The stores filled, with the worker's RSS before and after on the empty stores; or, on
    a kept stack filled before (``filled``, from ``--keep``), what that run measured."""
    if filled is not None:
        print(f"reusing the stores filled in {args.keep} ({filled.fill_s:.0f}s then); "
              f"then: {filled.stores}", flush=True)
        return filled
    ep, fa = await pool_vectors(pool, args.pool_cache)
    worker = WorkerProcess(settings, data / "worker.log")
    await worker.start()
    await asyncio.sleep(5)
    filled = Filled(shape_of(args))
    filled.rss["start, empty stores"] = rss_mb(worker.pid)
    filled.fill_s = await fill(settings, stack.graph_uri, plans, pool, ep, fa,
                               args.concurrency, args.rows_per_write)
    filled.rss["after filling"] = rss_mb(worker.pid)
    stores = {"Milvus server": (milvus.pid, data / "milvus"),
              "FalkorDB": (stack.falkordb.pid if stack.falkordb else None,
                           settings.data_dir / "falkordb"),
              "broker": (None, settings.data_dir / "broker")}
    filled.stores = "; ".join(f"{name} {dir_mb(path):,.0f} MB on disk"
                              + (f", {rss_mb(pid):,.0f} MB resident" if pid else "")
                              for name, (pid, path) in stores.items())
    print(f"after filling: {filled.stores}", flush=True)
    await worker.stop()
    if args.keep:
        keep_filled(args.keep, filled)
    return filled


async def run(args: argparse.Namespace, data: Path, reused: Filled | None = None) -> None:
    pool = make_pool(args.pool_chunks, args.seed)
    sizes = cube_sizes(args.cubes, args.memories, args.size_exponent)
    plans = plan_cubes(sizes, len(pool), args.seed)
    print(f"{args.cubes:,} cubes, {args.memories:,} memories: largest {sizes[0]:,}, median "
          f"{int(np.median(sizes))}, smallest {sizes[-1]}; pool of {len(pool)} chats "
          f"({len(pool)} episodes, {3 * len(pool)} statements)", flush=True)
    milvus = MilvusServer(data / "milvus", startup_timeout_s=300, stop_timeout_s=30)
    t0 = time.perf_counter()
    milvus_uri = milvus.start()
    print(f"Milvus server {milvus_uri} up in {time.perf_counter() - t0:.0f}s", flush=True)
    try:
        base_settings = Settings(data_dir=data / "memstream")
        async with EmbeddedStack(base_settings) as stack:
            settings = Settings(data_dir=data / "memstream",
                                kafka={"bootstrap_servers": stack.bootstrap},
                                graph={"uri": stack.graph_uri}, vector={"uri": milvus_uri})
            filled = await filled_stores(args, data, settings, stack, milvus, pool, plans,
                                         reused)
            rss = {k if reused is None else f"{k} (when filled)": v for k, v in filled.rss.items()}
            fill_s = filled.fill_s
            # a log of its own: a kept stack's earlier run left its worker's log in ``data``
            worker = WorkerProcess(settings, data / f"worker-{time.strftime('%Y%m%d-%H%M%S')}.log")
            t0 = time.perf_counter()
            await worker.start()
            restart_s = time.perf_counter() - t0
            print(f"worker restarted in {restart_s:.0f}s; {await warmed(worker.log_path)}",
                  flush=True)
            rss["restarted on the filled stores"] = rss_mb(worker.pid)
            assert milvus.pid is not None
            pids = {"worker": [worker.pid], "Milvus": group_members(milvus.pid),
                    "FalkorDB": [p for p in [stack.falkordb.pid if stack.falkordb else None]
                                 if p],
                    "broker": [p for p in [stack.broker.pid if stack.broker else None] if p],
                    "this process": [os.getpid()]}
            order = zipf_order(len(plans), args.searches, args.zipf, args.seed)
            jobs = list(iter_jobs(plans, pool, order, args.seed))
            baseline = Baseline(settings, stack.graph_uri)
            await baseline.embedder.embed_queries(["warm up"])  # the model loaded, as a worker's
            watch = RSSWatch(worker.pid)
            watching = asyncio.create_task(watch.run())
            try:
                async with MemoryClient(settings, stack.bootstrap) as client:
                    with contextlib.suppress(ClientError):  # the reply path, no cube of ours
                        await client.search("tenancy-warm-up", "hello", top_k=1)
                    rest0, t0 = cpu_of(pids), time.perf_counter()
                    await asyncio.sleep(10)  # what the stack costs with nothing asked of it
                    ledger = Ledger(pids, {k: (v - rest0[k]) / (time.perf_counter() - t0)
                                           for k, v in cpu_of(pids).items()})
                    load = os.getloadavg()
                    before = await asyncio.to_thread(handled, settings.data_dir)
                    t0 = time.perf_counter()
                    with profiling(worker.pid, args.profile):
                        ours, base = await interleaved(client, baseline, jobs, ledger)
                    search_s = time.perf_counter() - t0
                    after = await asyncio.to_thread(handled, settings.data_dir)
                    inside = (after[0] - before[0]) / max(1, after[1] - before[1])
                    print("machine load (1, 5, 15 min) {} at the searches' start, {} at their "
                          "end, on {} cores".format(*(" ".join(f"{x:.2f}" for x in avg)
                                                      for avg in (load, os.getloadavg())),
                                                    os.cpu_count()), flush=True)
            finally:
                watching.cancel()
                baseline.milvus.close()
            rss["end"] = rss_mb(worker.pid)
            rss["peak while searching"] = max(watch.samples, default=float("nan"))
            await worker.stop()
    finally:
        milvus.stop()
        if not args.keep:
            shutil.rmtree(data / "milvus" / "bin", ignore_errors=True)
    report(args, sizes, ours, base, rss, fill_s, restart_s, search_s, inside)
    print("CPU at rest (cores): " + ", ".join(f"{k} {v:.3f}" for k, v in ledger.rest.items()))
    for side, book in ledger.spent.items():
        print(f"CPU ms per search beyond rest, {side}: " + ", ".join(
            f"{k} {v / len(jobs) * 1000:.1f}" for k, v in book.items())
            + f" (all {sum(book.values()) / len(jobs) * 1000:.0f})")


def report(args: argparse.Namespace, sizes: list[int], ours: list[Timed], base: list[Timed],
           rss: dict[str, float], fill_s: float, restart_s: float, search_s: float,
           inside: float) -> None:
    by_cube = dict(zip((f"ten{i:05d}" for i in range(len(sizes))), sizes, strict=True))
    warm = [t for t in ours if not t.cold]
    cold = [t for t in ours if t.cold]
    base_warm = [t for t in base if not t.cold]
    base_cold = [t for t in base if t.cold]
    print(f"\n{args.cubes:,} cubes, {args.memories:,} memories; {len(ours)} searches "
          f"(Zipf {args.zipf}) over {len(cold)} cubes, each also asked of the baseline, in "
          f"{search_s:.0f}s; fill {fill_s:.0f}s; worker restart {restart_s:.0f}s")
    print(f"\n{'ms':<28} {'n':>6} {'p50':>7} {'p95':>7} {'max':>7}   {'base p50':>7} "
          f"{'p95':>7} {'max':>7}   {'× p50':>6} {'× p95':>6}")
    print(row("warm (searched before)", warm, base_warm))
    print(row("cold (first search of cube)", cold, base_cold))
    print(row("all", ours, base))
    ok = [t for t in ours if not t.error]
    mean = sum(t.seconds for t in ok) / max(1, len(ok))
    back = sum(t.back for t in ok) / max(1, len(ok))
    print(f"where a search's time goes (means): {mean * 1000:.0f} ms in all = "
          f"{inside * 1000:.0f} handled by the worker (its /metrics) + "
          f"{(mean - inside - back) * 1000:.0f} the request's way in + "
          f"{back * 1000:.0f} the reply's way back (from its stamp)")
    slow = sorted(ours, key=lambda t: -t.seconds)[:5]
    print("slowest: " + ", ".join(f"{t.seconds * 1000:.0f} ms ({'cold' if t.cold else 'warm'}, "
                                  f"{by_cube[t.cube]} memories)" for t in slow))
    for lo, hi in ((0, 100), (100, 1000), (1000, 10**9)):
        some = [t.seconds * 1000 for t in cold if lo <= by_cube[t.cube] < hi and not t.error]
        if some:
            print(f"  cold, cubes of {lo:,}–{min(hi, max(sizes)):,} memories: n {len(some)}, "
                  f"p50 {pct(some, 50):.0f}, p95 {pct(some, 95):.0f}, max {max(some):.0f} ms")
    cold_sizes = [by_cube[t.cube] for t in cold]
    if cold_sizes:
        print(f"cold cubes: {len(cold_sizes)}, memories median {int(np.median(cold_sizes))}, "
              f"max {max(cold_sizes):,}")
    errors = [t for t in ours if t.error]
    if errors:
        print(f"ERRORS: {len(errors)} searches failed, e.g. {errors[0].error}")
    print("worker RSS (MB): " + ", ".join(f"{k} {v:,.0f}" for k, v in rss.items()))
    w = [t.seconds * 1000 for t in warm if not t.error]
    c = [t.seconds * 1000 for t in cold if not t.error]
    peak = max(rss.values())
    print(f"goals: warm p95 {pct(w, 95):.0f} ≤ {GOAL_WARM_P95_MS}, warm max {max(w, default=0):.0f}"
          f" ≤ {GOAL_WARM_MAX_MS}, cold max {max(c, default=0):.0f} (p95 {pct(c, 95):.0f}) ≤ "
          f"{GOAL_COLD_MS}, RSS {peak:,.0f} ≤ {GOAL_RSS_MB:,} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cubes", type=int, default=200)
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--searches", type=int, default=400)
    parser.add_argument("--zipf", type=float, default=1.0,
                        help="exponent of the cubes' access law (rank r: ∝ r ** -zipf)")
    parser.add_argument("--size-exponent", type=float, default=0.7,
                        help="cube sizes ∝ rank ** -this above a floor of 10")
    parser.add_argument("--pool-chunks", type=int, default=600,
                        help="generated chats in the pool (an episode and 3 statements each)")
    parser.add_argument("--pool-cache", type=Path, default=None,
                        help="an .npz file keeping the pool's vectors between runs")
    parser.add_argument("--concurrency", type=int, default=4, help="cubes written at once")
    parser.add_argument("--rows-per-write", type=int, default=1000,
                        help="memories in one MemoryStore.write while filling")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--tmp", default=None, help="where the data directories go")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="the stack's data directories in DIR, kept; a later run with the "
                             "same DIR and shape searches those stores instead of filling")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy record of the worker while memstream searches (speedscope;"
                             " py-spy's collapsed stacks if it ends in .raw)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.keep:
        args.keep = args.keep.resolve()
        reused = kept(args.keep, shape_of(args))  # a wrong DIR refused before anything starts
        args.keep.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args, args.keep, reused))
        return
    with tempfile.TemporaryDirectory(prefix="ms-tenancy-", dir=args.tmp) as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
