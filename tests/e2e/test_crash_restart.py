"""Crash recovery the documented way: SIGKILL a part of `memstream up`'s stack mid-stream,
run `memstream up` again, and every published memory ends up stored, with its vector,
nothing dead-lettered, no process left behind. Real processes, one temp data dir each."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from memstream.client.client import ClientError, MemoryClient
from memstream.local.broker import recorded_pid as broker_pid
from memstream.local.falkordb import FalkorDBServer
from memstream.local.processes import pid_alive
from memstream.topics.events import DeadLetter, DumpCube, WriteToken
from memstream.topics.registry import DEAD_LETTER
from memstream.topics.settings import Settings

MEMSTREAM = [sys.executable, "-m", "memstream"]
NAMES = ["Anna Nowak", "Bruno Silva", "Chen Wei", "Dara Okafor", "Emil Berg", "Fatima Zahra",
         "Goran Ilic", "Hana Sato", "Ivan Petrov", "Julia Costa", "Kofi Mensah", "Lena Vogel"]
CITIES = ["Lisbon", "Osaka", "Nairobi", "Quito", "Tallinn", "Perth", "Bergen", "Hanoi"]
HOBBIES = ["chess", "rowing", "pottery", "birdwatching", "fencing", "origami", "karaoke"]


def run(args: list[str], data_dir: Path, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env["COLUMNS"] = "200"
    return subprocess.run([*MEMSTREAM, *args, "--data-dir", str(data_dir)], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def facts(cube: int) -> list[str]:
    """Distinct facts about different people (nothing for the judge to merge)."""
    out = []
    for i, name in enumerate(NAMES):
        out.append(f"{name} lives in {CITIES[(i + cube) % len(CITIES)]}.")
        out.append(f"{name} practises {HOBBIES[(i * 3 + cube) % len(HOBBIES)]} on Sundays.")
    return out


def worker_pid(data_dir: Path) -> int:
    return int(json.loads((data_dir / "worker.json").read_text())["pid"])


def our_processes(data_dir: Path) -> list[str]:
    """Every process whose command line or working directory names ``data_dir``."""
    found = []
    needle = str(data_dir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(entry.name + ": " + cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Path]:
    """`memstream up` in a fresh data dir; `memstream down` afterwards, whatever happened."""
    data_dir = tmp_path / "data"
    up = run(["up"], data_dir)
    assert up.returncode == 0, up.stdout + up.stderr
    pids: dict[str, int | None] = {
        "first broker": broker_pid(data_dir / "broker"),
        "first falkordb": (FalkorDBServer.recorded(data_dir / "falkordb") or (None, 0))[0],
    }
    try:
        yield data_dir
    finally:
        # the ones running now (restarted ones included) must be gone after `down` too
        pids["last broker"] = broker_pid(data_dir / "broker")
        pids["last falkordb"] = (FalkorDBServer.recorded(data_dir / "falkordb") or (None, 0))[0]
        if (data_dir / "worker.json").exists():
            pids["last worker"] = worker_pid(data_dir)
        down = run(["down"], data_dir, timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        for name, pid in pids.items():
            if pid is not None and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"the {name} (pid {pid}) outlived `memstream down`")
    left = our_processes(data_dir)
    assert not left, f"processes left behind: {left}"


async def publish_slowly(client: MemoryClient, cubes: int, pause_s: float) -> list[WriteToken]:
    """Each cube's facts, two at a time, so a kill lands mid-stream; the last token per cube."""
    last: dict[int, WriteToken] = {}
    all_facts = {c: facts(c) for c in range(cubes)}
    for start in range(0, len(all_facts[0]), 2):
        for c in range(cubes):
            last[c] = await client.add_memories(f"crash{c}", all_facts[c][start:start + 2])
        await asyncio.sleep(pause_s)
    return [last[c] for c in range(cubes)]


async def wait_some_applied(client: MemoryClient, data_dir: Path, count: int) -> None:
    """Until at least ``count`` nodes of cube crash0 are stored."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if len(await client.get_all("crash0", timeout=5)) >= count:
                return
        except Exception:  # noqa: BLE001, S110 - no reply yet (worker starting): poll again
            pass
        await asyncio.sleep(0.3)
    pytest.fail(f"fewer than {count} memories stored within 60s; see {data_dir / 'worker.log'}")


async def check_everything_stored(client: MemoryClient, data_dir: Path, cubes: int,
                                  tokens: list[WriteToken]) -> None:
    for token in tokens:
        await client.wait_applied(token, timeout=90)
    for c in range(cubes):
        path = data_dir / f"dump{c}.json"
        applied = await client.command(DumpCube(user_id=f"crash{c}", cube_id=f"crash{c}",
                                                path=str(path)))
        await client.wait_applied(applied, timeout=60)
        dump = json.loads(path.read_text())
        by_text = {n["memory"]: n["id"] for n in dump["nodes"]}
        missing = [f for f in facts(c) if f not in by_text]
        assert not missing, f"cube crash{c}: {len(missing)} facts not stored: {missing[:3]}"
        no_vector = [f for f in facts(c) if by_text[f] not in dump["vectors"]]
        assert not no_vector, f"cube crash{c}: facts without a vector: {no_vector[:3]}"
    letters = [d for d in await client.history(DEAD_LETTER) if isinstance(d, DeadLetter)]
    assert not letters, f"{len(letters)} dead letters, e.g. {letters[0].error}"


async def test_worker_sigkill_then_up_resumes_the_work(stack: Path) -> None:
    settings = Settings(data_dir=stack)
    async with MemoryClient(settings) as client:
        first = worker_pid(stack)
        publishing = asyncio.create_task(publish_slowly(client, cubes=2, pause_s=0.15))
        await wait_some_applied(client, stack, 4)
        os.kill(first, signal.SIGKILL)
        tokens = await publishing  # the rest is published while no worker runs
        while pid_alive(first):
            await asyncio.sleep(0.05)

        status = run(["status"], stack)
        assert f"not running (stale state, pid {first} dead)" in status.stdout, status.stdout
        # a request now reaches no worker (the dead one is still a member of the request
        # group: the embedded broker never drops it): it fails at once, naming the cause
        started = time.monotonic()
        with pytest.raises(ClientError, match=rf"no worker is running: .* no live member "
                           rf"\(its members' processes, pid {first}, are gone\)"):
            await client.search("cube-0", "who lives in Lisbon?")
        assert time.monotonic() - started < 5
        started = time.monotonic()
        up = run(["up"], stack)
        assert up.returncode == 0, up.stdout + up.stderr
        assert time.monotonic() - started < 60, "the restarted worker took over a minute"
        second = worker_pid(stack)
        assert second != first and pid_alive(second)
        await check_everything_stored(client, stack, 2, tokens)
        log = (stack / "worker.log").read_text(errors="replace")
        assert f"its process (pid {first}) is gone" in log  # the dead member was dropped


async def test_falkordb_sigkill_pauses_the_worker_and_up_brings_it_back(stack: Path) -> None:
    settings = Settings(data_dir=stack)
    recorded = FalkorDBServer.recorded(stack / "falkordb")
    assert recorded is not None
    falkor_pid, port = recorded
    worker = worker_pid(stack)
    async with MemoryClient(settings) as client:
        publishing = asyncio.create_task(publish_slowly(client, cubes=2, pause_s=0.15))
        await wait_some_applied(client, stack, 4)
        os.kill(falkor_pid, signal.SIGKILL)
        await asyncio.sleep(4)  # the worker meets the outage and pauses, for some rounds
        status = run(["status"], stack)
        assert f"not running (stale state, pid {falkor_pid} dead" in status.stdout, status.stdout

        up = run(["up"], stack)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"graph redis://127.0.0.1:{port}" in up.stdout  # the same address
        assert "worker already running" in up.stdout
        assert worker_pid(stack) == worker  # not restarted: it reconnected by itself
        tokens = await publishing
        await check_everything_stored(client, stack, 2, tokens)
    log = (stack / "worker.log").read_text(errors="replace")
    assert "paused, a dependency is unreachable" in log
    assert "resumed after a pause" in log


async def test_broker_sigkill_then_up_on_the_same_address_and_the_work_resumes(
    stack: Path,
) -> None:
    settings = Settings(data_dir=stack)
    worker = worker_pid(stack)
    bootstrap = (stack / "broker" / "broker.bootstrap").read_text().strip()
    async with MemoryClient(settings) as client:
        first = await publish_slowly(client, cubes=1, pause_s=0.05)
        for token in first:
            await client.wait_applied(token, timeout=60)
    # noida-db snapshots its log about once a second: a SIGKILL within that window loses
    # records it had acknowledged (README, "Crash recovery"). Kill it once it has saved.
    await asyncio.sleep(3)
    os.kill(broker_pid(stack / "broker") or 0, signal.SIGKILL)
    await asyncio.sleep(3)  # the worker meets the outage
    status = run(["status"], stack)
    assert f"last at {bootstrap}" in status.stdout and "stale state" in status.stdout, \
        status.stdout

    up = run(["up"], stack)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"kafka {bootstrap}" in up.stdout  # the same address
    # the broker may have lost its last second of commits: the old worker is gone before the
    # broker is back (it would commit the positions it remembers), a new one starts over
    assert f"stopped worker pid {worker} before it" in up.stdout, up.stdout
    assert not pid_alive(worker) and worker_pid(stack) != worker
    async with MemoryClient(settings) as client:
        second = await client.add_memories("crash1", facts(1))
        await check_everything_stored(client, stack, 2, [*first, second])
    started = time.monotonic()
    down = run(["down"], stack)
    assert down.returncode == 0 and "stopped: worker, FalkorDB, broker" in down.stdout, \
        down.stdout + down.stderr
    assert time.monotonic() - started < 30, "memstream down took over 30s"


async def test_broker_back_with_less_than_memstream_saw_is_reported_and_waits_fail_at_once(
    stack: Path,
) -> None:
    """The broker restarted with an older log than the one memstream saw (what a SIGKILL in
    its unsaved second does, made certain here by putting an older data file back): `up`
    and `status` say which records are lost, and a client waiting on one fails at once."""
    settings = Settings(data_dir=stack)
    broker_dir = stack / "broker"
    async with MemoryClient(settings) as client:
        for token in await publish_slowly(client, cubes=1, pause_s=0.05):
            await client.wait_applied(token, timeout=60)
        await asyncio.sleep(3)  # saved by noida
        older = (broker_dir / "kafka.json").read_bytes()
        lost = await client.add_memories("crash1", facts(1))
        await client.wait_applied(lost, timeout=60)
    await asyncio.sleep(2)  # seen by the worker's record of the log's ends
    os.kill(broker_pid(broker_dir) or 0, signal.SIGKILL)
    (broker_dir / "kafka.tmp").write_bytes(older)
    os.replace(broker_dir / "kafka.tmp", broker_dir / "kafka.json")

    up = run(["up"], stack)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "the broker lost" in up.stdout, up.stdout
    assert f"memory.items[{lost.partition}]" in up.stdout, up.stdout
    async with MemoryClient(settings) as client:
        started = time.monotonic()
        with pytest.raises(ClientError, match="the broker lost this write"):
            await client.wait_applied(lost, timeout=60)
        assert time.monotonic() - started < 5
    status = run(["status"], stack)
    assert "last restart problem" in status.stdout and "record(s) lost" in status.stdout, \
        status.stdout
    as_json = json.loads(run(["status", "--json"], stack).stdout)
    assert as_json["log"]["last_report"]["losses"], as_json["log"]
