"""The scheduler agent (streams/scheduler/agent.py) merges its topics by time without
reordering any one of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.runtime.stage import RawRecord, Record
from memstream.streams.scheduler.agent import in_order
from memstream.topics.events import Origin, ScheduleMessage

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


def record(topic: str, offset: int, at: datetime) -> Record[ScheduleMessage]:
    msg = ScheduleMessage(user_id="u", label="query", content=f"{topic}{offset}", occurred_at=at)
    return Record(msg, Origin(topic=topic, partition=0, offset=offset),
                  RawRecord(topic, 0, offset, b"u", b""))


def test_topics_are_merged_by_time_without_reordering_a_topic() -> None:
    q0, q1 = record("q", 0, T0), record("q", 1, T0 - timedelta(seconds=5))  # a skewed clock
    a0 = record("a", 0, T0 + timedelta(seconds=1))
    b0 = record("b", 0, T0 - timedelta(seconds=1))
    merged = in_order([q0, a0, q1, b0])
    assert [r.value.content for r in merged] == ["b0", "q0", "q1", "a0"]
