"""Process, port and log plumbing for the embedded FalkorDB launcher (``sinks.local``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import BusyLoadingError, RedisError, ResponseError

from memstream.local.processes import pid_alive
from memstream.local.processes import port_in_use as port_taken
from memstream.sinks.ports import StoreError

LOOPBACK = "127.0.0.1"
# FalkorDB reads BOLT_PORT as a signed 16-bit number and silently skips Bolt above this.
MAX_BOLT_PORT = 32767
_READY_GRAPH = "__memstream_ready__"


class FalkorDBServerError(StoreError):
    """The embedded FalkorDB server could not be started, found or stopped."""


def free_bolt_port() -> int:
    """A free loopback port FalkorDB's Bolt listener accepts: it ignores ports above 32767."""
    rng = random.Random()  # noqa: S311  (port choice, not security)
    for _ in range(200):
        port = rng.randint(10_000, MAX_BOLT_PORT)
        if not port_taken(port):
            return port
    raise FalkorDBServerError(f"no free port between 10000 and {MAX_BOLT_PORT} for Bolt")


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


async def ready(port: int, timeout_s: float = 1.0) -> bool:
    """PING answers and the graph module runs a trivial read-only query."""
    client = aioredis.Redis(
        host=LOOPBACK,
        port=port,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),  # the caller polls; the default retries take seconds
    )
    try:
        if not await client.ping():
            return False
        try:
            await client.execute_command(  # type: ignore[no-untyped-call]
                "GRAPH.RO_QUERY", _READY_GRAPH, "RETURN 1"
            )
        except ResponseError as exc:
            # The module answered; a read-only query on a missing graph is refused without
            # creating it, which is all we want to know.
            return "empty key" in str(exc)
        return True
    except (RedisError, OSError):
        return False
    finally:
        await client.aclose()


async def loading(port: int, timeout_s: float = 1.0) -> bool:
    """The server answers but is still replaying its AOF / RDB (``LOADING`` reply)."""
    client = aioredis.Redis(host=LOOPBACK, port=port, socket_timeout=timeout_s,
                            socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))
    try:
        await client.ping()
        return False
    except BusyLoadingError:
        return True
    except (RedisError, OSError):
        return False
    finally:
        await client.aclose()


def cpu_seconds(pid: int) -> float | None:
    """CPU time ``pid`` has used so far (Linux procfs), None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class LoadWatch:
    """Whether a server that does not answer yet still works at loading its data: it
    replies ``LOADING``, or its CPU time advanced since the last look (building its indexes
    it answers nothing at all: ~20 s for 100,000 turns of history)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu = cpu_seconds(pid)

    async def working(self, port: int) -> bool:
        before, self._cpu = self._cpu, cpu_seconds(self.pid)
        if await loading(port):
            return True
        return before is not None and self._cpu is not None and self._cpu > before


def is_redis_server(pid: int) -> bool:
    """Guards against a recycled pid: on Linux the process must be a redis-server."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no procfs (macOS): trust the run file
    except OSError:
        return False
    return b"redis-server" in argv0


def read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


async def terminate(pid: int, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL; reaps our own child."""

    def gone() -> bool:
        return proc.poll() is not None if proc is not None else not pid_alive(pid)

    if gone():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while not gone():
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 5.0
            while not gone() and time.monotonic() < kill_deadline:
                await asyncio.sleep(0.05)
            if not gone():
                raise FalkorDBServerError(f"FalkorDB (pid {pid}) did not exit after SIGKILL")
            return
        await asyncio.sleep(0.05)
