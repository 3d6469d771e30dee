"""The lifecycle stage's sweep events (streams/lifecycle/agent.py): the same within an
interval, so a redelivery sweeps nothing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.lifecycle.agent import sweep_events

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_sweep_events_are_the_same_within_an_interval() -> None:
    one = sweep_events(["b", "a"], T0 + timedelta(minutes=5), 3600)
    two = sweep_events(["a", "b"], T0 + timedelta(minutes=50), 3600)
    assert [e.event_id for e in one] == [e.event_id for e in two]
    assert [e.cube_id for e in one] == ["a", "b"] and one[0].occurred_at == T0
