"""What the log holds per ingested turn and per search, and what keeping it costs (issue #25).

    python bench/log_volume.py PATH [--conversations N] [--turns N] [--settle-wait 420]

PATH is a LoCoMo-format JSON file (such as the LoCoMo dev split; read its README for the
licence; never copy it into the repository). Every conversation goes into one cube per
speaker in chunks of 5 turns, as bench/load.py publishes them ("a turn" below is one turn of
the conversation, published to both speakers' cubes); ``--turns`` cuts each conversation.

One embedded stack (noida-db, FalkorDB, Milvus Lite, rules, local e5), erasure on as under
`memstream up` (every value sealed), and a real ``memstream worker`` process:

1. ingest: publish every chunk, wait until the add stage applied the last one and every
   stage (the optimizer included) caught up;
2. searches: each question of the ingested conversations once, as a fast search (top_k 10)
   in its first speaker's cube, through the client;
3. wait until transient records have gone (the topics the worker trims, ``memstream/kafka/trim.py``:
   requests and replies, their partitions empty), at most ``--settle-wait`` seconds.

After each step every topic on the broker is read back through a consumer: records and raw
bytes (key + value + headers). Printed: per topic, bytes per ingested turn after ingest and
at the end; bytes per search (end minus after-ingest, over the searches, and what the
searches wrote before transient retention passed); the broker's data file (``kafka.json``)
at each step, and what it spends on records (characters a byte, batch headers) against the
rest; CPU seconds of the worker (with its children: Milvus Lite), the broker and the graph
store (redis-server) from /proc. ``--samples`` prints three opened records of each kind.
Ratios against the goals: retained <= 8 KB per turn on the broker's disk (its record batches,
compressed by the producer as Kafka keeps them; issue 43), broker file <= 4x the retained bytes,
a search <= 1 KB, broker CPU <= 15% of the worker's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from load import (  # noqa: E402
    WorkerProcess,
    _children,
    bench_settings,
    chunks_of,
    cpu_seconds,
    interleave,
    publish_all,
    settle,
)
from retrieval_quality import cube_of, load  # noqa: E402

from memstream.client.client import MemoryClient, MemoryServiceError  # noqa: E402
from memstream.kafka.trim import TRANSIENT  # noqa: E402
from memstream.local.broker_snapshot import DATA_FILE  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.security.keys import activate  # noqa: E402
from memstream.topics.sealing import unseal  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

GOAL_PER_TURN = 8 * 1024
GOAL_FILE_RATIO = 4.0
GOAL_PER_SEARCH = 1024
GOAL_BROKER_CPU = 0.15


@dataclass
class Volume:
    """Records and raw bytes per topic (without the run's prefix), and the broker's file."""

    records: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    raw: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    file_bytes: int = 0
    # memory.updates by action and memory.items by type: records, raw bytes, opened bytes
    kinds: dict[str, list[int]] = field(default_factory=dict)
    samples: dict[str, int] | None = None  # --samples: a few opened records per kind, shown

    def note_kind(self, label: str, raw: bytes) -> None:
        if label not in ("memory.updates", "memory.items"):
            return
        with contextlib.suppress(ValueError):
            opened = unseal(raw)
            data = json.loads(opened)
            kind = f"{label}:{data.get('action') or data.get('memory_type', 'LongTermMemory')}"
            if label == "memory.updates":
                kind += f" ({data.get('stage', '?')})"
            if self.samples is not None and self.samples.get(kind, 0) < 3:
                self.samples[kind] = self.samples.get(kind, 0) + 1
                text = opened.decode(errors="replace") if isinstance(opened, bytes) else opened
                print(f"sample {kind}: {text}", file=sys.stderr)
            row = self.kinds.setdefault(kind, [0, 0, 0])
            row[0] += 1
            row[1] += len(raw)
            row[2] += len(opened)

    @property
    def total(self) -> int:
        return sum(self.raw.values())


async def read_volume(bootstrap: str, prefix: str, broker_dir: Path,
                      samples: bool = False) -> Volume:
    """Every record of every topic, read back from its first retained offset."""
    vol = Volume(samples={} if samples else None)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    try:
        names = sorted(t for t in await consumer.topics() if not t.startswith("__"))
        tps = [TopicPartition(t, p) for t in names
               for p in sorted(consumer.partitions_for_topic(t) or ())]
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            if not ends[tp]:
                continue
            label = tp.topic.removeprefix(prefix)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=2000, max_records=5000)
                for msg in batch.get(tp, []):
                    if msg.offset >= ends[tp]:
                        break
                    vol.records[label] += 1
                    vol.note_kind(label, msg.value or b"")
                    vol.raw[label] += (len(msg.key or b"") + len(msg.value or b"")
                                       + sum(len(k) + len(v or b"") for k, v in msg.headers))
    finally:
        await consumer.stop()
    with contextlib.suppress(OSError):
        vol.file_bytes = (broker_dir / DATA_FILE).stat().st_size
    return vol


async def transient_left(bootstrap: str, prefix: str, trimmed: set[str]) -> int:
    """Records still retained in the ``trimmed`` topics (those the worker deletes; the
    others, ``reorganize.*`` among them, keep what the broker's retention keeps)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        names = [t for t in await consumer.topics()
                 if t.startswith(prefix) and t.removeprefix(prefix) in trimmed]
        tps = [TopicPartition(t, p) for t in names
               for p in sorted(consumer.partitions_for_topic(t) or ())]
        starts, ends = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
        return sum(ends[tp] - starts[tp] for tp in tps)
    finally:
        await consumer.stop()


def file_parts(path: Path, prefix: str) -> dict[str, int]:
    """Characters of the broker's file by part: each topic, and every other top-level field
    (consumer groups, configs), to see what the file holds besides records."""
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(path.read_bytes())
        out: dict[str, int] = {}
        for key, value in doc.items():
            if key == "topics" and isinstance(value, dict):
                for name, topic in value.items():
                    out[f"topic {name.removeprefix(prefix)}"] = len(json.dumps(topic))
            elif key == "topics" and isinstance(value, list):  # noida: [[name, topic], …]
                for entry in value:
                    name = str(entry[0]) if isinstance(entry, list) and entry else "?"
                    part = f"topic {name.removeprefix(prefix)}"
                    out[part] = out.get(part, 0) + len(json.dumps(entry))
            else:
                out[key] = len(json.dumps(value))
        return out
    return {}


@dataclass
class FileRecords:
    """What the broker's file spends on records: the characters of its record-batch byte
    lists, the bytes in them and how many batches, against the whole file."""

    file_chars: int = 0
    batch_chars: int = 0
    batch_bytes: int = 0
    batches: int = 0
    by_topic: dict[str, list[int]] = field(default_factory=dict)  # name: [batches, bytes]


def file_records(path: Path) -> FileRecords:
    """noida-db keeps each partition's ``record_batches`` as ``[offset, [byte, …]]`` pairs
    (Kafka's batch format: a 61-byte header, then each record framed)."""
    out = FileRecords()
    with contextlib.suppress(OSError, ValueError):
        text = path.read_bytes()
        out.file_chars = len(text)
        for name, topic in json.loads(text).get("topics", []):
            mine = out.by_topic.setdefault(name, [0, 0])
            for _pid, part in topic.get("partitions", []):
                for _offset, batch in part.get("record_batches", []):
                    out.batches += 1
                    out.batch_bytes += len(batch)
                    mine[0] += 1
                    mine[1] += len(batch)
                    out.batch_chars += len(json.dumps(batch, separators=(",", ":")))
    return out


def cpu_s(pid: int | None, with_children: bool = False) -> float:
    """User + system CPU seconds of ``pid`` (and of its live descendants)."""
    if pid is None:
        return float("nan")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu_seconds(p)
        if with_children:
            todo += _children(p)
    return total


@dataclass
class Cpu:
    worker: float
    broker: float
    graph: float

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.worker - other.worker, self.broker - other.broker,
                   self.graph - other.graph)


def kb(n: float) -> str:
    return f"{n / 1024:8.2f}"


def report(turns: int, searches: int, ingest: Volume, after: Volume, end: Volume,
           cpu: Cpu, seconds: float, left: int) -> None:
    topics = sorted(set(ingest.raw) | set(after.raw) | set(end.raw),
                    key=lambda t: -max(ingest.raw.get(t, 0), end.raw.get(t, 0)))
    print(f"\n{turns} turns ingested, {searches} searches; ingest {seconds:.0f}s; "
          f"transient records left at the end: {left}")
    print(f"{'topic':<40}{'records':>9}{'KB/turn':>9}{'records':>9}{'KB/turn':>9}"
          f"{'B/search':>10}")
    print(f"{'':<40}{'after ingest':>18}{'at the end':>18}{'':>10}")
    for t in topics:
        print(f"{t:<40}{ingest.records.get(t, 0):>9}{kb(ingest.raw.get(t, 0) / turns):>9}"
              f"{end.records.get(t, 0):>9}{kb(end.raw.get(t, 0) / turns):>9}"
              f"{(end.raw.get(t, 0) - ingest.raw.get(t, 0)) / max(searches, 1):>10.0f}")
    print(f"{'all topics':<40}{sum(ingest.records.values()):>9}{kb(ingest.total / turns):>9}"
          f"{sum(end.records.values()):>9}{kb(end.total / turns):>9}"
          f"{(end.total - ingest.total) / max(searches, 1):>10.0f}")
    print(f"\n{'kind (at the end)':<40}{'records':>9}{'KB/turn':>9}{'B/record':>9}"
          f"{'opened B/record':>16}")
    for kind, (n, raw, opened) in sorted(end.kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"{kind:<40}{n:>9}{kb(raw / turns):>9}{raw / n:>9.0f}{opened / n:>16.0f}")
    per_turn = end.total / turns
    per_search = (end.total - ingest.total) / max(searches, 1)
    print(f"\nrecords as a consumer reads them (key, value, headers; batch compression "
          f"undone) per ingested turn: {per_turn / 1024:.2f} KB")
    print(f"broker file: after ingest {ingest.file_bytes / 1024:.0f} KB, right after the "
          f"searches {after.file_bytes / 1024:.0f} KB, at the end {end.file_bytes / 1024:.0f} "
          f"KB = {end.file_bytes / max(end.total, 1):.2f}x the retained bytes (goal <= 4x), "
          f"{end.file_bytes / turns / 1024:.2f} KB per turn")
    print(f"a search adds {per_search:.0f} B to the retained log "
          f"({per_search / GOAL_PER_SEARCH:.2f}x the goal of 1 KB); before transient "
          f"retention passed: "
          f"{(after.total - ingest.total) / max(searches, 1):.0f} B")
    print(f"CPU seconds: worker {cpu.worker:.1f} (Milvus Lite included), broker "
          f"{cpu.broker:.1f} ({cpu.broker / max(cpu.worker, 1e-9):.2f} of the worker's; goal "
          f"<= {GOAL_BROKER_CPU}), graph store {cpu.graph:.1f}")


async def run(args: argparse.Namespace) -> None:
    convs = load(args.path, {5})[:args.conversations]
    per_cube: dict[str, list[Any]] = {}
    questions: list[tuple[str, str]] = []
    for conv in convs:
        per_cube.update(chunks_of(conv, 5, args.turns))
        cube = cube_of(conv, conv.speakers[0])
        questions += [(cube, q.text) for q in conv.questions]
    chunks = interleave(per_cube)
    turns = sum(len(conv.turns[: args.turns] if args.turns else conv.turns) for conv in convs)
    print(f"{len(convs)} conversations, {len(per_cube)} cubes, {len(chunks)} chunks, "
          f"{turns} turns, {len(questions)} questions", flush=True)
    with tempfile.TemporaryDirectory(prefix="ms-logvol-", dir=args.tmp) as tmp:
        data = Path(tmp)
        async with EmbeddedStack(Settings(data_dir=data)) as stack:
            assert stack.broker is not None and stack.falkordb is not None
            settings = bench_settings(data, "lv", stack.bootstrap, stack.graph_uri)
            keys = data / "keys"
            activate(keys)  # to open values for the breakdown by kind
            settings = settings.model_copy(update={"erasure": settings.erasure.model_copy(
                update={"enabled": True, "key_dir": keys})})
            worker = WorkerProcess(settings, data / "worker.log")
            await worker.start()
            prefix = settings.kafka.topic_prefix
            broker_dir = data / "broker"

            def cpu() -> Cpu:
                return Cpu(cpu_s(worker.pid, True), cpu_s(stack.broker.pid if stack.broker
                                                          else None),
                           cpu_s(stack.falkordb.pid if stack.falkordb else None))
            try:
                async with MemoryClient(settings, stack.bootstrap) as client:
                    cpu0, t0 = cpu(), time.perf_counter()
                    last = await publish_all(client, chunks)
                    for token in last.values():
                        await client.wait_applied(token, timeout=7200)
                    await settle(settings, stack.bootstrap, timeout_s=7200)
                    seconds = time.perf_counter() - t0
                    print(f"ingested in {seconds:.0f}s", flush=True)
                    ingest = await read_volume(stack.bootstrap, prefix, broker_dir)
                    done = 0
                    for cube, text in questions:
                        with contextlib.suppress(MemoryServiceError):
                            await client.search(cube, text, top_k=10, timeout=60)
                        done += 1
                    after = await read_volume(stack.bootstrap, prefix, broker_dir)
                    print(f"{done} searches; waiting for transient retention", flush=True)
                    keep = {spec.suffix for spec in TRANSIENT}
                    deadline = time.monotonic() + args.settle_wait
                    left = await transient_left(stack.bootstrap, prefix, keep)
                    while left and time.monotonic() < deadline:
                        await asyncio.sleep(10)
                        left = await transient_left(stack.bootstrap, prefix, keep)
                    await asyncio.sleep(3)  # the broker saves its file about once a second
                    end = await read_volume(stack.bootstrap, prefix, broker_dir, args.samples)
                    used = cpu() - cpu0
                    parts = file_parts(broker_dir / DATA_FILE, prefix)
                    in_file = file_records(broker_dir / DATA_FILE)
            finally:
                await worker.stop()
    report(turns, done, ingest, after, end, used, seconds, left)
    f = in_file
    print(f"broker file at the end: {f.file_chars / 1024:.0f} KB; its record batches "
          f"{f.batch_chars / 1024:.0f} KB ({f.batch_chars / max(f.file_chars, 1):.0%}) writing "
          f"{f.batch_bytes / 1024:.0f} KB of batches ({f.batches}) at "
          f"{f.batch_chars / max(f.batch_bytes, 1):.2f} characters a byte; the batches are "
          f"{f.batch_bytes / max(end.total, 1):.2f}x the raw records (batch headers and record "
          f"framing); the rest of the file (topics' metadata, group offsets) "
          f"{(f.file_chars - f.batch_chars) / 1024:.0f} KB")
    on_disk = f.batch_bytes / turns
    print(f"\nretained log on the broker's disk per ingested turn (its record batches as a "
          f"Kafka broker keeps them, compressed by the producer): {on_disk / 1024:.2f} KB "
          f"({on_disk / GOAL_PER_TURN:.2f}x the goal of 8 KB); in the embedded broker's file "
          f"{f.file_chars / turns / 1024:.2f} KB")
    print("record batches by topic: " + ", ".join(
        f"{name.split('.', 1)[-1]} {n} ({size / 1024:.0f} KB)"
        for name, (n, size) in sorted(f.by_topic.items(), key=lambda kv: -kv[1][1])
        if n))
    print("\nbroker file by part (KB): " + ", ".join(
        f"{k} {v / 1024:.0f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:12]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None,
                        help="at most this many turns of each conversation")
    parser.add_argument("--settle-wait", type=float, default=420.0,
                        help="seconds to wait at most for transient records to go")
    parser.add_argument("--tmp", default=None, help="where the run's data dir goes")
    parser.add_argument("--samples", action="store_true",
                        help="print three opened records of each kind to stderr")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
