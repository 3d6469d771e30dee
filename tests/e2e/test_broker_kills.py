"""The embedded broker SIGKILLed during ingestion, again and again, and brought back the way
`memstream up` brings it back (``EmbeddedStack.start(detached=True)``, then ``up``'s loss
report): its log never comes back empty or shorter than it was at the previous start; what
it lost is reported by `up` and `status`, and a client waiting on a lost write fails at once.

Real processes: the noida broker, a committing consumer group standing in for the worker's
stages (a real worker cannot be SIGKILLed in-process), the worker's own log-end recorder,
and the client publishing encrypted chat chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from memstream.client.client import ClientError, MemoryClient
from memstream.kafka.log_ends import LogWatch, compare, read_ledger
from memstream.kafka.progress import Progress, WriteLost
from memstream.local.broker import recorded_pid, stop_detached
from memstream.local.broker_snapshot import DATA_FILE, LAST_GOOD, preserve
from memstream.local.log_report import after_start, status_report
from memstream.local.stack import EmbeddedStack
from memstream.topics.events import WriteToken
from memstream.topics.registry import CONVERSATIONS
from memstream.topics.settings import GraphSettings, KafkaSettings, Settings

pytestmark = pytest.mark.slow

ROUNDS = 12
CUBES = [f"cube-{i}" for i in range(5)]


def settings_for(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, graph=GraphSettings(backend="memory"),
                    kafka=KafkaSettings(topic_prefix="kills."))


async def publish(client: MemoryClient, acked: dict[int, WriteToken]) -> None:
    """Chat chunks as fast as the broker acknowledges them; the last token per partition."""
    n = 0
    while True:
        cube = CUBES[n % len(CUBES)]
        token = await client.add_messages(cube, [
            {"role": "user", "content": f"Turn {n}: I booked a table for {n % 7 + 2} people."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": f"第{n}轮：我下周去上海出差。"},
        ])
        acked[token.partition] = token
        n += 1


async def stage(settings: Settings, bootstrap: str) -> None:
    """Consumes conversations in the workers' group and commits, as a stage does."""
    consumer = AIOKafkaConsumer(CONVERSATIONS.name(settings), bootstrap_servers=bootstrap,
                                group_id=settings.app_id, enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=6000,
                                heartbeat_interval_ms=500)
    await consumer.start()
    try:
        while True:
            if await consumer.getmany(timeout_ms=200):
                await consumer.commit()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.stop(), 3)


def saved_ends(broker_dir: Path, topic: str) -> dict[int, int]:
    """End offsets of ``topic`` in the broker's data file: what a restart will load."""
    try:
        saved = json.loads((broker_dir / DATA_FILE).read_bytes())
    except FileNotFoundError:
        return {}
    return {int(pid): int(part["high_watermark"]) for name, spec in saved["topics"]
            if name == topic for pid, part in spec["partitions"]}


async def conversation_ends(settings: Settings, bootstrap: str) -> dict[int, int]:
    watch = LogWatch(settings, bootstrap)
    try:
        seen = await watch.observe([CONVERSATIONS.name(settings)])
    finally:
        await watch.close()
    return seen.ends.get(CONVERSATIONS.name(settings), {})


async def stop_all(*tasks: asyncio.Task[None]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 5)


async def test_sigkilled_broker_never_comes_back_empty_and_losses_are_reported(
        tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "data")
    broker_dir = settings.data_dir / "broker"
    rng = random.Random(27)
    topic = CONVERSATIONS.name(settings)
    floor: dict[int, int] = {}  # the saved log at the previous start: it must never shrink
    acked: dict[int, WriteToken] = {}
    rounds_with_loss = reported = killed_mid_save = restored = 0
    windows: list[float] = []  # seconds of acknowledged writes lost per kill
    rate = 0.0
    try:
        for round_no in range(ROUNDS + 1):
            damaged = {ROUNDS // 2: "missing", ROUNDS - 3: "cut short"}.get(round_no)
            if damaged == "missing":  # a data file lost outright: the copy comes back
                (broker_dir / DATA_FILE).unlink()
            elif damaged:  # cut short (noida would refuse to start): the copy comes back.
                # As a power loss leaves it: the rename reached the disk, half the data not.
                whole = (broker_dir / DATA_FILE).read_bytes()
                (broker_dir / "kafka.tmp").write_bytes(whole[: len(whole) // 2])
                os.replace(broker_dir / "kafka.tmp", broker_dir / DATA_FILE)
            seen_before = read_ledger(settings.data_dir)
            stack = EmbeddedStack(settings)
            await stack.start(detached=True)
            bootstrap = stack.bootstrap
            ends = await conversation_ends(settings, bootstrap)
            saved = saved_ends(broker_dir, topic)  # what this start loaded (a save may follow)
            if round_no:
                assert sum(ends.values()) > 0, f"round {round_no}: the log came back empty"
                for partition, low in floor.items():
                    assert min(ends.get(partition, 0), saved.get(partition, 0)) >= low, (
                        f"round {round_no}: partition {partition} came back with "
                        f"{ends.get(partition, 0)} records (file: {saved.get(partition, 0)}), "
                        f"fewer than the {low} its file held at the previous start")
            if damaged:
                assert stack.restored is not None, f"round {round_no}: nothing restored"
                assert stack.restored.problem.startswith(damaged), stack.restored
                assert (broker_dir / "kafka.damaged.json").exists() == (damaged != "missing")
                restored += 1
            else:
                assert stack.restored is None, stack.restored
            lost = {p: t for p, t in acked.items() if t.offset >= ends.get(p, 0)}
            expected = compare(seen_before, {CONVERSATIONS.name(settings): ends}) \
                if seen_before else []
            expected = [x for x in expected if x.topic == CONVERSATIONS.name(settings)]
            status = await status_report(settings, bootstrap)  # `status`, before `up` reports
            lines = await after_start(settings, bootstrap, stack.restored)  # `up`
            if expected:
                reported += 1
                assert status["lost"], f"round {round_no}: status missed {expected}"
                assert any("the broker lost" in line for line in lines), lines
                for loss in expected:
                    assert any(f"{loss.topic}[{loss.partition}]" in line for line in lines)
            if lost:
                rounds_with_loss += 1
                count = sum(t.offset + 1 - ends.get(p, 0) for p, t in lost.items())
                windows.append(count / rate if rate else 0.0)
                progress = Progress(settings, bootstrap)
                try:
                    for token in lost.values():
                        started = time.monotonic()
                        with pytest.raises(WriteLost, match="the broker lost this write"):
                            await progress.wait_applied(token, timeout=60)
                        assert time.monotonic() - started < 5
                finally:
                    await progress.close()
                async with MemoryClient(settings, bootstrap) as waiting:
                    with pytest.raises(ClientError, match="the broker lost this write"):
                        await waiting.wait_applied(next(iter(lost.values())), timeout=60)
            if round_no == ROUNDS:
                break
            floor = saved
            acked = {}
            client = MemoryClient(settings, bootstrap)
            await client.start()
            watch = LogWatch(settings, bootstrap)
            tasks = [asyncio.create_task(publish(client, acked)),
                     asyncio.create_task(stage(settings, bootstrap)),
                     asyncio.create_task(watch.record_forever(
                         settings.data_dir, settings.kafka.log_watch_s,
                         lambda: preserve(broker_dir)))]
            began = time.monotonic()
            await asyncio.sleep(rng.uniform(0.3, 3.0))  # kill at a varied point
            pid = recorded_pid(broker_dir)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            published = sum(t.offset + 1 - floor.get(p, 0) for p, t in acked.items())
            rate = published / (time.monotonic() - began)
            if (broker_dir / "kafka.tmp").exists():
                killed_mid_save += 1
            await stop_all(*tasks)
            await watch.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 5)
            assert acked, f"round {round_no}: nothing was published before the kill"
    finally:
        await stop_detached(broker_dir)
    print(f"\n{ROUNDS} kills: {rounds_with_loss} lost acknowledged writes, {reported} of them "
          f"seen by the log-end record and reported, {killed_mid_save} killed mid-save, "
          f"{restored} data file restored from {LAST_GOOD}; acknowledged writes lost per kill: "
          f"median {statistics.median(windows):.2f}s, max {max(windows):.2f}s of publishing")
    assert rounds_with_loss > 0, "no kill lost anything: the test exercised no loss"
