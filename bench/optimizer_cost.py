"""Where the optimizer's time goes: one ``add`` event's cost, step by step, next to the
ingestion that produced the events.

    python bench/optimizer_cost.py PATH [--max-turns 400] [--conversation 0]

PATH is a LoCoMo-format JSON file (such as the LoCoMo dev split; never
copy it into the repository). On the embedded default (noida-db, FalkorDB, Milvus Lite, rules
LLM, local e5 embedder), in this process and with nothing else running:

1. ingestion: the conversation's chunks (one cube per speaker, chunks of 5 turns, as
   bench/load.py publishes them) extracted and added, keeping the ``reorganize.high``
   events the add stage would publish;
2. the optimizer: those events handled one after another in log order, as a worker's
   optimizer does (``run_windows`` then ``on_add``), with every store read and write, LLM
   call and embedding timed.

Prints the optimizer's seconds against ingestion's (the ratio says how much of a worker the
optimizer needs to keep up with ingestion), milliseconds per event by quarter of the run
(growth with the cube's size), and the time of each step. bench/load.py's ``--sustained``
mode shows which stage bounds a sustained rate; this shows what inside the optimizer does.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from load import (  # noqa: E402
    add_in_process,
    bench_settings,
    chunks_of,
    extract_in_process,
    interleave,
)
from retrieval_quality import load  # noqa: E402

from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.streams import metering  # noqa: E402
from memstream.streams.reorganize import (  # noqa: E402
    asof,
    optimize,
    organize,  # noqa: E402
)
from memstream.streams.reorganize import logic as reorganize  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import ReorganizeEvent  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402


class Timings:
    """Seconds and calls per step; a step nested in another counts in both."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def timed(self, label: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1
        return run

    def patch(self, owner: Any, label: str, names: list[str]) -> None:
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, self.timed(f"{label}.{name}", getattr(owner, name)))


async def run(path: Path, conversation: int, max_turns: int) -> None:
    conv = load(path, {5})[conversation]  # as bench/load.py reads it
    chunks = interleave(chunks_of(conv, 5, max_turns))
    with tempfile.TemporaryDirectory(prefix="ms-optcost-") as tmp:
        data = Path(tmp)
        async with EmbeddedStack(Settings(data_dir=data)) as stack:
            settings = bench_settings(data, "opt", stack.bootstrap, stack.graph_uri)
            worker = Worker(settings, stack.bootstrap, stack.graph_uri)
            deps = await worker.open_deps()
            await deps.embedder.embed_passages(["warm up"])  # the model loads on first use
            events: list[ReorganizeEvent] = []
            t0 = time.perf_counter()
            for i, c in enumerate(chunks):
                if records := await extract_in_process(deps, c, i):
                    events += [out.event for out in await add_in_process(deps, records)
                               if isinstance(out.event, ReorganizeEvent)]
            ingest_s = time.perf_counter() - t0
            turns = sum(len(c.turns) for c in chunks)
            print(f"ingestion: {len(chunks)} chunks ({turns} turn deliveries) in {ingest_s:.1f}s,"
                  f" {len(events)} reorganize events", flush=True)

            t = Timings()
            t.patch(asof, "asof", ["live_many", "tag_neighbours", "vector_neighbours",
                                   "predecessor", "optimization_candidates"])
            t.patch(reorganize, "optimizer", ["follows"])
            t.patch(organize, "optimizer", ["organize", "neighbours", "plan_concept",
                                            "apply_concept", "write_inferred"])
            t.patch(optimize, "optimizer", ["optimize_scope"])
            t.patch(deps.query, "graph", ["get_nodes", "get_node", "find_nodes",
                                          "nodes_by_tags", "edges_from", "children"])
            t.patch(deps.query, "vectors", ["vectors"])
            t.patch(deps.store, "store", ["search", "add_edges", "write", "complete"])
            t.patch(deps.llm, "llm", ["run"])
            t.patch(deps.embedder, "embedder", ["embed_passages"])
            scopes = optimize.Scopes()
            per_event: list[float] = []
            t0 = time.perf_counter()
            for event in events:
                metering.enter(reorganize.STAGE, event.cube_id)
                started = time.perf_counter()
                if event.op == "add":
                    await optimize.run_windows(deps, scopes, event)
                    await reorganize.on_add(event, deps)
                per_event.append(time.perf_counter() - started)
            optimizer_s = time.perf_counter() - t0
            await worker.stop()

    print(f"optimizer: {len(events)} events in {optimizer_s:.1f}s "
          f"({1000 * optimizer_s / max(len(events), 1):.0f} ms/event): "
          f"{optimizer_s / ingest_s:.2f}× the ingestion that made them")
    quarter = max(len(per_event) // 4, 1)
    print("ms/event by quarter of the run: " + ", ".join(
        f"{1000 * sum(part) / len(part):.0f}" for k in range(4)
        if (part := per_event[k * quarter:(k + 1) * quarter])))
    print(f"\n{'step':<34}{'seconds':>9}{'share':>8}{'calls':>8}{'ms/call':>9}")
    for label, seconds in t.seconds.most_common():
        calls = t.calls[label]
        print(f"{label:<34}{seconds:>9.2f}{seconds / optimizer_s:>8.0%}{calls:>8}"
              f"{1000 * seconds / calls:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=400)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args.path, args.conversation, args.max_turns))


if __name__ == "__main__":
    main()
