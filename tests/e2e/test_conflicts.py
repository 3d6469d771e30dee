"""Rules mode never archives on a guess — real broker and stores, through the
client and the rules extractor: near misses stay apart, a suspected contradiction is a
``CONFLICT`` edge with both kept and the newer first in search, duplicates still merge."""

from __future__ import annotations

from datetime import UTC, datetime

from memstream.topics.events import MemoryUpdate
from memstream.topics.registry import MEMORY_UPDATES
from tests.support.pipeline import Pipeline, facts_by_status, holding, say_apart
from tests.support.topics import read_topic

T0 = datetime(2026, 11, 20, 9, tzinfo=UTC)
LYON = "I moved to Lyon last month."
SHANGHAI = "我下周要去上海出差，住在外滩附近。"

# (class, language, older, newer): each pair in its own cube, said a day apart.
NEAR_MISSES = [
    ("plan-vs-residence", "en", "I live in Munich.", "I plan to move to Berlin next year."),
    ("trip-vs-home", "en", "I live in Boston.",
     "Next week I'm staying at a hotel in Chicago for work."),
    ("different-time", "en", "I went to the dentist on 2024-03-02.",
     "I went to the dentist on 2024-09-10."),
    ("plan-vs-residence", "zh", "我住在北京。", "我打算明年搬到深圳。"),
    ("trip-vs-home", "zh", "用户住在广州。", "用户这周末去厦门旅游，住在鼓浪屿附近。"),
    ("different-time", "zh", "我上周去上海出差了。", "我下周要去上海出差。"),
    ("plan-vs-residence", "mixed", "I live in Berlin.", "我打算明年搬到慕尼黑。"),
    ("trip-vs-home", "mixed", "我住在上海。", "I'm flying to London next week for a meeting."),
    ("different-time", "mixed", "I ran a marathon in 2022.", "我2024年跑了一次马拉松。"),
]


async def say(pipeline: Pipeline, cube: str, *texts: str) -> None:
    """Each text as its own chat chunk from the user, a day apart from T0."""
    await say_apart(pipeline, cube, *texts, start=T0, days=1)

async def test_a_trip_to_shanghai_does_not_replace_a_home_in_lyon(pipeline: Pipeline) -> None:
    await say(pipeline, "lyon", LYON, SHANGHAI)
    nodes = await facts_by_status(pipeline, "lyon")
    assert "archived" not in nodes
    lyon, shanghai = holding(nodes["activated"], "Lyon"), holding(nodes["activated"], "上海")
    assert len(nodes["activated"]) == 2
    graph = pipeline.deps.store.graph
    for a, b in ((lyon, shanghai), (shanghai, lyon)):
        for edge_type in ("MERGED_TO", "CONFLICT"):
            assert not await graph.edge_exists("lyon", a.id, b.id, edge_type)
    # the Lyon memory keeps its own tags: nothing of the trip moved onto it
    assert not {t for t in lyon.metadata.tags if any(w in t for w in ("上海", "出差", "外滩"))}
    hits = await pipeline.client.search("lyon", "上海出差", top_k=5)
    statements = [h.item for h in hits if h.item.metadata.memory_type != "EpisodicMemory"]
    assert statements[0].id in {shanghai.id}, [s.memory for s in statements]
    assert "上海" in hits[0].item.memory  # the statement or its episode, never Lyon
    ranks = {h.item.metadata.origin_id or h.item.id: i for i, h in enumerate(hits)}
    assert lyon.id not in ranks or ranks[lyon.id] > ranks[shanghai.id]


async def test_near_misses_of_every_class_stay_apart_in_english_chinese_and_mixed(
    pipeline: Pipeline,
) -> None:
    for n, (_, _, older, newer) in enumerate(NEAR_MISSES):
        await say(pipeline, f"near{n}", older, newer)
    for n, (kind, lang, _, _) in enumerate(NEAR_MISSES):
        cube = f"near{n}"
        nodes = await facts_by_status(pipeline, cube)
        assert "archived" not in nodes, (kind, lang)
        assert len(nodes["activated"]) == 2, (kind, lang, [x.memory for x in nodes["activated"]])
        ids = [x.id for x in nodes["activated"]]
        for edge_type in ("MERGED_TO", "CONFLICT"):
            assert not await pipeline.deps.store.graph.edge_exists(
                cube, ids[1], ids[0], edge_type), (kind, lang, edge_type)
            assert not await pipeline.deps.store.graph.edge_exists(
                cube, ids[0], ids[1], edge_type), (kind, lang, edge_type)


async def test_a_suspected_contradiction_keeps_both_and_ranks_the_newer_first(
    pipeline: Pipeline,
) -> None:
    # two homes, and no word that says one replaced the other: a suspicion, not a change
    # (an explicit change closes the older one: tests/e2e/test_validity.py)
    await say(pipeline, "move", "Alice lives in Berlin.", "Alice lives in Lisbon.")
    await say(pipeline, "move-zh", "用户的朋友小王住在上海。", "小王住在北京。")
    for cube, old_place, new_place, query in (
            ("move", "Berlin", "Lisbon", "Alice lives in Berlin."),
            ("move-zh", "上海", "北京", "用户的朋友小王住在上海。")):
        nodes = await facts_by_status(pipeline, cube)
        assert "archived" not in nodes
        old, new = holding(nodes["activated"], old_place), holding(nodes["activated"], new_place)
        graph = pipeline.deps.store.graph
        assert await graph.edge_exists(cube, new.id, old.id, "CONFLICT")
        assert not await graph.edge_exists(cube, old.id, new.id, "MERGED_TO")
        # the query is the older statement word for word, so it alone would rank first
        hits = await pipeline.client.search(cube, query, top_k=5)
        order = [h.item.metadata.origin_id or h.item.id for h in hits]
        assert order.index(new.id) < order.index(old.id), [h.item.memory for h in hits]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    updates = [u for u in await read_topic(pipeline.settings, pipeline.bootstrap, MEMORY_UPDATES)
               if isinstance(u, MemoryUpdate) and u.cube_id == "move"]
    conflict = [u for u in updates if u.action == "linked" and u.stage == "memory.add"]
    assert len(conflict) == 1 and conflict[0].edges[0].type == "CONFLICT"
    assert conflict[0].reason.startswith("suspected contradiction")
    assert not [u for u in updates if u.action in ("merged", "archived")]


async def test_a_duplicate_still_merges_through_the_extractor(pipeline: Pipeline) -> None:
    await say(pipeline, "dupe", "I love hiking in the mountains.",
              "I really enjoy mountain hiking.")
    nodes = await facts_by_status(pipeline, "dupe")
    assert len(nodes["activated"]) == 1 and len(nodes["archived"]) == 1
