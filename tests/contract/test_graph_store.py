"""GraphStore contract: every adapter, the same behaviour, on real FalkorDB servers.

Adapters: ``falkordb`` (native client) and ``neo4j-bolt`` (the Neo4j adapter over
FalkorDB's Bolt endpoint). Cases that endpoint cannot carry are not generated for it;
``BOLT_CANNOT_RUN`` lists them with the measured reason.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from memstream.sinks.graph.store import CypherGraphStore
from memstream.sinks.ports import Filter, GraphStore, StoreError
from memstream.topics.models import (
    CubeGraph,
    Edge,
    EdgeType,
    MemoryItem,
    MemoryMetadata,
    SourceRef,
    UsageRecord,
)
from tests.contract.graph_fixtures import GRAPH_BACKENDS

pytestmark = pytest.mark.asyncio(loop_scope="session")

# Measured on FalkorDB 4.16.3's Bolt endpoint with neo4j 6.4 (see the module docstring).
BOLT_CANNOT_RUN = {
    "test_quotes_backslashes_and_json_text_are_stored_literally": (
        "the endpoint pastes parameters into the query text: a ' ends the string literal "
        "(the query fails) and a backslash starts an escape ('a\\\\b' came back as 'a\\b'); "
        "sources/usage are JSON strings, whose escapes are backslashes"
    ),
    "test_long_memory_text_round_trips": (
        "a parameter over ~4 KB overflows the endpoint's buffer and kills the server process"
    ),
    "test_floats_round_trip_to_fifteen_significant_digits": (
        "floats are printed into the query text with 6 decimals (73.123456789 -> 73.123457)"
    ),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "graph_backend" in metafunc.fixturenames:
        skip_bolt = metafunc.function.__name__ in BOLT_CANNOT_RUN
        backends = [b for b in GRAPH_BACKENDS if not (skip_bolt and b == "neo4j-bolt")]
        metafunc.parametrize("graph_backend", backends)


T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def node(cube: str, node_id: str, text: str = "", minutes: int = 0, **meta: Any) -> MemoryItem:
    meta.setdefault("memory_type", "LongTermMemory")
    meta.setdefault("created_at", T0)
    return MemoryItem(
        id=node_id,
        memory=text or f"memory {node_id}",
        metadata=MemoryMetadata(
            user_id="user-1", cube_id=cube, updated_at=T0 + timedelta(minutes=minutes), **meta
        ),
    )


def edge(source: str, target: str, type_: EdgeType = "RELATE_TO", **kw: Any) -> Edge:
    return Edge(source=source, target=target, type=type_, **kw)


def ids(items: list[MemoryItem]) -> list[str]:
    return [i.id for i in items]


async def test_adapters_satisfy_the_port(graph_store: CypherGraphStore) -> None:
    assert isinstance(graph_store, GraphStore)
    await graph_store.ensure_schema()  # again: idempotent
    await graph_store.ensure_schema()


# -- nodes ---------------------------------------------------------------------------------


async def test_upsert_then_get_returns_equal_nodes(graph_store: GraphStore, cube: str) -> None:
    full = node(
        cube, "full", "the user moved to Lyon in May 2024", minutes=5,
        session_id="s-1", memory_type="UserMemory", status="activated", type="event",
        key="moved to Lyon", tags=("move", "lyon"), entities=("Lyon",), hierarchy_level="concept",
        background="from the chat of 2024-06-01", source="conversation", confidence=87.5,
        sources=(SourceRef(message_id="m-1", role="user"), SourceRef(kind="chunk", chunk_index=2)),
        visibility="public", memory_time=T0 - timedelta(days=300),
        usage=(UsageRecord(at=T0, requester="agent", query="where does the user live"),),
        frozen=True, origin_id="lt-9",
    )  # fmt: skip
    plain = node(cube, "plain")
    await graph_store.upsert_nodes(cube, [full, plain])
    assert await graph_store.get_node(cube, "full") == full
    assert await graph_store.get_nodes(cube, ["plain", "missing", "full"]) == [plain, full]
    assert await graph_store.get_node(cube, "missing") is None


async def test_upsert_is_idempotent_and_replaces_every_field(
    graph_store: GraphStore, cube: str
) -> None:
    first = node(cube, "n", "old text", tags=("a", "b"), memory_time=T0, session_id="s")
    await graph_store.upsert_nodes(cube, [first])
    await graph_store.upsert_nodes(cube, [first])
    assert await graph_store.count_by_type(cube) == {"LongTermMemory": 1}
    second = node(cube, "n", "new text", minutes=1)  # no tags, memory_time, session any more
    await graph_store.upsert_nodes(cube, [second])
    assert await graph_store.get_node(cube, "n") == second


async def test_update_node_replaces_only_existing_nodes(graph_store: GraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "n", "before")])
    changed = node(cube, "n", "after", status="archived", tags=("t",))
    assert await graph_store.update_node(cube, changed) is True
    assert await graph_store.get_node(cube, "n") == changed
    assert await graph_store.update_node(cube, node(cube, "ghost")) is False
    assert await graph_store.get_node(cube, "ghost") is None


def uses(ids: Sequence[str], record: UsageRecord) -> dict[str, list[UsageRecord]]:
    """The same use of every listed node (one search that returned them)."""
    return {i: [record] for i in ids}


async def test_record_usage_appends_and_touches_nothing_else(
    graph_store: GraphStore, cube: str
) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "u1", "used"), node(cube, "u2", "also")])
    # another writer archives u1 after a reader loaded it: usage must not undo that
    stale = await graph_store.get_node(cube, "u1")
    assert stale is not None
    await graph_store.update_node(cube, stale.evolve(status="archived"))
    for i in range(4):
        record = UsageRecord(at=T0 + timedelta(minutes=i), requester="r", query=f"q{i}")
        assert await graph_store.record_usage(cube, uses(["u1", "u2", "gone"], record),
                                             keep=3) == 2
    u1, u2 = await graph_store.get_nodes(cube, ["u1", "u2"])
    assert u1.metadata.status == "archived" and u1.memory == "used"
    assert [r.query for r in u1.metadata.usage] == ["q1", "q2", "q3"]
    assert u2.metadata.usage == u1.metadata.usage
    assert await graph_store.record_usage("other-cube", uses(["u1"], record), keep=3) == 0


async def test_record_usage_from_nodes_just_read_skips_the_read_and_loses_no_use(
    graph_store: GraphStore, cube: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "s1", "seen"), node(cube, "s2", "too")])
    seen = await graph_store.get_nodes(cube, ["s1", "s2"])
    first = UsageRecord(at=T0, requester="r", query="first")
    reads: list[Sequence[str]] = []
    real_get_nodes = graph_store.get_nodes

    async def counting_get_nodes(cube_id: str, ids: Sequence[str]) -> list[MemoryItem]:
        reads.append(ids)
        return await real_get_nodes(cube_id, ids)

    monkeypatch.setattr(graph_store, "get_nodes", counting_get_nodes)
    # the histories are as read: one write, no read
    assert await graph_store.record_usage(cube, uses(["s1", "s2"], first), keep=5, seen=seen) == 2
    assert reads == []
    # a search that read the nodes before that use records with stale copies: the changed
    # histories are read again and both uses are kept
    late = UsageRecord(at=T0 + timedelta(minutes=1), requester="r", query="late")
    assert await graph_store.record_usage(cube, uses(["s1", "s2"], late), keep=5, seen=seen) == 2
    assert reads == [["s1", "s2"]]
    monkeypatch.undo()
    for n in await graph_store.get_nodes(cube, ["s1", "s2"]):
        assert [r.query for r in n.metadata.usage] == ["first", "late"]
    await graph_store.delete_nodes(cube, ["s2"])
    assert await graph_store.record_usage(cube, uses(["s1", "s2"], late), keep=5, seen=seen) == 1


async def test_record_usage_appends_each_nodes_own_records_in_order(
    graph_store: GraphStore, cube: str
) -> None:
    # what several searches returned, written together: every node gets its own uses
    await graph_store.upsert_nodes(cube, [node(cube, "b1", "one"), node(cube, "b2", "two")])
    seen = await graph_store.get_nodes(cube, ["b1", "b2"])
    a, b, c = (UsageRecord(at=T0 + timedelta(seconds=i), requester="r", query=q)
               for i, q in enumerate("abc"))
    assert await graph_store.record_usage(cube, {"b1": [a, b, c], "b2": [b], "b3": [c]},
                                          keep=2, seen=seen) == 2
    b1, b2 = await graph_store.get_nodes(cube, ["b1", "b2"])
    assert [r.query for r in b1.metadata.usage] == ["b", "c"]
    assert [r.query for r in b2.metadata.usage] == ["b"]
    # a stale copy: the history is read again and the new use appended after the old ones
    assert await graph_store.record_usage(cube, {"b2": [c]}, keep=2, seen=seen) == 1
    (b2,) = await graph_store.get_nodes(cube, ["b2"])
    assert [r.query for r in b2.metadata.usage] == ["b", "c"]
    # a node that expired since a search returned it (its text erased) takes no use: the
    # query of the use is text too
    await graph_store.update_node(cube, b1.evolve(status="expired", usage=()))
    assert await graph_store.record_usage(cube, {"b1": [c]}, keep=2, seen=[b1]) == 0
    assert await graph_store.record_usage(cube, {"b1": [c]}, keep=2) == 0
    (b1,) = await graph_store.get_nodes(cube, ["b1"])
    assert b1.metadata.usage == ()


async def test_delete_nodes_removes_them_with_their_edges(
    graph_store: GraphStore, cube: str
) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, i) for i in ("a", "b", "c")])
    await graph_store.add_edges(cube, [edge("a", "b"), edge("c", "a", "CAUSE")])
    assert await graph_store.delete_nodes(cube, ["a", "missing", "a"]) == 1
    assert await graph_store.get_nodes(cube, ["a", "b", "c"]) == [node(cube, "b"), node(cube, "c")]
    assert await graph_store.edges_of(cube, "b") == []
    assert await graph_store.edges_of(cube, "c") == []


async def test_nodes_of_another_cube_are_refused(graph_store: GraphStore, cube: str) -> None:
    with pytest.raises(StoreError, match="belongs to cube"):
        await graph_store.upsert_nodes(cube, [node(cube, "ok"), node(cube + "-x", "intruder")])
    with pytest.raises(StoreError, match="belongs to cube"):
        await graph_store.update_node(cube, node(cube + "-x", "ok"))
    assert await graph_store.get_nodes(cube, ["ok", "intruder"]) == []


async def test_batch_upsert_of_hundreds_of_nodes(graph_store: GraphStore, cube: str) -> None:
    items = [node(cube, f"n{i:04d}", minutes=i, tags=(f"t{i % 7}",)) for i in range(320)]
    await graph_store.upsert_nodes(cube, items)
    assert await graph_store.count_by_type(cube) == {"LongTermMemory": 320}
    newest_first = await graph_store.all_of_type(cube, "LongTermMemory")
    assert newest_first == items[::-1]
    assert await graph_store.delete_nodes(cube, [i.id for i in items]) == 320
    assert await graph_store.count_by_type(cube) == {}


async def test_long_memory_text_round_trips(graph_store: GraphStore, cube: str) -> None:
    long_text = "用户的笔记 the user's notes; " * 800  # ~25 KB, a document chunk of a big file
    item = node(cube, "long", long_text)
    await graph_store.upsert_nodes(cube, [item])
    assert await graph_store.get_node(cube, "long") == item


async def test_floats_round_trip_to_fifteen_significant_digits(
    graph_store: GraphStore, cube: str
) -> None:
    item = node(cube, "f", confidence=73.123456789012)
    await graph_store.upsert_nodes(cube, [item, node(cube, "g")])
    await graph_store.add_edges(cube, [edge("f", "g", weight=0.123456789)])
    assert await graph_store.get_node(cube, "f") == item
    assert (await graph_store.edges_of(cube, "f"))[0].weight == 0.123456789


# -- edges ---------------------------------------------------------------------------------


async def test_add_edges_merges_one_edge_per_source_target_and_type(
    graph_store: GraphStore, cube: str
) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "a"), node(cube, "b")])
    await graph_store.add_edges(cube, [edge("a", "b", weight=0.5, reason="first")])
    await graph_store.add_edges(cube, [edge("a", "b", weight=0.75, reason="again")])
    await graph_store.add_edges(cube, [edge("a", "b", "CAUSE")])
    assert await graph_store.edges_of(cube, "a") == [
        edge("a", "b", "CAUSE"),
        edge("a", "b", weight=0.75, reason="again"),
    ]


async def test_edges_need_both_endpoints_in_the_cube(graph_store: GraphStore, cube: str) -> None:
    other = cube + "-other"
    await graph_store.upsert_nodes(cube, [node(cube, "a")])
    await graph_store.upsert_nodes(other, [node(other, "b")])
    await graph_store.add_edges(cube, [edge("a", "b"), edge("a", "nowhere")])
    assert await graph_store.edges_of(cube, "a") == []
    assert await graph_store.edges_of(other, "b") == []


async def test_edge_exists_respects_direction(graph_store: GraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "a"), node(cube, "b")])
    await graph_store.add_edges(cube, [edge("a", "b", "FOLLOWS")])
    assert await graph_store.edge_exists(cube, "a", "b", "FOLLOWS")
    assert not await graph_store.edge_exists(cube, "b", "a", "FOLLOWS")
    assert await graph_store.edge_exists(cube, "b", "a", "FOLLOWS", direction="in")
    assert not await graph_store.edge_exists(cube, "a", "b", "FOLLOWS", direction="in")
    assert await graph_store.edge_exists(cube, "b", "a", "FOLLOWS", direction="any")
    assert not await graph_store.edge_exists(cube, "a", "b", "CAUSE", direction="any")


async def test_missing_edges_are_those_not_in_the_cube(graph_store: GraphStore, cube: str) -> None:
    other = cube + "-other"
    await graph_store.upsert_nodes(cube, [node(cube, i) for i in "abcd"])
    await graph_store.upsert_nodes(other, [node(other, i) for i in "ab"])
    await graph_store.add_edges(cube, [edge("a", "b", "FOLLOWS"), edge("b", "c", "CAUSE")])
    await graph_store.add_edges(other, [edge("a", "b", "CAUSE")])
    asked = [edge("a", "b", "FOLLOWS"), edge("b", "a", "FOLLOWS"), edge("a", "b", "CAUSE"),
             edge("b", "c", "CAUSE"), edge("c", "d", "AGGREGATE_TO"), edge("a", "nowhere")]
    # direction and type count, another cube's edge does not, and the order is kept
    assert await graph_store.missing_edges(cube, asked) == [asked[1], asked[2], asked[4],
                                                             asked[5]]
    assert await graph_store.missing_edges(cube, []) == []
    many = [edge("a", f"n{i}", "AGGREGATE_TO") for i in range(1200)]  # more than one batch
    assert await graph_store.missing_edges(cube, many) == many


async def test_delete_edge_removes_only_that_type(graph_store: GraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "a"), node(cube, "b")])
    await graph_store.add_edges(cube, [edge("a", "b"), edge("a", "b", "CONFLICT")])
    assert await graph_store.delete_edge(cube, "a", "b", "RELATE_TO") is True
    assert await graph_store.delete_edge(cube, "a", "b", "RELATE_TO") is False
    assert await graph_store.edges_of(cube, "b") == [edge("a", "b", "CONFLICT")]


async def test_edges_of_filters_by_type_and_direction(graph_store: GraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, i) for i in "abcd"])
    e_out, e_in = edge("a", "b", "CAUSE"), edge("c", "a", "RELATE_TO")
    e_parent = edge("a", "d", "PARENT")
    await graph_store.add_edges(cube, [e_out, e_in, e_parent, edge("b", "c")])
    assert await graph_store.edges_of(cube, "a") == [e_out, e_parent, e_in]
    assert await graph_store.edges_of(cube, "a", direction="out") == [e_out, e_parent]
    assert await graph_store.edges_of(cube, "a", direction="in") == [e_in]
    assert await graph_store.edges_of(cube, "a", types=["RELATE_TO", "PARENT"]) == [e_parent, e_in]
    assert await graph_store.edges_of(cube, "a", types=[]) == []


async def test_edges_from_reads_many_nodes_outgoing_edges_at_once(
        graph_store: GraphStore, cube: str) -> None:
    other = cube + "-other"
    await graph_store.upsert_nodes(cube, [node(cube, i) for i in "abcde"])
    await graph_store.upsert_nodes(other, [node(other, i) for i in "ab"])
    merged_a, merged_c = edge("a", "b", "MERGED_TO"), edge("c", "e", "MERGED_TO")
    await graph_store.add_edges(cube, [merged_c, merged_a, edge("a", "d", "RELATE_TO"),
                                       edge("d", "a", "MERGED_TO")])
    await graph_store.add_edges(other, [edge("a", "b", "MERGED_TO")])
    assert await graph_store.edges_from(cube, ["c", "a", "b", "a"], ["MERGED_TO"]) == [
        merged_a, merged_c]
    assert await graph_store.edges_from(cube, ["a"], ["MERGED_TO", "RELATE_TO"]) == [
        merged_a, edge("a", "d", "RELATE_TO")]
    assert await graph_store.edges_from(cube, ["a"], []) == []
    assert await graph_store.edges_from(cube, [], ["MERGED_TO"]) == []


async def test_children_are_the_targets_of_parent_edges(graph_store: GraphStore, cube: str) -> None:
    kids = [node(cube, "k1"), node(cube, "k2")]
    await graph_store.upsert_nodes(cube, [node(cube, "p"), node(cube, "x"), *kids])
    await graph_store.add_edges(
        cube, [edge("p", "k1", "PARENT"), edge("p", "k2", "PARENT"), edge("p", "x")]
    )
    assert await graph_store.children(cube, "p") == kids
    assert await graph_store.children(cube, "k1") == []


async def test_redirect_edges_moves_all_but_excluded_types(
    graph_store: GraphStore, cube: str
) -> None:
    names = ["old1", "old2", "new", "x", "y", "z", "c"]
    await graph_store.upsert_nodes(cube, [node(cube, n) for n in names])
    staying = [
        edge("old1", "new", "MERGED_TO"),  # excluded type
        edge("old1", "c", "PARENT"),  # excluded type
        edge("old1", "old2"),  # between merged nodes: would become a self-loop
        edge("old2", "new", "CONFLICT"),  # onto the target: would become a self-loop
    ]
    moving = [
        edge("old1", "x", reason="r1"), edge("y", "old1", "CAUSE"), edge("old2", "z", "FOLLOWS")
    ]
    await graph_store.add_edges(cube, staying + moving)
    moved = await graph_store.redirect_edges(cube, ["old1", "old2"], "new", ["MERGED_TO", "PARENT"])
    assert moved == 3
    assert await graph_store.edges_of(cube, "new") == sorted(
        [
            edge("new", "x", reason="r1"),
            edge("y", "new", "CAUSE"),
            edge("new", "z", "FOLLOWS"),
            edge("old1", "new", "MERGED_TO"),
            edge("old2", "new", "CONFLICT"),
        ],
        key=lambda e: (e.source, e.target, e.type),
    )
    assert await graph_store.edges_of(cube, "x") == [edge("new", "x", reason="r1")]
    assert await graph_store.edges_of(cube, "old1", direction="out") == [
        edge("old1", "c", "PARENT"), edge("old1", "new", "MERGED_TO"), edge("old1", "old2"),
    ]  # fmt: skip


# -- neighbourhoods --------------------------------------------------------------------------


async def test_neighbors_by_tags_orders_by_overlap_and_skips_what_must_not_link(
    graph_store: GraphStore, cube: str
) -> None:
    tags = ("tea", "lyon", "music")
    await graph_store.upsert_nodes(
        cube,
        [
            node(cube, "three", tags=tags),
            node(cube, "two-new", tags=("music", "tea", "other"), minutes=5),
            node(cube, "two-old", tags=("tea", "music"), minutes=1),
            node(cube, "one", tags=("lyon",), memory_type="UserMemory"),
            node(cube, "none", tags=("else",)),
            node(cube, "working", tags=tags, memory_type="WorkingMemory"),
            node(cube, "reasoning", tags=tags, type="reasoning"),
            node(cube, "archived", tags=tags, status="archived"),
            node(cube, "me", tags=tags),
        ],
    )
    other = cube + "-other"
    await graph_store.upsert_nodes(other, [node(other, "foreign", tags=tags)])

    found = await graph_store.neighbors_by_tags(cube, list(tags), exclude_ids=["me"])
    assert [(n.node.id, n.overlap) for n in found] == [
        ("three", 3), ("two-new", 2), ("two-old", 2), ("one", 1),
    ]  # fmt: skip
    assert found[0].node == node(cube, "three", tags=tags)
    at_least_two = await graph_store.neighbors_by_tags(cube, list(tags), 2, ["me", "three"])
    assert [n.node.id for n in at_least_two] == ["two-new", "two-old"]
    first_two = await graph_store.neighbors_by_tags(cube, list(tags), exclude_ids=["me"], limit=2)
    assert [n.node.id for n in first_two] == ["three", "two-new"]
    assert await graph_store.neighbors_by_tags(cube, ["nothing-shares-this"]) == []


async def test_nodes_by_tags_ranks_by_shared_tags_then_latest_within_the_filters(
    graph_store: GraphStore, cube: str
) -> None:
    tags = ("tea", "lyon", "music")
    await graph_store.upsert_nodes(cube, [
        node(cube, "three", tags=tags),
        node(cube, "two-new", tags=("music", "tea", "other"), minutes=5),
        node(cube, "two-old", tags=("tea", "music"), minutes=1),
        node(cube, "two-old-b", tags=("tea", "music"), minutes=1),
        node(cube, "one", tags=("lyon",), status="archived"),
        node(cube, "later", tags=tags, minutes=60),
        node(cube, "none", tags=("else",)),
    ])
    other = cube + "-other"
    await graph_store.upsert_nodes(other, [node(other, "foreign", tags=tags)])
    until = [Filter("updated_at", "<=", T0 + timedelta(minutes=30))]

    found = await graph_store.nodes_by_tags(cube, list(tags), until)
    assert ids(found) == ["three", "two-new", "two-old-b", "two-old", "one"]
    assert found[0] == node(cube, "three", tags=tags)
    assert ids(await graph_store.nodes_by_tags(cube, list(tags), until, 2, limit=3)) == [
        "three", "two-new", "two-old-b"]
    archived = [*until, Filter("status", "=", "archived")]
    assert ids(await graph_store.nodes_by_tags(cube, list(tags), archived)) == ["one"]
    assert ids(await graph_store.nodes_by_tags(cube, list(tags)))[0] == "later"
    assert await graph_store.nodes_by_tags(cube, ["nothing-shares-this"]) == []
    assert await graph_store.nodes_by_tags(cube, list(tags), limit=0) == []


async def test_subgraph_follows_depth_and_requires_center_status(
    graph_store: GraphStore, cube: str
) -> None:
    chain = [node(cube, i) for i in ("center", "n1", "n2", "n3")]
    await graph_store.upsert_nodes(cube, [*chain, node(cube, "off", status="archived")])
    e1, e2, e3 = edge("center", "n1"), edge("n2", "n1", "CAUSE"), edge("n2", "n3", "FOLLOWS")
    e_off = edge("off", "center", "MERGED_TO")
    await graph_store.add_edges(cube, [e1, e2, e3, e_off])
    other = cube + "-other"  # same ids in another cube must never leak in
    await graph_store.upsert_nodes(other, [node(other, "center"), node(other, "n1")])
    await graph_store.add_edges(other, [edge("center", "n1", "CONFLICT")])

    one = await graph_store.subgraph(cube, "center", depth=1)
    assert one.core_id == "center"
    assert ids(list(one.nodes)) == ["center", "n1", "off"]
    assert set(one.edges) == {e1, e_off}
    two = await graph_store.subgraph(cube, "center", depth=2)
    assert ids(list(two.nodes)) == ["center", "n1", "n2", "off"]
    assert set(two.edges) == {e1, e2, e_off}
    assert all(n.metadata.cube_id == cube for n in two.nodes)

    empty = await graph_store.subgraph(cube, "off")  # archived center, activated required
    assert (empty.core_id, empty.nodes, empty.edges) == (None, (), ())
    archived = await graph_store.subgraph(cube, "off", depth=1, center_status="archived")
    assert ids(list(archived.nodes)) == ["off", "center"] and archived.edges == (e_off,)
    assert (await graph_store.subgraph(cube, "missing")).core_id is None


# -- queries over a cube ---------------------------------------------------------------------

ISO_PLUS_2 = timezone(timedelta(hours=2))


def filter_nodes(cube: str) -> list[MemoryItem]:
    """Four nodes whose fields differ in known ways; expectations below are read off them."""
    return [
        node(cube, "f1", "the user likes green tea", minutes=1, key="alpha", tags=("x", "y"),
             entities=("Lyon",), confidence=90, memory_time=T0 - timedelta(days=1),
             session_id="s1"),
        node(cube, "f2", "the user hates coffee", minutes=2, key="beta", tags=("y",),
             status="archived", memory_type="UserMemory", type="opinion", confidence=50,
             frozen=True),
        node(cube, "f3", "用户喜欢绿茶", minutes=3, key="gamma", memory_type="WorkingMemory",
             type="event", confidence=70, memory_time=T0 + timedelta(days=1), session_id="s2"),
        node(cube, "f4", "a summary of drinks", minutes=4, key="delta", tags=("z",),
             confidence=99.5, hierarchy_level="topic", visibility="public", session_id="s1"),
    ]  # fmt: skip


FILTER_CASES: list[tuple[list[Filter], set[str]]] = [
    ([Filter("status", "=", "archived")], {"f2"}),
    ([Filter("status", "!=", "activated")], {"f2"}),
    ([Filter("session_id", "=", None)], {"f2"}),
    ([Filter("session_id", "!=", "s1")], {"f2", "f3"}),  # a missing value is "not s1"
    ([Filter("memory_time", "!=", None)], {"f1", "f3"}),
    ([Filter("key", "in", ["alpha", "gamma", "nope"])], {"f1", "f3"}),
    ([Filter("memory_type", "in", ("UserMemory", "WorkingMemory"))], {"f2", "f3"}),
    ([Filter("tags", "contains", "y")], {"f1", "f2"}),
    ([Filter("tags", "in", ["z", "x"])], {"f1", "f4"}),
    ([Filter("tags", "=", ["y"])], {"f2"}),
    ([Filter("tags", "!=", ["y"])], {"f1", "f3", "f4"}),
    ([Filter("entities", "contains", "Lyon")], {"f1"}),
    ([Filter("memory", "contains", "tea")], {"f1"}),
    ([Filter("memory", "contains", "绿茶")], {"f3"}),
    ([Filter("confidence", ">", 70)], {"f1", "f4"}),
    ([Filter("confidence", ">=", 70)], {"f1", "f3", "f4"}),
    ([Filter("confidence", "<", 70)], {"f2"}),
    ([Filter("confidence", "<=", 50.0)], {"f2"}),
    ([Filter("updated_at", ">", T0 + timedelta(minutes=2))], {"f3", "f4"}),
    ([Filter("updated_at", ">", datetime(2025, 3, 1, 11, 2, tzinfo=ISO_PLUS_2))], {"f3", "f4"}),
    ([Filter("updated_at", "<=", "2025-03-01T09:02:00+00:00")], {"f1", "f2"}),
    ([Filter("memory_time", "<", T0)], {"f1"}),  # a missing time is never in a range
    ([Filter("frozen", "=", True)], {"f2"}),
    ([Filter("hierarchy_level", "=", "topic"), Filter("visibility", "=", "public")], {"f4"}),
    ([Filter("memory_type", "=", "LongTermMemory"), Filter("confidence", ">", 95)], {"f4"}),
    ([Filter("id", "=", "f3"), Filter("type", "=", "event")], {"f3"}),
    ([Filter("key", "=", "nothing")], set()),
    ([], {"f1", "f2", "f3", "f4"}),
]


def _case_id(value: object) -> str:
    """The same id in every process (a set's repr follows the process's hash seed)."""
    return repr(sorted(value) if isinstance(value, set) else value)[:60]


@pytest.mark.parametrize(("filters", "expected"), FILTER_CASES, ids=_case_id)
async def test_find_nodes_applies_each_filter_op(
    graph_store: GraphStore, cube: str, filters: list[Filter], expected: set[str]
) -> None:
    await graph_store.upsert_nodes(cube, filter_nodes(cube))
    other = cube + "-other"
    await graph_store.upsert_nodes(other, filter_nodes(other))
    found = await graph_store.find_nodes(cube, filters)
    assert {n.id for n in found} == expected
    assert all(n.metadata.cube_id == cube for n in found)


async def test_find_nodes_is_newest_first_and_limited(graph_store: GraphStore, cube: str) -> None:
    items = filter_nodes(cube)
    await graph_store.upsert_nodes(cube, items)
    assert await graph_store.find_nodes(cube) == items[::-1]
    assert ids(await graph_store.find_nodes(cube, [Filter("tags", "contains", "y")], 1)) == ["f2"]


@pytest.mark.parametrize(
    "bad",
    [
        Filter("confidence", "contains", "9"),
        Filter("tags", "<", "a"),
        Filter("frozen", ">", False),
        Filter("updated_at", ">", datetime(2025, 1, 1)),  # noqa: DTZ001  (naive on purpose)
        Filter("updated_at", ">", "yesterday"),
        Filter("confidence", "=", {"a": 1}),
    ],
    ids=repr,
)
async def test_unsupported_filters_are_refused(
    graph_store: GraphStore, cube: str, bad: Filter
) -> None:
    with pytest.raises(StoreError):
        await graph_store.find_nodes(cube, [bad])


async def test_count_by_groups_and_filters(graph_store: GraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, filter_nodes(cube))
    by_type = await graph_store.count_by(cube, ["memory_type"])
    assert {(g.values["memory_type"], g.count) for g in by_type} == {
        ("LongTermMemory", 2), ("UserMemory", 1), ("WorkingMemory", 1),
    }  # fmt: skip
    assert by_type[0].count == 2
    pairs = await graph_store.count_by(cube, ["memory_type", "status"], [Filter("key", "!=", "f")])
    assert {(g.values["memory_type"], g.values["status"], g.count) for g in pairs} == {
        ("LongTermMemory", "activated", 2), ("UserMemory", "archived", 1),
        ("WorkingMemory", "activated", 1),
    }  # fmt: skip
    per_tag = await graph_store.count_by(cube, ["tags"], [Filter("status", "=", "activated")])
    assert {(g.values["tags"], g.count) for g in per_tag} == {("x", 1), ("y", 1), ("z", 1)}
    times = await graph_store.count_by(cube, ["updated_at"], [Filter("key", "=", "alpha")])
    assert [(g.values, g.count) for g in times] == [({"updated_at": T0 + timedelta(minutes=1)}, 1)]


async def test_count_by_type_counts_one_status_or_all(graph_store: GraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, filter_nodes(cube))
    assert await graph_store.count_by_type(cube) == {"LongTermMemory": 2, "WorkingMemory": 1}
    assert await graph_store.count_by_type(cube, status=None) == {
        "LongTermMemory": 2, "UserMemory": 1, "WorkingMemory": 1,
    }  # fmt: skip
    assert await graph_store.count_by_type(cube, status="archived") == {"UserMemory": 1}


async def test_all_of_type_is_newest_first(graph_store: GraphStore, cube: str) -> None:
    items = [
        node(cube, f"w{i}", minutes=m, memory_type="WorkingMemory") for i, m in enumerate([3, 1, 2])
    ]
    archived = node(cube, "wa", minutes=9, memory_type="WorkingMemory", status="archived")
    await graph_store.upsert_nodes(cube, [*items, archived, node(cube, "lt")])
    assert ids(await graph_store.all_of_type(cube, "WorkingMemory")) == ["w0", "w2", "w1"]
    everything = await graph_store.all_of_type(cube, "WorkingMemory", status=None)
    assert ids(everything) == ["wa", "w0", "w2", "w1"]


async def test_all_of_type_pages_are_slices_of_the_whole_listing(
    graph_store: GraphStore, cube: str
) -> None:
    items = [node(cube, f"p{i:02d}", minutes=i % 5) for i in range(23)]  # ties on updated_at
    await graph_store.upsert_nodes(cube, items)
    whole = ids(await graph_store.all_of_type(cube, "LongTermMemory"))
    pages = [ids(await graph_store.all_of_type(cube, "LongTermMemory", skip=s, limit=5))
             for s in range(0, 25, 5)]
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [i for p in pages for i in p] == whole
    assert ids(await graph_store.all_of_type(cube, "LongTermMemory", skip=21)) == whole[21:]
    assert await graph_store.all_of_type(cube, "LongTermMemory", skip=30, limit=5) == []


async def test_remove_oldest_keeps_the_newest_activated_of_one_type(
    graph_store: GraphStore, cube: str
) -> None:
    wm = [node(cube, f"w{m}", minutes=m, memory_type="WorkingMemory") for m in (5, 1, 4, 2, 3)]
    old_archived = node(cube, "w-archived", memory_type="WorkingMemory", status="archived")
    old_long = node(cube, "lt-old", minutes=0)
    await graph_store.upsert_nodes(cube, [*wm, old_archived, old_long])
    await graph_store.add_edges(cube, [edge("w1", "lt-old")])
    other = cube + "-other"
    await graph_store.upsert_nodes(other, [node(other, "w1", memory_type="WorkingMemory")])

    # what would go, newest first, read without deleting anything
    assert await graph_store.beyond_capacity(cube, "WorkingMemory", keep=2) == ["w3", "w2", "w1"]
    assert await graph_store.beyond_capacity(cube, "WorkingMemory", keep=5) == []
    assert len(await graph_store.all_of_type(cube, "WorkingMemory")) == 5
    removed = await graph_store.remove_oldest(cube, "WorkingMemory", keep=2)
    assert sorted(removed) == ["w1", "w2", "w3"]
    assert ids(await graph_store.all_of_type(cube, "WorkingMemory")) == ["w5", "w4"]
    survivors = await graph_store.get_nodes(cube, ["w-archived", "lt-old"])
    assert survivors == [old_archived, old_long]
    assert await graph_store.edges_of(cube, "lt-old") == []
    assert await graph_store.get_node(other, "w1") is not None
    assert await graph_store.remove_oldest(cube, "WorkingMemory", keep=2) == []
    assert await graph_store.remove_oldest(cube, "WorkingMemory", keep=10) == []


async def test_optimization_candidates_are_activated_orphans_of_the_type(
    graph_store: GraphStore, cube: str
) -> None:
    free1, free2 = node(cube, "free1", minutes=1), node(cube, "free2", minutes=2)
    await graph_store.upsert_nodes(
        cube,
        [
            free1, free2,
            node(cube, "summary", hierarchy_level="concept"),
            node(cube, "child"),
            node(cube, "archived", status="archived"),
            node(cube, "user", memory_type="UserMemory"),
            node(cube, "wm", memory_type="WorkingMemory"),
        ],
    )  # fmt: skip
    await graph_store.add_edges(cube, [edge("summary", "child", "PARENT"), edge("free1", "free2")])
    other = cube + "-other"
    await graph_store.upsert_nodes(other, [node(other, "foreign")])
    found = await graph_store.optimization_candidates(cube, "LongTermMemory")
    assert set(ids(found)) == {"free1", "free2", "summary"}
    assert ids(await graph_store.optimization_candidates(cube, "UserMemory")) == ["user"]
    assert await graph_store.optimization_candidates(cube, "WorkingMemory") == []
    assert len(await graph_store.optimization_candidates(cube, "LongTermMemory", limit=2)) == 2


# -- whole cubes -----------------------------------------------------------------------------


async def test_export_clear_import_round_trip(graph_store: GraphStore, cube: str) -> None:
    items = filter_nodes(cube)
    edges = [edge("f1", "f2", "MERGED_TO", weight=0.5, reason="merged"), edge("f4", "f1", "PARENT")]
    await graph_store.upsert_nodes(cube, items)
    await graph_store.add_edges(cube, edges)
    other = cube + "-other"
    await graph_store.upsert_nodes(other, filter_nodes(other))

    exported = await graph_store.export_cube(cube)
    assert exported.cube_id == cube
    assert sorted(exported.nodes, key=lambda n: n.id) == items
    assert set(exported.edges) == set(edges)
    assert await graph_store.clear_cube(cube) == 4
    assert await graph_store.export_cube(cube) == CubeGraph(cube_id=cube)
    await graph_store.import_cube(exported)
    assert await graph_store.export_cube(cube) == exported
    assert len((await graph_store.export_cube(other)).nodes) == 4


async def test_clear_cube_and_list_cubes(graph_store: GraphStore, cube: str) -> None:
    other = cube + "-other"
    await graph_store.upsert_nodes(cube, [node(cube, "a"), node(cube, "b")])
    await graph_store.upsert_nodes(other, [node(other, "a")])
    assert {cube, other} <= set(await graph_store.list_cubes())
    assert await graph_store.clear_cube(cube) == 2
    assert await graph_store.clear_cube(cube) == 0
    cubes = await graph_store.list_cubes()
    assert cube not in cubes and other in cubes
    assert cubes == sorted(cubes)
    assert await graph_store.get_node(other, "a") == node(other, "a")


async def test_recent_cubes_come_newest_change_first(graph_store: GraphStore, cube: str) -> None:
    """What a worker warms at start: the cubes whose memories changed (or that were searched)
    last, at most ``limit`` (years past the other tests' clocks, so this test's cubes are the
    newest)."""
    late, later = cube + "-late", cube + "-later"
    years = 60 * 24 * 365 * 10
    await graph_store.upsert_nodes(late, [node(late, "a", minutes=years),
                                          node(late, "b", minutes=years + 5)])
    await graph_store.upsert_nodes(later, [node(later, "a", minutes=years + 3),
                                           node(later, "b", minutes=years + 9)])
    assert await graph_store.recent_cubes(2) == [later, late]
    assert await graph_store.recent_cubes(1) == [later]
    assert await graph_store.recent_cubes(0) == []
    await graph_store.upsert_nodes(late, [node(late, "c", minutes=years + 20)])
    assert await graph_store.recent_cubes(2) == [late, later]
    await graph_store.clear_cube(late)
    assert late not in await graph_store.recent_cubes(1000)
    await graph_store.clear_cube(later)


async def test_a_cube_searched_after_its_last_change_counts_from_its_search(
        graph_store: GraphStore, cube: str) -> None:
    """A cube searched last is warmed first at a worker's start, even if another changed
    later; erasing the cube forgets its searches, and one noted after the erasure (a search
    answered just before it) is not kept."""
    searched, changed = cube + "-searched", cube + "-changed"
    years = 60 * 24 * 365 * 11
    await graph_store.upsert_nodes(searched, [node(searched, "a", minutes=years)])
    await graph_store.upsert_nodes(changed, [node(changed, "a", minutes=years + 10)])
    assert await graph_store.recent_cubes(2) == [changed, searched]
    at = node(searched, "a", minutes=years + 20).metadata.updated_at
    await graph_store.mark_used(searched, at)
    assert await graph_store.recent_cubes(2) == [searched, changed]
    await graph_store.mark_used(searched, at - timedelta(minutes=60))  # older than its change
    assert await graph_store.recent_cubes(2) == [changed, searched]
    await graph_store.mark_used(searched, at)
    await graph_store.clear_cube(searched)
    await graph_store.upsert_nodes(searched, [node(searched, "a", minutes=years)])
    assert await graph_store.recent_cubes(2) == [changed, searched]  # its search forgotten
    await graph_store.clear_cube(searched)
    await graph_store.mark_used(searched, at)  # a search answered before the erasure
    await graph_store.upsert_nodes(searched, [node(searched, "a", minutes=years)])
    assert await graph_store.recent_cubes(2) == [changed, searched]  # not noted once erased
    await graph_store.clear_cube(searched)
    await graph_store.clear_cube(changed)


async def test_llm_answers_are_kept_per_cube_and_erased_with_it(
    graph_store: GraphStore, cube: str
) -> None:
    other = cube + "-other"
    await graph_store.upsert_nodes(cube, [node(cube, "a")])
    await graph_store.record_llm_answer(cube, "q1", '{"x": "它"}')
    await graph_store.record_llm_answer(cube, "q1", '{"x": 2}')  # an upsert
    await graph_store.record_llm_answer(other, "q1", '{"x": 3}')
    assert await graph_store.llm_answer(cube, "q1") == '{"x": 2}'
    assert await graph_store.llm_answer(cube, "q2") is None
    await graph_store.clear_cube(cube)
    assert await graph_store.llm_answer(cube, "q1") is None
    assert await graph_store.llm_answer(other, "q1") == '{"x": 3}'


async def test_answers_dropped_are_gone_for_their_cube_only(
    graph_store: GraphStore, cube: str
) -> None:
    other = cube + "-other"
    for call in ("q1", "q2", "q3"):
        await graph_store.record_llm_answer(cube, call, f'{{"call": "{call}"}}')
    await graph_store.record_llm_answer(other, "q1", '{"x": 3}')
    await graph_store.drop_llm_answers(cube, ["q1", "q3", "never asked"])
    await graph_store.drop_llm_answers(cube, [])
    assert [await graph_store.llm_answer(cube, c) for c in ("q1", "q2", "q3")] == [
        None, '{"call": "q2"}', None]
    assert await graph_store.llm_answer(other, "q1") == '{"x": 3}'
    await graph_store.clear_cube(other)
    await graph_store.clear_cube(cube)


async def test_every_read_and_write_stays_in_its_cube(graph_store: GraphStore, cube: str) -> None:
    a, b = cube + "-a", cube + "-b"
    for c in (a, b):  # the same ids, tags and edges in both cubes
        await graph_store.upsert_nodes(c, [
            node(c, "n1", tags=("t", "u")), node(c, "n2", tags=("t", "u"), minutes=1),
            node(c, "w", memory_type="WorkingMemory"),
        ])  # fmt: skip
        await graph_store.add_edges(c, [edge("n1", "n2", "PARENT"), edge("n2", "w")])
    before = await graph_store.export_cube(b)

    def only_a(items: list[MemoryItem] | tuple[MemoryItem, ...]) -> bool:
        return bool(items) and all(i.metadata.cube_id == a for i in items)

    assert only_a(await graph_store.get_nodes(a, ["n1", "n2", "w"]))
    assert only_a(await graph_store.find_nodes(a, [Filter("tags", "contains", "t")]))
    assert only_a([n.node for n in await graph_store.neighbors_by_tags(a, ["t", "u"])])
    assert len(await graph_store.neighbors_by_tags(a, ["t", "u"])) == 2
    assert only_a(await graph_store.all_of_type(a, "LongTermMemory"))
    assert await graph_store.count_by_type(a) == {"LongTermMemory": 2, "WorkingMemory": 1}
    assert [g.count for g in await graph_store.count_by(a, ["status"])] == [3]
    sub = await graph_store.subgraph(a, "n1")
    assert only_a(sub.nodes) and len(sub.nodes) == 3 and len(sub.edges) == 2
    assert only_a(await graph_store.children(a, "n1"))
    assert len(await graph_store.edges_of(a, "n2")) == 2
    assert ids(await graph_store.optimization_candidates(a, "LongTermMemory")) == ["n1"]
    assert only_a((await graph_store.export_cube(a)).nodes)

    assert await graph_store.update_node(a, node(a, "n1", "changed"))
    assert await graph_store.delete_edge(a, "n1", "n2", "PARENT")
    assert await graph_store.redirect_edges(a, ["n2"], "n1", []) == 1
    assert await graph_store.remove_oldest(a, "WorkingMemory", 0) == ["w"]
    assert await graph_store.delete_nodes(a, ["n1"]) == 1
    assert await graph_store.clear_cube(a) == 1
    assert await graph_store.export_cube(b) == before


async def test_ids_differing_only_by_surrounding_whitespace_stay_apart(
    graph_store: GraphStore, cube: str
) -> None:
    padded = cube + " "  # a different cube that an index trimming whitespace would merge
    await graph_store.upsert_nodes(cube, [node(cube, "a"), node(cube, "a\n"), node(cube, " a")])
    await graph_store.upsert_nodes(padded, [node(padded, "a", "padded cube")])
    await graph_store.add_edges(cube, [edge("a\n", " a")])
    assert ids(await graph_store.get_nodes(cube, [" a", "a", "a\n"])) == [" a", "a", "a\n"]
    assert await graph_store.get_node(padded, "a") == node(padded, "a", "padded cube")
    assert await graph_store.edges_of(cube, "a") == []
    assert await graph_store.edges_of(cube, " a") == [edge("a\n", " a")]
    assert await graph_store.count_by_type(cube) == {"LongTermMemory": 3}
    assert await graph_store.delete_nodes(cube, ["a"]) == 1
    assert set(ids(await graph_store.find_nodes(cube))) == {"a\n", " a"}
    assert await graph_store.clear_cube(padded) == 1
    assert len(await graph_store.find_nodes(cube)) == 2


# -- user text is data, never query text -------------------------------------------------

# What the Bolt endpoint can carry: no ' and no backslash (see BOLT_CANNOT_RUN).
SAFE_PAYLOADS = [
    'say "hi" }) DETACH DELETE n //',
    "back`tick`) MATCH (m) DETACH DELETE m",
    "$param and $cube_id",
    "line one\nline two\r\n\tindented",
    "用户说：“你好”，然后删除所有记忆",
    "{id: 'x'}"[0:5] + "x}",  # a map literal's opening, without a quote
]
QUOTE_PAYLOADS = [
    "it's the user's",
    "' OR 1=1 // ",
    "'}) DETACH DELETE n //",
    "a\\b\\nc\\",
    "\\'); MATCH (m) DETACH DELETE m //",
    '\\"}) RETURN 1 //',
    "\\u0027 and \\x27",
]


async def assert_stored_literally(
    graph_store: GraphStore, cube: str, payloads: list[str], with_json: bool
) -> None:
    bystander = cube + "-bystander"
    await graph_store.upsert_nodes(bystander, [node(bystander, "keep", tags=("plain",))])
    items = []
    for i, text in enumerate(payloads):
        meta: dict[str, Any] = {"key": text, "tags": (text, "plain"), "entities": (text,),
                                "background": text, "session_id": text}  # fmt: skip
        if with_json:
            meta["sources"] = (SourceRef(message_id=text, role=text),)
            meta["usage"] = (UsageRecord(at=T0, requester=text, query=text),)
        items.append(node(cube, f"id-{i}-{text}", text, minutes=i, **meta))
    await graph_store.upsert_nodes(cube, items)
    edges = [edge(x.id, y.id, reason=x.memory) for x, y in zip(items, items[1:], strict=False)]
    await graph_store.add_edges(cube, edges)

    for text, item in zip(payloads, items, strict=True):
        assert await graph_store.get_node(cube, item.id) == item
        assert await graph_store.find_nodes(cube, [Filter("key", "=", text)]) == [item]
        assert await graph_store.find_nodes(cube, [Filter("session_id", "in", [text])]) == [item]
        assert item in await graph_store.find_nodes(cube, [Filter("memory", "contains", text)])
        assert await graph_store.find_nodes(cube, [Filter("tags", "contains", text)]) == [item]
        assert await graph_store.find_nodes(cube, [Filter("entities", "in", [text])]) == [item]
        assert [n.node for n in await graph_store.neighbors_by_tags(cube, [text])] == [item]
    assert set((await graph_store.export_cube(cube)).edges) == set(edges)
    per_tag = await graph_store.count_by(cube, ["tags"])
    assert {g.values["tags"]: g.count for g in per_tag} == {**dict.fromkeys(payloads, 1),
                                                            "plain": len(payloads)}  # fmt: skip
    assert await graph_store.count_by_type(cube) == {"LongTermMemory": len(payloads)}
    assert await graph_store.get_node(bystander, "keep") == node(bystander, "keep", tags=("plain",))


async def test_injection_text_is_stored_and_matched_literally(
    graph_store: GraphStore, cube: str
) -> None:
    await assert_stored_literally(graph_store, cube + '-"}) //', SAFE_PAYLOADS, with_json=False)


async def test_quotes_backslashes_and_json_text_are_stored_literally(
    graph_store: GraphStore, cube: str
) -> None:
    payloads = SAFE_PAYLOADS + QUOTE_PAYLOADS
    await assert_stored_literally(graph_store, cube + "-'}) //\\", payloads, with_json=True)
    assert await graph_store.find_nodes(cube, [Filter("key", "=", "x' OR '1'='1")]) == []


async def test_bolt_exclusions_name_real_tests_of_this_suite() -> None:
    module = sys.modules[__name__]
    for name, reason in BOLT_CANNOT_RUN.items():
        test = getattr(module, name, None)
        assert name.startswith("test_") and inspect.iscoroutinefunction(test), name
        assert "graph_store" in inspect.signature(test).parameters, name
        assert reason.strip(), name
