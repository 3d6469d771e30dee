"""A SIGKILLed worker's partitions go to the two workers that remain, in every group they share.

Three ``memstream worker`` processes share their consumer groups (the stages', the search
lane's, the provenance index's) on the embedded broker; the one holding the most
``memory.items`` partitions is killed outright (no LeaveGroup) while all three work through
a backlog. The broker never expires the dead member; a survivor's reaper removes it, and the
broker bumps the generation at once, answering a survivor's heartbeat or SyncGroup of the
generation before with ILLEGAL_GENERATION. aiokafka used to rejoin under a new member id
then, and the old id, never expired, kept the group from completing a rebalance: nothing
taken over, a survivor listed two or more times (``bench/scale.py``, three workers; here
about two runs in three before the fix, the rest won the race). Here each group settles on
the two survivors, once each, holding every partition the three held, and every fact
published before, during and after is stored once.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from memstream.client.client import MemoryClient
from memstream.history.log_index import index_group, partition_of
from memstream.kafka.members import owner_of
from memstream.local.processes import die_with_parent
from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.topics.events import WriteToken
from memstream.topics.registry import MEMORY_ITEMS, WORKER_INPUTS, consumer_group
from memstream.topics.settings import Settings
from tests.support.pipeline import pipeline_settings

PARTITIONS = 6  # two each for three workers (faust keeps a partition where it is, up to that)
# one cube on each partition: whichever worker dies held some of them
CUBES = [next(f"takeover{c}" for c in itertools.count()
              if partition_of(f"takeover{c}", PARTITIONS) == p) for p in range(PARTITIONS)]
NAMES = ["Ana", "Bram", "Chidi", "Dorota", "Eamon", "Farah", "Goro", "Hedda", "Ilias", "Jun",
         "Kofi", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tamar",
         "Umar", "Vera", "Wanjiru", "Xiomara", "Yusuf", "Zofia", "Aurelio", "Bettina", "Cosmin",
         "Delphine", "Emeka", "Freya", "Gideon", "Hana", "Idris", "Jelena", "Kasper", "Lucia",
         "Milan", "Noor"]
# Facts per cube published just before the kill, and more until the dead member is removed:
# the survivors are busy (committing, handing partitions over slowly) when the broker starts
# a new round, which widens the window in which one of their heartbeats meets the new
# generation. Idle survivors got through more often before the fix.
BACKLOG = 10
PLACES = ["Lisbon", "Osaka", "Nairobi", "Quito", "Tallinn", "Perth", "Bergen", "Hanoi"]
TP = tuple[str, int]


class Member:
    def __init__(self, member_id: str, client_id: str, raw: bytes) -> None:
        self.member_id, self.client_id = member_id, client_id
        owner = owner_of(client_id)
        self.pid = owner[0] if owner else None
        self.partitions: set[TP] = set()
        if raw:
            self.partitions = {(tp.topic, tp.partition) for tp in
                               ConsumerProtocolMemberAssignment.decode(raw).partitions()}

    def __repr__(self) -> str:
        return f"{self.client_id}/{self.member_id[-6:]}:{len(self.partitions)}"


async def describe(admin: AIOKafkaAdminClient, group: str) -> tuple[str, list[Member]]:
    for response in await admin.describe_consumer_groups([group]):
        for g in response.groups:
            return g[2], [Member(m[0], m[1], m[4]) for m in g[5]]
    return "not described", []


def env_of(s: Settings, data_dir: Path) -> dict[str, str]:
    """The environment that gives a ``memstream worker`` process the test's settings."""
    assert s.graph.uri is not None and s.kafka.bootstrap_servers is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    return {**env, "MEMSTREAM_DATA_DIR": str(data_dir), "MEMSTREAM_APP_ID": s.app_id,
            "MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS": s.kafka.bootstrap_servers,
            "MEMSTREAM_KAFKA__TOPIC_PREFIX": s.kafka.topic_prefix,
            "MEMSTREAM_KAFKA__PARTITIONS": str(s.kafka.partitions),
            "MEMSTREAM_KAFKA__SESSION_TIMEOUT_S": str(s.kafka.session_timeout_s),
            "MEMSTREAM_KAFKA__REBALANCE_TIMEOUT_S": str(s.kafka.rebalance_timeout_s),
            "MEMSTREAM_GRAPH__URI": s.graph.uri, "MEMSTREAM_GRAPH__DATABASE": s.graph.database,
            "MEMSTREAM_VECTOR__BACKEND": "memory",
            "MEMSTREAM_REORGANIZE__ENABLED": "false"}


@pytest_asyncio.fixture
async def settings(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                   ) -> AsyncIterator[Settings]:
    s = pipeline_settings(tmp_path / "client", kafka_broker, falkordb_uri,
                          kafka={"partitions": PARTITIONS},
                          vector={"backend": "memory"}, reorganize={"enabled": False})
    yield s
    graph = FalkorDBGraphStore(falkordb_uri, s.graph.database)
    await graph.drop_graph()
    await graph.close()


def launch(s: Settings, data_dir: Path) -> subprocess.Popen[bytes]:
    """``memstream worker`` with ``s``; it gets SIGTERM if this process dies first."""
    data_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "memstream", "worker", "--data-dir", str(data_dir)]
    with (data_dir / "worker.log").open("ab") as log:
        return subprocess.Popen(die_with_parent(argv), env=env_of(s, data_dir),  # noqa: S603
                                stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def running(proc: subprocess.Popen[bytes], data_dir: Path, timeout: float = 120) -> None:
    log = data_dir / "worker.log"
    deadline = time.monotonic() + timeout
    while b"memstream worker running" not in log.read_bytes():
        assert proc.poll() is None, f"the worker exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no worker after {timeout}s: {log.read_text()[-3000:]}"
        await asyncio.sleep(0.3)


async def member_of(admin: AIOKafkaAdminClient, group: str, pid: int) -> bool:
    return any(m.pid == pid for m in (await describe(admin, group))[1])


async def settle(admin: AIOKafkaAdminClient, groups: list[str], pids: list[int],
                 timeout: float) -> dict[str, list[Member]]:
    """Wait until each group is Stable with one member per pid in ``pids`` (a pid twice: two
    members of that process) and each member holds partitions; the members per group."""
    deadline = time.monotonic() + timeout
    while True:
        seen = {g: await describe(admin, g) for g in groups}
        if all(state == "Stable" and sorted(m.pid or 0 for m in members) == sorted(pids)
               and all(m.partitions for m in members) for state, members in seen.values()):
            return {g: members for g, (_, members) in seen.items()}
        assert time.monotonic() < deadline, f"groups not settled after {timeout:.0f}s: {seen}"
        await asyncio.sleep(0.5)


def fact(cube: str, n: int) -> str:
    """The ``n``th fact of ``cube``: about someone else each time, nothing for the merge stage
    to fold together."""
    return f"{NAMES[n]} {cube} lives in {PLACES[(n + CUBES.index(cube)) % len(PLACES)]}."


class Load:
    """Facts sent to every cube, one at a time, and the tokens to wait on."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self.sent: dict[str, list[str]] = {cube: [] for cube in CUBES}
        self.tokens: list[WriteToken] = []

    async def tick(self) -> None:
        """A fact to each cube."""
        n = len(self.sent[CUBES[0]])
        for cube in CUBES:
            self.tokens.append(await self.client.add_memories(cube, [fact(cube, n)]))
            self.sent[cube].append(fact(cube, n))


async def test_a_killed_workers_partitions_go_to_the_two_that_remain(
    settings: Settings, tmp_path: Path
) -> None:
    s, bootstrap = settings, settings.kafka.bootstrap_servers
    assert bootstrap is not None and s.graph.uri is not None
    groups = sorted({consumer_group(s, t) for t in WORKER_INPUTS} | {index_group(s)})
    procs = [launch(s, tmp_path / f"worker{i}") for i in range(3)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await asyncio.gather(*(running(p, tmp_path / f"worker{i}") for i, p in enumerate(procs)))
        await admin.start()
        before = await settle(admin, groups, [p.pid for p in procs], timeout=60)
        held = {g: set().union(*(m.partitions for m in ms)) for g, ms in before.items()}
        items = MEMORY_ITEMS.name(s)
        victim = max(procs, key=lambda p: sum(tp[0] == items for m in before[s.app_id]
                                              if m.pid == p.pid for tp in m.partitions))
        survivors = [p.pid for p in procs if p is not victim]
        async with MemoryClient(s, bootstrap) as client:
            load = Load(client)
            for _ in range(BACKLOG):
                await load.tick()
            victim.send_signal(signal.SIGKILL)  # busy, with records not yet committed
            victim.wait()
            # More work while a survivor's reaper gets to the dead member (within a session
            # timeout), so the survivors are committing when the broker starts a new round.
            deadline = time.monotonic() + 2 * s.kafka.session_timeout_s
            while await member_of(admin, s.app_id, victim.pid) and time.monotonic() < deadline:
                if len(load.sent[CUBES[0]]) < len(NAMES) - 1:
                    await load.tick()
                await asyncio.sleep(0.3)
            after = await settle(admin, groups, survivors, timeout=40)
            for g, members in after.items():
                assert set().union(*(m.partitions for m in members)) == held[g], (
                    f"{g}: {members} hold less than the three did: {sorted(held[g])}")
            await load.tick()  # once they have settled
            deadline = time.monotonic() + 40
            for token in load.tokens:
                await client.wait_applied(token, timeout=max(1.0, deadline - time.monotonic()))
        graph = FalkorDBGraphStore(s.graph.uri, s.graph.database)
        try:
            for cube in CUBES:
                texts = [n.memory for n in
                         await graph.all_of_type(cube, "LongTermMemory", status=None)]
                assert sorted(texts) == sorted(load.sent[cube]), cube
        finally:
            await graph.close()
    finally:
        await admin.close()
        for p in procs:
            stop(p)
