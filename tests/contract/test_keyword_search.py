"""GraphStore.keyword_search: full-text (BM25-style) recall on every adapter, real FalkorDB.

Words are tokenized by memstream before they reach the index (``sinks.graph.fulltext``), so
Chinese is searched by words, and no character of a query can reach the engine's syntax.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from memstream.local.falkordb import FalkorDBServer
from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.sinks.graph.store import CypherGraphStore
from memstream.sinks.ports import Filter
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.contract.graph_fixtures import GRAPH_BACKENDS, plan_checked_store

pytestmark = [pytest.mark.asyncio(loop_scope="session"),
              pytest.mark.parametrize("graph_backend", GRAPH_BACKENDS)]

STORED = ["LongTermMemory", "UserMemory", "EpisodicMemory"]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def falkordb_graph_store(
    graph_falkordb_server: FalkorDBServer,
) -> AsyncIterator[FalkorDBGraphStore]:
    """A graph of this module's own: a full-text score weighs each word by how many of the
    graph's memories hold it, so the memories other modules' tests leave in the shared
    graph would reorder these rankings (run after the graph and memory store suites,
    "support2" came before "support")."""
    async for store in plan_checked_store(graph_falkordb_server):
        yield store


def node(cube: str, node_id: str, text: str, **meta: Any) -> MemoryItem:
    meta.setdefault("memory_type", "LongTermMemory")
    return MemoryItem(id=node_id, memory=text,
                      metadata=MemoryMetadata(user_id=cube, cube_id=cube, **meta))


async def ids(store: CypherGraphStore, cube: str, text: str, **kw: Any) -> list[str]:
    """The ids found, best first; ``keyword_ids`` (what a search reads) finds the same, in the
    same order, with the same scores."""
    kw.setdefault("memory_types", STORED)
    found = await store.keyword_search(cube, text, 10, **kw)
    assert await store.keyword_ids(cube, text, 10, **kw) == [(n.id, s) for n, s in found]
    return [n.id for n, _ in found]


async def test_words_find_the_memories_that_hold_them_best_first(
    graph_store: CypherGraphStore, cube: str,
) -> None:
    await graph_store.upsert_nodes(cube, [
        node(cube, "support", "I went to the LGBTQ support group yesterday [2023-05-07]."),
        node(cube, "support2", "The support group meets on Tuesdays; the group is small."),
        node(cube, "cat", "My cat Whiskers sleeps all day."),
    ])
    found = await ids(graph_store, cube, "When did Caroline go to the LGBTQ support group?")
    assert found == ["support", "support2"]  # both words beat one; "cat" shares none
    scored = await graph_store.keyword_search(cube, "LGBTQ support", 10, STORED)
    assert scored[0][1] > scored[1][1] > 0
    assert await ids(graph_store, cube, "whiskers") == ["cat"]  # case does not matter


async def test_chinese_is_searched_by_words(graph_store: CypherGraphStore, cube: str) -> None:
    await graph_store.upsert_nodes(cube, [
        node(cube, "cat", "我养了一只叫小白的猫，它三岁了。"),
        node(cube, "tea", "我每天早上喝一杯绿茶。"),
        node(cube, "beijing", "我住在北京，在医院当护士。"),
    ])
    assert await ids(graph_store, cube, "小白") == ["cat"]
    assert await ids(graph_store, cube, "我早上喝什么茶？") == ["tea"]
    assert await ids(graph_store, cube, "北京的医院") == ["beijing"]
    assert await ids(graph_store, cube, "了的") == []  # particles alone are no words


async def test_only_the_cubes_activated_nodes_of_the_wanted_types(
    graph_store: CypherGraphStore, cube: str,
) -> None:
    other = f"{cube}-other"
    await graph_store.upsert_nodes(cube, [
        node(cube, "fact", "The kayak of the user is orange."),
        node(cube, "pref", "The user loves kayak trips.", memory_type="UserMemory"),
        node(cube, "wm", "The kayak of the user is orange.", memory_type="WorkingMemory"),
        node(cube, "old", "The kayak of the user was green.", status="archived"),
        node(cube, "ep", "[2025-03-01 09:00] Ann: my kayak is orange",
             memory_type="EpisodicMemory", tags=("Ann",)),
    ])
    await graph_store.upsert_nodes(other, [node(other, "theirs", "Another kayak, orange too.")])
    assert set(await ids(graph_store, cube, "kayak")) == {"fact", "pref", "ep"}
    assert await ids(graph_store, cube, "kayak", memory_types=["EpisodicMemory"]) == ["ep"]
    tagged = await graph_store.keyword_search(
        cube, "kayak", 10, STORED, [Filter("memory_type", "=", "UserMemory")])
    assert [n.id for n, _ in tagged] == ["pref"]
    assert await ids(graph_store, other, "kayak") == ["theirs"]
    assert await graph_store.keyword_search(cube, "kayak", 0, STORED) == []


async def test_query_syntax_in_user_text_is_only_words(
    graph_store: CypherGraphStore, cube: str, graph_backend: str,
) -> None:
    await graph_store.upsert_nodes(cube, [node(cube, "a", "Backup codes are in the red folder.")])
    hostile = ["red) | (*", "@cube_id:{x} red", "red\" OR 1=1 //", "+red -folder~2 AND *:*"]
    if graph_backend != "neo4j-bolt":  # that endpoint pastes parameters into query text
        hostile.append("'; MATCH (n) DETACH DELETE n //")
    for text in hostile:
        assert await ids(graph_store, cube, text) in (["a"], [])
    assert await ids(graph_store, cube, "red folder") == ["a"]
    assert await ids(graph_store, cube, "   ") == []


async def test_rewritten_text_is_searched_by_its_new_words(
    graph_store: CypherGraphStore, cube: str,
) -> None:
    first = node(cube, "n", "The bike of the user is a red Brompton.")
    await graph_store.upsert_nodes(cube, [first])
    await graph_store.update_node(cube, first.model_copy(
        update={"memory": "The bike of the user is a blue Moulton."}))
    assert await ids(graph_store, cube, "Brompton") == []
    assert await ids(graph_store, cube, "Moulton") == ["n"]
