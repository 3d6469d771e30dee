"""Feedback from the agent (issue #41) end to end — real broker, FalkorDB and Milvus Lite, a
worker in-process: each verdict as a user sees it afterwards (search, working memory,
history, explain), a memory called wrong out of every way of reading it but by its id (the
MCP tools too), the command line, and a replay of the log that rebuilds the same stores."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memstream.agents.memory_tools import Identity, MemoryTools, ToolFailure
from memstream.sinks.dump import export_cube
from memstream.topics.events import DropViews, FreezeNodes, WriteToken
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem
from tests.e2e.test_replay import feed, replay, settle, view
from tests.e2e.test_scheduler import ask, replacement_for
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline

HOME = "The user lives in Porto."
CAR = "The user drives a red Fiat to work."
PEANUTS = "The user is allergic to peanuts."
SWIM = "The user swims in the sea every morning before work."
BEACH = "The user likes to read on the beach in summer."
SWIM_QUESTION = "does the user swim in the sea?"
# What a status filter may ask for: a memory called wrong is left out whatever it names.
EVERY_WAY = ({}, {"mode": "fine"}, {"memory_type": "LongTermMemory"},
             {"memory_type": "WorkingMemory"}, {"search_filter": {"status": "archived"}},
             {"search_filter": {"status": {"in": ["activated", "archived"]}}})


async def remember(p: Pipeline, cube: str, *texts: str) -> dict[str, MemoryItem]:
    """The memories added directly (each with its working-memory copy), by text."""
    await p.client.wait_applied(await p.client.add_memories(cube, list(texts)), timeout=60)
    nodes = await p.client.get_all(cube, memory_type="LongTermMemory")
    return {n.memory: n for n in nodes if n.memory in texts}


async def applied(p: Pipeline, *tokens: WriteToken) -> None:
    for token in tokens:
        await p.client.wait_applied(token, timeout=60)
        assert await p.client.command_failure(token) is None


async def found(p: Pipeline, cube: str, query: str, **fields: Any) -> list[str]:
    """The memories a search returns, by their long-term ids (a copy stands for its memory)."""
    hits = await p.client.search(cube, query, top_k=10, **fields)
    return [h.item.metadata.origin_id or h.item.id for h in hits]


async def working(p: Pipeline, cube: str) -> set[str]:
    return {n.metadata.origin_id or n.id for n in await p.client.working_memory(cube)}


async def test_each_verdict_as_the_user_sees_it_afterwards(pipeline: Pipeline) -> None:
    p, c, cube = pipeline, pipeline.client, "vera"
    nodes = await remember(p, cube, HOME, CAR, PEANUTS, SWIM, BEACH)
    home, car, peanuts, swim = nodes[HOME], nodes[CAR], nodes[PEANUTS], nodes[SWIM]
    assert {home.id, car.id, swim.id} <= await working(p, cube)
    assert (await found(p, cube, SWIM_QUESTION))[0] == swim.id
    assert car.id in await found(p, cube, "what car does the user drive?")

    started = datetime.now(UTC)
    await applied(p, await c.feedback(cube, car.id, "wrong", "the user sold the car in 2024"),
                  await c.feedback(cube, home.id, "outdated", "the user moved to Lyon"),
                  await c.feedback(cube, swim.id, "irrelevant", "asked about swimming pools",
                                   query=SWIM_QUESTION),
                  await c.feedback(cube, working_copy_id(peanuts.id), "confirmed"))
    ended = datetime.now(UTC)

    # wrong: never returned again, whatever is asked, and out of working memory
    for fields in EVERY_WAY:
        assert car.id not in await found(p, cube, "what car does the user drive?", **fields), \
            fields
    assert car.id not in await working(p, cube)
    (kept,) = await c.get(cube, [car.id])  # by its id it is still there, with its verdict
    assert (kept.metadata.status, kept.metadata.feedback) == ("archived", "wrong")
    # outdated: out of working memory (what is current), still found, closed when it was said
    assert home.id not in await working(p, cube)
    assert home.id in await found(p, cube, "where does the user live?")
    (closed,) = await c.get(cube, [home.id])
    assert closed.metadata.valid_until is not None
    assert started <= closed.metadata.valid_until <= ended
    # irrelevant: ranked lower for that question, still there
    again = await found(p, cube, SWIM_QUESTION)
    assert again[0] != swim.id and swim.id in again
    # confirmed, through its working-memory copy's id: on the memory itself
    (sure,) = await c.get(cube, [peanuts.id])
    assert sure.metadata.feedback == "confirmed" and peanuts.id in await working(p, cube)

    # history and explain say which verdict and why
    changes = [ch.update for ch in await c.memory_history(car.id, cube)]
    assert (changes[-1].action, changes[-1].reason) == (
        "feedback", "wrong: the user sold the car in 2024")
    assert changes[-1].node is not None and changes[-1].node.metadata.feedback == "wrong"
    why = await c.explain(car.id, cube)
    assert why.feedback is not None
    assert why.feedback.update.reason == "wrong: the user sold the car in 2024"
    assert [ch.update.reason for ch in await c.memory_history(peanuts.id, cube)
            if ch.update.action == "feedback"] == ["confirmed"]

    # the scheduler's refresh of working memory leaves out what is wrong or no longer holds
    msg, _ = await ask(p, cube, "what car does the user drive, and where does the user live?")
    refreshed = {i.id for i in (await replacement_for(p, msg)).items}
    assert refreshed and not {car.id, working_copy_id(car.id), home.id,
                              working_copy_id(home.id)} & refreshed
    assert not {car.id, home.id} & await working(p, cube)


async def test_the_mcp_tools_never_show_a_wrong_memory_but_by_its_id(pipeline: Pipeline) -> None:
    p, cube = pipeline, "wren"
    nodes = await remember(p, cube, CAR, PEANUTS, HOME)
    car, home = nodes[CAR], nodes[HOME]
    tools = MemoryTools(p.client, Identity(cube, cube))

    said = await tools.feedback(working_copy_id(car.id)[:8], "wrong", "no car at all", None)
    assert said["verdict"] == "wrong" and said["memory"]["id"] == car.id  # the memory itself
    assert said["memory"]["feedback"] == "wrong" and said["memory"]["status"] == "archived"
    for kind in ("All", "LongTermMemory", "WorkingMemory"):
        hits = await tools.search("what car does the user drive?", 10, None, kind, None, [])
        assert car.id not in {r["id"] for r in hits["results"]}, kind
    for archived in (False, True):
        listed = await tools.list_memories(None, 50, archived)
        assert car.id not in {m["id"] for m in listed["memories"]}
        assert listed["total"] == len(listed["memories"])
    assert car.id not in {m["id"] for m in await tools.working_memory()}
    # by its id: the memory, its verdict and why
    (got,) = (await tools.get([car.id]))["memories"]
    assert got["feedback"] == "wrong"
    change = (await tools.history(car.id))["changes"][-1]
    assert (change["action"], change["reason"]) == ("feedback", "wrong: no car at all")
    assert change["caused_by"].endswith("memory.commands: feedback")
    assert (await tools.explain(car.id))["feedback"]["note"] == "no car at all"

    outdated = await tools.feedback(home.id, "outdated", None, None)
    assert outdated["memory"]["valid_until"] and outdated["memory"]["feedback"] == "outdated"
    with pytest.raises(ToolFailure, match="no memory no-such-id in cube 'wren'"):
        await tools.feedback("no-such-id", "wrong", None, None)
    with pytest.raises(ToolFailure, match="unknown verdict 'bad'"):
        await tools.feedback(home.id, "bad", None, None)  # type: ignore[arg-type]
    await applied(p, await p.client.command(FreezeNodes(user_id=cube, node_ids=(home.id,))))
    with pytest.raises(ToolFailure, match=f"feedback refused: .*{home.id} is frozen"):
        await tools.feedback(home.id, "confirmed", None, None)


async def test_memstream_feedback_on_the_command_line(pipeline: Pipeline) -> None:
    p, cube = pipeline, "wes"
    env = pipeline_env(p)
    car = (await remember(p, cube, CAR, PEANUTS))[CAR]
    done = await run_cli(env, "feedback", car.id[:8], "wrong", "--note", "never had a car",
                         "--user", cube)
    assert done.code == 0, done.text
    assert f"{car.id}: wrong (never had a car)" in done.out
    search = await run_cli(env, "search", "what car does the user drive?", "--user", cube,
                           "--json")
    assert search.code == 0 and car.id not in search.out and "Fiat" not in search.out
    history = await run_cli(env, "history", car.id[:8], "--cube", cube)
    assert history.code == 0, history.text
    assert " feedback " in history.out and "wrong: never had a car" in history.out
    assert "memory.commands: feedback" in history.out
    explain = await run_cli(env, "explain", car.id, "--cube", cube)
    assert explain.code == 0 and "feedback at " in explain.out
    assert "wrong: never had a car" in explain.out
    got = await run_cli(env, "get", car.id, "--user", cube)
    assert got.code == 0 and "feedback" in got.out and "archived" in got.out

    unknown = await run_cli(env, "feedback", "no-such-id", "outdated", "--user", cube)
    assert unknown.code == 2, unknown.text
    errors = [line for line in unknown.err.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: no memory no-such-id in cube '{cube}'; nothing changed"]
    bad = await run_cli(env, "feedback", car.id, "useless", "--user", cube)
    assert bad.code == 2, bad.text
    errors = [line for line in bad.err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "'useless' is not one of 'wrong', 'outdated'" in errors[0]




async def test_feedback_replayed_from_the_log_rebuilds_identical_stores(live: Pipeline) -> None:
    p, c, cube = live, live.client, "yara"
    await feed(p, cube, "Yara")
    nodes = {n.memory: n for n in await c.get_all(cube, memory_type="LongTermMemory")
             + await c.get_all(cube, memory_type="UserMemory") if not n.metadata.is_derived}
    hiking = next(n for text, n in nodes.items() if "hiking" in text)
    cello = next(n for text, n in nodes.items() if "cello" in text)
    flight = next(n for text, n in nodes.items() if "delayed" in text)
    sister = next(n for text, n in nodes.items() if "nurse" in text)
    await applied(p, await c.feedback(cube, working_copy_id(hiking.id), "wrong", "no"),
                  await c.feedback(cube, cello.id, "outdated", "gave it up"),
                  await c.feedback(cube, flight.id, "irrelevant", query="where is Berlin?"),
                  await c.feedback(cube, flight.id, "irrelevant", query="the client meeting"),
                  await c.feedback(cube, sister.id, "outdated"),
                  await c.feedback(cube, sister.id, "confirmed", "still a nurse"))
    await settle(p, cube)
    before = await export_cube(p.deps.store, cube)
    judged = {n.id: n.metadata for n in before.nodes if n.metadata.feedback is not None}
    assert judged[hiking.id].feedback == "wrong" and judged[hiking.id].status == "archived"
    assert judged[cello.id].valid_until is not None
    assert judged[flight.id].irrelevant_for == ("where is Berlin?", "the client meeting")
    assert judged[sister.id].feedback == "confirmed" and judged[sister.id].valid_until is None
    assert working_copy_id(hiking.id) not in {n.id for n in before.nodes}

    await applied(p, await c.command(DropViews(user_id=cube)))
    assert not (await export_cube(p.deps.store, cube)).nodes
    await replay(p, cube)
    assert view(await export_cube(p.deps.store, cube)) == view(before)
