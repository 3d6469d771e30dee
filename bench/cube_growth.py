"""One user's cube grown for years: what a new turn costs when its cube already holds a lot.

    python bench/cube_growth.py [--sizes 0,2000,30000] [--turns 200] [--pool 400] [--tmp DIR]

``bench/history.py`` grows a deployment by adding users (cubes of ~1,200 memories each). A
user who keeps one assistant for years grows one cube instead: every new turn is compared,
merged and linked against that cube. This bench measures how a turn's cost grows with the
size of its own cube, in one run on one deployment (the embedded default as ``memstream up``
runs it: noida-db broker, FalkorDB, Milvus Lite, one ``memstream worker`` with the optimizer
on and the ``rules`` stand-in for the model, local e5 embedder):

1. For each size of ``--sizes`` (memories in each of the two speakers' cubes), two cubes are
   grown to that size with the history bench's generated chats (bench/history_data.py: no
   copied data), through ``load`` of dumps, as bench/history.py grows its history: every
   generated conversation's memories go into the same two cubes, each node's vector its
   sentence's from a pool embedded once in this run. A cube holds at most its memory
   types' capacities (at default settings 1,500 long-term, 480 user, 5,000 episodic and 20
   working memories): the first batch after a load trims a larger cube to them, oldest
   first, as it would trim a cube that grew turn by turn. So the largest size is a cube at
   its capacities: one user's cube after years.
2. ``--turns`` turns of NEW chats between those two speakers (the same texts at every size)
   go into the two cubes through ``MemoryClient``. The first 20 are ingested and left out
   of the count: they run the cubes' first structure optimization over all that the load
   put there, a cost of the load, not of a turn. The rest are published at once, timed
   until the add stage applied every cube's last chunk and until every stage, the
   optimizer included, took all its input. Meanwhile the CPU of the worker, the broker and
   FalkorDB. The first 20 are left out at size 0 too: the same turns count at every size.

Prints, per size: turns/s (applied, every stage), the rate against size 0 of the same run,
CPU seconds a turn by process, and the embedder alone on the same texts (every core) as the
baseline of the same run. Size 0 is two fresh cubes: the rate a turn gets with nothing to
compare it to.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from history import pool_vectors  # noqa: E402
from history_data import CONVERSATION, chunks, dumps, pool_sentences, speakers  # noqa: E402
from history_stack import cli, ingest, load_dumps, running  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.security.keys import activate  # noqa: E402
from memstream.topics.models import CubeGraph  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

WARM_CHUNKS = 4  # chunks ingested into a grown cube before the counted ones


def now() -> str:
    return time.strftime("%H:%M:%S")


def grown(targets: tuple[str, str], size: int, pool: list[str], vectors: list[list[float]],
          seed: int) -> Iterator[CubeGraph]:
    """Dumps that fill each of ``targets`` with ``size`` memories: the generated history's
    conversations, each speaker's memories moved into one of the two cubes."""
    held = dict.fromkeys(targets, 0)
    start = 0
    while min(held.values()) < size:
        for dump in dumps(start, start + CONVERSATION, pool, vectors, seed):
            conv = start // CONVERSATION
            side = 0 if dump.cube_id.endswith(speakers(conv)[0].lower()) else 1
            target = targets[side]
            room = size - held[target]
            if room <= 0:
                continue
            nodes = dump.nodes[:room]
            keep = {n.id for n in nodes}
            held[target] += len(nodes)
            yield CubeGraph(
                cube_id=target, owner=target,
                nodes=tuple(n.model_copy(update={"metadata": n.metadata.model_copy(
                    update={"cube_id": target, "user_id": target})}) for n in nodes),
                edges=tuple(e for e in dump.edges if e.source in keep and e.target in keep),
                vectors={k: v for k, v in dump.vectors.items() if k in keep})
        start += CONVERSATION


async def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="memstream-cube-growth-", dir=args.tmp))
    data = root / "stack"
    settings = Settings(data_dir=data)
    pool = pool_sentences(args.pool, args.seed)
    print(f"data {root}", flush=True)
    vectors = await pool_vectors(pool)
    up_s = await asyncio.to_thread(cli, data, "up")
    key_dir = settings.erasure_key_dir
    assert key_dir is not None  # noqa: S101 - the embedded stack seals
    activate(key_dir)
    print(f"up in {up_s:.1f}s", flush=True)
    rows = []
    try:
        stack = await running(data)
        async with MemoryClient(settings, stack.bootstrap) as client:
            for i, size in enumerate(sizes):
                live = list(chunks(0, args.turns, pool, args.seed, prefix=f"grow{i}",
                                   encoded=False))
                cubes = sorted({cube for c in live for cube in c.chats})
                a, b = speakers(0)
                targets = (next(c for c in cubes if c.endswith(a.lower())),
                           next(c for c in cubes if c.endswith(b.lower())))
                if size:
                    t0 = time.perf_counter()
                    loaded = await load_dumps(client, root / "dumps",
                                              grown(targets, size, pool, vectors, args.seed))
                    print(f"{now()} size {size:,}: {loaded[1]:,} memories loaded into {targets} in "
                          f"{time.perf_counter() - t0:.0f}s", flush=True)
                # The first turns into a loaded cube run its first structure optimization
                # over everything the load put there (the load's cost, not a turn's): they
                # are ingested first and not counted, at every size.
                warm = await ingest(client, settings, stack, live[:WARM_CHUNKS])
                print(f"{now()} size {size:,}: the first {warm.turns} turns (not counted) took "
                      f"{warm.settled_s:.0f}s", flush=True)
                got = await ingest(client, settings, stack, live[WARM_CHUNKS:])
                rows.append((size, got))
                print(f"{now()} size {size:,}: {got.turns} turns, applied "
                      f"{got.turns / got.applied_s:.2f} turns/s, every stage {got.rate:.2f}; "
                      f"the embedder alone {got.embedder_rate:.2f}; CPU s " + ", ".join(
                          f"{k} {v:.0f}" for k, v in got.cpu.items()), flush=True)
    finally:
        await asyncio.to_thread(cli, data, "down")
    base = rows[0][1].rate if rows and rows[0][0] == 0 else None
    print(f"\n{'memories a cube':>16} {'applied/s':>10} {'stage/s':>8} {'× size 0':>9} "
          f"{'embedder/s':>11} {'worker s/turn':>14} {'graph s/turn':>13} {'broker s/turn':>14}")
    for size, got in rows:
        ratio = f"{got.rate / base:.2f}" if base else "-"
        per = {k: v / got.turns for k, v in got.cpu.items()}
        print(f"{size:>16,} {got.turns / got.applied_s:>10.2f} {got.rate:>8.2f} {ratio:>9} "
              f"{got.embedder_rate:>11.2f} {per.get('worker', 0):>14.3f} "
              f"{per.get('graph', 0):>13.3f} {per.get('broker', 0):>14.3f}")
    print(f"(data left in {root})" if args.keep else "")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0,2000,30000",
                        help="memories in each of the two cubes before the new turns")
    parser.add_argument("--turns", type=int, default=200, help="new turns at each size")
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--tmp", type=Path, default=None, help="where the data directory goes")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
