"""Rules-mode summaries over real topics and stores: the optimizer writes extractive concept,
topic and aggregate nodes marked ``written_by="rules"``, and none of them ever reaches working
memory, neither through a scheduler refresh nor through a replace_working_memory command."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from memstream.streams.prompts.members import sentences
from memstream.topics.events import ReplaceWorkingMemory
from memstream.topics.models import MemoryItem
from tests.e2e.test_optimizer import settle, tell
from tests.e2e.test_scheduler import ask, replacement_for
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

COOKING = [
    ("The user cooks vegetarian lasagne with spinach every Sunday.",
     ["cooking", "vegetarian", "lasagne"]),
    ("The user learned to cook a vegetarian Thai green curry with tofu.",
     ["cooking", "vegetarian", "curry"]),
    ("The user makes vegetarian dumplings with cabbage and mushrooms.",
     ["cooking", "vegetarian", "dumplings"]),
    ("The user bakes vegetarian pizza with roasted peppers for friends.",
     ["cooking", "vegetarian", "pizza"]),
    ("The user cooks a vegetarian mushroom risotto on Friday evenings.",
     ["cooking", "vegetarian", "risotto"]),
    ("用户周末喜欢做素食饺子，最爱韭菜鸡蛋馅。", ["cooking", "vegetarian", "饺子"]),
]
TRAVEL = [
    ("The user's flight to Lisbon leaves on May 14.", ["travel", "lisbon", "flight"]),
    ("The user booked a hotel in Alfama for the Lisbon trip.", ["travel", "lisbon", "hotel"]),
    ("The user wants to take the tram 28 through Lisbon.", ["travel", "lisbon", "tram"]),
    ("The user plans a day trip from Lisbon to Sintra.", ["travel", "lisbon", "sintra"]),
]


@pytest_asyncio.fixture
async def roomy(tmp_path: Path, kafka_broker: str, falkordb_uri: str) -> AsyncIterator[Pipeline]:
    """Rules mode; no merges (near-identical recipes are beside the point); a working memory
    large enough that capacity never decides what is left out."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 memory={"conflict_detection": False,
                                         "working_memory_capacity": 30})
    async for p in run_pipeline(settings):
        yield p


def derived(nodes: list[MemoryItem]) -> list[MemoryItem]:
    return [n for n in nodes if n.metadata.is_derived]


async def test_rules_summaries_are_verbatim_and_never_enter_working_memory(
    roomy: Pipeline,
) -> None:
    p, cube = roomy, "cook-wm"
    await tell(p, cube, COOKING + TRAVEL, session="kitchen")
    await settle(p, cube)

    nodes = await p.deps.store.graph.all_of_type(cube, "LongTermMemory")
    facts = {n.memory for n in nodes if not n.metadata.is_derived}
    summaries = derived(nodes)
    assert any(s.metadata.hierarchy_level == "concept" for s in summaries), summaries
    for summary in summaries:
        md = summary.metadata
        assert md.written_by == "rules" and md.is_stand_in_summary
        assert "(extractive, no model)" in md.background
        # every sentence of the value is a whole sentence of one member: nothing spliced
        member_sentences = {s.rstrip("。.") for f in facts for s in sentences(f)}
        for sentence in sentences(summary.memory):
            assert sentence.rstrip("。.") in member_sentences, (sentence, summary.memory)

    # a query the summaries answer well: retrieval finds them, working memory never holds them
    msg, _ = await ask(p, cube, "Which vegetarian dishes does the user cook?")
    event = await replacement_for(p, msg)
    summary_ids = {s.id for s in summaries}
    assert event.items and not summary_ids & {i.id for i in event.items}, event.items
    working = await p.client.working_memory(cube)
    assert working and not derived(working), [w.memory for w in working]
    assert not summary_ids & {w.metadata.origin_id for w in working}

    # the sink refuses them too, whoever names them
    fact_id = next(n.id for n in nodes if not n.metadata.is_derived)
    cmd = ReplaceWorkingMemory(user_id=cube, node_ids=(*sorted(summary_ids), fact_id))
    await p.client.wait_applied(await p.client.command(cmd))
    working = await p.client.working_memory(cube)
    assert [w.metadata.origin_id for w in working] == [fact_id]


async def test_a_rules_concept_that_would_repeat_one_fact_is_not_written(roomy: Pipeline) -> None:
    """Issue #27.5: a cluster of two gets an extractive summary quoting one member — a copy
    of that fact typed LongTermMemory. Rules mode writes no such node; larger groups still
    get theirs."""
    p, cube = roomy, "no-copies"
    await tell(p, cube, TRAVEL[:2], session="lisbon")
    await settle(p, cube)
    nodes = await p.deps.store.graph.all_of_type(cube, "LongTermMemory")
    facts = {n.memory for n in nodes if not n.metadata.is_derived}
    assert len(facts) == 2
    copies = [n.memory for n in derived(nodes) if n.memory in facts]
    assert copies == []
    await tell(p, cube, COOKING, session="kitchen")
    await settle(p, cube)
    nodes = await p.deps.store.graph.all_of_type(cube, "LongTermMemory")
    facts = {n.memory for n in nodes if not n.metadata.is_derived}
    assert derived(nodes)
    assert [n.memory for n in derived(nodes) if n.memory in facts] == []
