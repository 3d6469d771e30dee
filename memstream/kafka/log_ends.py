"""What memstream last saw of its log, so a broker that comes back with less is noticed.

A broker that loses acknowledged records (the embedded one loses its last unsaved second
when it is killed, see docs/durability.md) answers as if nothing happened: the lost offsets
are simply handed out again. So the worker records, about twice a second, the end offsets
of the topics memstream keeps forever and its consumer group's committed offsets
(``<data_dir>/log-ends.json``). ``memstream up`` and ``status`` compare the broker with that
record and say what is missing; what they found is kept in ``<data_dir>/log-losses.json``.
No faust here: the CLI uses it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from memstream.topics.models import utcnow
from memstream.topics.registry import (
    CONVERSATIONS,
    DEAD_LETTER,
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    TopicSpec,
)
from memstream.topics.settings import Settings

__all__ = [
    "LEDGER", "LOSSES", "Ledger", "Loss", "LogWatch", "check", "compare", "read_ledger",
    "recorded_losses", "tracked_topics",
]

log = logging.getLogger(__name__)

LEDGER = "log-ends.json"
LOSSES = "log-losses.json"
KEEP_REPORTS = 20
PRESERVE_EVERY = 10  # observations between refreshes of the broker's last good data file
# The retained topics: their offsets only grow unless the broker loses records.
TRACKED: tuple[TopicSpec, ...] = (
    CONVERSATIONS, MEMORY_ITEMS, MEMORY_COMMANDS, MEMORY_UPDATES, DEAD_LETTER,
)

Offsets = dict[str, dict[int, int]]


def tracked_topics(settings: Settings) -> list[str]:
    return [spec.name(settings) for spec in TRACKED]


@dataclass(frozen=True)
class Ledger:
    """End offsets and the workers' committed offsets as memstream last saw them."""

    at: datetime
    ends: Offsets
    committed: Offsets


@dataclass(frozen=True)
class Loss:
    """Records of one partition that memstream saw and the broker no longer holds."""

    topic: str
    partition: int
    seen: int  # the end offset (or committed offset) memstream saw
    now: int  # the broker's end offset now
    seen_at: str  # ISO time of that observation
    by: str  # "log" (an end offset seen) or "workers" (an offset they had processed)

    @property
    def count(self) -> int:
        return self.seen - self.now

    def describe(self) -> str:
        what = "records" if self.by == "log" else "records the workers had processed"
        return (f"{self.topic}[{self.partition}]: {self.count} {what} lost (offsets "
                f"{self.now}–{self.seen - 1}, seen at {self.seen_at[:19]}Z)")


def _encode(offsets: Offsets) -> dict[str, dict[str, int]]:
    return {topic: {str(p): o for p, o in sorted(parts.items())}
            for topic, parts in sorted(offsets.items())}


def _decode(raw: Any) -> Offsets:
    if not isinstance(raw, dict):
        return {}
    return {str(t): {int(p): int(o) for p, o in parts.items()}
            for t, parts in raw.items() if isinstance(parts, dict)}


def _write_json(path: Path, data: Any) -> None:
    """Atomically: a reader never sees half a record (a kill mid-write keeps the old one)."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n")
    os.replace(staging, path)


def read_ledger(data_dir: Path) -> Ledger | None:
    try:
        raw = json.loads((data_dir / LEDGER).read_text())
        return Ledger(datetime.fromisoformat(raw["at"]), _decode(raw.get("ends")),
                      _decode(raw.get("committed")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_ledger(data_dir: Path, ledger: Ledger) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_json(data_dir / LEDGER, {"at": ledger.at.isoformat(), "ends": _encode(ledger.ends),
                                    "committed": _encode(ledger.committed)})


def compare(seen: Ledger, ends: Offsets) -> list[Loss]:
    """Every partition whose end offset (or the workers' committed offset) as ``seen`` lies
    past the broker's end offset now. A topic the broker no longer has counts from 0."""
    at = seen.at.isoformat()
    losses: list[Loss] = []
    for by, offsets in (("log", seen.ends), ("workers", seen.committed)):
        for topic, parts in sorted(offsets.items()):
            for partition, offset in sorted(parts.items()):
                now = ends.get(topic, {}).get(partition, 0)
                if offset > now and not any(
                        (x.topic, x.partition) == (topic, partition) and x.seen >= offset
                        for x in losses):
                    losses.append(Loss(topic, partition, offset, now, at, by))
    return losses


def recorded_losses(data_dir: Path) -> list[dict[str, Any]]:
    """The loss reports kept so far, oldest first."""
    try:
        reports = json.loads((data_dir / LOSSES).read_text())
    except (OSError, ValueError):
        return []
    return reports if isinstance(reports, list) else []


def _record_losses(data_dir: Path, where: str, losses: list[Loss], note: str | None) -> None:
    reports = recorded_losses(data_dir)
    reports.append({"found_at": utcnow().isoformat(), "by": where, "note": note,
                    "losses": [asdict(x) for x in losses]})
    _write_json(data_dir / LOSSES, reports[-KEEP_REPORTS:])


class LogWatch:
    """Reads the tracked topics' end offsets and the workers' committed offsets."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self._reader: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None

    async def _clients(self) -> tuple[AIOKafkaConsumer, AIOKafkaAdminClient]:
        if self._reader is None or self._admin is None:
            reader = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                      request_timeout_ms=5000)
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
            try:
                await reader.start()
                await admin.start()
            except BaseException:
                await self._close(reader, admin)
                raise
            self._reader, self._admin = reader, admin
        return self._reader, self._admin

    @staticmethod
    async def _close(reader: AIOKafkaConsumer | None, admin: AIOKafkaAdminClient | None) -> None:
        with contextlib.suppress(Exception):
            if reader is not None:
                await reader.stop()
        with contextlib.suppress(Exception):
            if admin is not None:
                await admin.close()

    async def close(self) -> None:
        reader, admin, self._reader, self._admin = self._reader, self._admin, None, None
        await self._close(reader, admin)

    async def observe(self, topics: Iterable[str] | None = None) -> Ledger:
        """The broker's end offsets of ``topics`` (default: the tracked ones) and the stages'
        committed offsets on them, now."""
        names = list(topics) if topics is not None else tracked_topics(self.settings)
        reader, admin = await self._clients()
        known = await reader.topics()
        partitions = [TopicPartition(t, p) for t in names if t in known
                      for p in sorted(reader.partitions_for_topic(t) or ())]
        ends: Offsets = {}
        for tp, end in (await reader.end_offsets(partitions)).items() if partitions else ():
            ends.setdefault(tp.topic, {})[tp.partition] = int(end)
        committed: Offsets = {}
        group = await admin.list_consumer_group_offsets(self.settings.app_id,
                                                        partitions=partitions or None)
        for tp, meta in group.items():
            if tp.topic in names and meta.offset >= 0:
                committed.setdefault(tp.topic, {})[tp.partition] = int(meta.offset)
        return Ledger(utcnow(), ends, committed)

    async def record_forever(self, data_dir: Path, interval_s: float = 0.5,
                             every_few: Callable[[], object] | None = None) -> None:
        """The worker's task: keep ``log-ends.json`` current; a drop seen between two
        observations (a broker restarted under a running worker) is reported at once.
        ``every_few``: called every ``PRESERVE_EVERY`` observations (the embedded broker's
        last good data file is refreshed so)."""
        previous = read_ledger(data_dir)
        ticks = 0
        while True:
            ticks += 1
            if every_few is not None and ticks % PRESERVE_EVERY == 0:
                every_few()
            try:
                now = await self.observe()
            except (KafkaError, OSError, TimeoutError) as exc:
                log.debug("log ends not observed (%s); the broker may be restarting", exc)
                await self.close()  # reconnect next time: the broker may be a new process
            else:
                if previous is not None and (losses := compare(previous, now.ends)):
                    log.error("the broker lost records memstream had seen: %s",
                              "; ".join(x.describe() for x in losses))
                    _record_losses(data_dir, "worker", losses, None)
                if previous is None or (now.ends, now.committed) != (previous.ends,
                                                                      previous.committed):
                    write_ledger(data_dir, now)
                previous = now
            await asyncio.sleep(interval_s)


async def check(settings: Settings, bootstrap: str, *, record: bool = False,
                note: str | None = None) -> list[Loss]:
    """Compare the broker with ``log-ends.json`` and return what is lost. With ``record``
    (``memstream up``, after a restart) the loss is kept in ``log-losses.json`` with
    ``note`` (e.g. that a copy of the data file was restored) and ``log-ends.json`` is reset
    to what the broker holds, so each loss is reported once; ``status`` only reads."""
    data_dir = settings.data_dir
    seen = read_ledger(data_dir)
    watch = LogWatch(settings, bootstrap)
    try:
        now = await watch.observe()
    finally:
        await watch.close()
    losses = compare(seen, now.ends) if seen is not None else []
    if record:
        if losses or note:
            _record_losses(data_dir, "up", losses, note)
        write_ledger(data_dir, now)
    return losses
