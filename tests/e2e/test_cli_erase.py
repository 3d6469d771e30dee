"""`memstream erase`, run as a user runs it, against an embedded stack under one data dir (a
noida broker, a FalkorDB server, Milvus Lite, a worker in-process): an English and a Chinese
canary written to a cube are, once the command is done, in no file under the data dir and
in no topic read back with the keys that remain — no service restarted — and what the
command printed is what it checked, never the text it erased."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from memstream.topics.events import DumpCube
from tests.e2e.test_erasure import read_everything
from tests.e2e.test_erasure_on_disk import files_holding
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline, sealed_local_pipeline

EN = "Zephyrine keeps her grandmother's brass astrolabe in a violet hatbox."
ZH = "我把祖母的铜制星盘藏在紫色帽盒里，只有泽菲琳知道。"
# Parts that must not survive on their own either (a store may split or index the text).
FRAGMENTS = (EN, ZH, "Zephyrine", "astrolabe", "violet hatbox", "祖母的铜制星盘", "泽菲琳")
KEPT = "Olga waters the ficus on Mondays."


@pytest_asyncio.fixture
async def local(tmp_path: Path) -> AsyncIterator[Pipeline]:
    async for p in sealed_local_pipeline(tmp_path):
        yield p


def erasing_env(p: Pipeline) -> dict[str, str]:
    """The environment of a user of this stack: its broker, graph and data dir, and the key
    directory the worker seals with (the data dir's, as with `memstream up`)."""
    return {**pipeline_env(p), "MEMSTREAM_ERASURE__ENABLED": "true"}


async def write_canaries(p: Pipeline) -> None:
    c = p.client
    chat = await c.add_messages("zeph", [{"role": "user", "content": EN},
                                         {"role": "user", "content": ZH}])
    added = await c.add_memories("zeph", [EN])
    kept = await c.add_memories("olga", [KEPT])
    for token in (chat, added, kept):
        await c.wait_applied(token, timeout=120)
    await c.schedule("zeph", "query", "Where is the astrolabe kept?")  # scheduler state
    assert [h for h in await c.search("zeph", "astrolabe hatbox")]


def readable_canaries(records: list[tuple[str, bytes, str]]) -> list[str]:
    return [topic for topic, raw, text in records
            if any(f in text or f.encode() in raw for f in FRAGMENTS)]


async def olga_kept(p: Pipeline) -> bool:
    nodes = await p.deps.store.graph.all_of_type("olga", "LongTermMemory")
    nodes += await p.deps.store.graph.all_of_type("olga", "UserMemory")
    return any("ficus" in n.memory for n in nodes)


@pytest.mark.slow
async def test_erase_leaves_no_canary_in_any_file_or_topic_and_prints_its_checks(
        local: Pipeline) -> None:
    p, data, env = local, local.settings.data_dir, erasing_env(local)
    await write_canaries(p)
    assert any("falkordb" in f for f in files_holding(data, FRAGMENTS))  # the scan sees them
    assert readable_canaries(await read_everything(p))  # and the log holds them, sealed

    declined = await run_cli(env, "erase", "--user", "zeph", stdin="n\n")
    assert declined.code == 1 and "Aborted" in declined.err, declined.text
    assert "cube 'zeph':" in declined.out and "olga" not in declined.out
    assert await p.deps.store.graph.count_by_type("zeph", status=None)  # nothing erased

    erased = await run_cli(env, "erase", "--user", "zeph", stdin="y\n")
    assert erased.code == 0, erased.text
    out = erased.out
    for line in ("ok      graph: 0 nodes (0 memories, 0 working-memory entries) and 0 edges",
                 "ok      vectors: 0 of cube 'zeph' left",
                 "ok      embedding cache: 0 entries of cube 'zeph' left",
                 "ok      reads: the worker answers that cube 'zeph' holds 0 memories",
                 "ok      keys: the data key of cube 'zeph'",
                 "ok      log: ", "none readable",
                 "ok      scheduler state: ",
                 "ok      files: none of the ", "holds any of 3 sampled texts",
                 "erased 1 cube of user 'zeph' and checked it"):
        assert line in out, out
    assert "FAILED" not in out
    assert not [f for f in FRAGMENTS if f in erased.text]  # never prints what it erased

    assert files_holding(data, FRAGMENTS) == {}  # no service restarted
    records = await read_everything(p)
    assert readable_canaries(records) == []
    assert any(t.endswith("conversations") for t, _, _ in records)  # the log is still there
    assert await olga_kept(p)

    again = await run_cli(env, "erase", "--user", "zeph", "--yes")
    assert again.code == 0 and "nothing to erase" in again.out, again.text


async def test_backup_drop_erases_as_erase_does_and_says_what_it_leaves_behind(
        local: Pipeline, tmp_path: Path) -> None:
    p, data, env = local, local.settings.data_dir, erasing_env(local)
    await write_canaries(p)
    backups = tmp_path / "backups"
    dropped = await run_cli(env, "backup", str(backups), "--user", "zeph", "--drop")
    assert dropped.code == 0, dropped.text
    assert "then erased it everywhere:" in dropped.out
    assert "ok      keys: " in dropped.out and "FAILED" not in dropped.out
    assert f"left behind: {backups} holds the cube's backups" in dropped.out
    assert files_holding(data, FRAGMENTS) == {}
    assert readable_canaries(await read_everything(p)) == []
    (backup,) = backups.glob("*.json")
    assert EN in backup.read_text(encoding="utf-8")  # what it left behind, as it said
    restored = await run_cli(env, "restore", str(backups))
    assert restored.code == 0, restored.text
    assert [h for h in await p.client.search("zeph", "astrolabe hatbox")]


async def test_a_check_that_fails_is_reported_and_exits_non_zero(local: Pipeline) -> None:
    """A dump the user wrote into the data dir is not the stores' to rewrite: the file check
    names it, the command exits 1, and the other checks are still made and printed."""
    p, data = local, local.settings.data_dir
    await write_canaries(p)
    dump = data / "exports" / "zeph.json"
    token = await p.client.command(DumpCube(user_id="zeph", path=str(dump)))
    await p.client.wait_applied(token, timeout=60)
    assert EN in dump.read_text(encoding="utf-8")
    result = await run_cli(erasing_env(p), "erase", "--user", "zeph", "--cube", "zeph", "--yes")
    assert result.code == 1, result.text
    assert "FAILED  files: 1 file under " in result.out
    assert "still holds a sampled text of cube 'zeph': exports/zeph.json" in result.out
    assert "ok      graph: 0 nodes" in result.out and "ok      log: " in result.out
    assert result.out.count("FAILED") == 1
    assert "erasure not verified: 1 check failed" in result.err
    assert not [f for f in FRAGMENTS if f in result.text]
