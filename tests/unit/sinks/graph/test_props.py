"""A node as graph properties (sinks/graph/props.py): flat, and back unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from memstream.sinks.graph.props import node_to_props, props_to_node
from memstream.topics.models import MemoryItem, MemoryMetadata, SourceRef, UsageRecord


def test_node_properties_are_flat_and_round_trip() -> None:
    item = MemoryItem(
        id="n1",
        memory="the user lives in Lyon",
        metadata=MemoryMetadata(
            user_id="u", cube_id="c", memory_type="UserMemory", tags=("a", "b"),
            sources=(SourceRef(message_id="m1", role="user"),),
            usage=(UsageRecord(at=datetime(2025, 1, 1, tzinfo=UTC), requester="agent"),),
            created_at=datetime(2025, 1, 1, 10, tzinfo=timezone(timedelta(hours=2))),
            memory_time=None,
        ),
    )  # fmt: skip
    props = node_to_props(item)
    assert all(not isinstance(v, dict) for v in props.values())
    assert props["tags"] == ["a", "b"]
    assert props["created_at"] == "2025-01-01T08:00:00.000000+00:00"
    assert "memory_time" not in props  # null is an absent property
    assert props_to_node({**props, "node_key": "k", "cube_key": "c"}) == item
