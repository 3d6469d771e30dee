"""Crashes change nothing: SIGKILL the worker (at several points), FalkorDB or the broker
mid-stream, bring the stack back with `memstream up`, and the stores and announcements end
exactly as in an uninterrupted run of the same input — nodes and their fields (timestamps
aside), vectors, edges of every type, the set of `memory.updates` ids — with no dead letter
and every node with its vector. Real processes (`memstream up`), one data dir each."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from memstream.client.client import MemoryClient
from memstream.kafka.progress import Progress
from memstream.local.broker import recorded_pid as broker_pid
from memstream.local.falkordb import FalkorDBServer
from memstream.local.processes import pid_alive
from memstream.topics.events import (
    ConversationChunk,
    DeadLetter,
    DumpCube,
    MemoryUpdate,
    Message,
    ReorganizeEvent,
    WriteToken,
)
from memstream.topics.registry import (
    CONVERSATIONS,
    DEAD_LETTER,
    MEMORY_UPDATES,
    REORGANIZE_HIGH,
    REORGANIZE_LOW,
)
from memstream.topics.settings import Settings
from tests.e2e.test_crash_restart import our_processes, run, worker_pid

CUBES = ("kill-ana", "kill-ben")
T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)
PLACES = ["Lisbon", "Porto", "Kyoto", "Oslo"]
THINGS = ["sourdough bread", "trail running", "jazz piano", "sea kayaking", "oil painting"]
PEOPLE = ["Maria", "Tomas", "Keiko", "Lars"]
TIMESTAMPS_AND_USAGE = {"created_at", "updated_at", "usage"}


def chunks(cube: str) -> list[ConversationChunk]:
    """Three sessions of short chats, the same every run: shared words (tag overlap and
    aggregates), a cause ("so"), sessions in time order (FOLLOWS), a restated fact (merge),
    more than twenty memories (working-memory capacity). Event time is fixed, as it is when
    an application publishes a recorded conversation."""
    salt = CUBES.index(cube)
    out = []
    for n in range(12):
        session = f"{cube}-s{n // 4}"
        place, thing = PLACES[(n + salt) % len(PLACES)], THINGS[(n * 2 + salt) % len(THINGS)]
        person = PEOPLE[(n + 2 * salt) % len(PEOPLE)]
        said = [
            f"I spent the weekend in {place} doing {thing} with {person}.",
            f"My friend {person} teaches {thing} classes in {place} every Tuesday.",
        ]
        if n % 4 == 3:
            said.append(f"The {thing} class in {place} was cancelled, so I stayed home.")
        if n == 7:
            said.append(f"I spent the weekend in {place} doing {thing} with {person} again.")
        at = T0 + timedelta(minutes=7 * n)
        messages = [Message(id=f"{cube}-m{n}-{i}", role="user", content=text,
                            timestamp=at + timedelta(seconds=i)) for i, text in enumerate(said)]
        messages.append(Message(id=f"{cube}-m{n}-a", role="assistant", content="Noted.",
                                timestamp=at + timedelta(seconds=len(said))))
        out.append(ConversationChunk(event_id=f"{cube}-chunk-{n}", user_id=cube,
                                     session_id=session, messages=tuple(messages),
                                     occurred_at=at + timedelta(seconds=30)))
    return out


@dataclass
class Snapshot:
    nodes: dict[str, dict[str, Any]]
    vectors: dict[str, list[float]]
    edges: set[tuple[str, str, str, str]]
    updates: dict[str, str]  # event id -> what it announces
    dead_letters: int


def comparable(node: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in node.get("metadata", {}).items() if k not in TIMESTAMPS_AND_USAGE}
    return {**{k: v for k, v in node.items() if k != "metadata"}, "metadata": meta}


async def publish_all(client: MemoryClient) -> list[WriteToken]:
    tokens = []
    for n in range(12):
        for cube in CUBES:
            tokens.append(await client.publish(CONVERSATIONS, chunks(cube)[n]))
    return tokens


async def updates_count(client: MemoryClient) -> int:
    return sum(1 for u in await client.history(MEMORY_UPDATES) if isinstance(u, MemoryUpdate))


async def settle_and_snapshot(data_dir: Path, tokens: list[WriteToken]) -> Snapshot:
    """Wait until the input is applied and the optimizer is done with it, send each cube an
    `end`, then dump the cubes and read the announcements."""
    settings = Settings(data_dir=data_dir)
    async with MemoryClient(settings) as client:
        for token in tokens:
            await client.wait_applied(token, timeout=180)
        progress = Progress(settings, client.bootstrap)
        try:
            topic = REORGANIZE_HIGH.name(settings)
            for p in range(settings.kafka.partitions):
                end = await progress.end_offset(TopicPartition(topic, p))
                if end:
                    await progress.wait_applied(
                        WriteToken(topic=topic, partition=p, offset=end - 1), timeout=180)
        finally:
            await progress.close()
        for cube in CUBES:
            token = await client.publish(REORGANIZE_LOW, ReorganizeEvent(user_id=cube, op="end"))
            await client.wait_applied(token, timeout=180)
        snap = Snapshot({}, {}, set(), {}, 0)
        for cube in CUBES:
            path = data_dir / f"{cube}.json"
            token = await client.command(DumpCube(user_id=cube, path=str(path)))
            await client.wait_applied(token, timeout=120)
            dump = json.loads(path.read_text())
            for node in dump["nodes"]:
                snap.nodes[node["id"]] = comparable(node)
            snap.vectors.update({k: list(v) for k, v in dump["vectors"].items()})
            snap.edges |= {(e["source"], e["type"], e["target"], e.get("reason") or "")
                           for e in dump["edges"]}
        snap.updates = {u.event_id: f"{u.stage} {u.action} {u.node_id} {list(u.edges)[:2]}"
                        for u in await client.history(MEMORY_UPDATES)
                        if isinstance(u, MemoryUpdate) and u.cube_id in CUBES}
        snap.dead_letters = sum(1 for d in await client.history(DEAD_LETTER)
                                if isinstance(d, DeadLetter))
    return snap


def assert_identical(got: Snapshot, want: Snapshot, may_be_lost: str | None = None) -> None:
    """``may_be_lost``: a prefix of announcements allowed to be missing, or to come as
    records of their own (see the broker test)."""
    assert got.dead_letters == 0, f"{got.dead_letters} dead letters"
    unembedded = [i for i in got.nodes if i not in got.vectors]
    assert not unembedded, f"{len(unembedded)} nodes without a vector, e.g. " + str([
        (got.nodes[i]["metadata"].get("memory_type"), got.nodes[i]["memory"][:40])
        for i in unembedded[:4]])
    missing, extra = want.nodes.keys() - got.nodes.keys(), got.nodes.keys() - want.nodes.keys()
    assert not missing and not extra, f"nodes missing {sorted(missing)[:3]}, extra " \
        f"{[got.nodes[i]['memory'][:60] for i in sorted(extra)[:3]]}"
    differ = [i for i in want.nodes if got.nodes[i] != want.nodes[i]]
    assert not differ, f"{len(differ)} nodes differ, e.g. {got.nodes[differ[0]]} != " \
        f"{want.nodes[differ[0]]}"
    assert got.vectors.keys() == want.vectors.keys()
    for node_id, vector in want.vectors.items():
        assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(
            vector, got.vectors[node_id], strict=True)), f"vector of {node_id} differs"
    assert got.edges == want.edges, f"edges missing {sorted(want.edges - got.edges)[:3]}, " \
        f"extra {sorted(got.edges - want.edges)[:3]}"
    missing_updates = sorted(i for i in want.updates.keys() - got.updates.keys()
                             if may_be_lost is None or not want.updates[i].startswith(may_be_lost))
    extra_updates = sorted(i for i in got.updates.keys() - want.updates.keys()
                           if may_be_lost is None or not got.updates[i].startswith(may_be_lost))
    assert not missing_updates and not extra_updates, \
        f"updates missing {[want.updates[i] for i in missing_updates[:3]]}, extra " \
        f"{[got.updates[i] for i in extra_updates[:3]]}"


def up(data_dir: Path) -> str:
    done = run(["up"], data_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def down(data_dir: Path) -> None:
    done = run(["down"], data_dir, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    left = our_processes(data_dir)
    for line in left:
        os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


async def wait_updates(data_dir: Path, at_least: int) -> None:
    deadline = time.monotonic() + 180
    async with MemoryClient(Settings(data_dir=data_dir)) as client:
        while time.monotonic() < deadline:
            if await updates_count(client) >= at_least:
                return
            await asyncio.sleep(0.2)
    pytest.fail(f"fewer than {at_least} updates within 180s; see {data_dir / 'worker.log'}")


def stack_run(data_dir: Path, crashes: Callable[[Path, int], Awaitable[None]] | None,
              expected_updates: int) -> Snapshot:
    async def go() -> Snapshot:
        async with MemoryClient(Settings(data_dir=data_dir)) as client:
            tokens = await publish_all(client)
        if crashes is not None:
            await crashes(data_dir, expected_updates)
        return await settle_and_snapshot(data_dir, tokens)

    up(data_dir)
    try:
        return asyncio.run(go())
    finally:
        down(data_dir)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    """The uninterrupted run."""
    snap = stack_run(tmp_path_factory.mktemp("reference") / "data", None, 0)
    assert snap.dead_letters == 0 and snap.nodes and snap.updates
    kinds = {e[1] for e in snap.edges}
    # the input exercises what the comparison is about
    assert {"RELATE_TO", "FOLLOWS", "PARENT", "EXTRACTED_FROM"} <= kinds, kinds
    return snap


def test_worker_sigkill_at_three_points_then_up_ends_identical(
    reference: Snapshot, tmp_path: Path,
) -> None:
    async def crashes(data_dir: Path, total: int) -> None:
        for fraction in (0.2, 0.45, 0.7):
            await wait_updates(data_dir, int(total * fraction))
            pid = worker_pid(data_dir)
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                await asyncio.sleep(0.05)
            up(data_dir)
            assert worker_pid(data_dir) != pid

    assert_identical(stack_run(tmp_path / "data", crashes, len(reference.updates)), reference)


def test_falkordb_sigkill_then_up_ends_identical(reference: Snapshot, tmp_path: Path) -> None:
    async def crashes(data_dir: Path, total: int) -> None:
        await wait_updates(data_dir, int(total * 0.4))
        recorded = FalkorDBServer.recorded(data_dir / "falkordb")
        assert recorded is not None
        os.kill(recorded[0], signal.SIGKILL)
        await asyncio.sleep(3)  # the worker meets the outage and pauses
        worker = worker_pid(data_dir)
        assert f"graph redis://127.0.0.1:{recorded[1]}" in up(data_dir)
        assert worker_pid(data_dir) == worker  # it reconnected by itself

    assert_identical(stack_run(tmp_path / "data", crashes, len(reference.updates)), reference)


def test_broker_sigkill_then_up_ends_identical(reference: Snapshot, tmp_path: Path) -> None:
    async def crashes(data_dir: Path, total: int) -> None:
        # the input must be on disk: noida-db saves its log about once a second (README)
        await asyncio.sleep(3)
        await wait_updates(data_dir, int(total * 0.4))
        os.kill(broker_pid(data_dir / "broker") or 0, signal.SIGKILL)
        await asyncio.sleep(2)
        up(data_dir)

    # noida-db loses records it acknowledged in its last unsaved second (README). Every
    # decision the redelivered input makes again is announced again, but a capacity
    # eviction is announced, then carried out: once the items are gone, the redelivery
    # finds nothing over capacity, and an eviction announcement the broker acknowledged and
    # lost stays lost (seen in CI, 2026-11-24: three `removed` of working-memory copies).
    # Evicted working-memory copies ride on the `added` of the memory that pushed them out;
    # when the redelivered batch that evicts them has no such `added` (the broker lost the
    # one that carried them), they come as `removed` records of their own (seen 2026-11-26).
    # Production Kafka does not lose acknowledged records; the stores must still be equal.
    assert_identical(stack_run(tmp_path / "data", crashes, len(reference.updates)), reference,
                     may_be_lost="memory.add removed ")
