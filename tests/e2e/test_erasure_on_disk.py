"""Erasure on disk: once `delete_cube` (or `delete` of memories) is applied, no byte of the
erased text is left in any file under the data directory — the broker's data file,
FalkorDB's append-only files and RDB snapshot, Milvus Lite's file, the embedding cache —
and no topic yields it to a reader holding the keys.

Everything runs under one data directory of the test's own: a noida broker, a FalkorDB
server, Milvus Lite and a worker in-process. The canaries are an English and a Chinese
sentence; every file's bytes are scanned for their UTF-8.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from memstream.topics.events import DeleteCube, DeleteNodes
from tests.e2e.test_erasure import read_everything
from tests.support.pipeline import Pipeline, sealed_local_pipeline

EN = "Zephyrine keeps her grandmother's brass astrolabe in a violet hatbox."
ZH = "我把祖母的铜制星盘藏在紫色帽盒里，只有泽菲琳知道。"
DELETED = "Ottoline buried the quince jam recipe under the lighthouse stairs."
# Parts that must not survive on their own either (a store may split or index the text).
FRAGMENTS = (EN, ZH, DELETED, "Zephyrine", "astrolabe", "祖母的铜制星盘", "泽菲琳", "Ottoline",
             "quince jam")


def files_holding(root: Path, needles: tuple[str, ...]) -> dict[str, list[str]]:
    """relative path -> the needles whose UTF-8 bytes it contains, over every file."""
    found: dict[str, list[str]] = {}
    encoded = [(n, n.encode()) for n in needles]
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:  # removed while scanning (a store's temporary file)
            continue
        hits = [n for n, raw in encoded if raw in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


@pytest_asyncio.fixture
async def local(tmp_path: Path) -> AsyncIterator[Pipeline]:
    async for p in sealed_local_pipeline(tmp_path):
        yield p


@pytest.mark.slow
async def test_erased_text_is_in_no_file_under_the_data_dir_and_in_no_topic(
        local: Pipeline) -> None:
    p, data = local, local.settings.data_dir
    c = p.client
    chat = await c.add_messages("zeph", [{"role": "user", "content": EN},
                                         {"role": "user", "content": ZH}])
    added = await c.add_memories("zeph", [EN])
    kept = await c.add_memories("olga", ["Olga waters the ficus on Mondays."])
    gone = await c.add_memories("olga", [DELETED])
    for token in (chat, added, kept, gone):
        await c.wait_applied(token, timeout=120)
    assert [h for h in await c.search("zeph", "astrolabe hatbox")]
    before = files_holding(data, FRAGMENTS)
    assert any("falkordb" in f for f in before), before  # the scan sees what stores write
    assert any("milvus" in f for f in before), before

    olga = await p.deps.store.graph.all_of_type("olga", "LongTermMemory")
    olga += await p.deps.store.graph.all_of_type("olga", "UserMemory")
    target = [n.id for n in olga if "Ottoline" in n.memory]
    assert target
    token = await c.command(DeleteNodes(user_id="olga", node_ids=tuple(target)))
    await c.wait_applied(token, timeout=60)
    assert await c.command_failure(token) is None
    token = await c.command(DeleteCube(user_id="zeph"))
    await c.wait_applied(token, timeout=60)
    assert await c.command_failure(token) is None

    left = files_holding(data, FRAGMENTS)
    assert left == {}, f"erased text still on disk: {left}"
    readable = [(t, text) for t, _, text in await read_everything(p)
                if any(f in text for f in (EN, ZH, "Zephyrine", "泽菲琳"))]
    assert readable == [], readable
    # the rest is still there
    assert [n for n in await p.deps.store.graph.all_of_type("olga", "LongTermMemory")
            + await p.deps.store.graph.all_of_type("olga", "UserMemory")
            if "ficus" in n.memory]


async def test_a_delete_redelivered_after_its_nodes_went_still_rewrites_the_files(
        local: Pipeline) -> None:
    """A delete that failed between removing the nodes and rewriting the files is delivered
    again: it finds nothing to remove, and still rewrites them."""
    p, falkordb_files = local, local.settings.data_dir / "falkordb"
    c = p.client
    token = await c.add_memories("olga", [DELETED, "Olga waters the ficus on Mondays."])
    await c.wait_applied(token, timeout=120)
    nodes = await p.deps.store.graph.all_of_type("olga", "LongTermMemory")
    target = [n.id for n in nodes if "Ottoline" in n.memory]
    assert target
    await p.deps.store.delete("olga", target)  # the first delivery's delete, then a failure
    assert files_holding(falkordb_files, (DELETED,))  # before the rewrite, still on disk

    token = await c.command(DeleteNodes(user_id="olga", node_ids=tuple(target)))
    await c.wait_applied(token, timeout=60)
    assert await c.command_failure(token) is None
    assert files_holding(falkordb_files, (DELETED,)) == {}
