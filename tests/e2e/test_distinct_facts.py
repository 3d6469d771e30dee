"""Distinct facts are never merged away — real broker and stores, ``add_memories``."""

from __future__ import annotations

import random
from typing import Any

from memstream.topics.models import MemoryItem
from tests.fakes.openai_server import Reply
from tests.support.pipeline import Pipeline

NAMES = ["Anna Kowalski", "Anna Nowak", "Boris Petrov", "Carla Rossi", "David Chen",
         "Elena Silva", "Farid Haddad", "Greta Berg", "Hugo Moreau", "Ines Costa"]
CITIES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Vienna", "Prague", "Dublin"]
JOBS = ["nurse", "teacher", "pilot", "carpenter", "lawyer", "dentist", "baker", "chef"]
FOODS = ["sushi", "ramen", "paella", "tacos", "falafel", "risotto", "curry", "pho"]
INSTRUMENTS = ["violin", "cello", "piano", "guitar", "flute", "trumpet", "drums", "harp"]


def distinct_facts(seed: int = 3) -> list[str]:
    """Four facts about each of ten people, from one template per attribute."""
    rng = random.Random(seed)
    facts = []
    for name in NAMES:
        facts += [f"{name} lives in {rng.choice(CITIES)}.",
                  f"{name} works as a {rng.choice(JOBS)}.",
                  f"{name}'s favourite food is {rng.choice(FOODS)}.",
                  f"{name} plays the {rng.choice(INSTRUMENTS)} every weekend."]
    rng.shuffle(facts)
    return facts


async def by_status(pipeline: Pipeline, cube: str) -> dict[str, list[MemoryItem]]:
    """The cube's facts by status (not the summaries the optimizer derives from them)."""
    out: dict[str, list[MemoryItem]] = {}
    for node in await pipeline.deps.store.graph.all_of_type(cube, "LongTermMemory", status=None):
        if node.metadata.hierarchy_level == "fact" and node.metadata.type != "reasoning":
            out.setdefault(node.metadata.status, []).append(node)
    return out


async def test_forty_distinct_facts_all_stay_activated_while_a_move_closes_the_old_home(
    pipeline: Pipeline,
) -> None:
    facts = distinct_facts()
    token = await pipeline.client.add_memories("df1", facts)
    await pipeline.client.wait_applied(token, timeout=120)
    nodes = await by_status(pipeline, "df1")
    assert sorted(n.memory for n in nodes["activated"]) == sorted(facts)
    assert "archived" not in nodes
    # first person, as the rules extractor stores it: a move said outright closes the old
    # home (SUPERSEDES, both kept); two homes without a word of change are a suspected
    # contradiction, a CONFLICT edge between the two, both kept
    for said in ("I live in Berlin.", "I moved to Munich.", "I live in Hamburg."):
        token = await pipeline.client.add_memories("df1", [said])
        await pipeline.client.wait_applied(token, timeout=60)
    nodes = await by_status(pipeline, "df1")
    assert "archived" not in nodes
    assert len(nodes["activated"]) == len(facts) + 3
    ids = {n.memory: n.id for n in nodes["activated"]}
    graph = pipeline.deps.store.graph
    assert await graph.edge_exists(
        "df1", ids["I moved to Munich."], ids["I live in Berlin."], "SUPERSEDES")
    assert await graph.edge_exists(
        "df1", ids["I live in Hamburg."], ids["I moved to Munich."], "CONFLICT")
    # none of the forty was closed
    assert [n.memory for n in nodes["activated"] if n.metadata.valid_until is not None] == [
        "I live in Berlin."]
    # and a found fact is the right person's
    hits = await pipeline.client.search("df1", "Where does Anna Nowak live?", top_k=10)
    lives = next(f for f in facts if f.startswith("Anna Nowak lives"))
    assert lives in {h.item.memory for h in hits}


async def test_a_model_judge_that_calls_everything_a_contradiction_cannot_merge_two_people(
    pipeline_with_llm: Pipeline,
) -> None:
    pipeline = pipeline_with_llm
    server = pipeline.llm_server
    def everything_contradicts(request: dict[str, Any]) -> Reply:
        items = request["messages"][-1]["content"].count("NEW memory")
        return Reply.json({"decisions": [
            {"item": i, "candidate": 0, "relation": "contradictory", "reason": "different city",
             "memory": "fused"} for i in range(items)]})

    server.route("New memories were just extracted", everything_contradicts, where="system")
    server.handler = lambda request: Reply.json({"links": [], "concepts": [], "summaries": []})
    for text in ("Anna lives in Paris.", "Boris lives in Rome.", "我住在北京。",
                 "我妹妹住在北京。"):
        token = await pipeline.client.add_memories("df2", [text])
        await pipeline.client.wait_applied(token, timeout=60)
    nodes = await by_status(pipeline, "df2")
    assert sorted(n.memory for n in nodes["activated"]) == sorted(
        ["Anna lives in Paris.", "Boris lives in Rome.", "我住在北京。", "我妹妹住在北京。"])
    assert "archived" not in nodes
    assert not [r for r in server.chat_requests  # never even asked about two people
                if "New memories were just extracted" in r["messages"][0]["content"]]
    # the same judge still merges a pair about one person
    token = await pipeline.client.add_memories("df2", ["Anna moved to Rome."])
    await pipeline.client.wait_applied(token, timeout=60)
    nodes = await by_status(pipeline, "df2")
    assert [n.memory for n in nodes["archived"]] == ["Anna lives in Paris."]
