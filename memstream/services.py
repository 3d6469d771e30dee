"""Background services for ``memstream up`` / ``down`` / ``status``.

The broker and FalkorDB launchers keep their own run files in the data dir; the
worker is a ``memstream worker`` child process in its own session that records
``worker.json`` once it consumes, and removes it when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sinks.local import FalkorDBServer
from topics.broker import running_broker, stop_detached
from topics.broker_process import pid_alive

WORKER_FILE = "worker.json"
WORKER_LOG = "worker.log"


def worker_file(data_dir: Path) -> Path:
    return data_dir / WORKER_FILE


def write_worker_file(data_dir: Path, bootstrap: str, graph_uri: str) -> None:
    info = {"pid": os.getpid(), "bootstrap": bootstrap, "graph": graph_uri,
            "started": time.time()}
    path = worker_file(data_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info), encoding="utf-8")
    tmp.replace(path)


def remove_worker_file(data_dir: Path) -> None:
    path = worker_file(data_dir)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()


def running_worker(data_dir: Path) -> dict[str, object] | None:
    """The recorded worker if its process still runs (a stale record is removed)."""
    path = worker_file(data_dir)
    try:
        info: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
        pid = int(str(info["pid"]))
    except (OSError, ValueError, KeyError):
        return None
    if not pid_alive(pid):
        path.unlink(missing_ok=True)
        return None
    return info


async def spawn_worker(data_dir: Path, timeout_s: float = 120.0) -> int:
    """Start ``memstream worker`` in the background; return its pid once it consumes."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / WORKER_LOG).open("ab")
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
        [sys.executable, "-m", "memstream", "worker", "--data-dir", str(data_dir)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = running_worker(data_dir)
        if info is not None and info.get("pid") == proc.pid:
            return proc.pid
        if proc.poll() is not None:
            tail = (data_dir / WORKER_LOG).read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError("the worker exited during startup:\n" + "\n".join(tail))
        await asyncio.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"the worker did not start within {timeout_s:.0f}s; see "
                       f"{data_dir / WORKER_LOG}")


async def stop_worker(data_dir: Path, timeout_s: float = 30.0) -> bool:
    info = running_worker(data_dir)
    if info is None:
        return False
    pid = int(str(info["pid"]))
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    worker_file(data_dir).unlink(missing_ok=True)
    return True


@dataclass
class Status:
    broker: str | None
    graph: str | None
    worker_pid: int | None


async def status(data_dir: Path) -> Status:
    falkor = await FalkorDBServer.find_running(data_dir / "falkordb")
    worker = running_worker(data_dir)
    return Status(
        broker=await running_broker(data_dir / "broker"),
        graph=falkor.uri if falkor else None,
        worker_pid=int(str(worker["pid"])) if worker else None,
    )


async def down(data_dir: Path) -> list[str]:
    """Stop the worker first (it commits its offsets), then FalkorDB, then the broker."""
    stopped = []
    if await stop_worker(data_dir):
        stopped.append("worker")
    if await FalkorDBServer.stop_running(data_dir / "falkordb"):
        stopped.append("FalkorDB")
    if await stop_detached(data_dir / "broker"):
        stopped.append("broker")
    return stopped
