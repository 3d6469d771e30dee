"""Lifecycle decisions and the log fold, over the shipped in-memory stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from memstream.history.provenance import CubeLog, explain_node, fold
from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.streams.core.lifecycle import EXPIRED_TEXT, FreezeRejected, set_frozen, sweep
from memstream.streams.lifecycle.agent import sweep_events
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ExtractedMemory, FreezeNodes, LifecycleSweep, MemoryUpdate
from memstream.topics.ids import working_copy_id
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata, SourceRef, UsageRecord
from memstream.topics.settings import Settings

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CUBE = "u"


def node(node_id: str, text: str, **meta: Any) -> MemoryItem:
    fields: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE, "memory_type": "LongTermMemory",
                              "created_at": T0, "updated_at": T0, "tags": ("t",), "key": text}
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(**{**fields, **meta}))


async def make_deps(*nodes: MemoryItem) -> Deps:
    graph = InMemoryGraphStore()
    vectors = InMemoryVectorStore(dim=3)
    store = MemoryStore(graph, vectors)
    settings = Settings(lifecycle={"archive_after": timedelta(days=30),
                                   "expire_after": timedelta(days=60)})
    units = []
    for n in nodes:
        units.append((n, [1.0, 0.0, 0.0]))
        if n.metadata.status == "activated":
            copy = MemoryItem(id=working_copy_id(n.id), memory=n.memory,
                              metadata=n.metadata.model_copy(
                                  update={"memory_type": "WorkingMemory", "origin_id": n.id}))
            units.append((copy, [1.0, 0.0, 0.0]))
    await store.write(units)
    return Deps(settings=settings, llm=cast(Any, None), embedder=cast(Any, None), store=store,
                clock=lambda: T0)


def at(days: int) -> LifecycleSweep:
    return LifecycleSweep(event_id=f"sweep-{days}", user_id=CUBE,
                          occurred_at=T0 + timedelta(days=days))


def actions(out: list[Any]) -> list[tuple[str, str | None]]:
    return sorted((o.event.action, o.event.node_id) for o in out)


async def status(deps: Deps, node_id: str) -> str:
    found = await deps.store.graph.get_node(CUBE, node_id)
    assert found is not None
    return found.metadata.status


async def test_sweeps_archive_unused_nodes_then_expire_them_and_spare_frozen_ones() -> None:
    used = UsageRecord(at=T0 + timedelta(days=20), requester="c")
    deps = await make_deps(node("a", "unused"), node("b", "searched", usage=(used,)),
                           node("c", "held", frozen=True),
                           node("d", "merged away", status="archived"))
    out = await sweep(at(35), deps)
    assert actions(out) == [("archived", "a")]
    assert [await status(deps, i) for i in "abcd"] == ["archived", "activated", "activated",
                                                       "archived"]
    assert await deps.store.graph.get_node(CUBE, working_copy_id("a")) is None
    (vector,) = await deps.store.vectors.get(CUBE, ["a"])
    assert vector.status == "archived"  # still found by a search that opts in

    out = await sweep(at(70), deps)  # b unused for 50 days; d untouched for 70, a for 35
    assert actions(out) == [("archived", "b"), ("expired", "d")]
    audit = await deps.store.graph.get_node(CUBE, "d")
    assert audit is not None and audit.memory == EXPIRED_TEXT
    assert (audit.metadata.status, audit.metadata.key, audit.metadata.tags) == ("expired", "", ())
    assert audit.metadata.created_at == T0 and audit.metadata.updated_at == T0 + timedelta(70)
    assert await deps.store.vectors.get(CUBE, ["d"]) == []

    out = await sweep(at(400), deps)
    assert actions(out) == [("expired", "a"), ("expired", "b")]
    held = await deps.store.graph.get_node(CUBE, "c")
    assert held is not None and (held.memory, held.metadata.status) == ("held", "activated")


async def test_a_redelivered_sweep_announces_the_same_and_changes_nothing() -> None:
    deps = await make_deps(node("a", "unused"), node("b", "old", status="archived"))
    first = await sweep(at(90), deps)
    graph_after = await deps.store.graph.export_cube(CUBE)
    again = await sweep(at(90), deps)
    assert sorted(o.event.event_id for o in again) == sorted(o.event.event_id for o in first)
    assert await deps.store.graph.export_cube(CUBE) == graph_after
    assert actions(first) == [("archived", "a"), ("expired", "b")]


async def test_freeze_names_unknown_nodes_and_announces_each_node() -> None:
    deps = await make_deps(node("a", "x"))
    with pytest.raises(FreezeRejected, match="not found in cube u: zz"):
        await set_frozen(FreezeNodes(user_id=CUBE, node_ids=("a", "zz")), deps)
    assert not (await deps.store.graph.get_node(CUBE, "a")).metadata.frozen  # type: ignore[union-attr]
    out = await set_frozen(FreezeNodes(user_id=CUBE, node_ids=("a",), reason="hold"), deps)
    assert actions(out) == [("frozen", "a")] and out[0].event.reason == "hold"
    assert (await deps.store.graph.get_node(CUBE, "a")).metadata.frozen  # type: ignore[union-attr]


def test_sweep_events_are_the_same_within_an_interval() -> None:
    one = sweep_events(["b", "a"], T0 + timedelta(minutes=5), 3600)
    two = sweep_events(["a", "b"], T0 + timedelta(minutes=50), 3600)
    assert [e.event_id for e in one] == [e.event_id for e in two]
    assert [e.cube_id for e in one] == ["a", "b"] and one[0].occurred_at == T0


def update(action: str, n: MemoryItem | None, minute: int, node_id: str | None = None,
           event_id: str | None = None) -> MemoryUpdate:
    return MemoryUpdate(event_id=event_id or f"{action}-{minute}", user_id=CUBE, action=action,
                        stage="test", node=n, node_id=node_id or (n.id if n else None),
                        occurred_at=T0 + timedelta(minutes=minute))


def test_fold_replays_snapshots_in_log_order_up_to_a_time() -> None:
    a, b = node("a", "first"), node("b", "second")
    copy = node("wa", "first", memory_type="WorkingMemory")
    log = [update("added", a, 1), update("added", copy, 1, event_id="wm"),
           update("added", b, 2), update("updated", a.model_copy(update={"memory": "edited"}), 3),
           update("added", a, 1),  # a redelivered announcement: same id, ignored
           update("deleted", None, 4, node_id="b"), update("deleted", None, 5),
           update("added", b, 6, event_id="again")]
    assert fold(log, T0) == {}
    assert {k: v.memory for k, v in fold(log, T0 + timedelta(minutes=2)).items()} == {
        "a": "first", "b": "second"}
    assert {k: v.memory for k, v in fold(log, T0 + timedelta(minutes=3)).items()} == {
        "a": "edited", "b": "second"}
    assert set(fold(log, T0 + timedelta(minutes=4))) == {"a"}
    assert fold(log, T0 + timedelta(minutes=5)) == {}  # the cube was erased
    assert set(fold(log)) == {"b"}


def test_explain_follows_inferences_to_their_premises_and_manual_sources() -> None:
    item = ExtractedMemory(event_id="i1", user_id=CUBE, memory="The user moved to Oslo.",
                           sources=(SourceRef(kind="manual"),))
    premise, other = node("p", "The user moved to Oslo."), node("q", "Oslo is cold in winter.")
    inferred = node("r", "It can be inferred that the user needs a warm coat.",
                    type="reasoning")
    added_p = update("added", premise, 1).model_copy(update={"cause_event_id": "i1"})
    added_r = update("added", inferred, 3).model_copy(update={"edges": (
        Edge(source="r", target="p", type="INFERRED_FROM"),
        Edge(source="r", target="q", type="INFERRED_FROM"))})
    log = CubeLog([added_p, update("added", other, 2), added_r], events={"i1": ("memory.items",
                                                                               item)})
    why = explain_node(log, "r")
    assert [(s.kind, s.source.node_id) for s in why.lineage] == [("inferred", "p"),
                                                                ("inferred", "q")]
    assert [(s.kind, s.text) for s in why.lineage[0].source.sources] == [
        ("manual", "The user moved to Oslo.")]
    assert [c.update.action for c in explain_node(log, "p").changes] == ["added", "added"]
