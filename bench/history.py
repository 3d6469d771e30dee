"""What a long history costs the embedded broker, with the archive and without (issue #40).

    python bench/history.py [--steps 1000,10000,100000] [--baseline-max 10000]
                            [--trickle-s 30] [--window 300]

One deployment's log grows to each step's number of turns, and at each step, in the same
run, the bench measures what the broker costs while the history sits there:

- the broker's CPU for a trickle of one chunk a second (the records a 5-turn chunk leaves in
  the retained topics) over ``--trickle-s`` seconds, as a fraction of a core;
- the broker's data file against the bytes of the records it holds (as a consumer reads
  them), and the archive's segment files;
- how long the broker takes to start on its file (the broker's share of ``memstream up``);
- how long a full read of the log takes through memstream's reader (segments, then the
  broker): what a replay or ``history`` goes through.

Two deployments run one after the other: **archive** (the worker's archiver, called here
after each slice of growth as the worker calls it every minute, keeps the newest
``--window`` turns on the broker) and **baseline** (no archive: the broker holds the whole
log, as before issue #40), up to ``--baseline-max`` turns (beyond it the baseline's file
takes minutes to write: the point of the issue).

The history is generated, in the shape of what the pipeline writes for a real chat (no
copied data): two speakers per conversation, sessions of 20 turns, chunks of 5 turns into
both speakers' cubes; for each turn and cube three extracted memories (``memory.items``) and
their ``added`` updates with the memory's snapshot (``memory.updates``), and per chunk and
cube one conversation record and one ``linked`` update with its edges. Values are sealed as
under ``memstream up`` (erasure on), so the sizes are those of sealed records. Records are
published straight to the topics (no worker runs: the history is what a worker already
applied), with a worker's producer settings (gzip batches, 10 ms linger).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaProducer  # noqa: E402
from load import cpu_seconds  # noqa: E402

from memstream.archive.archiver import archive_once  # noqa: E402
from memstream.archive.segments import Archive  # noqa: E402
from memstream.client.client import MemoryClient  # noqa: E402
from memstream.history.provenance import read_log  # noqa: E402
from memstream.kafka.admin import ensure_topics  # noqa: E402
from memstream.local.broker import NoidaBroker  # noqa: E402
from memstream.local.broker_snapshot import DATA_FILE  # noqa: E402
from memstream.security.keys import activate  # noqa: E402
from memstream.topics.events import (  # noqa: E402
    ConversationChunk,
    ExtractedMemory,
    MemoryUpdate,
    Message,
)
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata  # noqa: E402
from memstream.topics.registry import (  # noqa: E402
    CONVERSATIONS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    TopicSpec,
)
from memstream.topics.settings import Settings  # noqa: E402

CHUNK = 5
SESSION = 20
TOPICS = [spec for spec in (CONVERSATIONS, MEMORY_ITEMS, MEMORY_UPDATES)]
GOAL_TRICKLE_CORE = 0.05
GOAL_FILE_RATIO = 2.0

# --- generated chats --------------------------------------------------------------------

NAMES = ["Ana", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas",
         "Kemi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas"]
PLACES = ["Lisbon", "Berlin", "Osaka", "Lagos", "Quito", "Tartu", "Porto", "Austin", "Pune"]
THINGS = ["the cello", "bouldering", "sourdough", "a vegetable garden", "chess", "pottery",
          "trail running", "Spanish lessons", "a book club", "woodworking", "birdwatching"]
PEOPLE = ["my sister", "my neighbour", "an old friend", "my manager", "my son", "my aunt"]
LINES = [
    "I started {thing} last {when} and I'm hooked.",
    "We drove to {place} with {person} over the weekend.",
    "Honestly {thing} is the only thing that calms me down after work.",
    "{person} is moving to {place} next month, I'll miss them.",
    "Did you ever try {thing}? I signed up for a class in {place}.",
    "I had a rough week, {person} helped me a lot.",
    "My plan for {when} is to finally get better at {thing}.",
    "The trip to {place} was amazing, we ate so well.",
]
WHEN = ["week", "month", "spring", "summer", "winter", "year"]


def sentence(rng: random.Random) -> str:
    return rng.choice(LINES).format(thing=rng.choice(THINGS), place=rng.choice(PLACES),
                                    person=rng.choice(PEOPLE), when=rng.choice(WHEN))


@dataclass
class Generated:
    records: list[tuple[TopicSpec, bytes, bytes]]  # spec, key, value
    turns: int


def history(rng: random.Random, first_turn: int, turns: int) -> Iterator[Generated]:
    """Records of ``turns`` generated turns (from turn ``first_turn``), a chunk at a time:
    each chunk goes into both speakers' cubes, and each turn leaves three memories there
    (what was said, as a fact about the speaker, and the moment), as the pipeline's
    extraction did on the LoCoMo dev split (5.6 extracted memories and 7.5 updates a turn)."""
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    for start in range(first_turn, first_turn + turns, CHUNK):
        conv = start // 400  # a conversation of 400 turns, one cube per speaker
        a, b = NAMES[conv % len(NAMES)], NAMES[(conv * 7 + 3) % len(NAMES)]
        session = f"s{(start % 400) // SESSION}"
        at = t0 + timedelta(hours=start)
        said = [(a if n % 2 == 0 else b, sentence(rng),
                 (at + timedelta(minutes=n - start)).isoformat())
                for n in range(start, start + CHUNK)]
        out: list[tuple[TopicSpec, bytes, bytes]] = []
        for me in (a, b):
            cube = f"hist-{conv:05d}-{me.lower()}"
            messages = tuple(Message(id=f"t{start + i}", role="user" if who == me else
                                     "assistant", name=who, content=text, timestamp=when)
                             for i, (who, text, when) in enumerate(said))
            chunk = ConversationChunk(user_id=cube, cube_id=cube, session_id=session,
                                      messages=messages, event_id=f"c{cube}{start:09d}")
            out.append((CONVERSATIONS, cube.encode(), CONVERSATIONS.encode(chunk)))
            ids = []
            for m in messages:
                for k, text in enumerate((f"{m.name}: {m.content}",
                                          f"{m.name} said that {m.content.lower()}",
                                          f"On {str(m.timestamp)[:10]} {m.name} talked about "
                                          f"{' '.join(m.content.split()[2:6])}.")):
                    node = f"{cube}-{m.id}-{k}"
                    ids.append(node)
                    meta = MemoryMetadata(user_id=cube, cube_id=cube, session_id=session,
                                          key=text[:40], tags=tuple(text.lower().split()[:4]),
                                          background=" ".join(x for _, x, _ in said),
                                          memory_type="LongTermMemory")
                    item = ExtractedMemory(user_id=cube, cube_id=cube, id=node, memory=text,
                                           key=meta.key, tags=meta.tags,
                                           background=meta.background,
                                           chunk_event_id=chunk.event_id, event_id=f"i{node}")
                    out.append((MEMORY_ITEMS, cube.encode(), MEMORY_ITEMS.encode(item)))
                    update = MemoryUpdate(user_id=cube, cube_id=cube, action="added",
                                          stage="memory.add", node_id=node,
                                          node=MemoryItem(id=node, memory=text, metadata=meta),
                                          cause_event_id=item.event_id, event_id=f"u{node}")
                    out.append((MEMORY_UPDATES, cube.encode(), MEMORY_UPDATES.encode(update)))
            edges = tuple(Edge(source=x, target=y, type="FOLLOWS",
                               reason=f"session {session} order")
                          for x, y in zip(ids, ids[1:], strict=False))
            linked = MemoryUpdate(user_id=cube, cube_id=cube, action="linked",
                                  stage="reorganize", edges=edges,
                                  event_id=f"l{cube}{start:09d}")
            out.append((MEMORY_UPDATES, cube.encode(), MEMORY_UPDATES.encode(linked)))
        yield Generated(out, CHUNK)


# --- measuring --------------------------------------------------------------------------


async def publish(producer: AIOKafkaProducer, settings: Settings,
                  chunks: Iterator[Generated]) -> int:
    turns = 0
    for g in chunks:
        for spec, key, value in g.records:
            await producer.send(spec.name(settings), value, key=key)
        turns += g.turns
    await producer.flush()
    return turns


async def full_read(settings: Settings, bootstrap: str) -> tuple[float, int]:
    """Seconds to read every record of the retained topics (segments, then the broker)."""
    t = time.perf_counter()
    async with MemoryClient(settings, bootstrap) as client:
        found = await read_log(client, TOPICS, None)
    return time.perf_counter() - t, sum(len(v) for v in found.values())


def broker_bytes(broker_dir: Path) -> int:
    return (broker_dir / DATA_FILE).stat().st_size if (broker_dir / DATA_FILE).exists() else 0


async def retained_raw(bootstrap: str, settings: Settings) -> int:
    """The bytes of the records the broker holds (key + value), as a consumer reads them."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    total = 0
    try:
        await consumer.topics()
        tps = [TopicPartition(spec.name(settings), p) for spec in TOPICS
               for p in sorted(consumer.partitions_for_topic(spec.name(settings)) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, records in batch.items():
                total += sum(len(r.key or b"") + len(r.value or b"") for r in records)
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
    finally:
        await consumer.stop()
    return total


@dataclass
class Step:
    turns: int
    grow_s: float
    trickle_core: float
    file_mb: float
    raw_mb: float
    archive_mb: float
    start_s: float
    read_s: float
    records: int

    def row(self, label: str) -> str:
        return (f"{label:<9} {self.turns:>8,} {self.trickle_core:>8.3f} {self.file_mb:>9.1f} "
                f"{self.raw_mb:>8.1f} {self.file_mb / max(self.raw_mb, 1e-9):>6.2f} "
                f"{self.archive_mb:>8.1f} {self.start_s:>7.2f} {self.read_s:>7.1f} "
                f"{self.records:>9,} {self.grow_s:>7.0f}")


HEADER = (f"{'run':<9} {'turns':>8} {'trickle':>8} {'file MB':>9} {'held MB':>8} {'ratio':>6} "
          f"{'arch MB':>8} {'start s':>7} {'read s':>7} {'records':>9} {'grow s':>7}")


async def deployment(label: str, steps: list[int], data: Path, archive: bool, window: int,
                     trickle_s: float, seed: int) -> list[Step]:
    rng = random.Random(seed)
    broker_dir = data / "broker"
    broker = NoidaBroker(broker_dir)
    bootstrap = await broker.start()
    settings = Settings(data_dir=data, app_id=f"hist-{label}",
                        kafka={"bootstrap_servers": bootstrap, "topic_prefix": f"{label}."},
                        archive={"min_records": 1, "segment_records": 50_000})
    await ensure_topics(settings, bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip",
                                linger_ms=10, max_batch_size=256 * 1024)
    await producer.start()
    out: list[Step] = []
    turns = 0
    try:
        for target in steps:
            t = time.perf_counter()
            while turns < target:
                slice_turns = min(2000, target - turns)
                turns += await publish(producer, settings, history(rng, turns, slice_turns))
                if archive and turns > window:
                    await asyncio.sleep(0.1)
                    await archive_once(settings, bootstrap, after_s=0)
            if archive:  # the newest window stays: it is what the last minutes wrote
                await archive_once(settings, bootstrap, after_s=0)
            turns += await publish(producer, settings, history(rng, turns, window))
            grow_s = time.perf_counter() - t
            await asyncio.sleep(2)  # the broker saves its file about once a second
            # a trickle: one chunk's records a second
            assert broker.pid is not None
            cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
            for _ in range(int(trickle_s)):
                tick = time.perf_counter()
                turns += await publish(producer, settings, history(rng, turns, CHUNK))
                await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - tick)))
            trickle = (cpu_seconds(broker.pid) - cpu0) / (time.perf_counter() - t0)
            await asyncio.sleep(2)
            file_mb = broker_bytes(broker_dir) / 1e6
            raw_mb = await retained_raw(bootstrap, settings) / 1e6
            archive_mb = Archive(data).size_bytes() / 1e6
            read_s, records = await full_read(settings, bootstrap)
            # the broker's share of `memstream up`: a restart on its file
            await producer.stop()
            await broker.stop()
            t1 = time.perf_counter()
            bootstrap = await broker.start()
            start_s = time.perf_counter() - t1
            settings = settings.model_copy(update={"kafka": settings.kafka.model_copy(
                update={"bootstrap_servers": bootstrap})})
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip",
                                        linger_ms=10, max_batch_size=256 * 1024)
            await producer.start()
            step = Step(turns, grow_s, trickle, file_mb, raw_mb, archive_mb, start_s, read_s,
                        records)
            print(step.row(label), flush=True)
            out.append(step)
    finally:
        await producer.stop()
        await broker.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="1000,10000,100000")
    parser.add_argument("--baseline-max", type=int, default=10_000)
    parser.add_argument("--trickle-s", type=float, default=30.0)
    parser.add_argument("--window", type=int, default=300,
                        help="turns the archive leaves on the broker: its default window "
                             "(archive.after_s, 60 s) at the trickle's 5 turns a second")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--tmp", default=None, help="where the data directories go")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    with tempfile.TemporaryDirectory(prefix="ms-history-", dir=args.tmp) as tmp:
        activate(Path(tmp) / "keys")  # sealed as under `memstream up`
        print("trickle: the broker's CPU (cores) for one chunk a second; file: the broker's "
              "data file; held: the records it holds as a consumer reads them; arch: segment "
              "files; start: the broker's restart on its file; read: every retained record "
              "through memstream's reader\n")
        print(HEADER, flush=True)
        arch = await deployment("archive", steps, Path(tmp) / "archive", True, args.window,
                                args.trickle_s, args.seed)
        base = await deployment("baseline", [s for s in steps if s <= args.baseline_max],
                                Path(tmp) / "baseline", False, args.window, args.trickle_s,
                                args.seed)
    print()
    last = arch[-1]
    print(f"archive at {last.turns:,} turns: trickle {last.trickle_core:.3f} of a core (goal <= "
          f"{GOAL_TRICKLE_CORE}), file {last.file_mb / max(last.raw_mb, 1e-9):.2f}x the records "
          f"held (goal <= {GOAL_FILE_RATIO}), broker start {last.start_s:.1f}s")
    for a, b in zip(arch, base, strict=False):
        print(f"at {b.turns:,} turns the baseline's trickle costs "
              f"{b.trickle_core / max(a.trickle_core, 1e-9):.1f}x the archive's, its file "
              f"{b.file_mb / max(a.file_mb, 1e-9):.1f}x, its start "
              f"{b.start_s / max(a.start_s, 1e-9):.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
