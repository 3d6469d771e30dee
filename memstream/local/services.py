"""Background services for ``memstream up`` / ``down`` / ``status``.

The broker and FalkorDB launchers keep their own run files in the data dir; the
worker is a ``memstream worker`` child process in its own session that records
``worker.json`` as soon as it runs (state ``starting``), again once it consumes (state
``running``, with the addresses it uses), and removes it when it stops. A record whose
process is gone is stale: ``status`` says so, ``up`` and ``down`` clean it up.
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
from dataclasses import dataclass, field
from pathlib import Path

from memstream.local.broker import last_port, running_broker, stop_detached
from memstream.local.broker import recorded_pid as broker_pid
from memstream.local.falkordb import FalkorDBServer
from memstream.local.processes import pid_alive

WORKER_FILE = "worker.json"
WORKER_LOG = "worker.log"


def worker_file(data_dir: Path) -> Path:
    return data_dir / WORKER_FILE


def write_worker_file(data_dir: Path, bootstrap: str | None = None,
                      graph_uri: str | None = None, state: str = "running",
                      metrics: str | None = None) -> None:
    info = {"pid": os.getpid(), "state": state, "bootstrap": bootstrap, "graph": graph_uri,
            "started": time.time(), "metrics": metrics}
    data_dir.mkdir(parents=True, exist_ok=True)
    path = worker_file(data_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info), encoding="utf-8")
    tmp.replace(path)


def remove_worker_file(data_dir: Path) -> None:
    path = worker_file(data_dir)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()


def recorded_worker(data_dir: Path) -> dict[str, object] | None:
    """What ``worker.json`` says, whether or not that process still runs."""
    try:
        info: dict[str, object] = json.loads(worker_file(data_dir).read_text(encoding="utf-8"))
        int(str(info["pid"]))
    except (OSError, ValueError, KeyError):
        return None
    return info


def _is_worker_process(pid: int) -> bool:
    """Alive and (where /proc tells) a memstream worker, not a recycled pid."""
    if not pid_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return False
    return b"worker" in argv and any(a.endswith(b"memstream") for a in argv)


def running_worker(data_dir: Path) -> dict[str, object] | None:
    """The recorded worker if its process still runs (a stale record is removed)."""
    info = recorded_worker(data_dir)
    if info is None:
        return None
    if not _is_worker_process(int(str(info["pid"]))):
        worker_file(data_dir).unlink(missing_ok=True)
        return None
    return info


async def _wait_running(data_dir: Path, pid: int, deadline: float,
                        proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Wait until worker ``pid`` records state ``running``; False if it died or time ran out."""
    while time.monotonic() < deadline:
        info = running_worker(data_dir)
        if info is not None and info.get("pid") == pid and info.get("state", "running") \
                == "running":
            return True
        if (proc.poll() is not None) if proc is not None else not pid_alive(pid):
            return False
        await asyncio.sleep(0.2)
    return False


async def kill_worker(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s`` (at once with 0: no clean stop, so the
    worker commits nothing more); returns once the process is gone."""
    if timeout_s > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            await asyncio.sleep(0.05)


async def wait_for_worker(data_dir: Path, pid: int, timeout_s: float = 120.0) -> bool:
    """A worker another ``up`` started and that is still starting: wait until it consumes."""
    return await _wait_running(data_dir, pid, time.monotonic() + timeout_s)


async def spawn_worker(data_dir: Path, timeout_s: float = 120.0) -> int:
    """Start ``memstream worker`` in the background; return its pid once it consumes.

    A worker that does not get there in time is stopped (never left behind)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / WORKER_LOG).open("ab")
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
        [sys.executable, "-m", "memstream", "worker", "--data-dir", str(data_dir)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    log.close()
    try:
        if await _wait_running(data_dir, proc.pid, time.monotonic() + timeout_s, proc):
            return proc.pid
    except asyncio.CancelledError:  # the caller gave up (``up`` whose FalkorDB failed)
        await kill_worker(proc.pid, timeout_s=10.0)
        proc.wait()
        raise
    if proc.poll() is not None:
        tail = (data_dir / WORKER_LOG).read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError("the worker exited during startup:\n" + "\n".join(tail))
    await kill_worker(proc.pid, timeout_s=10.0)
    proc.wait()
    worker_file(data_dir).unlink(missing_ok=True)
    raise RuntimeError(f"the worker did not start within {timeout_s:.0f}s and was stopped; "
                       f"see {data_dir / WORKER_LOG}")


async def stop_worker(data_dir: Path, timeout_s: float = 30.0) -> bool:
    info = running_worker(data_dir)
    if info is None:
        return False
    await kill_worker(int(str(info["pid"])), timeout_s)
    worker_file(data_dir).unlink(missing_ok=True)
    return True


@dataclass
class Status:
    broker: str | None
    graph: str | None
    worker_pid: int | None
    # What was found when something is not running, e.g. "stale state, pid 12 dead".
    notes: dict[str, str] = field(default_factory=dict)


def _stale(pid: int | None, alive: bool, last: str | None) -> str:
    if pid is None:
        return "never started here" if last is None else f"stopped; last at {last}"
    where = f"; last at {last}" if last else ""
    return (f"pid {pid} runs but does not answer{where}" if alive
            else f"stale state, pid {pid} dead{where}")


async def status(data_dir: Path) -> Status:
    """What runs, and for what does not, what its state files said (stale ones are removed)."""
    broker_dir, falkor_dir = data_dir / "broker", data_dir / "falkordb"
    notes: dict[str, str] = {}
    b_pid, f_rec, w_rec = broker_pid(broker_dir), FalkorDBServer.recorded(falkor_dir), \
        recorded_worker(data_dir)
    broker = await running_broker(broker_dir)
    if broker is None:
        port = last_port(broker_dir)
        notes["broker"] = _stale(b_pid, b_pid is not None and pid_alive(b_pid),
                                 f"127.0.0.1:{port}" if port else None)
    falkor = await FalkorDBServer.find_running(falkor_dir)
    if falkor is None:
        f_pid = f_rec[0] if f_rec else None
        port = FalkorDBServer.last_port(falkor_dir)
        if f_rec is not None and FalkorDBServer.still_loading(falkor_dir):
            notes["graph"] = f"pid {f_rec[0]} is loading its data, not answering yet"
        else:
            notes["graph"] = _stale(f_pid, f_pid is not None and pid_alive(f_pid),
                                    f"redis://127.0.0.1:{port}" if port else None)
    worker_pid = None
    if w_rec is not None:
        pid = int(str(w_rec["pid"]))
        if _is_worker_process(pid):
            worker_pid = pid
            if w_rec.get("state") == "starting":
                notes["worker"] = "starting"
        else:
            notes["worker"] = f"stale state, pid {pid} dead"
    return Status(broker=broker, graph=falkor.uri if falkor else None, worker_pid=worker_pid,
                  notes=notes)


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
