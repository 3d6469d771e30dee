"""History and explain of every node a user sees (issue #41): working-memory copies, the
optimizer's concepts; and one exit code per kind of error for the commands that take ids.
Against a real pipeline, through the client and the command line as a user runs it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest_asyncio

from memstream.topics.events import ExtractedMemory, ReplaceWorkingMemory
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_ITEMS
from tests.e2e.test_optimizer import TRIP, settle
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

CUBE = "trip"
T0 = datetime(2026, 4, 2, 8, tzinfo=UTC)


@pytest_asyncio.fixture
async def trip(tmp_path: Path, kafka_broker: str, falkordb_uri: str,
               ) -> AsyncIterator[Pipeline]:
    """Three facts of one trip, their working-memory copies and the optimizer's concept over
    them (conflict detection off: the rules judge would fuse the trip's statements)."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 memory={"conflict_detection": False},
                                 reorganize={"optimize_interval_s": 86400})
    async for p in run_pipeline(settings):
        token = None
        for i, (text, tags) in enumerate(TRIP):
            token = await p.client.publish(MEMORY_ITEMS, ExtractedMemory(
                user_id=CUBE, memory=text, tags=tuple(tags), session_id="trip",
                occurred_at=T0 + timedelta(hours=i)))
        assert token is not None
        await p.client.wait_applied(token, timeout=60)
        await settle(p, CUBE)
        yield p


async def nodes(p: Pipeline) -> tuple[list[MemoryItem], MemoryItem, list[MemoryItem]]:
    """The facts, the concept and the working-memory copies, as `list` and the UI show them."""
    graph = p.deps.store.graph
    long_term = await graph.all_of_type(CUBE, "LongTermMemory")
    (concept,) = [n for n in long_term if n.metadata.hierarchy_level == "concept"]
    facts = [n for n in long_term if n.metadata.hierarchy_level == "fact"]
    return facts, concept, await graph.all_of_type(CUBE, "WorkingMemory")


async def test_a_working_memory_copy_has_the_history_and_explanation_of_its_memory(
        trip: Pipeline) -> None:
    p = trip
    facts, _, copies = await nodes(p)
    delayed = next(n for n in facts if "delayed" in n.memory)
    copy = next(c for c in copies if c.metadata.origin_id == delayed.id)

    history = await p.client.memory_history(copy.id[:8], CUBE)
    assert getattr(history, "copy_of", None) == delayed.id
    assert getattr(history, "node_id", None) == copy.id
    original = await p.client.memory_history(delayed.id, CUBE)
    assert [c.update.event_id for c in history] == [c.update.event_id for c in original]
    why = await p.client.explain(copy.id, CUBE)
    assert why.copy_of == delayed.id and why.node is not None
    assert why.node.metadata.memory_type == "WorkingMemory" and why.node.memory == delayed.memory
    (step,) = why.lineage
    assert step.kind == "copy" and step.source.node_id == delayed.id
    assert [s.text for s in step.source.sources] == [delayed.memory]

    # put in working memory by a command: the copy's history shows it, and still its memory
    booked = next(n for n in facts if "booked" in n.memory)
    await p.client.wait_applied(await p.client.command(ReplaceWorkingMemory(
        user_id=CUBE, node_ids=(booked.id, delayed.id))), timeout=60)
    history = await p.client.memory_history(working_copy_id(booked.id), CUBE)
    assert getattr(history, "copy_of", None) == booked.id
    actions = [c.update.action for c in history]
    assert actions[0] == "added" and actions[-1] == "working_memory_replaced", actions

    env = pipeline_env(p)
    shown = await run_cli(env, "history", copy.id[:8])
    assert shown.code == 0, shown.text
    assert f"history of {copy.id}, a working-memory copy of {delayed.id}" in " ".join(
        shown.out.split())
    assert " added " in shown.out and "delayed by three hours" in shown.out
    told = await run_cli(env, "explain", copy.id, "--cube", CUBE)
    assert told.code == 0, told.text
    assert "a working-memory copy of:" in told.out and delayed.id[:8] in told.out
    assert "← manual" in told.out and "[activated]" in told.out


async def test_a_concept_is_explained_by_the_stage_that_made_it_and_its_members(
        trip: Pipeline) -> None:
    p = trip
    facts, concept, _ = await nodes(p)
    history = await p.client.memory_history(concept.id, CUBE)
    assert [(c.update.action, c.update.stage) for c in history][:2] == [
        ("added", "optimizer"), ("linked", "optimizer")]
    why = await p.client.explain(concept.id[:8], CUBE)
    made = why.made
    assert made is not None and made.update.stage == "optimizer"
    members = {s.source.node_id: s for s in why.lineage}
    assert set(members) == {f.id for f in facts}
    assert all(s.kind == "member" and "PARENT" in s.reason for s in members.values())
    assert {t.text for s in members.values() for t in s.source.sources} == {
        f.memory for f in facts}

    told = await run_cli(pipeline_env(p), "explain", concept.id[:8])
    assert told.code == 0, told.text
    out = " ".join(told.out.split())
    assert "(concept)" in out and "made by the optimizer stage" in out
    assert "summarizes 3 memories (PARENT edge by the optimizer stage" in out
    assert all(f.id[:8] in out for f in facts)


async def test_an_unknown_or_ambiguous_id_exits_2_from_every_command(trip: Pipeline) -> None:
    """docs/cli.md, Errors: an id the cube does not hold is the user's mistake (exit 2, one
    line naming it); so is a prefix naming several memories, which names them."""
    p = trip
    env = pipeline_env(p)
    token = await p.client.add_memories(CUBE, [
        {"memory": "The user plays the violin.", "id": "abcdefgh-0001"},
        {"memory": "The user grows tomatoes.", "id": "abcdefgh-0002"}])
    await p.client.wait_applied(token, timeout=60)
    for args in (["get", "no-such-id", "--user", CUBE], ["history", "no-such-id"],
                 ["explain", "no-such-id", "--cube", CUBE],
                 ["freeze", "no-such-id", "--user", CUBE],
                 ["update", "no-such-id", "--user", CUBE, "--text", "x"],
                 ["delete", "no-such-id", "--user", CUBE]):
        done = await run_cli(env, *args)
        errors = [line for line in done.err.splitlines() if line.startswith("Error:")]
        assert done.code == 2 and len(errors) == 1, (args, done.text)
        assert "no memory no-such-id" in errors[0] and "Traceback" not in done.text
    for args in (["get", "abcdefgh", "--user", CUBE], ["history", "abcdefgh"],
                 ["explain", "abcdefgh", "--cube", CUBE],
                 ["delete", "abcdefgh", "--user", CUBE]):
        done = await run_cli(env, *args)
        assert done.code == 2, (args, done.text)
        line = " ".join(done.err.split())
        assert "id prefix 'abcdefgh' matches several memories" in line, (args, line)
        assert "abcdefgh-0001" in line and "abcdefgh-0002" in line, (args, line)
    assert await p.deps.store.graph.get_node(CUBE, "abcdefgh-0001") is not None
    frozen = await run_cli(env, "freeze", "abcdefgh-0002", "--user", CUBE)
    assert frozen.code == 0 and "froze 1 memory" in frozen.out, frozen.text
