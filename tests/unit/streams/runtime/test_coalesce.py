"""The optimizer's edge announcements of one cause go out as one record (runtime/coalesce)."""

from __future__ import annotations

from datetime import UTC, datetime

from memstream.streams.runtime.coalesce import coalesce_links
from memstream.streams.runtime.stage import Outgoing
from memstream.topics.events import MemoryUpdate, ReorganizeEvent
from memstream.topics.models import Edge
from memstream.topics.registry import MEMORY_UPDATES, REORGANIZE_HIGH

AT = datetime(2026, 3, 1, tzinfo=UTC)


def link(source: str, target: str, kind: str, reason: str, cause: str = "c1",
         cube: str = "ann") -> Outgoing:
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=f"{source}{target}", user_id=cube, action="linked", stage="reorganize",
        occurred_at=AT, cause_event_id=cause, reason=reason,
        edges=(Edge(source=source, target=target, type=kind),)))  # type: ignore[arg-type]


def test_the_edges_of_one_cause_are_announced_once_each_keeping_its_reason() -> None:
    other = Outgoing(REORGANIZE_HIGH, ReorganizeEvent(user_id="ann", op="add"))
    outs = [link("a", "b", "FOLLOWS", "session order"), other,
            link("a", "c", "CAUSE", "the delay caused it"), link("x", "y", "FOLLOWS", "s", "c2"),
            link("a", "b", "FOLLOWS", "session order", cube="ben")]
    got = coalesce_links(outs)
    assert len(got) == 4 and got[1] is other and got[2] is outs[3] and got[3] is outs[4]
    joined = got[0].event
    assert isinstance(joined, MemoryUpdate) and joined.cause_event_id == "c1"
    assert [(e.source, e.target, e.type, e.reason) for e in joined.edges] == [
        ("a", "b", "FOLLOWS", "session order"), ("a", "c", "CAUSE", "the delay caused it")]
    # the same inputs make the same record (a redelivery dedupes by its id)
    assert coalesce_links(outs)[0].event.event_id == joined.event_id != "ab"


def test_updates_naming_a_node_are_left_alone() -> None:
    named = Outgoing(MEMORY_UPDATES, MemoryUpdate(
        user_id="ann", action="linked", stage="memory.add", node_id="n1", related_ids=("n2",),
        edges=(Edge(source="n1", target="n2", type="CONFLICT"),)))
    outs = [named, named]
    assert coalesce_links(outs) == outs
