"""The log's older records, in immutable segment files beside the broker (tiered storage).

The embedded broker rewrites its whole data file about once a second, so what it holds must
stay bounded while the log, the source of truth, keeps every record. The archiver
(``memstream/archive/archiver.py``) moves a partition's records older than a window into a
segment file here and then deletes them from the broker (Kafka DeleteRecords), as Kafka's
tiered storage (KIP-405) moves closed log segments to remote storage. Every reader of the
log — replay, history, explain, as-of, backup, counts, erasure's checks — reads a
partition's archived records first, then the broker from where the archive ends
(``memstream/archive/reading.py``), so they see one log.

A segment is an Apache Parquet file (pyarrow, zstd), one per run of a partition's offsets:
``<data_dir>/archive/<topic>/<partition>/<first offset>-<last offset>.parquet`` with one row
per record — ``offset``, ``timestamp`` (ms), ``key``, ``value`` (the record's bytes as the
producer wrote them: event JSON, sealed fields still sealed) and ``headers``. Offsets are
those the broker gave, so positions the provenance index stored still point at the record.
A segment is written to a temporary name, flushed and renamed: it is whole or absent. It is
never changed but by erasure, which writes it again without the erased cube's records.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ARCHIVE_DIR = "archive"
ROW_GROUP = 2000  # rows read together; an offset lookup reads one row group
COMPRESSION = "zstd"
_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")

SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()),
                                            pa.field("value", pa.binary())]))),
])


@dataclass(frozen=True)
class ArchivedRecord:
    """A record read from a segment, with the attributes of aiokafka's ``ConsumerRecord``
    that memstream's readers use."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, order=True)
class Segment:
    first: int
    last: int
    path: Path

    @property
    def end(self) -> int:
        """The offset after the segment's last record."""
        return self.last + 1


class Archive:
    """The segments of every archived partition under one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / ARCHIVE_DIR

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.root / topic / str(partition)

    def segments(self, topic: str, partition: int) -> list[Segment]:
        folder = self.partition_dir(topic, partition)
        found: list[Segment] = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                m = _NAME.match(entry.name)
                if m:
                    found.append(Segment(int(m[1]), int(m[2]), Path(entry.path)))
        return sorted(found)

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) with a segment."""
        out: list[tuple[str, int]] = []
        with contextlib.suppress(FileNotFoundError):
            for topic in sorted(os.listdir(self.root)):
                with contextlib.suppress(NotADirectoryError, FileNotFoundError):
                    for part in sorted(os.listdir(self.root / topic)):
                        if part.isdigit() and self.segments(topic, int(part)):
                            out.append((topic, int(part)))
        return out

    def end(self, topic: str, partition: int) -> int:
        """The offset after the last archived record of the partition (0: none archived)."""
        found = self.segments(topic, partition)
        return found[-1].end if found else 0

    def size_bytes(self) -> int:
        total = 0
        for topic, part in self.partitions():
            total += sum(s.path.stat().st_size for s in self.segments(topic, part))
        return total

    def summary(self) -> dict[str, int]:
        """``{"segments", "records", "bytes"}`` over every partition (records counted from
        the files' metadata, without reading them)."""
        segments = records = size = 0
        for topic, part in self.partitions():
            for seg in self.segments(topic, part):
                segments += 1
                size += seg.path.stat().st_size
                records += pq.ParquetFile(seg.path).metadata.num_rows
        return {"segments": segments, "records": records, "bytes": size}

    def describe(self) -> str:
        """One line for ``memstream status``."""
        s = self.summary()
        if not s["segments"]:
            return "nothing archived yet (the broker holds the whole log)"
        return (f"{s['records']:,} older records in {s['segments']} segment files, "
                f"{s['bytes'] / 1e6:.1f} MB under {self.root}")

    # ------------------------------------------------------------------ writing

    def write(self, topic: str, partition: int,
              records: Sequence[ArchivedRecord]) -> Segment | None:
        """One segment of ``records`` (ascending offsets, after what is archived already)."""
        if not records:
            return None
        first, last = records[0].offset, records[-1].offset
        end = self.end(topic, partition)
        if first < end:
            raise ValueError(f"{topic}[{partition}]: offsets from {first} are archived already "
                             f"(up to {end - 1})")
        folder = self.partition_dir(topic, partition)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{first:020d}-{last:020d}.parquet"
        _write_table(path, _table(records))
        return Segment(first, last, path)

    def drop_keys(self, keys: set[bytes]) -> int:
        """Every segment written again without the records keyed by ``keys`` (erasure);
        returns how many records went."""
        gone = 0
        for topic, part in self.partitions():
            for seg in self.segments(topic, part):
                table = pq.read_table(seg.path, schema=SCHEMA)
                mask = pa.array([k not in keys for k in table.column("key").to_pylist()],
                                type=pa.bool_())
                kept = table.filter(mask)
                if kept.num_rows == table.num_rows:
                    continue
                gone += table.num_rows - kept.num_rows
                # kept under its name even when empty: the name says which offsets are archived
                _write_table(seg.path, kept)
        return gone

    # ------------------------------------------------------------------ reading

    def read(self, topic: str, partition: int, start: int = 0, stop: int | None = None,
             key: bytes | None = None) -> Iterator[ArchivedRecord]:
        """The archived records of a partition with ``start <= offset < stop`` (and, when
        ``key`` is given, that key), in offset order."""
        for seg in self.segments(topic, partition):
            if seg.last < start or (stop is not None and seg.first >= stop):
                continue
            yield from _rows(topic, partition, seg.path, start, stop, key)

    def read_offsets(self, topic: str, partition: int,
                     offsets: Iterable[int]) -> list[ArchivedRecord]:
        """The archived records at ``offsets`` (those archived; others are left out)."""
        wanted = sorted(set(offsets))
        out: list[ArchivedRecord] = []
        for seg in self.segments(topic, partition):
            mine = [o for o in wanted if seg.first <= o <= seg.last]
            if not mine:
                continue
            table = pq.read_table(seg.path, schema=SCHEMA,
                                  filters=[("offset", "in", mine)])
            out.extend(_records(topic, partition, table))
        return out


def _table(records: Sequence[ArchivedRecord]) -> pa.Table:
    return pa.Table.from_pydict({
        "offset": [r.offset for r in records],
        "timestamp": [r.timestamp for r in records],
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
    }, schema=SCHEMA)


def _write_table(path: Path, table: pa.Table) -> None:
    """``table`` at ``path``, whole or not at all: written aside, flushed, renamed."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        pq.write_table(table, out, compression=COMPRESSION, row_group_size=ROW_GROUP)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # the rename itself reaches the disk
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _rows(topic: str, partition: int, path: Path, start: int, stop: int | None,
          key: bytes | None) -> Iterator[ArchivedRecord]:
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        stats = file.metadata.row_group(group).column(0).statistics
        if stats is not None and stats.has_min_max and (
                stats.max < start or (stop is not None and stats.min >= stop)):
            continue
        table = file.read_row_group(group)
        table = table.filter(_mask(table, start, stop, key))
        yield from _records(topic, partition, table)


def _mask(table: pa.Table, start: int, stop: int | None, key: bytes | None) -> pa.Array:
    mask = pc.greater_equal(table.column("offset"), start)
    if stop is not None:
        mask = pc.and_(mask, pc.less(table.column("offset"), stop))
    if key is not None:
        mask = pc.and_(mask, pc.equal(table.column("key"), pa.scalar(key, pa.binary())))
    return mask


def _records(topic: str, partition: int, table: pa.Table) -> Iterator[ArchivedRecord]:
    cols = table.to_pydict()
    for i in range(table.num_rows):
        yield ArchivedRecord(
            topic, partition, cols["offset"][i], cols["timestamp"][i], cols["key"][i],
            cols["value"][i],
            tuple((h["key"], h["value"]) for h in cols["headers"][i] or ()))
