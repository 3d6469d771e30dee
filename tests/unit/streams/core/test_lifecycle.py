"""Lifecycle decisions (streams/core/lifecycle.py) over the shipped in-memory stores:
sweeps archive and expire, frozen nodes are spared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.streams.core.lifecycle import EXPIRED_TEXT, FreezeRejected, set_frozen, sweep
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import FreezeNodes, LifecycleSweep
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem, MemoryMetadata, UsageRecord
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
