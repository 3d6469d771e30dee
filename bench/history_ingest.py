"""New turns ingested into a history deployment kept by ``bench/history.py --keep DIR``.

    python bench/history_ingest.py DIR/archive/stack [--turns 300] [--prefix again1]

Starts the deployment with ``memstream up``, ingests ``--turns`` turns of new chats (two
fresh cubes named after ``--prefix``, the history bench's texts) through ``MemoryClient`` as
the history bench's step 4 does, prints what it printed (turns/s until applied and until
every stage took all its input, the embedder alone on the same texts, CPU by process), and
stops it. Runs on deployments of several sizes, one after the other, compare a change
without growing the histories again. Each run adds its turns to the deployment: give each
run its own prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from history_data import CHUNK, chunks, pool_sentences  # noqa: E402
from history_stack import cli, ingest, running  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.security.keys import activate  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402


async def run(data: Path, prefix: str, turns: int, pool: int, seed: int) -> None:
    settings = Settings(data_dir=data)
    key_dir = settings.erasure_key_dir
    assert key_dir is not None  # the embedded stack seals
    activate(key_dir)
    up_s = await asyncio.to_thread(cli, data, "up")
    try:
        stack = await running(data)
        live = list(chunks(0, turns, pool_sentences(pool, seed), seed, prefix=prefix,
                           encoded=False))
        async with MemoryClient(settings, stack.bootstrap) as client:
            got = await ingest(client, settings, stack, live)
    finally:
        await asyncio.to_thread(cli, data, "down")
    print(f"{data}: up {up_s:.1f}s; {got.turns} turns: applied {got.turns / got.applied_s:.2f} "
          f"turns/s, every stage {got.rate:.2f} turns/s; the embedder alone "
          f"{got.embedder_rate:.2f} (rate / embedder {got.rate / got.embedder_rate:.2f}); CPU s "
          + ", ".join(f"{k} {v:.0f}" for k, v in got.cpu.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="a kept deployment's data dir (stopped)")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--prefix", default="again", help="names the new cubes")
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--seed", type=int, default=40)
    args = parser.parse_args()
    if not (args.data / "worker.log").exists() and not (args.data / "falkordb").is_dir():
        raise SystemExit(f"{args.data}: not a deployment's data dir (DIR/archive/stack of "
                         "bench/history.py --keep DIR)")
    if args.turns < CHUNK or args.turns % CHUNK:
        raise SystemExit(f"--turns {args.turns}: a positive multiple of {CHUNK}")
    for name in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[name]  # the embedded default, as the history bench runs it
    asyncio.run(run(args.data, args.prefix, args.turns, args.pool, args.seed))


if __name__ == "__main__":
    main()
