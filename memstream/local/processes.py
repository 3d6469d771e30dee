"""Process, port and readiness helpers for the local broker launcher (``topics.broker``).

Kept apart so the launcher reads as policy; everything here is POSIX plumbing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True when binding ``host:port`` fails, i.e. a broker could not listen there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option the brokers set, so a port in TIME_WAIT does not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


async def kafka_ready(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True when a Kafka metadata request to ``bootstrap`` succeeds and names a broker.

    An open TCP port is not enough: the broker must answer the protocol clients speak.
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout_s)
    except (OSError, TimeoutError, ValueError):
        return False  # nothing listening yet: skip the client, which logs every failure
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=max(int(timeout_s * 1000), 100)
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout_s)
        return bool(cluster.get("brokers"))
    except (KafkaError, OSError, TimeoutError):
        return False
    finally:
        await admin.close()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; reaps it first if it is our exited child (a zombie is not alive)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: ask the kernel below
    else:
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped by a parent that never does (in a
    container whose first process is no init, a killed service stays a zombie): it holds no
    port and answers nothing, so it is not running. Linux's /proc; elsewhere False."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the broker's process group (it leads its own session), else the process."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


async def terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL: a clean stop lets noida save its log."""
    _signal_group(pid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while pid_alive(pid):
        if loop.time() >= deadline:
            log.warning("broker pid %s ignored SIGTERM for %.1fs; sending SIGKILL", pid, timeout_s)
            _signal_group(pid, signal.SIGKILL)
            deadline = loop.time() + 5.0
            while pid_alive(pid) and loop.time() < deadline:
                await asyncio.sleep(0.05)
            return
        await asyncio.sleep(0.05)


_PDEATHSIG = sys.platform.startswith("linux")  # prctl(PR_SET_PDEATHSIG) exists there

# Runs in the child between spawn and exec of the server binary. Setting the parent-death
# signal here, instead of in a ``preexec_fn``, keeps Popen on its vfork path: a real fork()
# runs the atfork handlers of libraries loaded in this process (gRPC from Milvus Lite
# restarts its poller thread in the child, which aborts once close_fds closes its epoll fd).
_ORPHAN_GUARD = (
    "import ctypes,os,sys;"
    "ctypes.CDLL(None).prctl(1,int(sys.argv[1]));"  # PR_SET_PDEATHSIG
    "os.execv(sys.argv[2],sys.argv[2:])"
)


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` wrapped so that, on Linux, the kernel sends SIGTERM to the started server when
    the launching thread dies (even by SIGKILL); unchanged elsewhere."""
    if not _PDEATHSIG:
        return argv
    return [sys.executable, "-I", "-S", "-c", _ORPHAN_GUARD, str(int(signal.SIGTERM)), *argv]


def log_tail(path: Path, offset: int = 0, lines: int = 25) -> str:
    """The last lines a broker wrote since ``offset``, colour codes stripped, for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(offset, path.stat().st_size - 8192))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    tail = "\n".join(_ANSI.sub("", text).splitlines()[-lines:])
    return tail or "(log is empty)"


def package_file(package: str, *parts: str) -> Path | None:
    """A file shipped inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location, *parts)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None
