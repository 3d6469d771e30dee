"""Activation memory (streams/scheduler/activation.py): a prependable block, rendered for
the cubes active since their last render."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from memstream.streams.core.working_memory import Entry
from memstream.streams.scheduler.activation import as_items, due_for_render, render_activation
from memstream.streams.scheduler.state import CubeState
from memstream.topics.events import ScheduleMessage
from memstream.topics.models import MemoryItem, MemoryMetadata

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


def state(**kw: object) -> CubeState:
    msg = ScheduleMessage(user_id="u", cube_id="c", label="query", content="x")
    return CubeState.new(msg, 1, T0).model_copy(update=kw)


def item(node_id: str, text: str, **metadata: Any) -> MemoryItem:
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(
        user_id="u", cube_id="c", memory_type="LongTermMemory", **metadata))


def test_activation_memory_is_a_prependable_block() -> None:
    """The search's context block (ids for feedback, dates, an episode's turns as said),
    where it was ``- text`` lines before: an agent can now name the memory it acts on."""
    block = render_activation([
        item("a1b2c3d4-1", "The user is vegetarian.", valid_from=T0),
        item("e5f6a7b8-2", "  "),
        item("c9d0e1f2-3", "Line one\nline two"),
    ], 4000)
    assert block.text == ("Known about the user:\n#a1b2c3d4 2026-05-01: The user is vegetarian."
                          "\n#c9d0e1f2: Line one line two")
    assert block.ids == ("a1b2c3d4-1", "c9d0e1f2-3")
    assert render_activation([], 4000).text == ""
    assert render_activation([item("f0f0f0f0-4", "x" * 2000)], 4000).text.count("\n") == 1


def test_an_episode_keeps_its_turns_and_the_budget_holds() -> None:
    episode = item("0e0e0e0e-1", "[2026-05-01 12:00] Alice: I moved to Lyon.\n"
                   "[2026-05-01 12:01] Bob: Welcome!")
    facts = [item(f"{i:08x}-f", f"Fact {i} " + "y" * 80) for i in range(30)]
    block = render_activation([episode, *facts], 1000)
    assert block.text.startswith("Known about the user:\n#0e0e0e0e\n[2026-05-01 12:00] Alice:")
    assert len(block.text) <= 1000 and block.text.endswith("memories did not fit)")


def test_entries_become_memories_under_the_ids_they_name() -> None:
    stored = item("lt-1", "The user is vegetarian (old text).", valid_from=T0)
    entries = [Entry(ref="lt-1", text="The user is vegetarian.", vector_id="wm-1"),
               Entry(ref="pending-2", text="The user flies on May 14.", vector_id="pending-2")]
    got = as_items(entries, [stored], "u", "c")
    assert [(i.id, i.memory) for i in got] == [("lt-1", "The user is vegetarian."),
                                              ("pending-2", "The user flies on May 14.")]
    assert got[0].metadata.valid_from == T0 and got[1].metadata.cube_id == "c"


def test_only_cubes_active_since_their_last_render_are_rendered() -> None:
    busy = state(last_activity_at=T0 + timedelta(seconds=10))
    other = state(cube_id="d", last_activity_at=T0 + timedelta(seconds=10))
    old = state(cube_id="e", last_activity_at=T0 - timedelta(seconds=10))
    rendered = {busy.key: T0 + timedelta(seconds=10), other.key: T0}
    assert due_for_render([busy, other, old], rendered, since=T0) == [other]
