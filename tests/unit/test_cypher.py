"""The Cypher builders: user text only ever travels as parameters; identifiers are whitelisted."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memstream.sinks.graph import cypher
from memstream.sinks.graph.props import node_to_props, props_to_node
from memstream.sinks.ports import FILTER_FIELDS, Filter, StoreError
from memstream.topics.models import EDGE_TYPES, MemoryItem, MemoryMetadata, SourceRef, UsageRecord

HOSTILE = [
    "x' OR 1=1 //",
    '"}) DETACH DELETE n //',
    "`Memory`) MATCH (m) DETACH DELETE m",
    "$injected_param",
    "a\\b\nc",
    "用户",
]


@pytest.mark.parametrize("dialect", [cypher.NEO4J, cypher.FALKORDB], ids=lambda d: d.name)
@pytest.mark.parametrize("value", HOSTILE)
def test_filter_values_travel_only_as_parameters(value: str, dialect: cypher.Dialect) -> None:
    filters = [
        Filter("key", "=", value),
        Filter("memory", "contains", value),
        Filter("tags", "in", [value, "other"]),
        Filter("session_id", "!=", value),
        Filter("type", "<", value),
    ]
    text, params = cypher.compile_filters(filters, dialect)
    query = cypher.find_nodes(text, limited=True)
    assert value not in query
    assert list(params.values()) == [value, value, [value, "other"], value, value]
    assert all(f"${name}" in text for name in params)


def test_filter_fields_outside_the_whitelist_are_refused() -> None:
    forged = object.__new__(Filter)  # skips Filter's own check, as a careless caller might
    object.__setattr__(forged, "field", "memory} ) DETACH DELETE n //")
    object.__setattr__(forged, "op", "=")
    object.__setattr__(forged, "value", "x")
    with pytest.raises(StoreError):
        cypher.compile_filters([forged], cypher.NEO4J)
    with pytest.raises(StoreError):
        cypher.count_by(["memory_type", "n.id) DETACH DELETE n //"], "")
    assert {"tags", "confidence", "updated_at"} <= FILTER_FIELDS


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


def test_string_ranges_avoid_falkordb_index_but_numbers_do_not() -> None:
    filters = [Filter("updated_at", "<", datetime(2025, 1, 1, tzinfo=UTC)),
               Filter("confidence", "<=", 50)]  # fmt: skip
    falkor, _ = cypher.compile_filters(filters, cypher.FALKORDB)
    neo, _ = cypher.compile_filters(filters, cypher.NEO4J)
    assert falkor == "toString(n.updated_at) < $p0 AND n.confidence <= $p1"
    assert neo == "n.updated_at < $p0 AND n.confidence <= $p1"


def test_neo4j_ddl_is_idempotent_and_named() -> None:
    for key, statement in cypher.NEO4J.schema:
        assert statement.startswith(("CREATE CONSTRAINT ", "CREATE INDEX ",
                                     "CREATE FULLTEXT INDEX "))
        others = {"cube_access": "CubeAccess", "llm_spend": "LLMSpend", "llm_answer": "LLMAnswer"}
        label = "LogRef" if key.startswith("log_ref_") else others.get(key, "Memory")
        assert f" {key} IF NOT EXISTS FOR (n:{label}) " in statement
    assert cypher.NEO4J.indexed_properties is None
    assert "memory_search_text" in cypher.NEO4J.fulltext_call
    for key, statement in cypher.FALKORDB.schema:
        if key == cypher.SEARCH_TEXT:  # the full-text index, by procedure
            assert statement == "CALL db.idx.fulltext.createNodeIndex('Memory', 'search_text')"
        elif "." in key:  # another label's index, listed as label.property
            label, prop = key.split(".")
            assert statement == f"CREATE INDEX FOR (n:{label}) ON (n.{prop})"
        else:
            assert statement == f"CREATE INDEX FOR (n:Memory) ON (n.{key})"
    assert cypher.FALKORDB.indexed_properties is not None


def test_iso_times_sort_as_the_times_do() -> None:
    rng = random.Random(7)
    zones = [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
    times = [
        datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**9))
        + timedelta(microseconds=rng.choice([0, 1, 999_999]))
        for _ in range(300)
    ]  # fmt: skip
    texts = [cypher.iso(t.astimezone(rng.choice(zones))) for t in times]
    assert len({len(t) for t in texts}) == 1
    assert sorted(texts) == [cypher.iso(t) for t in sorted(times)]
    with pytest.raises(StoreError):
        cypher.iso(datetime(2025, 1, 1))  # noqa: DTZ001


def test_keys_have_no_whitespace_edges_and_do_not_collide() -> None:
    assert cypher.node_key("a", "bc") != cypher.node_key("ab", "c")
    assert cypher.cube_key("x") != cypher.cube_key("x ")
    for value in ["x ", " x", "a\n", "用户"]:
        key = cypher.node_key(value, value)
        assert key == key.strip() and key.isalnum()


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
