"""Segment files of the archived log: what is written is read back, by range, key and offset;
erasure rewrites them without a cube; a write is whole or absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.archive.segments import Archive, ArchivedRecord


def records(first: int, count: int, topic: str = "t.memory.updates") -> list[ArchivedRecord]:
    return [ArchivedRecord(topic, 0, first + i, 1_700_000_000_000 + i,
                           b"alice" if i % 2 else b"bob", f'{{"n":{first + i}}}'.encode(),
                           (("ce_type", b"memstream.MemoryUpdate.v3"),))
            for i in range(count)]


def test_written_records_read_back_exactly_by_range_and_key(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    written = records(0, 5000)
    archive.write("t.memory.updates", 0, written[:3000])
    archive.write("t.memory.updates", 0, written[3000:])
    assert archive.end("t.memory.updates", 0) == 5000
    assert list(archive.read("t.memory.updates", 0)) == written
    assert list(archive.read("t.memory.updates", 0, 2990, 3010)) == written[2990:3010]
    alice = list(archive.read("t.memory.updates", 0, key=b"alice"))
    assert alice == [r for r in written if r.key == b"alice"]
    assert archive.read_offsets("t.memory.updates", 0, [4999, 7, 3000, 9999]) == [
        written[7], written[3000], written[4999]]
    assert archive.partitions() == [("t.memory.updates", 0)]
    assert archive.end("t.memory.updates", 1) == 0


def test_offsets_archived_already_are_refused(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    archive.write("t.conversations", 0, records(0, 10, "t.conversations"))
    with pytest.raises(ValueError, match="archived already"):
        archive.write("t.conversations", 0, records(5, 10, "t.conversations"))
    assert len(list(archive.read("t.conversations", 0))) == 10


def test_erasure_rewrites_segments_without_the_cube_and_keeps_their_offsets(
        tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    archive.write("t.memory.updates", 0, records(0, 10))
    archive.write("t.memory.updates", 0, [r for r in records(10, 4) if r.key == b"alice"])
    assert archive.drop_keys({b"alice"}) == 7
    left = list(archive.read("t.memory.updates", 0))
    assert [r.key for r in left] == [b"bob"] * 5
    assert archive.end("t.memory.updates", 0) == 14  # the emptied segment (11-13) still says so
    assert b"alice" not in b"".join(p.read_bytes() for p in tmp_path.rglob("*.parquet"))
    assert archive.drop_keys({b"alice"}) == 0


def test_a_write_cut_short_leaves_no_segment(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    folder = archive.partition_dir("t.memory.items", 0)
    folder.mkdir(parents=True)
    (folder / f"{0:020d}-{9:020d}.parquet.tmp").write_bytes(b"PAR1 half")
    assert archive.segments("t.memory.items", 0) == []
    assert archive.end("t.memory.items", 0) == 0
    archive.write("t.memory.items", 0, records(0, 10, "t.memory.items"))
    assert len(list(archive.read("t.memory.items", 0))) == 10


def test_status_says_what_is_archived_and_where(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    assert archive.describe() == "nothing archived yet (the broker holds the whole log)"
    archive.write("t.memory.updates", 0, records(0, 1500))
    archive.write("t.memory.updates", 1, records(0, 20))
    summary = archive.summary()
    assert summary["segments"] == 2 and summary["records"] == 1520
    assert summary["bytes"] == sum(p.stat().st_size for p in tmp_path.rglob("*.parquet"))
    assert archive.describe().startswith("1,520 older records in 2 segment files, ")
