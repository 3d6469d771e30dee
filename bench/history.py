"""One deployment's history grown to 1k, 10k and 100k turns: what it costs (issue #40).

    python bench/history.py [--steps 1000,10000,100000] [--ingest-turns 300] [--searches 100]
                            [--full-replay-max N] [--baseline-max 10000] [--trickle-s 30]
                            [--window 300] [--pool 400] [--tmp DIR]

The deployment is the embedded default as ``memstream up`` runs it (noida-db broker with the
archive, FalkorDB, Milvus Lite, one ``memstream worker`` with the optimizer on and the
``rules`` stand-in for the model, local e5 embedder), in a temporary data dir, started and
stopped with ``memstream up`` / ``memstream down``. Its history is generated chats
(bench/history_data.py: no copied data), grown to each step's number of turns fast, through
what a user also has, and at each step, in the same run:

1. **load** (stack up): the step's new turns go into the stores as ``memstream dump`` files
   loaded with the ``load`` command, which the worker applies (graph nodes, FOLLOWS edges,
   vectors) and announces on ``memory.updates``. A node's vector is its sentence's, from a
   pool of ``--pool`` generated sentences embedded once in this run (local e5, as passages)
   and reused under every node's own id: latency depends on how much a store holds, not on
   what it says.
2. **log** (``memstream down``; the broker alone, started by the bench on the data dir):
   the same turns' records — conversation chunks, extracted memories, ``linked`` updates —
   are published as a worker's producer would have written them, sealed with the data dir's
   keys, and the worker's and the provenance indexer's consumer groups are committed past
   them (the worker applied them: that is what the load stands for). The archive round the
   worker runs every 30 s is run after each slice; the newest ``--window`` turns stay on the
   broker. Then the broker's costs, as before issue #40's archive and since: its CPU for a
   trickle of one chunk a second (a chunk's records with their ``added`` updates: those
   turns' updates are in the log twice, once from the load) over ``--trickle-s`` seconds;
   its data file against the bytes of the records it holds; the segment files; its restart
   on its file; a read of the whole retained log through memstream's reader (segments, then
   broker: what a replay or ``history`` goes through).
3. **up**: ``memstream up`` on that history, timed (broker, FalkorDB and the worker started,
   the embedding model loaded, the worker consuming).
4. **ingest**: ``--ingest-turns`` turns of NEW chats (two speakers, two fresh cubes; the same
   texts at every step) published at once through ``MemoryClient`` to ``conversations``;
   timed until the add stage applied every cube's last chunk and until every stage, the
   optimizer included, took all its input (turns/s on the latter). Meanwhile the CPU of the
   broker, the worker and FalkorDB (broker / worker: goal ≤ 0.15) and the worker's RSS
   (with Milvus Lite, its child). Baseline of the same run: the local embedder alone, on
   every core, over the same texts (each turn once per cube, each chunk's episode once).
5. **search**: ``--searches`` fast searches (top 10), one at a time, of history cubes picked
   at random, each a question about what the cube's speaker talks about: p50/p95/max.
6. **replay**: the worker's archive round run once with no window and no minimum (what
   every group passed moves to segments, so the replay reads segments and broker), then the
   two ingested cubes dumped (``dump`` command), replayed (``replay`` command: views
   dropped, rebuilt from the whole log) and dumped again: identical nodes, edges and vectors
   (usage aside), as tests/e2e/test_replay_recorded_log.py checks. At steps up to
   ``--full-replay-max`` (default: the smallest step) every cube of the history is replayed
   too, timed: a replay embeds every memory again (three a turn per cube), hours at 100k
   turns on this machine, so larger steps say what the smallest one measured instead. After
   a full replay the history cubes hold what the replay rebuilt from their records (their
   nodes' own texts embedded, not the pool's vectors) for the later steps.

A second deployment (``baseline``: the broker alone, no archive, as before issue #40) grows
the same records up to ``--baseline-max`` turns for step 2's broker figures (beyond it its
file takes minutes to write: the point of the issue).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from history_broker import BROKER_HEADER, BrokerCost, baseline, grow_log  # noqa: E402
from history_data import CHUNK, chunks, dumps, history_cubes, pool_sentences  # noqa: E402
from history_stack import (  # noqa: E402
    Ingested,
    Searched,
    archive_now,
    cli,
    differences,
    dumped,
    in_segments,
    ingest,
    load_dumps,
    replay,
    running,
    searches,
)
from load import RSSWatch, rss_mb  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.security.keys import activate  # noqa: E402
from memstream.streams.embed.local import LocalEmbedder  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

GOAL_TRICKLE_CORE = 0.05
GOAL_FILE_RATIO = 2.0
GOAL_BROKER_SHARE = 0.15
GOAL_UP_S = 30.0
GOAL_RATE_KEPT = 0.9


# --- the deployment ---------------------------------------------------------------------


@dataclass
class StepResult:
    turns: int
    loaded: str  # cubes and nodes loaded at this step, and the seconds
    broker: BrokerCost
    up_s: float
    ingested: Ingested
    rss_up: float  # the worker's RSS once `memstream up` returned
    rss_peak: float
    searched: Searched
    moved: int  # records the archive round moved to segments just before the replay
    archived: int  # records of the ingested cubes the replay read from segments
    replay_s: float
    replay_diffs: list[str]
    full_replay: str

    def row(self) -> str:
        i = self.ingested
        return (f"{self.turns:>8,} {self.up_s:>6.1f} {i.turns / i.applied_s:>8.2f} "
                f"{i.rate:>8.2f} {i.embedder_rate:>8.2f} {i.broker_share:>7.3f} "
                f"{self.rss_peak:>7.0f} {self.searched.line():>14} {self.replay_s:>8.1f} "
                f"{'yes' if not self.replay_diffs else 'NO':>6}")


STACK_HEADER = (f"{'turns':>8} {'up s':>6} {'applied':>8} {'turns/s':>8} {'embedder':>8} "
                f"{'brk/wrk':>7} {'RSS MB':>7} {'search ms':>14} {'replay s':>8} "
                f"{'same':>6}")


async def pool_vectors(pool: list[str]) -> list[list[float]]:
    """The pool's sentences embedded once, as passages (as the add stage embeds a memory)."""
    embedder = LocalEmbedder()
    t0 = time.perf_counter()
    vectors = [[float(x) for x in v] for v in await embedder.embed_passages(pool)]
    await embedder.close()
    print(f"embedded the pool of {len(pool)} sentences in {time.perf_counter() - t0:.0f}s",
          flush=True)
    return vectors


async def one_step(i: int, settings: Settings, prev: int, target: int, pool: list[str],
                   vectors: list[list[float]], args: argparse.Namespace,
                   live_so_far: list[str], full_rate: list[float]) -> StepResult:
    data = settings.data_dir
    folder = data.parent / "dumps"
    stack = await running(data)
    t0 = time.perf_counter()
    async with MemoryClient(settings, stack.bootstrap) as client:
        cubes, nodes = await load_dumps(client, folder, dumps(prev, target, pool, vectors,
                                                              args.seed))
    loaded = f"{cubes} dumps, {nodes:,} memories loaded in {time.perf_counter() - t0:.0f}s"
    print(f"  {target:,} turns: {loaded}", flush=True)
    await asyncio.to_thread(cli, data, "down")
    cost = await grow_log(settings, prev, target, pool, args.seed, args.window,
                          args.trickle_s, archive=True)
    print(f"  {target:,} turns: log grown in {cost.grow_s:.0f}s", flush=True)
    up_s = await asyncio.to_thread(cli, data, "up")
    stack = await running(data)
    rss_up = rss_mb(stack.worker)
    live = list(chunks(0, args.ingest_turns, pool, args.seed, prefix=f"live{i}",
                       encoded=False))
    live_cubes = sorted({cube for c in live for cube in c.chats})
    async with MemoryClient(settings, stack.bootstrap) as client:
        watch = RSSWatch(stack.worker)
        watching = asyncio.create_task(watch.run())
        try:
            ingested = await ingest(client, settings, stack, live)
            print(f"  {target:,} turns: up {up_s:.1f}s, ingested {ingested.turns} turns in "
                  f"{ingested.settled_s:.0f}s", flush=True)
            searched = await searches(client, history_cubes(target), args.searches,
                                      args.seed + i)
        finally:
            watching.cancel()
        moved = await archive_now(settings, stack.bootstrap)
        archived = await asyncio.to_thread(in_segments, settings, live_cubes)
        before = {c: await dumped(client, c, folder / f"{c}.json") for c in live_cubes}
        replay_s, failed = await replay(client, live_cubes)
        after = {c: await dumped(client, c, folder / f"{c}.json") for c in live_cubes}
        diffs = [f"{c}: {d}" for c in live_cubes for d in differences(before[c], after[c])]
        diffs += [f"replay failed: {f}" for f in failed]
        live_so_far += live_cubes
        full = f"not run (more than --full-replay-max {args.full_replay_max:,} turns)"
        if full_rate:
            full += (f"; at the rate measured at {full_rate[0]:,.0f} turns it would take "
                     f"{target / full_rate[1] / 3600:.1f} h")
        if target <= args.full_replay_max:
            every = history_cubes(target) + live_so_far
            full_s, failed = await replay(client, every)
            full_rate[:] = [target, target / full_s]
            full = (f"{len(every)} cubes in {full_s:.0f}s ({target / full_s:.1f} turns of "
                    f"history/s{'; FAILED: ' + failed[0] if failed else ''})")
    return StepResult(target, loaded, cost, up_s, ingested, rss_up,
                      max(watch.samples, default=0.0),
                      searched, moved, archived, replay_s, diffs, full)


async def deployment(data: Path, steps: list[int], args: argparse.Namespace
                     ) -> list[StepResult]:
    settings = Settings(data_dir=data / "stack")
    key_dir = settings.erasure_key_dir
    assert key_dir is not None  # the embedded stack seals
    activate(key_dir)  # the generated records sealed with the keys the worker reads them with
    pool = pool_sentences(args.pool, args.seed)
    vectors = await pool_vectors(pool)
    first_up = await asyncio.to_thread(cli, settings.data_dir, "up")
    print(f"memstream up on an empty data dir: {first_up:.1f}s", flush=True)
    out: list[StepResult] = []
    live: list[str] = []
    full_rate: list[float] = []  # turns and turns/s of the last full replay
    prev = 0
    try:
        for i, target in enumerate(steps):
            step = await one_step(i, settings, prev, target, pool, vectors, args, live, full_rate)
            out.append(step)
            print(step.broker.row("archive"), flush=True)
            print(f"  {STACK_HEADER}\n  {step.row()}", flush=True)
            prev = target
    finally:
        with contextlib.suppress(RuntimeError):
            await asyncio.to_thread(cli, settings.data_dir, "down")
    return out


# --- the run ----------------------------------------------------------------------------


def report(stack: list[StepResult], base: list[BrokerCost]) -> None:
    print("\nbroker (step 2): trickle = its CPU (cores) for one chunk a second; file = its data "
          "file; held = the records it holds as a consumer reads them; arch = segment files; "
          "start = its restart on its file; read = every retained record through memstream's "
          "reader")
    print(BROKER_HEADER)
    for s in stack:
        print(s.broker.row("archive"))
    for b in base:
        print(b.row("baseline"))
    print("\nstack: up = `memstream up` on the history; applied = turns/s until the add stage "
          "applied the last chunk; turns/s = until every stage (optimizer included) took all "
          "its input; embedder = the local embedder alone on the same texts; brk/wrk = broker "
          "CPU / worker CPU over the ingestion; RSS = the worker's peak (Milvus Lite "
          "included); search = p50/p95/max ms; replay = the ingested cubes replayed, same = "
          "identical stores after it")
    print(STACK_HEADER)
    for s in stack:
        print(s.row())
    for s in stack:
        searched = s.searched
        print(f"at {s.turns:,} turns: {s.loaded}; {len(searched.ms)} searches, {searched.errors} "
              f"errors, {searched.hits / max(1, len(searched.ms)):.1f} hits each (p50/p95/max "
              f"ms: a cube's first search {searched.line(True)}, {sum(searched.first)} of "
              f"them; later ones {searched.line(False)}); worker RSS "
              f"{s.rss_up:.0f} MB after up; ingestion "
              f"CPU s " + ", ".join(f"{k} {v:.0f}" for k, v in s.ingested.cpu.items())
              + f"; rate / embedder alone {s.ingested.rate / s.ingested.embedder_rate:.2f}; "
              f"full replay: {s.full_replay}")
        kinds = Counter(d.split(": ")[1] for d in s.replay_diffs)  # "cube: kind: detail"
        print(f"  replay of the ingested cubes ({s.archived:,} of their records in segments "
              f"by then, {s.moved:,} records moved by an archive round just before): "
              f"{len(s.replay_diffs)} differences"
              + "".join(f"; {n} {kind}" for kind, n in kinds.most_common()))
        for line in s.replay_diffs[:40]:
            print(f"    {line}")
    first, last = stack[0], stack[-1]
    kept = last.ingested.rate / first.ingested.rate
    # the same ratio with each rate taken against the embedder alone at its step: the machine
    # is shared, and what else runs moves both
    fair = (last.ingested.rate / last.ingested.embedder_rate) / \
        (first.ingested.rate / first.ingested.embedder_rate)
    print(f"\ngoals at {last.turns:,} turns: ingestion {last.ingested.rate:.2f} turns/s = "
          f"{kept:.2f}x its rate at {first.turns:,} turns ({fair:.2f}x against the embedder "
          f"alone at each step; goal >= {GOAL_RATE_KEPT}); broker / "
          f"worker CPU while ingesting {last.ingested.broker_share:.3f} (goal <= "
          f"{GOAL_BROKER_SHARE}); trickle {last.broker.trickle_core:.3f} of a core (goal <= "
          f"{GOAL_TRICKLE_CORE}); broker file "
          f"{last.broker.file_mb / max(last.broker.raw_mb, 1e-9):.2f}x the records it holds "
          f"(goal <= {GOAL_FILE_RATIO}); memstream up {last.up_s:.1f}s (goal <= {GOAL_UP_S:.0f}"
          f"); replay of the ingested cubes: "
          f"{'identical stores' if not last.replay_diffs else 'DIFFERENT stores'}")
    for a, b in zip(stack, base, strict=False):
        print(f"at {b.turns:,} turns the baseline's trickle costs "
              f"{b.trickle_core / max(a.broker.trickle_core, 1e-9):.1f}x the archive's, its "
              f"file {b.file_mb / max(a.broker.file_mb, 1e-9):.1f}x, its start "
              f"{b.start_s / max(a.broker.start_s, 1e-9):.1f}x")


def parse_steps(text: str, window: int, trickle_s: float) -> list[int]:
    """Increasing multiples of the chunk, each growing the history by more than the window
    and the trickle leave on the broker."""
    try:
        steps = [int(s) for s in text.split(",")]
    except ValueError:
        raise SystemExit(f"--steps {text!r}: give turn counts separated by commas, e.g. "
                         "1000,10000,100000") from None
    least = window + int(trickle_s) * CHUNK + CHUNK
    for prev, step in zip([0, *steps], steps, strict=False):
        if step % CHUNK or step - prev < least:
            raise SystemExit(f"--steps {text!r}: each step must be a multiple of {CHUNK} and "
                             f"grow the history by at least {least} turns (--window + 5 x "
                             f"--trickle-s + {CHUNK}); {step} does not")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="1000,10000,100000")
    parser.add_argument("--ingest-turns", type=int, default=300,
                        help="turns of new chats ingested at each step")
    parser.add_argument("--searches", type=int, default=100, help="searches at each step")
    parser.add_argument("--full-replay-max", type=int, default=None,
                        help="replay every cube at steps up to this many turns (default: the "
                             "smallest step)")
    parser.add_argument("--baseline-max", type=int, default=10_000,
                        help="the no-archive baseline's last step (0: no baseline)")
    parser.add_argument("--trickle-s", type=float, default=30.0)
    parser.add_argument("--window", type=int, default=300,
                        help="turns the archive leaves on the broker: its default window "
                             "(archive.after_s, 60 s) at the trickle's 5 turns a second")
    parser.add_argument("--pool", type=int, default=400,
                        help="generated sentences embedded once (the templates give ~365)")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--tmp", type=Path, default=None, help="where the data directories go")
    parser.add_argument("--keep", type=Path, default=None,
                        help="a new directory for the data, kept after the run (its "
                             "archive/stack is the grown deployment, stopped: `memstream up "
                             "--data-dir DIR/archive/stack` serves it again)")
    args = parser.parse_args()
    steps = parse_steps(args.steps, args.window, args.trickle_s)
    if args.ingest_turns < CHUNK or args.ingest_turns % CHUNK:
        raise SystemExit(f"--ingest-turns {args.ingest_turns}: a positive multiple of {CHUNK}")
    if args.searches < 1:
        raise SystemExit(f"--searches {args.searches}: at least 1")
    if args.tmp is not None and not args.tmp.is_dir():
        raise SystemExit(f"--tmp {args.tmp}: no such directory")
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        raise SystemExit(f"--keep {args.keep}: not empty; give a new directory")
    if args.full_replay_max is None:
        args.full_replay_max = steps[0]
    for name in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[name]  # the embedded default, in this process as in the stack's
    logging.basicConfig(level=logging.WARNING)
    with contextlib.ExitStack() as held:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = str(args.keep)
        else:
            tmp = held.enter_context(tempfile.TemporaryDirectory(prefix="hist-", dir=args.tmp))
        print(f"data in {tmp}; steps {', '.join(f'{s:,}' for s in steps)} turns\n", flush=True)
        stack = asyncio.run(deployment(Path(tmp) / "archive", steps, args))
        base = asyncio.run(baseline(Path(tmp) / "baseline",
                                    [s for s in steps if s <= args.baseline_max], args))
    report(stack, base)


if __name__ == "__main__":
    main()
