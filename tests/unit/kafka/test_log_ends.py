"""What memstream last saw of its log against what the broker holds (kafka/log_ends.py):
pure comparisons and the record files, no broker."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from memstream.kafka.log_ends import Ledger, compare, read_ledger, write_ledger

AT = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def test_a_broker_with_fewer_records_than_seen_is_a_loss_per_partition() -> None:
    seen = Ledger(AT, {"c": {0: 10, 1: 5}, "u": {0: 3}}, {"c": {0: 10}})
    assert compare(seen, {"c": {0: 10, 1: 7}, "u": {0: 3}}) == []  # grown: fine
    [loss] = compare(seen, {"c": {0: 8, 1: 5}, "u": {0: 3}})
    assert (loss.topic, loss.partition, loss.count, loss.by) == ("c", 0, 2, "log")
    assert "c[0]: 2 records lost (offsets 8–9" in loss.describe()
    empty = compare(seen, {})  # the broker came back empty: everything is lost
    assert sorted((x.topic, x.partition, x.count) for x in empty) == [
        ("c", 0, 10), ("c", 1, 5), ("u", 0, 3)]


def test_offsets_the_workers_committed_past_the_end_count_too() -> None:
    seen = Ledger(AT, {}, {"c": {0: 12}})
    [loss] = compare(seen, {"c": {0: 9}})
    assert (loss.count, loss.by) == (3, "workers")
    assert "records the workers had processed" in loss.describe()


def test_the_ledger_round_trips_and_a_broken_one_reads_as_none(tmp_path: Path) -> None:
    assert read_ledger(tmp_path) is None
    write_ledger(tmp_path, Ledger(AT, {"c": {0: 4}}, {"c": {0: 2}}))
    assert read_ledger(tmp_path) == Ledger(AT, {"c": {0: 4}}, {"c": {0: 2}})
    (tmp_path / "log-ends.json").write_text("{half")
    assert read_ledger(tmp_path) is None
