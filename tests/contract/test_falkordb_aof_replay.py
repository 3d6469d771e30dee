"""The embedded FalkorDB comes back whole after a stop or a kill (its append-only file replays).

FalkorDB 4.16 crashed replaying a log that mixed queries and effects (docs/durability.md):
the pattern below made it crash in a second, as a bench ingest did after ~4,000 writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from pathlib import Path

import pytest
import redis.asyncio

from memstream.local.falkordb import FalkorDBServer, FalkorDBServerError
from memstream.local.processes import pid_alive

GRAPH = "g"
N = 100
# The last write's slow expression, reduce(s = 0, i IN range(1, SLOW) | s + i), runs for
# ~1.3 s over two changes, far above the effects threshold the mixed log sets. FalkorDB
# decides per write without parameters (those are always logged as queries); at its default
# 0.3 ms a loaded machine may log the two-node create as effects too, and the log then
# replayed without the crash (a CI run). The cut is not the time per change in microseconds:
# with the threshold below, a 0.13 s write of two changes was logged as a query on a fast
# machine and a 0.44 s one as effects, so the slow write is made long enough for any machine.
SLOW = 30_000_000
EFFECTS_THRESHOLD_US = 20_000


def connect(uri: str) -> redis.asyncio.Redis:
    """A client that waits for the slow write's reply (redis-py 8 gives up on a read after
    5 s by default, and a loaded machine takes longer than that)."""
    return redis.asyncio.Redis.from_url(uri, socket_timeout=None)


async def query(client: redis.asyncio.Redis, text: str, **params: object) -> list[list[object]]:
    head = "".join(f"{name}={json.dumps(value)} " for name, value in params.items())
    reply = await client.execute_command(  # type: ignore[no-untyped-call]
        "GRAPH.QUERY", GRAPH, f"CYPHER {head}{text}" if params else text
    )
    rows: list[list[object]] = reply[1] if len(reply) == 3 else []
    return rows


async def write_pattern(client: redis.asyncio.Redis) -> None:
    """Index-driven deletes that free ids out of id order, then a write logged as effects.

    After the first delete and re-create, the index lists nodes in another order than their
    ids; the second delete frees ids in index order, the replay (no index yet) in id order,
    so the next nodes get other ids, and the last write (one change behind a slow
    expression: logged as GRAPH.EFFECT at FalkorDB's default threshold) names a node by id.
    """
    await query(client, "CREATE INDEX FOR (n:M) ON (n.k)")
    await query(client, "UNWIND range(0, $n - 1) AS i CREATE (:M {k: 'a' + toString(i)})", n=N)
    evens = [f"a{i}" for i in range(0, N, 2)]
    await query(client, "MATCH (n:M) WHERE n.k IN $keys DELETE n", keys=evens)
    await query(client, "UNWIND range(0, $n - 1) AS i CREATE (:M {k: 'b' + toString(i)})", n=N // 2)
    rest = [f"a{i}" for i in range(1, N, 2)] + [f"b{i}" for i in range(N // 2)]
    await query(client, "MATCH (n:M) WHERE n.k IN $keys DELETE n", keys=rest)
    await query(client, "CREATE (:M {k: 'c0'})-[:R {w: 1}]->(:M {k: 'c1'})")
    await query(
        client,
        "MATCH (n:M {k: 'c0'})-[r:R]->() WITH n, r,"
        f" reduce(s = 0, i IN range(1, {SLOW}) | s + i) AS slow SET n.v = slow, r.w = 2",
    )


async def read_all(client: redis.asyncio.Redis) -> list[list[object]]:
    return await query(
        client, "MATCH (n:M) OPTIONAL MATCH (n)-[r]->(m) RETURN n.k, n.v, r.w, m.k ORDER BY n.k"
    )


EXPECTED = [[b"c0", SLOW * (SLOW + 1) // 2, 2, b"c1"], [b"c1", None, None, None]]


async def kill(server: FalkorDBServer, sig: signal.Signals) -> None:
    pid = server.pid
    assert pid is not None
    os.kill(pid, sig)
    for _ in range(200):
        if not pid_alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not pid_alive(pid)


@pytest.mark.parametrize("how", ["down", "sigkill"])
async def test_graph_comes_back_after_stop_or_kill(tmp_path: Path, how: str) -> None:
    data = tmp_path / "db"
    server = FalkorDBServer(data)
    await server.start(detached=True)  # as `memstream up` does
    try:
        client = connect(server.uri)
        await write_pattern(client)
        assert await read_all(client) == EXPECTED
        await client.aclose()
        if how == "down":
            assert await FalkorDBServer.stop_running(data)  # what `memstream down` does
        else:
            await kill(server, signal.SIGKILL)
    finally:
        await server.stop()
    async with FalkorDBServer(data) as again:
        client = connect(again.uri)
        assert await read_all(client) == EXPECTED
        await client.aclose()


async def mixed_log(data: Path, sig: signal.Signals) -> FalkorDBServer:
    """A data dir as an older memstream left it: a log mixing queries and effects."""
    server = FalkorDBServer(data)
    await server.start()
    client = connect(server.uri)
    await client.execute_command(  # type: ignore[no-untyped-call]
        "GRAPH.CONFIG", "SET", "EFFECTS_THRESHOLD", EFFECTS_THRESHOLD_US)
    await write_pattern(client)
    await client.save()  # a snapshot on disk, whatever the stop
    await client.aclose()
    await logged_as_mixed(data)
    await kill(server, sig)  # SIGTERM: redis saves its snapshot, as the old stop did
    await server.stop()
    return server


async def logged_as_mixed(data: Path, timeout: float = 10.0) -> None:
    """Until the append-only file on disk holds the pattern as the crash needs it: every write
    as a query but the last, logged as effects. Redis may hold back its write to the file
    while an earlier fsync is slow (a busy disk), and a kill then takes the tail with it."""
    deadline = time.monotonic() + timeout
    logged: list[bytes] = []
    while time.monotonic() < deadline:
        logged = [
            kind
            for part in sorted((data / "appendonlydir").glob("*.incr.aof"))
            for kind in re.findall(rb"GRAPH\.(QUERY|EFFECT)", part.read_bytes())
        ]
        if logged and logged[-1] == b"EFFECT":
            break
        await asyncio.sleep(0.05)
    assert logged == [b"QUERY"] * 6 + [b"EFFECT"], f"the log holds {logged}"


async def test_a_crashing_log_after_a_clean_stop_recovers_from_the_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "db"
    await mixed_log(data, signal.SIGTERM)
    with caplog.at_level(logging.WARNING, logger="memstream.local.falkordb"):
        async with FalkorDBServer(data) as recovered:
            client = connect(recovered.uri)
            assert await read_all(client) == EXPECTED
            await client.aclose()
    kept = list(data.glob("appendonlydir.crashed-*"))
    assert len(kept) == 1 and (kept[0] / "appendonly.aof.manifest").is_file()
    assert "crashed replaying its append-only file" in caplog.text and str(kept[0]) in caplog.text
    # The new log replays: a kill after more writes loses nothing.
    server = FalkorDBServer(data)
    await server.start()
    client = connect(server.uri)
    await query(client, "MATCH (n:M {k: 'c1'}) SET n.v = 7")
    await client.aclose()
    await kill(server, signal.SIGKILL)
    await server.stop()
    async with FalkorDBServer(data) as again:
        client = connect(again.uri)
        assert await read_all(client) == [EXPECTED[0], [b"c1", 7, None, None]]
        await client.aclose()


async def test_a_crashing_log_after_a_kill_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "db"
    await mixed_log(data, signal.SIGKILL)
    with pytest.raises(FalkorDBServerError) as raised:
        await FalkorDBServer(data).start()
    message = str(raised.value)
    assert "\n" not in message
    assert "crashes replaying its append-only file" in message
    assert f"move {data / 'appendonlydir'} aside" in message
    assert (data / "appendonlydir").is_dir()  # nothing was moved or deleted on its own
    # Doing what it says starts the server from the last snapshot (here taken after the
    # last write, which the launcher cannot know from a killed run's log).
    (data / "appendonlydir").rename(data / "appendonlydir.crashed")
    async with FalkorDBServer(data) as server:
        client = connect(server.uri)
        assert await read_all(client) == EXPECTED
        await client.aclose()
    assert (data / "appendonlydir" / "appendonly.aof.manifest").is_file()  # logging again
