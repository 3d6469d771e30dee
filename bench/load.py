"""A long multi-session conversation load: Kafka path vs in-process, stalls, search, RSS.

    python bench/load.py PATH [--conversations N] [--max-turns N] [--chunk 5]
    python bench/load.py PATH --sustained [--minutes 5] [--rates 0.5,1,2,4]

PATH is a LoCoMo-format JSON file (such as the LoCoMo dev split; read
its README for the licence; never copy it into the repository). Every conversation goes
into one cube per speaker, in chunks of ``--chunk`` turns (the cube's speaker as ``user``),
as bench/retrieval_quality.py publishes them. ``--max-turns`` cuts each conversation for a
quick run.

Default mode, one run on the embedded default (noida-db, FalkorDB, Milvus Lite, rules LLM,
local e5 embedder), the worker in its own process (``memstream worker``), as `memstream up`
runs it:

1. in-process: the same extraction and add-stage writes (capacity evictions included)
   called directly in this process (no Kafka, no optimizer, no searches), chunk by chunk,
   batched per cube like the worker, each cube's work in that cube's scope as the worker
   runs it (the embedding cache is per cube: the two speakers' cubes hold the same
   episode texts, embedded once for each);
2. through Kafka: every chunk is published at once (a backlog far larger than a batch),
   and the run waits until the add stage applied the last chunk of every cube. Meanwhile:
   the longest time any input partition of any stage waited with records pending and no
   commit (polled every second), fast searches of the ingested cubes one after another
   (p50/p95/max), and the worker's RSS. Then, by quarter of the ingestion, the search p95
   in that quarter, the worker's RSS and the broker's data directory at its end, and the
   worker log's stall warnings: run on the whole dev split (three conversations back to
   back), this is the soak — each should stay flat or grow with what was ingested.

Turns/s = turns published / seconds; memories/s = long-term + user nodes stored / seconds
(the same count for both paths). Goals (issue #15): Kafka ≥ 0.75× in-process, longest wait
< 10 s, search p95 < 150 ms and max < 1 s.

``--sustained``: publish at a fixed input rate (turns/s, each rate for ``--minutes``),
rate after rate; a rate holds when the worker's total lag (every stage, optimizer
included) stops growing: its mean over the last quarter of the window is at most 1.25× its
mean over the second quarter, or under 20 records. Prints the lag and the worker's RSS every
30 s, and the highest rate that held.

``--profile FILE`` records the worker with py-spy (speedscope format) during the Kafka
path; ``--worker-log FILE`` keeps the worker's log (faust's stall warnings land there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import TopicPartition  # noqa: E402
from retrieval_quality import Conversation, Turn, cube_of, load  # noqa: E402

from memstream.client.client import MemoryClient, MemoryServiceError  # noqa: E402
from memstream.kafka.admin import _admin, _offsets_reader  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.sinks.graph.factory import create_graph_store  # noqa: E402
from memstream.sinks.ports import Filter  # noqa: E402
from memstream.streams import metering  # noqa: E402
from memstream.streams.extraction.logic import STAGE as EXTRACTION  # noqa: E402
from memstream.streams.extraction.logic import extract_chunk  # noqa: E402
from memstream.streams.memory.logic import STAGE as ADD  # noqa: E402
from memstream.streams.memory.logic import add_memories  # noqa: E402
from memstream.streams.runtime.stage import Deps, Outgoing, RawRecord, Record  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import ConversationChunk, ExtractedMemory, Message, Origin, WriteToken  # noqa: E402
from memstream.topics.registry import WORKER_INPUTS, consumer_group  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

STORED_TYPES = ("LongTermMemory", "UserMemory")
# records: a lag this small is bounded whatever its trend. One 5-turn chunk puts ~40 records
# through the stages (chat chunk, ~12 items, their reorganize events and working-memory
# copies); at 20 a 5-minute run at 2 turns/s, lag 0-59 and a slope of +0.06 records/s,
# was called growing.
SMALL_LAG = 100


# --- the load ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    cube: str
    session: str
    turns: tuple[Turn, ...]
    speaker: str

    def messages(self) -> list[Message]:
        return [Message(id=t.dia_id, role="user" if t.speaker == self.speaker else "assistant",
                        name=t.speaker, content=t.text, timestamp=t.at) for t in self.turns]


def chunks_of(conv: Conversation, chunk: int, max_turns: int | None,
              suffix: str = "") -> dict[str, list[Chunk]]:
    """Every cube's chunks in conversation order (one cube per speaker)."""
    turns = conv.turns[:max_turns] if max_turns else conv.turns
    out: dict[str, list[Chunk]] = {}
    for speaker in conv.speakers:
        cube = cube_of(conv, speaker) + suffix
        by_session: dict[str, list[Turn]] = defaultdict(list)
        for turn in turns:
            by_session[turn.session].append(turn)
        out[cube] = [Chunk(cube, session, tuple(ts[i:i + chunk]), speaker)
                     for session, ts in by_session.items() for i in range(0, len(ts), chunk)]
    return out


def interleave(per_cube: dict[str, list[Chunk]]) -> list[Chunk]:
    """Round-robin over the cubes: the cubes of a conversation fill at the same pace."""
    lists = list(per_cube.values())
    return [c for i in range(max(map(len, lists), default=0)) for lst in lists
            if i < len(lst) for c in [lst[i]]]


# --- settings and the worker process ----------------------------------------------------


def bench_settings(data: Path, label: str, bootstrap: str, graph_uri: str) -> Settings:
    """Settings of one path of the run: its own app id, topics, graph and collection."""
    tag = f"{label}{uuid.uuid4().hex[:6]}"
    (data / tag).mkdir(parents=True, exist_ok=True)
    return Settings(
        data_dir=data / tag, app_id=f"load-{tag}",
        kafka={"bootstrap_servers": bootstrap, "topic_prefix": f"{tag}."},
        graph={"uri": graph_uri, "database": f"load_{tag}"},
        vector={"uri": str(data / f"{tag}.db"), "collection": f"load_{tag}"},
    )


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a ``memstream worker`` process these settings."""
    v = settings.vector
    env = {
        "MEMSTREAM_APP_ID": settings.app_id,
        "MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers or "",
        "MEMSTREAM_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
        "MEMSTREAM_GRAPH__URI": settings.graph.uri or "",
        "MEMSTREAM_GRAPH__DATABASE": settings.graph.database,
        "MEMSTREAM_VECTOR__URI": v.uri or "",
        "MEMSTREAM_VECTOR__COLLECTION": v.collection,
    }
    if v.token:
        env["MEMSTREAM_VECTOR__TOKEN"] = v.token.get_secret_value()
    if settings.erasure.enabled:  # sealed values: the worker opens them with the same keys
        env["MEMSTREAM_ERASURE__ENABLED"] = "true"
        if settings.erasure.key_dir is not None:
            env["MEMSTREAM_ERASURE__KEY_DIR"] = str(settings.erasure.key_dir)
    return env


@dataclass
class WorkerProcess:
    """``memstream worker`` for ``settings`` in its own process (its log to ``log_path``)."""

    settings: Settings
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_from: int = 0  # where this start's lines begin in the log (a reused dir appends)

    def said(self, *lines: str) -> str | None:
        """The first line this start of the worker logged containing one of ``lines``."""
        with self.log_path.open("rb") as log:
            log.seek(self.log_from)
            for line in log.read().decode(errors="replace").splitlines():
                if any(want in line for want in lines):
                    return line
        return None

    async def wait_for(self, *lines: str, timeout_s: float = 600.0) -> str:
        """Wait until this start logs a line containing one of ``lines``; returns it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (line := self.said(*lines)) is not None:
                return line
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({self.proc.returncode}); see "
                                   f"{self.log_path}")
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the worker logged none of {lines} within {timeout_s:.0f}s; see "
                           f"{self.log_path}")

    async def start(self, timeout_s: float = 180.0) -> None:
        env = {**os.environ, **settings_env(self.settings), **self.extra_env,
               # the repository first, then the caller's own path (a profiling hook)
               "PYTHONPATH": os.pathsep.join(filter(None, (
                   str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH"))))}
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        out = self.log_path.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "memstream", "worker", "--data-dir",
             str(self.settings.data_dir)], env=env, stdout=out, stderr=subprocess.STDOUT)
        await self.wait_for("memstream worker running", timeout_s=timeout_s)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    return []


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants (Milvus Lite runs as a child), MB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        todo += _children(p)
    return total / 1024


# --- watching the consumer groups -------------------------------------------------------


@dataclass
class StallWatch:
    """Per input partition of every stage: how long records waited with no commit."""

    since: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    longest: float = 0.0
    where: str = ""
    total_lag: int = 0
    lag_by_topic: dict[str, int] = field(default_factory=dict)

    def observe(self, now: float, offsets: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.total_lag = 0
        self.lag_by_topic = {}
        for tp, (committed, end) in offsets.items():
            if end <= committed:
                self.since.pop(tp, None)
                continue
            self.total_lag += end - committed
            topic = tp[0].split(".", 1)[-1]  # without the run's topic prefix
            self.lag_by_topic[topic] = self.lag_by_topic.get(topic, 0) + end - committed
            seen = self.since.get(tp)
            if seen is None or seen[0] != committed:  # new pending records, or progress
                self.since[tp] = (committed, now)
                continue
            waited = now - seen[1]
            if waited > self.longest:
                self.longest, self.where = waited, f"{tp[0]}[{tp[1]}]"


@contextlib.asynccontextmanager
async def group_offsets(settings: Settings, bootstrap: str) -> AsyncIterator[Any]:
    """A reader of (committed, end) for every input partition of every stage's group."""
    groups: dict[str, list[str]] = {}
    for spec in WORKER_INPUTS:
        if spec.suffix.startswith("reorganize.") and not settings.reorganize.enabled:
            continue  # no worker consumes them
        groups.setdefault(consumer_group(settings, spec), []).append(spec.name(settings))
    async with _admin(bootstrap, "memstream-load-bench") as admin, \
            _offsets_reader(bootstrap) as reader:

        async def read() -> dict[tuple[str, int], tuple[int, int]]:
            out: dict[tuple[str, int], tuple[int, int]] = {}
            await reader.topics()
            for group, names in groups.items():
                tps = [TopicPartition(t, p) for t in names
                       for p in sorted(reader.partitions_for_topic(t) or ())]
                if not tps:
                    continue
                committed = await admin.list_consumer_group_offsets(group, partitions=tps)
                ends = await reader.end_offsets(tps)
                starts = await reader.beginning_offsets(tps)
                for tp in tps:
                    meta = committed.get(tp)
                    base = meta.offset if meta is not None and meta.offset >= 0 else starts[tp]
                    out[(tp.topic, tp.partition)] = (base, ends[tp])
            return out

        yield read


# --- the two paths ----------------------------------------------------------------------


async def stored_memories(settings: Settings, graph_uri: str, cubes: Sequence[str]) -> int:
    """Long-term and user facts the add stage stored (any status: merged ones count), not
    what the optimizer derives (concepts, topics, inferences), which in-process lacks."""
    graph = create_graph_store(settings, graph_uri)
    try:
        total = 0
        for cube in cubes:
            total += len(await graph.find_nodes(cube, [
                Filter("memory_type", "in", list(STORED_TYPES)),
                Filter("hierarchy_level", "=", "fact"), Filter("type", "!=", "reasoning")]))
        return total
    finally:
        await graph.close()


async def extract_in_process(deps: Deps, c: Chunk, offset: int
                             ) -> list[Record[ExtractedMemory]]:
    """The extraction stage's items of one chunk, called directly."""
    chunk = ConversationChunk(user_id=c.cube, session_id=c.session, messages=tuple(c.messages()))
    origin = Origin(topic="load", partition=0, offset=offset)
    # The worker's batch handler runs each cube's work in that cube's scope, which is also
    # what keys the embedding cache: without it, the two speakers' cubes shared cached
    # vectors (the same episode text in both), which a worker never does.
    metering.enter(EXTRACTION, c.cube)
    items = await extract_chunk(chunk, origin, deps)
    raw = RawRecord("load", 0, offset, c.cube.encode(), None)
    return [Record(it, origin, raw) for it in items]


async def add_in_process(deps: Deps, records: list[Record[ExtractedMemory]]) -> list[Outgoing]:
    """The add stage's writes of one cube's records, its capacity evictions included (a
    worker carries them out once their announcement is sent); returns the events it would
    publish, which are not sent."""
    metering.enter(ADD, records[0].value.cube_id)
    outs = await add_memories(records, deps)
    for out in outs:
        if out.then is not None:
            await out.then()
    return outs


async def in_process(settings: Settings, bootstrap: str, graph_uri: str,
                     chunks: Sequence[Chunk]) -> float:
    """Seconds for the extraction and add-stage writes of ``chunks``, called directly."""
    worker = Worker(settings, bootstrap, graph_uri)
    deps = await worker.open_deps()
    await deps.embedder.embed_passages(["warm up"])  # the model loads on first use
    batch = settings.worker.batch_size

    t0 = time.perf_counter()
    pending: dict[str, list[Record[ExtractedMemory]]] = {}
    for i, c in enumerate(chunks):
        pending.setdefault(c.cube, []).extend(await extract_in_process(deps, c, i))
        if sum(len(v) for v in pending.values()) >= batch:
            for records in pending.values():
                await add_in_process(deps, records)
            pending.clear()
    for records in pending.values():
        await add_in_process(deps, records)
    elapsed = time.perf_counter() - t0
    await worker.stop()
    return elapsed


SERVICES: dict[str, int] = {}  # the embedded broker's and graph server's pids (main sets it)
BROKER_DIR: Path | None = None  # the embedded broker's data directory (main sets it)
# what a worker log says when something is stuck (faust's stall detector, the lane, timers)
STALL_WORDS = ("has not started processing", "stopped processing", "is slow",
               "livelock", "not processed", "stalled")


def dir_mb(path: Path) -> float:
    """Size of the files under ``path`` (a file being rewritten may vanish meanwhile)."""
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):
            if f.is_file():
                total += f.stat().st_size
    return total / 1e6


def stability(run: KafkaRun, t0: float, log_path: Path) -> list[str]:
    """Per quarter of the ingestion: search p95, worker RSS and broker data at its end;
    and the worker log's stall warnings. Flat or growing with what was ingested, not with
    time, is what a long run needs (issue: the soak)."""
    lines = ["by quarter of the ingestion (end of quarter: worker RSS, broker data; searches "
             "in it: p95):"]
    end = run.elapsed
    for q in range(4):
        lo, hi = end * q / 4, end * (q + 1) / 4
        ms = [d * 1000 for d, at in zip(run.searches, run.search_at, strict=True)
              if lo <= at - t0 < hi]
        rss = [m for t, m in run.rss if t < hi]
        broker = [m for t, m in run.broker_mb if t < hi]
        lines.append(f"  Q{q + 1} ({lo:.0f}-{hi:.0f}s): RSS {rss[-1] if rss else float('nan'):.0f}"
                     f" MB, broker {broker[-1] if broker else float('nan'):.1f} MB, search p95 "
                     f"{pct(ms, 95):.0f} ms (n={len(ms)})")
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    stalls = [ln for ln in text.splitlines()
              if ("WARNING" in ln or "ERROR" in ln) and any(w in ln for w in STALL_WORDS)]
    lines.append(f"stall warnings in the worker log: {len(stalls)}"
                 + (f" (first: {stalls[0][:160]})" if stalls else ""))
    return lines


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def cpu_line(before: dict[str, float], after: dict[str, float], turns: int) -> str:
    used = {k: after[k] - before[k] for k in before}
    worker = used.get("worker", 0.0) or float("nan")
    parts = [f"{k} {v:.0f} s ({v / turns * 100:.1f} s per 100 turns)" for k, v in used.items()]
    return ("CPU: " + ", ".join(parts) + f"; broker / worker {used.get('broker', 0) / worker:.2f} "
            f"(goal ≤ 0.15), graph / worker {used.get('graph', 0) / worker:.2f}")


@dataclass
class RSSWatch:
    """The resident memory of ``pid``, sampled every second while ``run`` runs."""

    pid: int
    samples: list[float] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            self.samples.append(rss_mb(self.pid))
            await asyncio.sleep(1.0)


async def passages_per_s(texts: Sequence[str]) -> float:
    """Seconds the local embedder alone (every core, the model loaded first) takes over
    ``texts`` as passages, as a rate: texts per second."""
    from memstream.streams.embed.local import LocalEmbedder

    embedder = LocalEmbedder(threads=None)
    await embedder.embed_passages(list(texts[:8]))  # load the model first
    t0 = time.perf_counter()
    await embedder.embed_passages(list(texts))
    elapsed = time.perf_counter() - t0
    await embedder.close()
    return len(texts) / elapsed


async def embedder_rate(chunks: Sequence[Chunk]) -> tuple[float, int]:
    """Turns per second the local embedder alone sustains on every core for what a turn
    needs at least (its text once in each of its cubes, each chunk's episode once), over
    the same chunks; and how many texts that was. The simple alternative's ingestion."""
    texts: list[str] = []
    episodes: set[str] = set()
    for c in chunks:
        texts += [t.text for t in c.turns]
        episodes.add("\n".join(f"[{t.at:%Y-%m-%d %H:%M}] {t.speaker}: {t.text}"
                               for t in c.turns))
    texts += sorted(episodes)
    per_text = await passages_per_s(texts)
    return sum(len(c.turns) for c in chunks) / (len(texts) / per_text), len(texts)


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass
class KafkaRun:
    elapsed: float = 0.0
    settle: float = 0.0
    searches: list[float] = field(default_factory=list)
    search_at: list[float] = field(default_factory=list)  # when each search started (s)
    search_errors: int = 0
    rss: list[tuple[float, float]] = field(default_factory=list)
    broker_mb: list[tuple[float, float]] = field(default_factory=list)  # its data dir
    watch: StallWatch = field(default_factory=StallWatch)
    cpu: str = ""
    t0: float = 0.0


async def watch_loop(settings: Settings, bootstrap: str, pid: int, run: KafkaRun,
                     stop: asyncio.Event, t0: float, every_s: float = 1.0,
                     report_s: float | None = None) -> None:
    last_report = 0.0
    async with group_offsets(settings, bootstrap) as read:
        while not stop.is_set():
            now = time.perf_counter()
            with contextlib.suppress(Exception):
                run.watch.observe(now, await read())
            run.rss.append((now - t0, rss_mb(pid)))
            if BROKER_DIR is not None:
                run.broker_mb.append((now - t0, dir_mb(BROKER_DIR)))
            if report_s is not None and now - last_report >= report_s:
                last_report = now
                where = ", ".join(f"{topic} {n}" for topic, n in sorted(
                    run.watch.lag_by_topic.items(), key=lambda kv: -kv[1]))
                print(f"  t={now - t0:6.0f}s  lag {run.watch.total_lag:6d}  "
                      f"worker RSS {run.rss[-1][1]:6.0f} MB"
                      f"{f'  ({where})' if where else ''}", flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)


async def search_loop(client: MemoryClient, questions: dict[str, list[str]], run: KafkaRun,
                      stop: asyncio.Event, rng: random.Random, interval_s: float) -> None:
    """One search at a time, starting one every ``interval_s`` (a user asking now and then)."""
    cubes = list(questions)
    if interval_s <= 0:
        return
    while not stop.is_set():
        cube = rng.choice(cubes)
        t = time.perf_counter()
        try:
            with contextlib.suppress(MemoryServiceError):  # an answer: no memories yet
                await client.search(cube, rng.choice(questions[cube]), top_k=10, timeout=30)
            run.searches.append(time.perf_counter() - t)
            run.search_at.append(t)
        except Exception:  # noqa: BLE001 - counted and shown
            run.search_errors += 1
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), max(interval_s - (time.perf_counter() - t), 0))


async def settle(settings: Settings, bootstrap: str, timeout_s: float) -> float:
    """Seconds until every stage (optimizer included) processed its whole input."""
    t0 = time.perf_counter()
    async with group_offsets(settings, bootstrap) as read:
        while time.perf_counter() - t0 < timeout_s:
            if all(c >= e for c, e in (await read()).values()):
                break
            await asyncio.sleep(1)
    return time.perf_counter() - t0


async def publish_all(client: MemoryClient, chunks: Sequence[Chunk]) -> dict[str, WriteToken]:
    last: dict[str, WriteToken] = {}
    for c in chunks:
        last[c.cube] = await client.add_messages(c.cube, c.messages(), session_id=c.session)
    return last


@contextlib.contextmanager
def profiling(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy record of ``pid`` into ``out`` for the duration of the block: speedscope, or
    py-spy's collapsed stacks when ``out`` ends in ``.raw``."""
    if out is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    proc = subprocess.Popen(  # noqa: S603 - py-spy on our own worker
        [spy, "record", "--pid", str(pid), "--rate", "50",
         "--format", "raw" if out.suffix == ".raw" else "speedscope",
         "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)


async def kafka_path(settings: Settings, bootstrap: str, graph_uri: str, chunks: Sequence[Chunk],
                     questions: dict[str, list[str]], log_path: Path,
                     profile: Path | None, search_interval_s: float,
                     extra_env: dict[str, str]) -> KafkaRun:
    run = KafkaRun()
    worker = WorkerProcess(settings, log_path, extra_env)
    await worker.start()
    try:
        async with MemoryClient(settings, bootstrap) as client:
            # warm the reply partition and the worker's search path before the clock starts
            for cube in list(questions)[:2]:
                with contextlib.suppress(MemoryServiceError):  # the cube is still empty
                    await client.search(cube, "hello", top_k=3)
            stop = asyncio.Event()
            rng = random.Random(7)
            pids = {"worker": worker.pid, **SERVICES}
            cpu0 = cpu_of(pids)
            with profiling(worker.pid, profile):
                t0 = time.perf_counter()
                run.t0 = t0
                watcher = asyncio.create_task(watch_loop(settings, bootstrap, worker.pid, run,
                                                         stop, t0))
                searcher = asyncio.create_task(search_loop(client, questions, run, stop, rng,
                                                           search_interval_s))
                last = await publish_all(client, chunks)
                for token in last.values():
                    await client.wait_applied(token, timeout=7200)
                run.elapsed = time.perf_counter() - t0
                stop.set()
                await asyncio.gather(watcher, searcher)
            run.settle = await settle(settings, bootstrap, timeout_s=1800)
            run.cpu = cpu_line(cpu0, cpu_of(pids), sum(len(c.turns) for c in chunks))
    finally:
        await worker.stop()
    return run


# --- sustained rate ---------------------------------------------------------------------


def slope(points: Sequence[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


async def sustained(args: argparse.Namespace, convs: list[Conversation], data: Path,
                    bootstrap: str, graph_uri: str) -> None:
    settings = bench_settings(data, "sus", bootstrap, graph_uri)
    worker = WorkerProcess(settings, args.worker_log or data / "worker.log", worker_env(args))
    await worker.start()
    rates = [float(r) for r in args.rates.split(",")]
    held: float | None = None
    last_stream: list[Chunk] = []
    window = args.minutes * 60
    try:
        async with MemoryClient(settings, bootstrap) as client:
            cycle = 0
            for rate in rates:
                # fresh cubes each round: a long load, never the same turns twice
                stream: list[Chunk] = []
                while sum(len(c.turns) for c in stream) < rate * window:
                    cycle += 1
                    for conv in convs:
                        stream += interleave(chunks_of(conv, args.chunk, args.max_turns,
                                                       f"-r{cycle}"))
                print(f"rate {rate:g} turns/s for {args.minutes:g} min "
                      f"({rate / args.chunk:.2f} chunks/s):", flush=True)
                run, stop = KafkaRun(), asyncio.Event()
                pids = {"worker": worker.pid, **SERVICES}
                cpu0 = cpu_of(pids)
                t0 = time.perf_counter()
                watcher = asyncio.create_task(watch_loop(settings, bootstrap, worker.pid, run,
                                                         stop, t0, report_s=30))
                lag: list[tuple[float, float]] = []
                sent = 0
                while (now := time.perf_counter() - t0) < window:
                    due = rate * now
                    while sent < len(stream) and sum(
                            len(c.turns) for c in stream[:sent]) < due:
                        c = stream[sent]
                        await client.add_messages(c.cube, c.messages(), session_id=c.session)
                        sent += 1
                    lag.append((now, run.watch.total_lag))
                    await asyncio.sleep(0.2)
                stop.set()
                await watcher
                growth = slope([p for p in lag if p[0] >= window / 2])
                early = [y for t, y in lag if window / 4 <= t < window / 2]
                late = [y for t, y in lag if t >= 3 * window / 4]
                # bounded: the lag of the last quarter is no higher than that of the second
                # (with a margin for its ups and downs), or small anyway
                ok = statistics.fmean(late) <= max(1.25 * statistics.fmean(early), SMALL_LAG)
                print(f"  lag: mean {statistics.fmean(early):.0f} in the second quarter, "
                      f"{statistics.fmean(late):.0f} in the last (slope over the second half "
                      f"{growth:+.2f} records/s), RSS {run.rss[0][1]:.0f} → "
                      f"{run.rss[-1][1]:.0f} MB: "
                      f"{'bounded' if ok else 'GROWING'}", flush=True)
                print("  " + cpu_line(cpu0, cpu_of(pids), sum(len(c.turns) for c in stream[:sent])),
                      flush=True)
                last_stream = stream[:sent]
                if not ok:
                    break
                held = rate
                drained = await settle(settings, bootstrap, timeout_s=600)
                print(f"  drained in {drained:.0f}s", flush=True)
    finally:
        await worker.stop()
    print(f"highest input rate with bounded lag for {args.minutes:g} min: "
          f"{'none of ' + args.rates if held is None else f'{held:g} turns/s'}")
    if last_stream:
        alone, texts = await embedder_rate(last_stream)
        print(f"the embedder alone (every core, {texts} texts of the last window: each turn "
              f"once per cube, each chunk's episode once): {alone:.2f} turns/s; highest held "
              f"/ embedder alone {(held or 0) / alone:.2f}")


# --- main -------------------------------------------------------------------------------


def worker_env(args: argparse.Namespace) -> dict[str, str]:
    return {"MEMSTREAM_REORGANIZE__ENABLED": "false"} if args.no_optimizer else {}


async def compare(args: argparse.Namespace, convs: list[Conversation], data: Path,
                  bootstrap: str, graph_uri: str) -> None:
    per_cube: dict[str, list[Chunk]] = {}
    questions: dict[str, list[str]] = {}
    for conv in convs:
        cubes = chunks_of(conv, args.chunk, args.max_turns)
        per_cube.update(cubes)
        for cube in cubes:
            questions[cube] = [q.text for q in conv.questions] or ["what happened?"]
    chunks = interleave(per_cube)
    turns = sum(len(c.turns) for c in chunks)
    print(f"{len(convs)} conversations, {len(per_cube)} cubes, {len(chunks)} chunks, "
          f"{turns} turns (each turn goes to both speakers' cubes)", flush=True)

    results: dict[str, tuple[float, int]] = {}
    if not args.skip_in_process:
        s = bench_settings(data, "inproc", bootstrap, graph_uri)
        elapsed = await in_process(s, bootstrap, graph_uri, chunks)
        results["in-process (extraction + add)"] = (
            elapsed, await stored_memories(s, graph_uri, list(per_cube)))
        print(f"in-process done in {elapsed:.0f}s", flush=True)
    s = bench_settings(data, "kafka", bootstrap, graph_uri)
    if args.no_optimizer:
        s = s.model_copy(update={"reorganize": s.reorganize.model_copy(update={"enabled": False})})
    run = await kafka_path(s, bootstrap, graph_uri, chunks, questions,
                           args.worker_log or data / "worker.log", args.profile,
                           args.search_interval, worker_env(args))
    results["through Kafka (worker process)"] = (
        run.elapsed, await stored_memories(s, graph_uri, list(per_cube)))

    print(f"\n{'path':<34}{'seconds':>9}{'turns/s':>9}{'memories':>10}{'memories/s':>12}")
    for label, (elapsed, mems) in results.items():
        print(f"{label:<34}{elapsed:>9.1f}{turns / elapsed:>9.2f}{mems:>10}"
              f"{mems / elapsed:>12.2f}")
    if len(results) == 2:
        (a, _), (b, _) = results.values()
        print(f"Kafka / in-process throughput (turns/s): {a / b:.2f}× (goal ≥ 0.75)")
    print(f"optimizer caught up {run.settle:.1f}s after the last chunk was applied: "
          f"{turns / (run.elapsed + run.settle):.2f} turns/s end to end")
    print(run.cpu)
    rate, texts = await embedder_rate(chunks)
    print(f"the embedder alone (every core, {texts} texts: each turn once per cube, each "
          f"chunk's episode once): {rate:.2f} turns/s; end to end / embedder alone "
          f"{turns / (run.elapsed + run.settle) / rate:.2f}")
    w = run.watch
    print(f"longest wait of an input partition with records pending: {w.longest:.1f}s "
          f"({w.where or '-'}; goal < 10 s)")
    s_ms = [x * 1000 for x in run.searches]
    print(f"searches while ingesting (fast, top_k 10, n={len(s_ms)}, errors "
          f"{run.search_errors}): p50 {pct(s_ms, 50):.0f} ms, p95 {pct(s_ms, 95):.0f} ms, "
          f"max {max(s_ms, default=float('nan')):.0f} ms (goal p95 < 150, max < 1000)")
    if run.rss:
        marks = [run.rss[round(i * (len(run.rss) - 1) / 4)] for i in range(5)]
        print("worker RSS (s: MB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in marks))
    for line in stability(run, run.t0, args.worker_log or data / "worker.log"):
        print(line)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--max-turns", type=int, default=None,
                        help="at most this many turns of each conversation")
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--search-interval", type=float, default=0.5,
                        help="seconds between searches while ingesting (0: none)")
    parser.add_argument("--no-optimizer", action="store_true",
                        help="the worker runs without the optimizer (to isolate its cost)")
    parser.add_argument("--sustained", action="store_true")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rates", default="1,2,4,8", help="input rates to try, turns/s")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy speedscope output of the worker (Kafka path)")
    parser.add_argument("--worker-log", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None,
                        help="data directory to use and keep (default: a temporary one)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    convs = load(args.path, {5})[:args.conversations]
    with contextlib.ExitStack() as cleanup:
        if args.keep is not None:
            data = args.keep.resolve()
            data.mkdir(parents=True, exist_ok=True)
        else:
            data = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ms-load-")))
        async with EmbeddedStack(Settings(data_dir=data)) as stack:
            b, g = stack.bootstrap, stack.graph_uri
            for name, service in (("broker", stack.broker), ("graph", stack.falkordb)):
                if service is not None and service.pid is not None:
                    SERVICES[name] = service.pid
            print(f"embedded stack: kafka {b}, graph {g}; data {data}", flush=True)
            global BROKER_DIR
            BROKER_DIR = data / "broker"
            if args.sustained:
                await sustained(args, convs, data, b, g)
            else:
                await compare(args, convs, data, b, g)


if __name__ == "__main__":
    asyncio.run(main())
