"""A cube's scheduler state (streams/scheduler/state.py): the query history and the
retrieval timer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.scheduler.state import CubeState, QueryRecord
from memstream.topics.events import ScheduleMessage

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


def state(**kw: object) -> CubeState:
    msg = ScheduleMessage(user_id="u", cube_id="c", label="query", content="x")
    return CubeState.new(msg, 1, T0).model_copy(update=kw)


def test_history_keeps_the_latest_queries_once_each() -> None:
    s = state()
    for i in range(5):
        s = s.with_query(QueryRecord(event_id=f"e{i}", text=f"q{i}", at=T0), keep=3)
    s = s.with_query(QueryRecord(event_id="e4", text="q4 again", at=T0), keep=3)  # redelivered
    assert s.recent_queries(10) == ["q2", "q3", "q4"]
    assert s.recent_queries(2) == ["q3", "q4"]
    restored = CubeState.load(s.dump())
    assert restored == s


def test_the_timer_counts_from_the_last_retrieval_or_the_first_sight() -> None:
    s = state()
    assert not s.retrieval_due(T0 + timedelta(seconds=299), 300)
    assert s.retrieval_due(T0 + timedelta(seconds=300), 300)
    s = s.model_copy(update={"last_retrieval_at": T0 + timedelta(seconds=250)})
    assert not s.retrieval_due(T0 + timedelta(seconds=500), 300)
    assert s.retrieval_due(T0 + timedelta(seconds=550), 300)
    assert s.touched(T0 - timedelta(days=1)).last_activity_at == T0  # never goes back
