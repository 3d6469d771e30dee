"""Validity in time, through the client and the rules extractor on a real broker and stores:
an explicit change closes the statement it replaces (kept, with the time it stopped
holding, linked by ``SUPERSEDES``), a present-tense question gets the current one first, a
question about the past still finds the old one, and near-misses close nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.topics.events import MemoryUpdate
from memstream.topics.registry import MEMORY_UPDATES
from tests.support.pipeline import Pipeline, facts_by_status, holding, say_apart
from tests.support.topics import read_topic

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def current_first(hits: list, current: str, stale: str) -> bool:
    """Whether a hit showing ``current`` (its excerpt or text) ranks above every hit that
    shows only ``stale``."""
    texts = [h.excerpt or h.item.memory for h in hits]
    first_current = next((i for i, t in enumerate(texts) if current in t), len(texts))
    first_stale = next((i for i, t in enumerate(texts) if stale in t and current not in t),
                       len(texts))
    return first_current < first_stale


async def say(pipeline: Pipeline, cube: str, *texts: str) -> None:
    """Each text as its own chat chunk from the user, 30 days apart from T0."""
    await say_apart(pipeline, cube, *texts, start=T0, days=30)

async def test_a_move_closes_the_old_home_and_the_new_one_answers_now(
        pipeline: Pipeline) -> None:
    await say(pipeline, "home", "I moved to Lyon last month.",
              "I moved from Lyon to Berlin, the flat here is much bigger.")
    nodes = await facts_by_status(pipeline, "home")
    assert "archived" not in nodes  # nothing merged, nothing hidden
    lyon = holding(nodes["activated"], "to Lyon")
    berlin = holding(nodes["activated"], "Berlin")
    # the old statement is kept, closed when the new one began to hold, and linked to it
    assert lyon.metadata.valid_until == berlin.metadata.valid_from == T0 + timedelta(days=30)
    assert lyon.metadata.superseded_by == berlin.id
    assert berlin.metadata.valid_until is None and berlin.metadata.valid_from is not None
    graph = pipeline.deps.store.graph
    assert await graph.edge_exists("home", berlin.id, lyon.id, "SUPERSEDES")
    assert not await graph.edge_exists("home", berlin.id, lyon.id, "CONFLICT")
    # working memory holds what is current
    working = [n.memory for n in await graph.all_of_type("home", "WorkingMemory")]
    assert any("Berlin" in m for m in working) and not any("to Lyon" in m for m in working)

    now = await pipeline.client.search("home", "where do I live now?", top_k=5)
    assert current_first(now, "Berlin", "Lyon"), [h.item.memory for h in now]
    # asked about the past, the old statement still answers, with its validity
    before = await pipeline.client.search("home", "where did I live before?", top_k=5)
    old = [h.item for h in before if h.item.id == lyon.id]
    assert old and old[0].metadata.valid_until == lyon.metadata.valid_until

    updates = [u for u in await read_topic(pipeline.settings, pipeline.bootstrap, MEMORY_UPDATES)
               if isinstance(u, MemoryUpdate) and u.cube_id == "home"]
    closed = [u for u in updates if u.action == "superseded"]
    assert [(u.node_id, u.related_ids) for u in closed] == [(lyon.id, (berlin.id,))]
    assert closed[0].edges[0].type == "SUPERSEDES"
    assert "explicit change" in closed[0].reason
    assert closed[0].node is not None and closed[0].node.metadata.valid_until is not None
    # as of a time in the conversation: the home that held then
    then = await pipeline.client.as_of("home", T0 + timedelta(days=10), time="valid")
    later = await pipeline.client.as_of("home", T0 + timedelta(days=40), time="valid")
    assert lyon.id in {n.id for n in then} and berlin.id not in {n.id for n in then}
    assert berlin.id in {n.id for n in later} and lyon.id not in {n.id for n in later}
    history = await pipeline.client.memory_history(lyon.id, "home")
    assert "superseded" in [c.update.action for c in history]


async def test_chinese_and_a_negated_habit_close_what_they_end(pipeline: Pipeline) -> None:
    await say(pipeline, "zh", "我住在上海。", "我上个月搬到了北京。")
    await say(pipeline, "smoke", "I smoke about a pack a day.", "I don't smoke anymore.")
    for cube, old_words, new_words, question in (
            ("zh", "上海", "北京", "我现在住在哪里？"),
            ("smoke", "a pack", "anymore", "do I smoke?")):
        nodes = await facts_by_status(pipeline, cube)
        old = holding(nodes["activated"], old_words)
        new = holding(nodes["activated"], new_words)
        assert old.metadata.superseded_by == new.id, (cube, old.metadata)
        assert new.metadata.valid_until is None
        hits = await pipeline.client.search(cube, question, top_k=5)
        assert current_first(hits, new_words, old_words), (cube, [h.item.memory for h in hits])


async def test_near_misses_close_nothing(pipeline: Pipeline) -> None:
    cases = [
        ("plan", "I live in Lyon.", "I'm thinking of moving to Berlin next year."),
        ("trip", "I live in Lyon.", "I'm in Berlin for a conference this week."),
        ("other person", "I live in Lyon.", "My sister moved from Lyon to Berlin."),
        ("hypothetical", "I live in Lyon.", "If I moved to Berlin I would miss the food."),
        ("other time", "I live in Lyon.", "In 2015 I moved from Paris to Lyon."),
        ("other attribute", "I work in Lyon.", "I moved to a bigger flat near the river."),
        ("zh plan", "我住在上海。", "我打算明年搬到北京。"),
        ("zh hypothetical", "我住在上海。", "如果我搬到北京，我会想念上海的小笼包。"),
    ]
    for n, (_, older, newer) in enumerate(cases):
        await say(pipeline, f"near{n}", older, newer)
    for n, (kind, _, _) in enumerate(cases):
        nodes = await facts_by_status(pipeline, f"near{n}")
        closed = [x.memory for x in nodes["activated"] if x.metadata.valid_until is not None]
        assert closed == [], (kind, closed)
