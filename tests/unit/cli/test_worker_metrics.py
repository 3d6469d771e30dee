"""What ``memstream status`` shows of a worker's metrics (memstream/cli/worker_metrics.py): the
partitions the worker reports stalled, read from its own metrics text, beside the lag."""

from __future__ import annotations

from prometheus_client import generate_latest
from rich.console import Console
from rich.table import Table

from memstream.cli.worker_metrics import StalledPartition, lag_table, parse
from memstream.kafka.admin import Position
from memstream.streams.ops.metrics import WorkerMetrics
from memstream.streams.runtime.stalls import StallWatch
from memstream.topics.settings import Settings

ITEMS, CONVERSATIONS = "memstream.memory.items", "memstream.conversations"


def shown(table: Table | None) -> str:
    assert table is not None
    console = Console(record=True, width=160)
    console.print(table)
    return console.export_text()


def test_a_stalled_partition_shows_in_status_beside_its_topics_lag() -> None:
    metrics = WorkerMetrics(Settings())
    metrics.stalls = watch = StallWatch(after_s=3.0)
    watch.watch("memory.add", [ITEMS])
    for t in range(10):  # partition 1: 7 records wait, its committed offset stays
        watch.update({ITEMS: {0: Position(t, t + 1), 1: Position(40, 47)}},
                     {(ITEMS, 0), (ITEMS, 1)}, float(t))

    stalls = parse(generate_latest(metrics.registry).decode()).stalls
    assert stalls == [StalledPartition("memory.add", ITEMS, 1, 9.0)]
    text = shown(lag_table({ITEMS: {0: 1, 1: 7}, CONVERSATIONS: {0: 2}}, stalls))
    assert "stalled" in text
    row = next(line for line in text.splitlines() if ITEMS in line)
    assert "8" in row and "[1] 7 waiting, none handled for 9s (memory.add)" in row


def test_without_stalls_the_lag_table_is_as_before() -> None:
    text = shown(lag_table({ITEMS: {0: 1, 1: 7}, CONVERSATIONS: {0: 0}}))
    assert "stalled" not in text and "lag (records not yet processed)" in text
    assert lag_table({ITEMS: {}}) is None  # no input partitions: no table
