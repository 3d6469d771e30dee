"""What bench/history.py does to a running deployment: `memstream up`/`down`, `load`, the
history's log behind the worker's back, ingestion, searches and replays.

Everything a user would do goes through the user's own path: the stack is started and
stopped with the ``memstream`` CLI on the bench's data dir, dumps go in with the ``load``
command and replays with the ``replay`` command (both run by the worker), chat chunks go to
the ``conversations`` topic through ``MemoryClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from history_data import Chunk, question
from load import cpu_seconds, passages_per_s, pct, settle

from memstream.archive.archiver import archive_once
from memstream.archive.segments import Archive
from memstream.client.client import ClientError, MemoryClient
from memstream.history.log_index import index_group
from memstream.local.broker import recorded_pid as broker_pid
from memstream.local.broker import running_broker
from memstream.local.falkordb import FalkorDBServer
from memstream.local.services import running_worker
from memstream.streams.replay.log import cube_partition
from memstream.topics.events import DeadLetter, DumpCube, LoadCube, ReplayCube, WriteToken
from memstream.topics.models import CubeGraph
from memstream.topics.registry import (
    CONVERSATIONS,
    DEAD_LETTER,
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    WORKING_MEMORY,
    consumer_group,
)
from memstream.topics.settings import Settings

# the worker as `memstream up` runs it, with the rules stand-in for the model (the default
# without an endpoint, set here so that a caller's MEMSTREAM_LLM__* cannot change it)
STACK_ENV = {"MEMSTREAM_LLM__PROVIDER": "rules"}


# --- the stack --------------------------------------------------------------------------


def cli(data: Path, *args: str) -> float:
    """Seconds ``memstream ARGS --data-dir DATA`` took; its output if it failed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    t0 = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "memstream", *args, "--data-dir", str(data)],
        env={**env, **STACK_ENV}, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"memstream {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took


@dataclass
class Running:
    """The processes of a stack `memstream up` started."""

    bootstrap: str
    worker: int
    broker: int
    graph: int | None

    def cpu(self) -> dict[str, float]:
        pids = {"worker": self.worker, "broker": self.broker, "graph": self.graph}
        return {k: cpu_seconds(p) for k, p in pids.items() if p is not None}


async def running(data: Path) -> Running:
    bootstrap = await running_broker(data / "broker")
    worker = running_worker(data)
    pid = broker_pid(data / "broker")
    if bootstrap is None or worker is None or pid is None:
        raise RuntimeError(f"the stack of {data} is not running (broker {bootstrap}, worker "
                           f"{worker}); see {data / 'worker.log'}")
    graph = FalkorDBServer.recorded(data / "falkordb")
    return Running(bootstrap, int(str(worker["pid"])), pid, graph[0] if graph else None)


async def commit_past(settings: Settings, bootstrap: str) -> None:
    """The worker's and the provenance indexer's groups committed past every record of the
    history's topics: the generated history is what a worker already applied and indexed
    (so the worker does not apply it again, and the archiver may move it)."""
    groups = {consumer_group(settings, CONVERSATIONS): (CONVERSATIONS, MEMORY_ITEMS),
              index_group(settings): (CONVERSATIONS, MEMORY_ITEMS, MEMORY_UPDATES)}
    for group, specs in groups.items():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            await consumer.topics()
            tps = [TopicPartition(s.name(settings), p) for s in specs
                   for p in sorted(consumer.partitions_for_topic(s.name(settings)) or ())]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            await consumer.commit({tp: end for tp, end in ends.items() if end > 0})
        finally:
            await consumer.stop()


async def failures(client: MemoryClient, tokens: Iterable[WriteToken]) -> list[str]:
    """The dead-letter errors of the commands behind ``tokens``."""
    wanted = {(t.topic, t.partition, t.offset) for t in tokens}
    return [letter.error for letter in await client.history(DEAD_LETTER)
            if isinstance(letter, DeadLetter) and (letter.original_topic,
                                                   letter.original_partition,
                                                   letter.original_offset) in wanted]


async def load_dumps(client: MemoryClient, folder: Path, cubes: Iterable[CubeGraph],
                     in_flight: int = 4) -> tuple[int, int]:
    """Each dump written to ``folder`` and loaded with the ``load`` command (as ``memstream
    load`` sends it), ``in_flight`` at a time; the file is removed once loaded. Returns
    (cubes, nodes); a failed load stops the run."""
    folder.mkdir(parents=True, exist_ok=True)
    pending: list[tuple[WriteToken, Path]] = []
    tokens: list[WriteToken] = []
    count = nodes = 0

    async def drain(keep: int) -> None:
        while len(pending) > keep:
            token, path = pending.pop(0)
            await client.wait_applied(token, timeout=1800)
            path.unlink(missing_ok=True)

    for cube in cubes:
        path = folder / f"{cube.cube_id}.json"
        await asyncio.to_thread(path.write_text, cube.model_dump_json(), "utf-8")
        token = await client.command(LoadCube(user_id=cube.cube_id, cube_id=cube.cube_id,
                                              path=str(path)))
        pending.append((token, path))
        tokens.append(token)
        count, nodes = count + 1, nodes + len(cube.nodes)
        await drain(in_flight - 1)
    await drain(0)
    if errors := await failures(client, tokens):
        raise RuntimeError(f"{len(errors)} loads failed, e.g. {errors[0]}")
    return count, nodes


# --- ingestion --------------------------------------------------------------------------


@dataclass
class Ingested:
    turns: int
    applied_s: float  # until the add stage applied the last chunk of every cube
    settled_s: float  # until every stage (optimizer included) took all its input
    cpu: dict[str, float]  # seconds over the whole of it, by process
    embedder_rate: float  # turns/s of the local embedder alone on the same texts

    @property
    def rate(self) -> float:
        return self.turns / self.settled_s

    @property
    def broker_share(self) -> float:
        return self.cpu.get("broker", 0.0) / max(self.cpu.get("worker", 0.0), 1e-9)


async def ingest(client: MemoryClient, settings: Settings, stack: Running,
                 live: Sequence[Chunk]) -> Ingested:
    """Every chunk of ``live`` published at once to ``conversations`` (each into both
    speakers' cubes), timed until applied and until the optimizer caught up."""
    cpu0, t0 = stack.cpu(), time.perf_counter()
    last: dict[str, WriteToken] = {}
    for c in live:
        for cube, (session, messages) in c.chats.items():
            last[cube] = await client.add_messages(cube, list(messages), session_id=session)
    for token in last.values():
        await client.wait_applied(token, timeout=7200)
    applied = time.perf_counter() - t0
    await settle(settings, stack.bootstrap, timeout_s=3600)
    settled = time.perf_counter() - t0
    cpu = {k: v - cpu0[k] for k, v in stack.cpu().items()}
    turns = sum(c.turns for c in live)
    return Ingested(turns, applied, settled, cpu, await embedder_rate(live))


async def embedder_rate(live: Sequence[Chunk]) -> float:
    """Turns per second the local embedder alone (every core) gets through what a turn needs
    at least: its text once in each of its cubes, each chunk's episode once per cube."""
    texts: list[str] = []
    for c in live:
        for _, messages in c.chats.values():
            texts += [m.content for m in messages]
            texts.append("\n".join(f"[{m.timestamp:%Y-%m-%d %H:%M}] {m.name}: {m.content}"
                                   for m in messages))
    return sum(c.turns for c in live) / (len(texts) / await passages_per_s(texts))


# --- searches ---------------------------------------------------------------------------


@dataclass
class Searched:
    ms: list[float]
    errors: int
    hits: int
    first: list[bool] = field(default_factory=list)  # per search: the cube's first since up

    def line(self, first: bool | None = None) -> str:
        """p50/p95/max ms of every search, or of the first (``first``) or later searches of
        their cube."""
        ms = self.ms if first is None else [
            m for m, f in zip(self.ms, self.first, strict=True) if f == first]
        return (f"{pct(ms, 50):.0f}/{pct(ms, 95):.0f}/"
                f"{max(ms, default=float('nan')):.0f}")


async def searches(client: MemoryClient, cubes: Sequence[str], n: int, seed: int) -> Searched:
    """``n`` fast searches (top 10), one at a time, of history cubes picked at random, each
    a question about what the cube's speaker talks about."""
    rng = random.Random(seed)
    with contextlib.suppress(ClientError):  # the reply path warmed, no history cube
        await client.search("history-warm-up", "hello", top_k=1)
    out = Searched([], 0, 0)
    seen: set[str] = set()
    for _ in range(n):
        cube = rng.choice(cubes)
        ask = question(rng, cube.split("-")[-1].title())
        t0 = time.perf_counter()
        try:
            found = await client.search(cube, ask, top_k=10, timeout=30)
        except ClientError:
            out.errors += 1
            continue
        out.ms.append((time.perf_counter() - t0) * 1000)
        out.first.append(cube not in seen)
        seen.add(cube)
        out.hits += len(found)
    return out


# --- replay -----------------------------------------------------------------------------


def view(cube: CubeGraph) -> dict[str, Any]:
    """What the stores hold of a cube, without usage (searches record it; a replay has none
    to repeat): nodes as JSON, edges, and each vector at 4 decimals (float32 round trips
    agree to far more), as tests/e2e/test_replay_recorded_log.py compares them."""
    return {
        "nodes": {n.id: json.loads(n.model_dump_json(exclude={"metadata": {"usage"}}))
                  for n in cube.nodes},
        "edges": sorted([e.source, e.target, e.type] for e in cube.edges),
        "vectors": {k: [round(x, 4) for x in v] for k, v in cube.vectors.items()},
    }


async def dumped(client: MemoryClient, cube: str, path: Path) -> dict[str, Any]:
    """The cube as ``memstream dump`` writes it (by the worker, which owns the stores)."""
    token = await client.command(DumpCube(user_id=cube, cube_id=cube, path=str(path)))
    await client.wait_applied(token, timeout=600)
    if errors := await failures(client, [token]):
        raise RuntimeError(f"dump of {cube} failed: {errors[0]}")
    graph = CubeGraph.model_validate_json(await asyncio.to_thread(path.read_text, "utf-8"))
    path.unlink()
    return view(graph)


async def archive_now(settings: Settings, bootstrap: str) -> int:
    """The worker's archive round run now with no window and no minimum (every record
    already passed by every group moves to segments), so that a replay reads segments and
    broker; returns the records it moved. A round the worker is running meanwhile is waited
    for."""
    now = settings.model_copy(update={"archive": settings.archive.model_copy(
        update={"min_records": 1})})
    for _ in range(120):
        done = await archive_once(now, bootstrap, after_s=0)
        if not done.skipped:
            return sum(done.archived.values())
        await asyncio.sleep(1)
    raise RuntimeError(f"the archive stayed busy for 2 minutes: {done.skipped}")


async def replay(client: MemoryClient, cubes: Sequence[str]) -> tuple[float, list[str]]:
    """Seconds to replay ``cubes`` (each dropped and rebuilt from the whole log, segments
    and broker, by ``replay`` commands sent at once), and the failures."""
    t0 = time.perf_counter()
    tokens = [await client.command(ReplayCube(user_id=cube)) for cube in cubes]
    for token in tokens:
        await client.wait_applied(token, timeout=24 * 3600)
    took = time.perf_counter() - t0
    return took, await failures(client, tokens)


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What a replay changed in a cube's view (empty: identical), each as ``kind: detail``."""
    def said(nodes: dict[str, Any], k: str) -> str:
        return f"{k} {nodes[k]['memory'][:50]!r}"

    def kind(nodes: dict[str, Any], k: str) -> str:
        meta = nodes[k]["metadata"]
        return f"{meta['memory_type']} {meta['hierarchy_level']}"

    out = []
    b, a = before["nodes"], after["nodes"]
    out += [f"node only before, {kind(b, k)}: {said(b, k)}" for k in sorted(b.keys() - a.keys())]
    out += [f"node only after, {kind(a, k)}: {said(a, k)}" for k in sorted(a.keys() - b.keys())]
    for k in sorted(b.keys() & a.keys()):
        if b[k] != a[k]:
            fields = sorted(f for f in b[k]["metadata"]
                            if b[k]["metadata"][f] != a[k]["metadata"].get(f))
            out.append(f"node differs in {fields or 'its text'}: {said(b, k)}")
    b, a = before["vectors"], after["vectors"]
    out += [f"vector differs or is missing: {k}" for k in sorted(b.keys() | a.keys())
            if b.get(k) != a.get(k)]
    nodes = {**after["nodes"], **before["nodes"]}

    def end(k: str) -> str:  # an edge's end, with its text when the cube holds it
        meta = nodes[k]["metadata"] if k in nodes else {}
        return f"{said(nodes, k)} ({meta.get('status')})" if k in nodes else k

    b_edges = {tuple(e) for e in before["edges"]}
    a_edges = {tuple(e) for e in after["edges"]}
    out += [f"edge only before, {e[2]}: {end(e[0])} -> {end(e[1])}"
            for e in sorted(b_edges - a_edges)]
    out += [f"edge only after, {e[2]}: {end(e[0])} -> {end(e[1])}"
            for e in sorted(a_edges - b_edges)]
    return out


def in_segments(settings: Settings, cubes: Sequence[str]) -> int:
    """The records of ``cubes`` a replay reads from segment files (its partitions of
    ``memory.items``, ``memory.commands`` and ``working-memory``)."""
    archive = Archive(settings.data_dir)
    return sum(1 for cube in cubes for spec in (MEMORY_ITEMS, MEMORY_COMMANDS, WORKING_MEMORY)
               for _ in archive.read(spec.name(settings),
                                     cube_partition(cube, settings.kafka.partitions),
                                     key=cube.encode()))
