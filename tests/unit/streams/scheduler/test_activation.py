"""Activation memory (streams/scheduler/activation.py): a prependable block, rendered for
the cubes active since their last render."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.scheduler.activation import due_for_render, render_activation
from memstream.streams.scheduler.state import CubeState
from memstream.topics.events import ScheduleMessage

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


def state(**kw: object) -> CubeState:
    msg = ScheduleMessage(user_id="u", cube_id="c", label="query", content="x")
    return CubeState.new(msg, 1, T0).model_copy(update=kw)


def test_activation_memory_is_a_prependable_block() -> None:
    text = render_activation(["The user is vegetarian.", "  ", "Line one\nline two"])
    assert text == "Known about the user:\n- The user is vegetarian.\n- Line one line two"
    assert render_activation([]) == ""
    assert render_activation(["x" * 2000]).count("\n") == 1


def test_only_cubes_active_since_their_last_render_are_rendered() -> None:
    busy = state(last_activity_at=T0 + timedelta(seconds=10))
    other = state(cube_id="d", last_activity_at=T0 + timedelta(seconds=10))
    old = state(cube_id="e", last_activity_at=T0 - timedelta(seconds=10))
    rendered = {busy.key: T0 + timedelta(seconds=10), other.key: T0}
    assert due_for_render([busy, other, old], rendered, since=T0) == [other]
