"""Scheduler latency: a `query` message to its `working-memory` event, next to the searches;
and, on LoCoMo-format conversations, what working memory holds of each question's evidence.

    python bench/scheduler.py [--cubes 20] [--per-cube 500] [--queries 100]
    python bench/scheduler.py --dev PATH --reuse DIR [--only ID] [--questions N]

``--dev``: the stores ``bench/retrieval_quality.py PATH --reuse DIR`` ingested (one cube per
speaker); each question is sent as a ``query`` to both speakers' cubes, one question after
another as a user would ask them (default scheduler settings: the decision whether to
retrieve is the scheduler's). Once both are handled (and a refresh applied), the two
working memories (N items together) are read back and credited with the turns their items
cite; in the same run a fast search of both cubes returning N items is credited the same way
(``bench/retrieval_quality.py``'s merge). Printed: evidence recall of both, their ratio
(goal >= 0.95), and the refresh latency, query published to working memory applied.

Loads cubes × memories straight into the embedded stores (loading is not measured),
starts a worker (``rules`` LLM, local e5 embedder) and publishes queries one at a
time, each to a random cube. Every query retrieves (the timed trigger is set to fire
always), so each one runs the whole path: keywords, decision, searches of
LongTermMemory and UserMemory, dedupe, rerank, filter, the replacement event, and
the sink applying it. Printed per query, in the same run:

- search calls alone: the Searcher calls the scheduler made for that query,
- scheduler handler: the whole query handler inside the worker,
- query → working-memory event: publish to the event's arrival at a consumer,
- query → applied: publish to the sink's ``working_memory_replaced`` announcement.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.arrivals import Arrivals  # noqa: E402
from bench.search import make_nodes, memory_texts, pct  # noqa: E402
from memstream.client.client import MemoryClient  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.sinks.vector.cache import CachedVectorStore  # noqa: E402
from memstream.streams.core.working_memory import working_copy  # noqa: E402
from memstream.streams.scheduler.agent import SchedulerStats  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import MemoryUpdate, ScheduleMessage  # noqa: E402
from memstream.topics.ids import derived_event_id  # noqa: E402
from memstream.topics.registry import MEMORY_UPDATES, SCHEDULE_QUERY, WORKING_MEMORY  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

QUERIES = ["what should I cook tonight?", "where does Ana live?",
           "which sport should I try this weekend?", "any ideas for a trip to Kyoto?",
           "who could join me for chess?", "用户喜欢喝什么茶？", "what did Ben recommend?",
           "plan my Saturday around yoga", "what gift would Hana like?", "travel plans"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cubes", type=int, default=20)
    parser.add_argument("--per-cube", type=int, default=500)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--dev", type=Path, metavar="PATH",
                        help="LoCoMo-format file: working memory against search per question")
    parser.add_argument("--reuse", type=Path, help="with --dev: retrieval_quality.py's data dir")
    parser.add_argument("--only", action="append", default=[], metavar="SAMPLE_ID")
    parser.add_argument("--questions", type=int, default=0, help="with --dev: the first N")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.dev is not None:
        if args.reuse is None or not (args.reuse / "retrieval-quality.json").is_file():
            parser.error("--dev needs --reuse DIR holding a finished retrieval_quality.py "
                         "ingestion of the same file")
        from scheduler_dev import dev_split  # noqa: PLC0415 - only this mode needs it

        await dev_split(args.dev, args.reuse, args.only, args.questions)
        return
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="memstream-bench-") as tmp:
        settings = Settings(data_dir=Path(tmp), kafka={"partitions": 4},
                            scheduler={"retrieval_interval_s": 1e-6})  # every query retrieves
        async with EmbeddedStack(settings) as stack:
            loader = Worker(settings, stack.bootstrap, stack.graph_uri)
            deps = await loader.open_deps()
            texts = memory_texts(args.per_cube)
            vectors = await deps.embedder.embed_passages(texts)
            t0 = time.perf_counter()
            for c in range(args.cubes):
                rows = [(n, v.tolist()) for n, v in
                        zip(make_nodes(f"cube{c}", texts), vectors, strict=True)]
                await deps.store.write(rows + [(working_copy(n), v) for n, v in rows[-20:]])
            print(f"loaded {args.cubes} cubes × {args.per_cube} memories in "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
            await loader.stop()

            replaced = Arrivals(stack.bootstrap, WORKING_MEMORY.name(settings),
                                WORKING_MEMORY.value)
            applied = Arrivals(stack.bootstrap, MEMORY_UPDATES.name(settings), MemoryUpdate)
            async with Worker(settings, stack.bootstrap, stack.graph_uri) as worker, \
                    MemoryClient(settings, stack.bootstrap) as client:
                assert worker.deps is not None
                if isinstance(worker.deps.store.vectors, CachedVectorStore):  # steady state: warm
                    for c in range(args.cubes):
                        await worker.deps.store.vectors.warm(f"cube{c}")
                await replaced.start()
                await applied.start()
                stats = worker.stats["scheduler"]
                assert isinstance(stats, SchedulerStats)
                to_event: list[float] = []
                to_applied: list[float] = []
                for i in range(args.queries + 5):  # the first 5 warm up
                    msg = ScheduleMessage(user_id=f"cube{rng.randrange(args.cubes)}",
                                          label="query",  # a new text each time, like a user
                                          content=f"{rng.choice(QUERIES)} (turn {i})")
                    wanted = derived_event_id("working-memory", msg.event_id)
                    t0 = time.perf_counter()
                    await client.publish(SCHEDULE_QUERY, msg)
                    t_event = await replaced.wait(wanted)
                    t_applied = await applied.wait(wanted)
                    if i >= 5:
                        to_event.append(t_event - t0)
                        to_applied.append(t_applied - t0)
                traces = list(stats.traces)[5:]
                await replaced.stop()
                await applied.stop()
    assert all(t.retrieved for t in traces) and len(traces) == len(to_event)
    search = [t.search_s for t in traces]
    handler = [t.total_s for t in traces]
    rows = [("search calls alone (LongTermMemory + UserMemory)", search),
            ("scheduler handler (whole query)", handler),
            ("query → working-memory event", to_event),
            ("query → applied (working_memory_replaced)", to_applied)]
    print(f"{'path':<50}{'p50 ms':>9}{'p95 ms':>9}")
    for name, samples in rows:
        print(f"{name:<50}{pct(samples, 50):>9.1f}{pct(samples, 95):>9.1f}")
    print(f"ratio to the searches: handler p50 {pct(handler, 50) / pct(search, 50):.2f}×, "
          f"event p50 {pct(to_event, 50) / pct(search, 50):.2f}×, "
          f"p95 {pct(to_event, 95) / pct(search, 95):.2f}×; n={len(to_event)}")


if __name__ == "__main__":
    asyncio.run(main())
