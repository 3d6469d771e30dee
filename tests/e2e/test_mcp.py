"""`memstream mcp` run as an MCP client runs it (a subprocess) and driven with the SDK's own
client: over HTTP against a test pipeline, over stdio against the stack `memstream up` runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextResourceContents

from memstream.agents.memory_tools import Identity, MemoryTools, ToolFailure
from memstream.history.ids import AmbiguousId, NodeNotFound
from memstream.topics.ids import working_copy_id
from tests.fakes.fixtures import free_port
from tests.support.cli import MEMSTREAM, clean_env, pipeline_env
from tests.support.pipeline import Pipeline

TOOLS = {"search_memories", "add_memory", "add_chat_turn", "get_memories", "list_memories",
         "update_memory", "delete_memories", "memory_history", "explain_memory",
         "memory_feedback", "memory_context"}


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured answer; a tool error fails the test with the server's line."""
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    assert isinstance(result.structured_content, dict), text
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return " ".join(getattr(c, "text", "") for c in result.content)


async def read(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents
    assert len(contents) == 1 and isinstance(contents[0], TextResourceContents)
    return contents[0].text


async def wait_for_port(port: int, proc: asyncio.subprocess.Process, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if proc.returncode is not None:
            err = (await proc.stderr.read()).decode() if proc.stderr else ""
            raise AssertionError(f"memstream mcp exited with {proc.returncode}: {err}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise AssertionError(f"memstream mcp did not listen on {port} within {timeout}s")


async def http_server(env: dict[str, str], *args: str) -> AsyncIterator[str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *MEMSTREAM, "mcp", *args, "--http", str(port), env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        await wait_for_port(port, proc, timeout=60)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_mcp_over_http_add_search_get_history_and_the_rest(pipeline: Pipeline) -> None:
    p = pipeline
    # another user's memory in another cube: the server for alice must never show it
    await p.client.wait_applied(await p.client.add_memories(
        "bob", ["Bob is allergic to peanuts."]), timeout=60)
    env = pipeline_env(p)
    async for url in http_server(env, "--user", "alice"):
        async with Client(url) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            for t in tools.values():  # the identity is the server's, never an argument
                assert not {"user_id", "user", "cube_id", "cube"} & set(
                    t.input_schema.get("properties", {})), t.name
                assert len(t.description or "") > 80, t.name  # written for a model to choose

            added = (await call(client, "add_memory", text="The user is allergic to shellfish.",
                                memory_type="UserMemory", tags=["health", "food"]))["stored"]
            assert added["memory"] == "The user is allergic to shellfish."
            assert added["memory_type"] == "UserMemory" and added["tags"] == ["health", "food"]
            turn = await call(client, "add_chat_turn",
                              user_message="I moved to Lyon last month and I work as a nurse.",
                              assistant_message="Welcome to Lyon!", session_id="s1")
            extracted = turn["extracted"]
            assert extracted and any("Lyon" in m["memory"] for m in extracted), turn
            assert all(m["session_id"] == "s1" for m in extracted)

            found = await call(client, "search_memories", query="what is the user allergic to?",
                               top_k=3)
            assert found["results"][0]["id"] == added["id"], found
            assert all("Bob" not in r["memory"] for r in found["results"])
            # a model that writes another user or cube into its arguments changes nothing
            spoofed = await client.call_tool("search_memories", {
                "query": "who is allergic to peanuts?", "user_id": "bob", "cube_id": "bob"})
            assert spoofed.is_error or all(
                "Bob" not in r["memory"] for r in spoofed.structured_content["results"])
            scores = [r["score"] for r in found["results"]]
            assert scores == sorted(scores, reverse=True)
            # min_score: what is shown scores at least that; the rest is counted as dropped
            # (scores are relative ranks that move as the cube changes: no exact value here)
            strict = await call(client, "search_memories", query="what is the user allergic to?",
                                top_k=10, min_score=0.99)
            assert all(r["score"] >= 0.99 for r in strict["results"])
            assert strict["dropped_below_min_score"] >= 1
            assert len(strict["results"]) + strict["dropped_below_min_score"] <= 10
            everything = await call(client, "search_memories",
                                    query="what is the user allergic to?", top_k=10, min_score=0)
            assert everything["dropped_below_min_score"] == 0
            in_session = await call(client, "search_memories", query="where does the user live?",
                                    session_id="s1")
            assert in_session["results"] and all(
                r["session_id"] == "s1" for r in in_session["results"])
            only_user = await call(client, "search_memories", query="allergic",
                                   memory_type="UserMemory", tags=["health"])
            assert [r["id"] for r in only_user["results"]] == [added["id"]]

            # the same search as one block for the prompt, each memory under its id
            block = await call(client, "memory_context", query="what is the user allergic to?",
                               budget=400)
            assert block["ids"][0] == added["id"] and block["unit"] == "chars"
            assert block["context"].startswith(f"#{added['id'][:8]}: The user is allergic")
            assert "allergic to shellfish" in block["context"] and "Bob" not in block["context"]
            assert len(block["context"]) == block["used"] <= 400
            assert block["left_out"] == 0 or block["context"].endswith("did not fit)")
            in_tokens = await call(client, "memory_context", query="where does the user live?",
                                   tokens=150)
            assert in_tokens["unit"] == "tokens" and in_tokens["used"] <= 150
            assert "Lyon" in in_tokens["context"]
            assert "query is empty" in await refused(client, "memory_context", query=" ")
            got = await call(client, "get_memories", memory_ids=[added["id"][:8], "no-such-id"])
            assert [m["id"] for m in got["memories"]] == [added["id"]]
            assert got["not_found"] == ["no-such-id"]  # a prefix of 8 names the memory
            assert got["memories"][0]["sources"] == [{"kind": "manual"}]

            lyon = next(m for m in extracted if "Lyon" in m["memory"])
            why = await call(client, "explain_memory", memory_id=lyon["id"])
            assert any("I moved to Lyon" in s["text"] for s in why["sources"]), why

            updated = await call(client, "update_memory", memory_id=added["id"],
                                 text="The user is allergic to shellfish and to cashews.")
            assert updated["updated"]["memory"].endswith("cashews.")
            history = await call(client, "memory_history", memory_id=added["id"][:8])
            assert history["id"] == added["id"]
            actions = [c["action"] for c in history["changes"]]
            assert actions[0] == "added" and "updated" in actions, history
            assert history["changes"][-1]["memory"].endswith("cashews.")

            listed = await call(client, "list_memories", limit=50)
            assert listed["total"] >= 3 and added["id"] in {m["id"] for m in listed["memories"]}

            working = json.loads(await read(client, "memstream://working-memory"))
            assert any("cashews" in m["memory"] for m in working)
            block = await read(client, "memstream://activation")
            assert "cashews" in block and "Bob" not in block

            line = await refused(client, "update_memory", memory_id="no-such-id", text="x")
            assert "no memory no-such-id" in line
            line = await refused(client, "search_memories", query="   ")
            assert "query is empty" in line
            assert (await call(client, "delete_memories", memory_ids=[added["id"]]))[
                "deleted"] == [added["id"]]
            gone = await call(client, "get_memories", memory_ids=[added["id"]])
            assert gone["not_found"] == [added["id"]]
    # bob's cube was never touched
    assert [n.memory for n in await p.client.get_all("bob", memory_type="LongTermMemory")] == [
        "Bob is allergic to peanuts."]


async def test_the_tools_take_the_ids_and_prefixes_the_command_line_takes(
        pipeline: Pipeline) -> None:
    """Issue #41: get, history and explain resolve an id or an 8-character prefix the same
    way as `memstream get/history/explain` (memstream/history/ids.py); an ambiguous prefix
    fails naming the memories; a working-memory copy has its memory's history."""
    p = pipeline
    swim = "5e1f0c2d-4b3a-5c6d-8e7f-a0b1c2d3e4f5"
    await p.client.wait_applied(await p.client.add_memories("alice", [
        {"memory": "The user plays the violin.", "id": "abcdefgh-0001"},
        {"memory": "The user grows tomatoes.", "id": "abcdefgh-0002"},
        {"memory": "The user swims on Tuesdays.", "id": swim}]), timeout=60)
    tools = MemoryTools(p.client, Identity("alice", "alice"))

    got = await tools.get([swim[:8]])
    assert [m["id"] for m in got["memories"]] == [swim] and got["not_found"] == []
    assert (await tools.history(swim[:8]))["id"] == swim
    why = await tools.explain(swim[:8])
    assert why["id"] == swim and why["memory"] == "The user swims on Tuesdays."
    asks: list[Callable[[], Awaitable[object]]] = [
        lambda: tools.get(["abcdefgh"]), lambda: tools.history("abcdefgh"),
        lambda: tools.explain("abcdefgh"), lambda: tools.delete(["abcdefgh"]),
        lambda: tools.update("abcdefgh", "x", None, None, None)]
    for ask in asks:
        with pytest.raises(AmbiguousId, match=r"'abcdefgh' matches several memories of cube "
                                              r"'alice': abcdefgh-0001, abcdefgh-0002;"):
            await ask()
    with pytest.raises(ToolFailure, match="no memory no-such-id in cube 'alice'"):
        await tools.update("no-such-id", "x", None, None, None)
    with pytest.raises(NodeNotFound, match="no memory no-such-id"):
        await tools.history("no-such-id")

    copy = working_copy_id(swim)  # what the working-memory resource lists
    assert copy in {m["id"] for m in await tools.working_memory()}
    history = await tools.history(copy[:8])
    assert history["id"] == copy and history["copy_of"] == swim
    assert history["changes"][0]["action"] == "added"
    assert history["changes"][0]["memory"] == "The user swims on Tuesdays."
    why = await tools.explain(copy)
    assert why["copy_of"] == swim and [s["kind"] for s in why["lineage"]] == ["copy"]
    assert why["lineage"][0]["from"]["id"] == swim

    # a deleted memory keeps its history, as on the command line
    assert (await tools.delete([swim[:8]]))["deleted"] == [swim]
    assert [c["action"] for c in (await tools.history(swim[:8]))["changes"]][-1] == "deleted"
    # the tools read as their user: one who may not read the cube reads no history either
    bob = MemoryTools(p.client, Identity("bob", "alice"))
    with pytest.raises(ToolFailure, match="may not read cube 'alice'"):
        await bob.history("abcdefgh-0001")


def run(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMSTREAM, *args], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


async def test_mcp_over_stdio_add_search_get_history(pipeline: Pipeline) -> None:
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memstream", "mcp", "--user", "dora"],
                                   env=pipeline_env(pipeline))
    async with Client(server, mode="legacy") as client:  # the initialize handshake
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        added = (await call(client, "add_memory",
                            text="The user keeps bees in a garden in Ghent."))["stored"]
        await call(client, "add_memory", text="The user's sister Ana is a pilot.")
        found = await call(client, "search_memories", query="does the user keep any animals?")
        assert found["results"][0]["id"] == added["id"], found
        got = await call(client, "get_memories", memory_ids=[added["id"]])
        assert got["memories"][0]["memory"] == "The user keeps bees in a garden in Ghent."
        history = await call(client, "memory_history", memory_id=added["id"])
        assert [c["action"] for c in history["changes"]] == ["added"], history
        assert history["changes"][0]["caused_by"].endswith("ExtractedMemory")
        # the agent says a memory is wrong: no search or list shows it again
        sister = (await call(client, "search_memories", query="who is the user's sister?",
                             top_k=1))["results"][0]
        assert "pilot" in sister["memory"]
        said = await call(client, "memory_feedback", memory_id=sister["id"], verdict="wrong",
                          note="Ana is a teacher")
        assert said["memory"]["feedback"] == "wrong"
        again = await call(client, "search_memories", query="who is the user's sister?")
        assert sister["id"] not in {r["id"] for r in again["results"]}
        listed = await call(client, "list_memories", include_archived=True)
        assert sister["id"] not in {m["id"] for m in listed["memories"]}
        line = await refused(client, "memory_feedback", memory_id=added["id"], verdict="meh")
        assert "verdict" in line and "confirmed" in line


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stack `memstream up` runs in a fresh directory; stopped whatever the tests did."""
    directory = tmp_path_factory.mktemp("up")
    try:
        up = run(["up"], directory)
        assert up.returncode == 0, up.stderr + up.stdout
        yield directory
    finally:
        run(["down"], directory)


def stdio_in(directory: Path, user: str) -> StdioServerParameters:
    """`memstream mcp` started in ``directory`` with no MEMSTREAM_* setting: it finds the
    stack as other commands do (the nearest .memstream upwards)."""
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "memstream", "mcp", "--user", user],
                                 cwd=directory, env=clean_env())


async def test_mcp_over_stdio_finds_the_stack_of_memstream_up(stack: Path) -> None:
    (stack / "project" / "src").mkdir(parents=True)
    async with Client(stdio_in(stack / "project" / "src", "carol")) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        added = (await call(client, "add_memory",
                            text="The user keeps bees in a garden in Ghent."))["stored"]
        found = await call(client, "search_memories", query="does the user keep any animals?")
        assert found["results"][0]["id"] == added["id"]
        got = await call(client, "get_memories", memory_ids=[added["id"]])
        assert got["memories"][0]["memory"] == "The user keeps bees in a garden in Ghent."


async def test_mcp_history_on_the_encrypted_log_of_memstream_up(stack: Path) -> None:
    async with Client(stdio_in(stack, "erin")) as client:
        added = (await call(client, "add_memory", text="The user rows on Sundays."))["stored"]
        result = await client.call_tool("memory_history", {"memory_id": added["id"]})
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, text
    assert [c["action"] for c in result.structured_content["changes"]] == ["added"]

def test_mcp_without_a_stack_says_so_in_one_line(tmp_path: Path) -> None:
    result = run(["mcp", "--user", "alice"], tmp_path, timeout=60)
    assert result.returncode == 1
    assert "no broker runs in" in result.stderr and "memstream up" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # stdout belongs to the protocol
