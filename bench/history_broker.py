"""The embedded broker's costs in bench/history.py (its step 2), with the archive and without.

The history's records are published as a worker's producer writes them (gzip batches, 10 ms
linger) to the data dir's broker, started here alone; with the archive the worker's archive
round runs after each slice of 2,000 turns, as the worker runs it every 30 s, and the
worker's groups are committed past what was published (the worker applied it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from history_data import CHUNK, Chunk, Record, chunks, pool_sentences
from history_stack import commit_past
from load import cpu_seconds

from memstream.archive.archiver import archive_once
from memstream.archive.segments import Archive
from memstream.client.client import MemoryClient
from memstream.history.provenance import read_log
from memstream.kafka.admin import ensure_topics
from memstream.local.broker import NoidaBroker
from memstream.local.broker_snapshot import DATA_FILE
from memstream.topics.registry import CONVERSATIONS, MEMORY_COMMANDS, MEMORY_ITEMS, MEMORY_UPDATES
from memstream.topics.settings import Settings

TOPICS = [CONVERSATIONS, MEMORY_ITEMS, MEMORY_UPDATES, MEMORY_COMMANDS]


# --- the broker's costs -----------------------------------------------------------------


async def publish(producer: AIOKafkaProducer, settings: Settings,
                  records: Iterable[Record]) -> None:
    for spec, key, value in records:
        await producer.send(spec.name(settings), value, key=key)
    await producer.flush()


def records_of(generated: Iterable[Chunk], added: bool) -> Iterator[Record]:
    for c in generated:
        yield from c.records
        if added:
            yield from c.added


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
class BrokerCost:
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


BROKER_HEADER = (f"{'run':<9} {'turns':>8} {'trickle':>8} {'file MB':>9} {'held MB':>8} "
                 f"{'ratio':>6} {'arch MB':>8} {'start s':>7} {'read s':>7} {'records':>9} "
                 f"{'grow s':>7}")


def producer_for(bootstrap: str) -> AIOKafkaProducer:
    """A worker's producer settings: gzip batches, 10 ms linger."""
    return AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip",
                            linger_ms=10, max_batch_size=256 * 1024)


async def grow_log(settings: Settings, first: int, last: int, pool: list[str], seed: int,
                   window: int, trickle_s: float, archive: bool) -> BrokerCost:
    """Step 2 of the module's text on the data dir's broker, started here alone: the records
    of turns ``first`` .. ``last - 1`` published (without their ``added`` updates when the
    load wrote them, ``archive``), then the broker's costs. Without ``archive`` (the
    baseline) nothing is archived and no group exists to commit."""
    broker_dir = settings.data_dir / "broker"
    broker = NoidaBroker(broker_dir)
    bootstrap = await broker.start()
    await ensure_topics(settings, bootstrap)
    producer = producer_for(bootstrap)
    await producer.start()
    trickle_turns = int(trickle_s) * CHUNK
    cut = last - window - trickle_turns
    try:
        t = time.perf_counter()
        turn = first
        while turn < cut:
            upto = min(turn + 2000, cut)
            await publish(producer, settings, records_of(chunks(turn, upto, pool, seed),
                                                         not archive))
            turn = upto
            if archive:
                await commit_past(settings, bootstrap)
                await asyncio.sleep(0.1)
                await archive_once(settings, bootstrap, after_s=0)
        # the newest window stays on the broker: it is what the last minute wrote
        await publish(producer, settings, records_of(chunks(cut, last - trickle_turns, pool,
                                                            seed), not archive))
        grow_s = time.perf_counter() - t
        await asyncio.sleep(2)  # the broker saves its file about once a second
        assert broker.pid is not None
        cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        for start in range(last - trickle_turns, last, CHUNK):  # one chunk's records a second
            tick = time.perf_counter()
            await publish(producer, settings, records_of(chunks(start, start + CHUNK, pool,
                                                                seed), True))
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - tick)))
        trickle = (cpu_seconds(broker.pid) - cpu0) / (time.perf_counter() - t0)
        if archive:
            await commit_past(settings, bootstrap)
        await asyncio.sleep(2)
        file_mb = broker_bytes(broker_dir) / 1e6
        raw_mb = await retained_raw(bootstrap, settings) / 1e6
        archive_mb = Archive(settings.data_dir).size_bytes() / 1e6
        read_s, records = await full_read(settings, bootstrap)
        await producer.stop()
        await broker.stop()
        t1 = time.perf_counter()  # the broker's share of `memstream up`: a restart on its file
        await broker.start()
        start_s = time.perf_counter() - t1
    finally:
        await producer.stop()
        await broker.stop()
    return BrokerCost(last, grow_s, trickle, file_mb, raw_mb, archive_mb, start_s, read_s,
                      records)


async def baseline(data: Path, steps: list[int], args: argparse.Namespace) -> list[BrokerCost]:
    """The broker alone without the archive, grown step by step to ``steps``."""
    pool = pool_sentences(args.pool, args.seed)
    settings = Settings(data_dir=data, app_id="hist-baseline",
                        archive={"enabled": "never"}, kafka={"topic_prefix": "baseline."})
    out, prev = [], 0
    for target in steps:
        cost = await grow_log(settings, prev, target, pool, args.seed, args.window,
                              args.trickle_s, archive=False)
        print(cost.row("baseline"), flush=True)
        out.append(cost)
        prev = target
    return out
