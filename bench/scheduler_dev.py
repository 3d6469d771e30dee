"""``bench/scheduler.py --dev``: working memory against a search of as many items, per question.

Kept apart from the latency bench because it needs a finished ``retrieval_quality.py``
ingestion and that bench's loading, merging and crediting (the same rules for both sides).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
from arrivals import Arrivals
from retrieval_quality import (
    DEFAULT_SKIP,
    Conversation,
    Question,
    cube_of,
    load,
    memstream_hits,
    settle,
)
from rq_baselines import Hit, recall_at

from memstream.client.client import MemoryClient
from memstream.local import broker
from memstream.local.stack import EmbeddedStack
from memstream.streams.scheduler.agent import SchedulerStats
from memstream.streams.worker import Worker
from memstream.topics.events import ScheduleMessage
from memstream.topics.ids import derived_event_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES, SCHEDULE_QUERY
from memstream.topics.settings import Settings


def held(items: list[MemoryItem]) -> list[Hit]:
    """Working-memory items credited like search hits: each with the turns it cites."""
    return [Hit(frozenset(s.message_id for s in i.metadata.sources
                          if s.kind == "message" and s.message_id), len(i.memory))
            for i in items]


class SealedUpdates:
    """``Arrivals`` decodes with ``model_validate_json``: memory.updates values are sealed
    with the cube's key when erasure is on, so they are read through the topic's spec."""

    @staticmethod
    def model_validate_json(raw: bytes) -> object:
        return MEMORY_UPDATES.decode(raw)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) * 1000 if values else float("nan")


async def dev_split(path: Path, data: Path, only: list[str], limit: int) -> None:

    convs: list[Conversation] = load(path, {int(c) for c in DEFAULT_SKIP.split(",")})
    if only:
        convs = [c for c in convs if c.name in only]
    marker = json.loads((data / "retrieval-quality.json").read_text())["done"]
    if marker["path"] != str(path.resolve()):
        raise SystemExit(f"{data} holds an ingestion of {marker['path']}, not {path}")
    pairs = [(c, q) for c in convs for q in c.questions][: limit or None]
    print(f"{len(pairs)} questions over {len(convs)} conversations, asked one after another "
          "in both speakers' cubes", flush=True)
    settings = Settings(data_dir=data, kafka={"partitions": 4})
    # a broker replaying a large log on a busy machine needs longer than 30 s to answer
    assert broker.create_broker.__kwdefaults__ is not None
    broker.create_broker.__kwdefaults__["startup_timeout_s"] = 300.0
    async with EmbeddedStack(settings) as stack:
        applied = Arrivals(stack.bootstrap, MEMORY_UPDATES.name(settings), SealedUpdates)
        async with Worker(settings, stack.bootstrap, stack.graph_uri) as worker, \
                MemoryClient(settings, stack.bootstrap) as client:
            await settle(settings, stack.bootstrap)
            stats = worker.stats["scheduler"]
            assert isinstance(stats, SchedulerStats)
            await applied.start()
            wm_recall: list[float] = []
            search_recall: list[float] = []
            sizes: list[int] = []
            refresh: list[float] = []
            searches: list[float] = []
            refreshed = 0
            for n, (conv, q) in enumerate(pairs, 1):
                refreshed += await ask(client, stats, applied, conv, q, refresh)
                items = [i for s in conv.speakers
                         for i in await client.working_memory(cube_of(conv, s))]
                size = len(items)
                found = await memstream_hits(client, conv, q, size, searches) if size else []
                sizes.append(size)
                wm_recall.append(recall_at(held(items), q.evidence, size) if size else 0.0)
                search_recall.append(recall_at(found, q.evidence, size) if size else 0.0)
                if n % 10 == 0:
                    print(f"  {n}: working memory {np.mean(wm_recall):.3f}, search "
                          f"{np.mean(search_recall):.3f}, refresh p50 {pct(refresh, 50):.0f} ms",
                          flush=True)
            await applied.stop()
    wm, srch = float(np.mean(wm_recall)), float(np.mean(search_recall))
    print(f"\nitems held by both working memories per question: mean {np.mean(sizes):.1f}, "
          f"min {min(sizes)}, max {max(sizes)}")
    print(f"{'evidence recall at N items':<44}{'recall':>8}")
    print(f"{'working memory after the query label':<44}{wm:>8.3f}")
    print(f"{'fast search, both cubes, N items':<44}{srch:>8.3f}")
    print(f"working memory / search: {wm / srch:.2f}x (goal >= 0.95)")
    print(f"refreshes: {refreshed} of {2 * len(pairs)} queries; query -> applied p50 "
          f"{pct(refresh, 50):.0f} ms, p95 {pct(refresh, 95):.0f} ms, max "
          f"{max(refresh, default=0) * 1000:.0f} ms (goal p50 <= 500)")
    print(f"search p50 {pct(searches, 50):.0f} ms, p95 {pct(searches, 95):.0f} ms "
          f"({len(searches)} searches)")


async def ask(client: MemoryClient, stats: SchedulerStats, applied: object, conv: Conversation,
              q: Question, refresh: list[float]) -> int:
    """The question as a ``query`` in both cubes; waits until each is handled and, when it
    refreshed, applied. Returns how many refreshed."""
    sent = []
    for speaker in conv.speakers:
        cube = cube_of(conv, speaker)
        msg = ScheduleMessage(user_id=cube, label="query", content=q.text)
        sent.append((msg, time.perf_counter()))
        await client.publish(SCHEDULE_QUERY, msg)
    done = 0
    for msg, t0 in sent:
        deadline = time.perf_counter() + 120
        trace = None
        while trace is None:
            trace = next((t for t in reversed(stats.traces) if t.event_id == msg.event_id),
                         None)
            if time.perf_counter() > deadline:
                raise TimeoutError(f"query {msg.event_id} not handled in 120 s")
            await asyncio.sleep(0.005)
        if trace.retrieved:
            wanted = derived_event_id("working-memory", msg.event_id)
            refresh.append(await applied.wait(wanted) - t0)  # type: ignore[attr-defined]
            done += 1
    return done
