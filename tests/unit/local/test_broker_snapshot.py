"""The last good copy of the embedded broker's data file (memstream.local.broker_snapshot), on files
laid out as noida-db 0.2.3 writes them: whole, cut short, empty, missing."""

from __future__ import annotations

import os
from pathlib import Path

from memstream.local.broker_snapshot import (
    DAMAGED,
    DATA_FILE,
    LAST_GOOD,
    damage,
    preserve,
    restore,
    save_allowance_s,
)

WHOLE = (b'{"topics":[["t",{"name":"t","partitions":[[0,{"id":0,"high_watermark":3}]]}]],'
         b'"broker_id":1,"committed_offsets":[],"offset_metadata":[],"broker_configs":{}}')


def save(directory: Path, data: bytes) -> None:
    """As noida saves: a new file renamed over the old one (never written in place)."""
    staging = directory / "kafka.tmp"
    staging.write_bytes(data)
    os.replace(staging, directory / DATA_FILE)


def test_damage_tells_whole_from_cut_short_empty_and_missing(tmp_path: Path) -> None:
    path = tmp_path / DATA_FILE
    assert damage(path) == "missing"
    path.write_bytes(b"")
    assert damage(path) == "empty"
    path.write_bytes(WHOLE[: len(WHOLE) // 2])
    assert (damage(path) or "").startswith("cut short")
    path.write_bytes(WHOLE[:-1])  # all but the closing brace
    assert (damage(path) or "").startswith("cut short")
    path.write_bytes(b"garbage" + WHOLE)
    assert (damage(path) or "").startswith("not a noida log")
    path.write_bytes(WHOLE + b"\n")
    assert damage(path) is None


def test_preserve_links_the_file_and_keeps_it_when_noida_renames_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / DATA_FILE
    path.write_bytes(WHOLE)
    assert preserve(tmp_path)
    assert os.path.samefile(path, tmp_path / LAST_GOOD)  # a hard link: no copy of a GB log
    save(tmp_path, WHOLE.replace(b"3}", b"9}"))
    assert (tmp_path / LAST_GOOD).read_bytes() == WHOLE
    save(tmp_path, b"")
    assert not preserve(tmp_path)  # a damaged file never replaces the good copy
    assert (tmp_path / LAST_GOOD).read_bytes() == WHOLE


def test_restore_puts_the_copy_back_and_keeps_the_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / DATA_FILE
    assert restore(tmp_path) is None  # a fresh data dir: nothing to do
    save(tmp_path, WHOLE)
    assert restore(tmp_path) is None and (tmp_path / LAST_GOOD).exists()
    save(tmp_path, WHOLE[:40])
    restored = restore(tmp_path)
    assert restored is not None and restored.problem.startswith("cut short")
    assert path.read_bytes() == WHOLE
    assert (tmp_path / DAMAGED).read_bytes() == WHOLE[:40]
    assert "restored its last good copy" in restored.describe()
    path.unlink()
    restored = restore(tmp_path)
    assert restored is not None and restored.problem == "missing"
    assert path.read_bytes() == WHOLE


def test_no_whole_copy_means_nothing_is_restored(tmp_path: Path) -> None:
    (tmp_path / DATA_FILE).write_bytes(b"")
    assert restore(tmp_path) is None
    assert (tmp_path / DATA_FILE).read_bytes() == b""  # left for noida to refuse, loudly


def test_a_stop_allows_time_for_a_large_save(tmp_path: Path) -> None:
    assert save_allowance_s(tmp_path, 10.0) == 10.0
    with (tmp_path / DATA_FILE).open("wb") as fh:
        fh.truncate(1_500_000_000)  # sparse: a 1.5 GB log
    assert save_allowance_s(tmp_path, 10.0) >= 60.0
