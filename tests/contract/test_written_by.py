"""Who wrote a derived node (``written_by``) survives every graph adapter, and old nodes
without the property still read back (as not recorded)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstream.sinks.graph.props import node_to_props, props_to_node
from memstream.sinks.ports import GraphStore
from memstream.topics.models import MemoryItem, MemoryMetadata

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "graph_backend" in metafunc.fixturenames:
        metafunc.parametrize("graph_backend", ["falkordb", "neo4j-bolt"])


def summary(cube: str, node_id: str, **meta: object) -> MemoryItem:
    return MemoryItem(id=node_id, memory="The user hikes in the Alps.", metadata=MemoryMetadata(
        user_id="user-1", cube_id=cube, memory_type="LongTermMemory", type="topic",
        hierarchy_level="concept", created_at=T0, updated_at=T0, **meta))  # type: ignore[arg-type]


@pytest.mark.asyncio(loop_scope="session")
async def test_written_by_round_trips(graph_store: GraphStore, cube: str) -> None:
    nodes = [summary(cube, "by-rules", written_by="rules"),
             summary(cube, "by-model", written_by="model"), summary(cube, "unknown")]
    await graph_store.upsert_nodes(cube, nodes)
    assert await graph_store.get_nodes(cube, ["by-rules", "by-model", "unknown"]) == nodes
    by_rules, by_model, unknown = nodes
    assert by_rules.metadata.is_stand_in_summary
    assert not by_model.metadata.is_stand_in_summary
    assert not unknown.metadata.is_stand_in_summary


def test_a_node_stored_before_the_field_existed_still_parses() -> None:
    props = node_to_props(summary("c", "old"))
    assert "written_by" not in props  # None is not stored
    assert props_to_node(props).metadata.written_by is None
    assert props_to_node({**props, "written_by": "rules"}).metadata.written_by == "rules"
