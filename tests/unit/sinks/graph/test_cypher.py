"""The Cypher builders (sinks/graph/cypher.py): identifiers are whitelisted, depths bounded,
keys unambiguous."""

from __future__ import annotations

import pytest

from memstream.sinks.graph import cypher
from memstream.sinks.ports import StoreError
from memstream.topics.models import EDGE_TYPES


def test_only_known_edge_types_reach_query_text() -> None:
    for t in EDGE_TYPES:
        assert f":{t}]" in cypher.add_edges(t)
    for bad in ["RELATE_TO]->(x) DETACH DELETE x //", "relate_to", "", "PARENT "]:
        with pytest.raises(StoreError):
            cypher.add_edges(bad)
        with pytest.raises(StoreError):
            cypher.redirect_edges(bad, outgoing=True)


@pytest.mark.parametrize("depth", [0, 6, -1, True, 2.0, "2"])
def test_subgraph_depth_must_be_a_small_integer(depth: object) -> None:
    with pytest.raises(StoreError):
        cypher.subgraph_edges(depth)  # type: ignore[arg-type]


def test_keys_have_no_whitespace_edges_and_do_not_collide() -> None:
    assert cypher.node_key("a", "bc") != cypher.node_key("ab", "c")
    assert cypher.cube_key("x") != cypher.cube_key("x ")
    for value in ["x ", " x", "a\n", "用户"]:
        key = cypher.node_key(value, value)
        assert key == key.strip() and key.isalnum()
