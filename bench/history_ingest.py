"""New turns ingested into a history deployment kept by ``bench/history.py --keep DIR``.

    python bench/history_ingest.py DIR/archive/stack [--turns 300] [--prefix again1]
    python bench/history_ingest.py DIR/archive/stack --turns 0 --searches 200 --history 100000
                                   [--set VECTOR__LITE_CACHE_LOAD_AFTER_S=0]

Starts the deployment with ``memstream up``, ingests ``--turns`` turns of new chats (two
fresh cubes named after ``--prefix``, the history bench's texts) through ``MemoryClient`` as
the history bench's step 4 does, prints what it printed (turns/s until applied and until
every stage took all its input, the embedder alone on the same texts, CPU by process), and
stops it. Runs on deployments of several sizes, one after the other, compare a change
without growing the histories again. Each run adds its turns to the deployment: give each
run its own prefix. ``--searches N`` then runs the history bench's step 5 on it (``N`` fast
searches, one at a time, of the ``--history`` turns' cubes picked at random: p50/p95/max,
a cube's first search since ``up`` apart); ``--turns 0`` ingests nothing. ``--set`` passes a
setting to the deployment (``MEMSTREAM_`` added), to compare a setting in the same session.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from history_data import CHUNK, chunks, history_cubes, pool_sentences  # noqa: E402
from history_stack import cli, ingest, running, searches  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.security.keys import activate  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402


async def run(data: Path, args: argparse.Namespace) -> None:
    settings = Settings(data_dir=data)
    key_dir = settings.erasure_key_dir
    assert key_dir is not None  # the embedded stack seals
    activate(key_dir)
    up_s = await asyncio.to_thread(cli, data, "up")
    print(f"{data}: up {up_s:.1f}s", flush=True)
    try:
        stack = await running(data)
        async with MemoryClient(settings, stack.bootstrap) as client:
            if args.turns:
                live = list(chunks(0, args.turns, pool_sentences(args.pool, args.seed),
                                   args.seed, prefix=args.prefix, encoded=False))
                got = await ingest(client, settings, stack, live)
                print(f"{got.turns} turns: applied {got.turns / got.applied_s:.2f} turns/s, "
                      f"every stage {got.rate:.2f} turns/s; the embedder alone "
                      f"{got.embedder_rate:.2f} (rate / embedder "
                      f"{got.rate / got.embedder_rate:.2f}); CPU s "
                      + ", ".join(f"{k} {v:.0f}" for k, v in got.cpu.items()), flush=True)
            if args.searches:
                before = stack.cpu()
                done = await searches(client, history_cubes(args.history), args.searches,
                                      args.seed)
                spent = {k: v - before[k] for k, v in stack.cpu().items()}
                print(f"{len(done.ms)} searches (errors {done.errors}) p50/p95/max ms: all "
                      f"{done.line()}, a cube's first since up {done.line(True)}, later "
                      f"{done.line(False)}; CPU ms a search: " + ", ".join(
                          f"{k} {v * 1000 / max(len(done.ms), 1):.0f}" for k, v in spent.items()),
                      flush=True)
    finally:
        await asyncio.to_thread(cli, data, "down")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="a kept deployment's data dir (stopped)")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--prefix", default="again", help="names the new cubes")
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--searches", type=int, default=0)
    parser.add_argument("--history", type=int, default=0,
                        help="turns of history the deployment holds (whose cubes to search)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the deployment, e.g. VECTOR__LITE_CACHE_MAX_CUBES=10")
    args = parser.parse_args()
    if not (args.data / "worker.log").exists() and not (args.data / "falkordb").is_dir():
        raise SystemExit(f"{args.data}: not a deployment's data dir (DIR/archive/stack of "
                         "bench/history.py --keep DIR)")
    if args.turns < 0 or args.turns % CHUNK:
        raise SystemExit(f"--turns {args.turns}: 0 or a positive multiple of {CHUNK}")
    if args.searches and args.history < CHUNK:
        raise SystemExit("--searches needs --history: the turns of history the deployment holds")
    for name in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[name]  # the embedded default, as the history bench runs it
    for pair in args.set:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {pair}: KEY=VALUE, e.g. VECTOR__LITE_CACHE_MAX_CUBES=10")
        os.environ[f"MEMSTREAM_{key.upper().removeprefix('MEMSTREAM_')}"] = value
    asyncio.run(run(args.data, args))


if __name__ == "__main__":
    main()
