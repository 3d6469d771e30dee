"""The data commands of the command line against a real pipeline (broker, FalkorDB, Milvus
Lite, an in-process worker): what a user reads after each one is true."""

from __future__ import annotations

import json
from pathlib import Path

from memstream.topics.registry import CONVERSATIONS
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline

CHAT = [{"session_id": "s1", "messages": [
    {"role": "user", "content": "I'm allergic to peanuts and I love Thai food."},
    {"role": "assistant", "content": "Maybe try green curry without peanuts."},
    {"role": "user", "content": "My brother Leo lives in Montreal and works as a chef."},
]}]
CHINESE = ("我每天早上在家附近的公园里跑步五公里，"
           "然后喝一杯不加糖的绿茶再去上班，这个习惯已经坚持三年了。")


def memory_column(table: str, column: int) -> str:
    """The text of one column of a rich table, its wrapped lines joined again."""
    cells = []
    for line in table.splitlines():
        parts = line.split("│")
        if len(parts) > column + 1:
            cells.append(parts[column + 1].strip())
    return "".join(cells)


async def test_add_search_get_update_delete_and_honest_counts(pipeline: Pipeline,
                                                             tmp_path: Path) -> None:
    env = pipeline_env(pipeline)
    (tmp_path / "chat.json").write_text(json.dumps(CHAT), encoding="utf-8")
    added = await run_cli(env, "add", "chat.json", "--user", "alice", cwd=tmp_path)
    assert added.code == 0, added.text
    graph = pipeline.deps.store.graph
    counts = await graph.count_by_type("alice", status=None)
    # counts say what was added: the statements extracted and the episode, not what the
    # optimizer derives from them (issue #27.5)
    extracted = [n for t in ("LongTermMemory", "UserMemory")
                 for n in await graph.all_of_type("alice", t, status=None)
                 if not n.metadata.is_derived]
    assert extracted
    said = f"{len(extracted)} memor{'y' if len(extracted) == 1 else 'ies'}"
    assert f"added 3 messages in 1 chunk to cube 'alice': {said}, 1 episode\n" in added.out, \
        added.out

    one = await run_cli(env, "add", "--text", "I moved to Lyon last month.", "--user", "lyon")
    assert one.code == 0, one.text
    assert "added 1 message in 1 chunk to cube 'lyon': 1 memory, 1 episode\n" in one.out, one.out

    again = await run_cli(env, "add", "chat.json", "--user", "alice", cwd=tmp_path)
    assert again.code == 0, again.text
    assert "nothing new" in again.out and "added" not in again.out.replace("no memory added", "")
    assert await graph.count_by_type("alice", status=None) == counts

    listed = json.loads((await run_cli(env, "list", "--user", "alice", "--json")).out)
    activated = await graph.count_by_type("alice")
    assert listed["total"] == sum(n for t, n in activated.items() if t != "WorkingMemory")
    assert all(n["metadata"]["memory_type"] != "WorkingMemory" for n in listed["nodes"])

    one = await run_cli(env, "search", "what am I allergic to?", "--user", "alice", "--top-k",
                        "1", "--type", "UserMemory")
    assert one.code == 0, one.text
    assert "1 result for" in one.out and "1 results" not in one.out
    hits = json.loads((await run_cli(env, "search", "allergic", "--user", "alice", "--type",
                                     "UserMemory", "--json")).out)
    peanut = next(h for h in hits if "peanuts" in h["memory"])
    assert peanut["id"] in one.out  # the table shows ids …
    assert peanut["metadata"]["updated_at"][:10] in one.out  # … and dates

    in_session = json.loads((await run_cli(env, "search", "Leo", "--user", "alice",
                                           "--session", "s1", "--json")).out)
    assert in_session and all(h["metadata"]["session_id"] == "s1" for h in in_session)
    assert json.loads((await run_cli(env, "search", "Leo", "--user", "alice", "--session",
                                     "other", "--json")).out) == []
    tagged = json.loads((await run_cli(
        env, "search", "food", "--user", "alice", "--json", "--filter",
        json.dumps({"memory_type": {"!=": "EpisodicMemory"}}))).out)
    assert tagged and all(h["metadata"]["memory_type"] != "EpisodicMemory" for h in tagged)

    shown = await run_cli(env, "get", peanut["id"], "--user", "alice")
    assert shown.code == 0 and "allergic to peanuts" in shown.out and "sources" in shown.out
    missing = await run_cli(env, "get", "no-such-id", "--user", "alice")
    assert missing.code == 2 and "no memory no-such-id in cube 'alice'" in missing.err

    changed = await run_cli(env, "update", peanut["id"], "--user", "alice", "--text",
                            "I'm allergic to peanuts and cashews.", "--tags", "allergy,food")
    assert changed.code == 0, changed.text
    node = await graph.get_node("alice", peanut["id"])
    assert node is not None and node.memory == "I'm allergic to peanuts and cashews."
    assert node.metadata.tags == ("allergy", "food")

    gone = await run_cli(env, "delete", peanut["id"], "--user", "alice")
    assert gone.code == 0 and "deleted 1 memory from cube 'alice'" in gone.out, gone.text
    assert await graph.get_node("alice", peanut["id"]) is None
    twice = await run_cli(env, "delete", peanut["id"], "--user", "alice")
    assert twice.code == 2 and "nothing deleted" in twice.err


async def test_text_stdin_and_documents_and_chinese_is_never_cut(pipeline: Pipeline,
                                                                  tmp_path: Path) -> None:
    env = pipeline_env(pipeline, columns=80)
    text = await run_cli(env, "add", "--text", CHINESE, "--user", "mei")
    assert text.code == 0 and "added 1 message in 1 chunk to cube 'mei'" in text.out, text.text
    piped = await run_cli(env, "add", "-", "--user", "mei", stdin=json.dumps(
        [{"role": "user", "content": "I keep a cat called Mochi."}]))
    assert piped.code == 0 and "added 1 message" in piped.out, piped.text
    (tmp_path / "notes.txt").write_text("The user's passport expires in March 2027. "
                                        "The user renews it at the consulate.", "utf-8")
    doc = await run_cli(env, "add", "notes.txt", "--user", "mei", cwd=tmp_path)
    assert doc.code == 0 and "added document 'notes.txt' to cube 'mei'" in doc.out, doc.text
    found = json.loads((await run_cli(env, "search", "passport", "--user", "mei",
                                      "--json")).out)
    assert any(h["metadata"]["source"] == "file" and "passport" in h["memory"] for h in found)

    table = await run_cli(env, "search", "跑步 绿茶", "--user", "mei", "--type", "UserMemory")
    assert table.code == 0, table.text
    assert max(len(line) for line in table.out.splitlines()) <= 80
    joined = "".join(line.strip() for line in table.out.splitlines())
    assert CHINESE in joined  # wrapped, every character kept
    wide = await run_cli({**env, "COLUMNS": "160"}, "search", "跑步 绿茶", "--user", "mei",
                         "--type", "UserMemory")
    assert CHINESE in memory_column(wide.out, 4)  # the table's memory column, rejoined


async def test_dump_backup_and_dead_letters(pipeline: Pipeline, tmp_path: Path) -> None:
    env = pipeline_env(pipeline)
    unknown = await run_cli(env, "dump", "nobody.json", "--user", "nobody", cwd=tmp_path)
    assert unknown.code == 2 and "cube 'nobody' has no memories" in unknown.err
    assert not (tmp_path / "nobody.json").exists()

    added = await run_cli(env, "add", "--text", "I'm learning the cello.", "--user", "ana")
    assert added.code == 0, added.text
    dumped = await run_cli(env, "dump", "ana.json", "--user", "ana", cwd=tmp_path)
    assert dumped.code == 0, dumped.text
    nodes = json.loads((tmp_path / "ana.json").read_text(encoding="utf-8"))["nodes"]
    copies = [n for n in nodes if n["metadata"]["memory_type"] == "WorkingMemory"]
    assert copies and any("cello" in n["memory"] for n in nodes)
    kept = len(nodes) - len(copies)
    assert f"dumped {kept} {'memory' if kept == 1 else 'memories'} (and {len(copies)} " \
        "working-memory cop" in dumped.out
    backup = await run_cli(env, "backup", str(tmp_path / "backups"), "--user", "ana")
    assert backup.code == 0, backup.text
    files = list((tmp_path / "backups").glob("*.json"))
    assert len(files) == 1 and str(files[0]) in backup.out
    assert await pipeline.deps.store.graph.count_by_type("ana")  # kept: no --drop

    # a record no stage can read is dead-lettered; the operator sees it and can re-drive it
    producer = pipeline.client
    await producer._producer.send_and_wait(  # type: ignore[union-attr]
        CONVERSATIONS.name(pipeline.settings), b"not json at all", key=b"ana")
    letters: dict[str, object] = {}
    for _ in range(60):
        letters = json.loads((await run_cli(env, "dead-letters", "--json")).out)
        if letters["total"]:
            break
    assert letters["total"] == 1
    letter = letters["letters"][0]  # type: ignore[index]
    where = f"{letter['original_topic']}:{letter['original_partition']}:" \
            f"{letter['original_offset']}"
    listed = await run_cli(env, "dead-letters")
    assert where in listed.out and "1 dead letter" in listed.out
    redriven = await run_cli(env, "dead-letters", "redrive", where)
    assert redriven.code == 0 and "re-drove 1 dead letter" in redriven.out, redriven.text
    for _ in range(60):
        letters = json.loads((await run_cli(env, "dead-letters", "--json")).out)
        if letters["total"] == 2:
            break
    assert letters["total"] == 2  # it failed again, as it must: the payload is still bad
    assert (await run_cli(env, "dead-letters", "redrive", "x:0:1")).code == 2


async def test_backup_of_every_cube_after_load_into_another_cube(pipeline: Pipeline,
                                                                 tmp_path: Path) -> None:
    """A cube loaded with ``load --cube`` belongs to the loading user: ``backup`` without
    --user asks for it as that user (not as a user named like the cube), the file records the
    owner, and ``restore`` loads it back as the owner."""
    env = pipeline_env(pipeline)
    added = await run_cli(env, "add", "--text", "I keep bees on my roof.", "--user", "alice")
    assert added.code == 0, added.text
    assert (await run_cli(env, "dump", "alice.json", "--user", "alice", cwd=tmp_path)).code == 0
    loaded = await run_cli(env, "load", "alice.json", "--user", "alice", "--cube", "alice-copy",
                           cwd=tmp_path)
    assert loaded.code == 0, loaded.text
    backup = await run_cli(env, "backup", str(tmp_path / "backups"))
    assert backup.code == 0, backup.text
    assert "backed up 2 cubes" in backup.out and "alice-copy" in backup.out
    files = {json.loads(f.read_text(encoding="utf-8"))["cube_id"]: f
             for f in (tmp_path / "backups").glob("*.json")}
    assert set(files) == {"alice", "alice-copy"}
    copy = json.loads(files["alice-copy"].read_text(encoding="utf-8"))
    assert copy["owner"] == "alice" and any("bees" in n["memory"] for n in copy["nodes"])
    restored = await run_cli(env, "restore", str(tmp_path / "backups"), "--cube", "alice-copy")
    assert restored.code == 0 and "restored cube 'alice-copy'" in restored.out, restored.text



async def _bees(pipeline: Pipeline) -> tuple[dict[str, str], dict[str, object]]:
    """alice's cube with one memory: the CLI's environment and that memory (as JSON)."""
    env = pipeline_env(pipeline)
    added = await run_cli(env, "add", "--text", "I keep bees on my roof.", "--user", "alice")
    assert added.code == 0, added.text
    bees = next(n for n in json.loads((await run_cli(env, "list", "--user", "alice",
                                                     "--json")).out)["nodes"]
                if "bees" in n["memory"] and n["metadata"]["memory_type"] != "EpisodicMemory")
    return env, bees


async def test_update_and_delete_of_an_unknown_id_exit_2_alike(pipeline: Pipeline) -> None:
    """Issue #27.9: an id the cube does not hold is the user's mistake for every write
    command: exit 2, one line naming the id and the cube, nothing changed."""
    env, bees = await _bees(pipeline)
    for args, did in ((["update", "no-such-id", "--text", "changed"], "updated"),
                      (["delete", "no-such-id"], "deleted")):
        unknown = await run_cli(env, *args, "--user", "alice")
        assert unknown.code == 2, unknown.text
        errors = [line for line in unknown.err.splitlines() if line.startswith("Error:")]
        assert errors == [f"Error: no memory no-such-id in cube 'alice'; nothing {did}"], \
            unknown.err
    # the 8-character id `as-of` and `explain` print names the memory for a write too
    node_id = str(bees["id"])
    short = await run_cli(env, "update", node_id[:8], "--user", "alice", "--tags", "bees")
    assert short.code == 0 and f"updated {node_id}" in short.out, short.text


async def test_a_write_the_cube_refuses_says_may_not_write(pipeline: Pipeline) -> None:
    """Issue #27.9: bob may not read alice's cube, so he may not write it; each write
    command says "may not write" (the worker's write check), not its own pre-read's refusal."""
    env, bees = await _bees(pipeline)
    node_id = str(bees["id"])
    for args in (["add", "--text", "Bob was here."], ["update", node_id, "--text", "x"],
                 ["delete", node_id]):
        refused = await run_cli(env, *args, "--user", "bob", "--cube", "alice")
        assert refused.code == 1, refused.text
        assert "user 'bob' may not write cube 'alice'" in refused.err, refused.err
        assert "may not read" not in refused.text and "Traceback" not in refused.text
    kept = await pipeline.deps.store.graph.get_node("alice", node_id)
    assert kept is not None and kept.memory == "I keep bees on my roof."


async def test_text_piped_to_add_dash_is_one_user_message(pipeline: Pipeline) -> None:
    """Issue #27.9: ``echo … | memstream add -`` adds one user message (as --text does);
    --doc makes it a document."""
    env = pipeline_env(pipeline)
    piped = await run_cli(env, "add", "-", "--user", "carol",
                          stdin="I moved to Lyon last month.\n")
    assert piped.code == 0, piped.text
    assert "added 1 message in 1 chunk to cube 'carol'" in piped.out, piped.out
    nodes = await pipeline.deps.store.graph.find_nodes("carol", limit=100)
    assert nodes and all(n.metadata.source == "conversation" for n in nodes)
    said = [n for n in nodes if n.metadata.memory_type == "EpisodicMemory"]
    assert len(said) == 1 and "I moved to Lyon last month." in said[0].memory, \
        [(n.metadata.memory_type, n.memory) for n in nodes]
    sources = said[0].metadata.sources  # a user message, not a document's chunk
    assert any(s.kind == "message" and s.role == "user" for s in sources), sources
    assert not any(s.kind == "chunk" or s.doc_id for s in sources), sources
    as_doc = await run_cli(env, "add", "-", "--doc", "--user", "dora",
                           stdin="The user's passport expires in March 2027.\n")
    assert as_doc.code == 0 and "added document 'stdin'" in as_doc.out, as_doc.text
