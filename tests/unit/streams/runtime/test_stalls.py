"""The worker's stall check (streams/runtime/stalls.py), sample by sample: what an operator
reads in the log. A slow partition that moves is never reported; one with records waiting
that does not move for ``worker.stall_after_s`` is reported once, above INFO, with the stage,
topic, partition, the records waiting and for how long nothing was handled; then at INFO
once it moves again. The optimizer's partitions move together; a stage's partitions taken
in turn each must move by itself."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from faust.types import TP

from memstream.kafka.admin import Position
from memstream.streams.runtime.stage import StageStats
from memstream.streams.runtime.stalls import StallWatch

AFTER_S = 3.0
LOW, HIGH, ITEMS = "p.reorganize.low", "p.reorganize.high", "p.memory.items"


def reports(caplog: pytest.LogCaptureFixture, above: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "memstream.stalls" and r.levelno > above]


def infos(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "memstream.stalls" and r.levelno == logging.INFO]


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="memstream.stalls")


def test_a_slow_partition_that_moves_is_never_reported(caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(AFTER_S)
    watch.watch("memory.add", [ITEMS])
    for t in range(60):  # one record handled every 2 s, 200 behind all along
        committed = t // 2
        assert watch.update({ITEMS: {0: Position(committed, committed + 200)}},
                            {(ITEMS, 0)}, float(t)) == []
    assert reports(caplog, logging.DEBUG) == []


def test_a_partition_that_stops_is_reported_once_then_again_when_it_moves(
        caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(AFTER_S)
    watch.watch("memory.add", [ITEMS], StageStats(in_flight=1))
    for t in range(10):  # 7 records wait; the committed offset stays at 40
        watch.update({ITEMS: {1: Position(40, 47)}}, {(ITEMS, 1)}, float(t))
    [error] = reports(caplog)
    assert error.startswith(f"memory.add: stalled on {ITEMS}[1]: 7 records wait and none was "
                            "handled for 3s; 1 batch of the stage in progress")
    assert "worker.stall_after_s is 3s" in error
    [now] = watch.stalled
    assert (now.stage, now.topic, now.partition, now.waiting, now.idle_s) == (
        "memory.add", ITEMS, 1, 7, 9.0)
    assert infos(caplog) == []
    assert watch.update({ITEMS: {1: Position(41, 47)}}, {(ITEMS, 1)}, 10.0) == []
    assert infos(caplog) == [f"memory.add: {ITEMS}[1] moves again after 9s without handling a "
                             "record (6 records wait)"]
    assert len(reports(caplog)) == 1


def test_records_arriving_on_an_idle_partition_are_not_a_stall_until_they_wait_long_enough(
        caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(AFTER_S)
    watch.watch("extraction", ["p.conversations"])
    tp = {("p.conversations", 0)}
    for t in range(100):  # idle for 100 s: nothing waits
        watch.update({"p.conversations": {0: Position(5, 5)}}, tp, float(t))
    for t in (100.0, 101.0, 101.9):  # a record arrives; the last sample with none was at 99
        assert watch.update({"p.conversations": {0: Position(5, 6)}}, tp, t) == []
    assert reports(caplog) == []
    [stall] = watch.update({"p.conversations": {0: Position(5, 6)}}, tp, 102.0)
    assert (stall.waiting, stall.idle_s) == (1, 3.0)
    assert len(reports(caplog)) == 1


def test_the_optimizers_partitions_move_together(caplog: pytest.LogCaptureFixture) -> None:
    """A less urgent partition waits while the optimizer works through urgent events: not
    stalled. Once the optimizer moves on none of its partitions, each waiting one is."""
    watch = StallWatch(AFTER_S)
    watch.watch("reorganize", [HIGH, LOW], together=True)
    mine = {(HIGH, 0), (LOW, 0)}
    for t in range(20):
        watch.update({HIGH: {0: Position(t, 100)}, LOW: {0: Position(0, 50)}}, mine, float(t))
    assert reports(caplog) == []
    for t in range(20, 23):  # stuck in one urgent batch
        watch.update({HIGH: {0: Position(19, 100)}, LOW: {0: Position(0, 50)}}, mine, float(t))
    assert sorted(reports(caplog)) == [
        f"reorganize: stalled on {HIGH}[0]: 81 records wait and none was handled for 3s; none "
        "delivered to the stage: its consumer is not fetching them (worker.stall_after_s is 3s)",
        f"reorganize: stalled on {LOW}[0]: 50 records wait and none was handled for 3s; none "
        "delivered to the stage: its consumer is not fetching them (worker.stall_after_s is 3s)"]
    watch.update({HIGH: {0: Position(20, 100)}, LOW: {0: Position(0, 50)}}, mine, 23.0)
    assert sorted(infos(caplog)) == [
        f"reorganize: {HIGH}[0] moves again after 3s without handling a record (80 records wait)",
        f"reorganize: {LOW}[0] moves again after 3s without handling a record (50 records wait)"]


def test_a_stage_taking_partitions_in_turn_must_move_each_of_them(
        caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(AFTER_S)
    watch.watch("memory.add", [ITEMS])
    mine = {(ITEMS, 0), (ITEMS, 1)}
    for t in range(5):
        watch.update({ITEMS: {0: Position(t, 100), 1: Position(3, 9)}}, mine, float(t))
    [error] = reports(caplog)
    assert f"{ITEMS}[1]: 6 records wait" in error


def test_only_this_workers_partitions_of_watched_topics_are_checked(
        caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(AFTER_S)
    watch.watch("memory.add", [ITEMS])
    stuck = {ITEMS: {0: Position(0, 9), 1: Position(0, 9)}, "p.other": {0: Position(0, 9)}}
    for t in range(5):  # partition 1 is another worker's; p.other is no stage's here
        watch.update(stuck, {(ITEMS, 0), ("p.other", 0)}, float(t))
    assert [s.partition for s in watch.stalled] == [0]
    watch.update(stuck, {("p.other", 0)}, 5.0)  # partition 0 moved to another worker
    assert watch.stalled == []
    assert infos(caplog) == [f"memory.add: {ITEMS}[0] is no longer this worker's (it was "
                             "stalled for 4s)"]


def test_a_rebalance_is_not_a_stall(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing is handled while the group rebalances: the wait counts from its end."""
    tp = TP(ITEMS, 0)
    app = SimpleNamespace(rebalancing=False, consumer=SimpleNamespace(assignment=lambda: {tp}))
    watch = StallWatch(AFTER_S, app)
    watch.watch("memory.add", [ITEMS])
    stuck = {ITEMS: {0: Position(0, 9)}}
    watch.observe(stuck, 0.0)
    app.rebalancing = True
    for t in range(1, 10):
        watch.observe(stuck, float(t))
    app.rebalancing = False
    watch.observe(stuck, 10.0)
    assert reports(caplog) == []
    watch.observe(stuck, 12.0)
    assert len(reports(caplog)) == 1
