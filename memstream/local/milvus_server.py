"""Launcher for a local Milvus standalone server: the ``milvus`` package's ``milvus-server``.

The ``milvus`` PyPI package (2.3.5, in the ``dev`` extra) bundles Milvus standalone with an
embedded etcd; tests and benches use it to run the server branch of the Milvus adapter and
several workers against one vector store. Three quirks of that launcher decide the code here:

- the embedded etcd ignores ``--etcd-port`` and listens on 2379/2380 unless the
  ``ETCD_CONFIG_PATH`` environment variable names an etcd config, so every server gets one;
- the launcher waits for its child ``milvus run standalone`` forever, even after the child
  died, so readiness is judged from the child and the proxy, not from the launcher;
- on SIGTERM the launcher exits without stopping the child, so it leads its own process group
  and the whole group is stopped (SIGTERM, wait, SIGKILL), and it gets SIGINT (its own clean
  stop) if the process that started it dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from memstream.sinks.ports import StoreError

LOOPBACK = "127.0.0.1"
LAUNCHER = "milvus-server"
# Every port the launcher's config template exposes; all are given explicitly so that nothing
# falls back to a default another server (or another test session) may hold.
PORT_FLAGS = (
    "proxy-port",
    "proxy-internal-port",
    "etcd-port",
    "root-coord-port",
    "query-coord-port",
    "query-node-port",
    "index-coord-port",
    "index-node-port",
    "data-coord-port",
    "data-node-port",
)
# Runs between spawn and exec: the launcher gets SIGINT (it then stops its child) when the
# thread that started it dies, even by SIGKILL.
_ORPHAN_GUARD = (
    "import ctypes,os,sys;"
    "ctypes.CDLL(None).prctl(1,int(sys.argv[1]));"  # PR_SET_PDEATHSIG
    "os.execv(sys.argv[2],sys.argv[2:])"
)


class MilvusServerError(StoreError):
    """The local Milvus server could not be found, started or stopped."""


def launcher_path() -> Path:
    """``milvus-server`` next to this interpreter (a venv), else on PATH."""
    beside = Path(sys.executable).parent / LAUNCHER
    if beside.exists():
        return beside
    found = shutil.which(LAUNCHER)
    if found is None:
        raise MilvusServerError(
            f"{LAUNCHER} is not installed: pip install 'milvus==2.3.5' (in memstream's dev extra)"
        )
    return Path(found)


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports nobody listens on right now."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, read from /proc."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(not written)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


class MilvusServer:
    """One Milvus standalone on loopback ports, with all its files under ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        startup_timeout_s: float = 180.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    @property
    def uri(self) -> str:
        if self._port is None:
            raise MilvusServerError("the Milvus server is not started")
        return f"http://{LOOPBACK}:{self._port}"

    @property
    def launcher_log(self) -> Path:
        return self.data_dir / "launcher.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, lines: int = 25) -> str:
        """The tails of the launcher's and the server's logs, for error messages."""
        logs = self.data_dir / "logs"
        return "\n".join(
            f"--- {path.name} ---\n{_tail(path, lines)}"
            for path in (self.launcher_log, logs / "milvus-stderr.log", logs / "milvus-stdout.log")
        )

    def start(self) -> str:
        """Start the server and return its URI once it answers; raises with the log tails."""
        if self._proc is not None:
            return self.uri
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(len(PORT_FLAGS) + 1)
        flags = dict(zip(PORT_FLAGS, ports, strict=False))
        peer = ports[-1]
        etcd_config = self.data_dir / "etcd.yaml"
        etcd_config.write_text(
            "name: memstream\n"
            f"listen-client-urls: http://{LOOPBACK}:{flags['etcd-port']}\n"
            f"advertise-client-urls: http://{LOOPBACK}:{flags['etcd-port']}\n"
            f"listen-peer-urls: http://{LOOPBACK}:{peer}\n"
            f"initial-advertise-peer-urls: http://{LOOPBACK}:{peer}\n"
            f"initial-cluster: memstream=http://{LOOPBACK}:{peer}\n"
        )
        argv = [str(launcher_path()), "--data", str(self.data_dir)]
        for flag, port in flags.items():
            argv += [f"--{flag}", str(port)]
        guarded = [sys.executable, "-I", "-S", "-c", _ORPHAN_GUARD, str(int(signal.SIGINT)), *argv]
        env = {**os.environ, "ETCD_CONFIG_PATH": str(etcd_config), "PYTHONUNBUFFERED": "1"}
        with self.launcher_log.open("wb") as log:
            self._proc = subprocess.Popen(  # noqa: S603 - our own launcher, fixed argv
                guarded, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self._port = flags["proxy-port"]
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.uri

    def _wait_ready(self) -> None:
        assert self._proc is not None  # noqa: S101 - start() set it
        deadline = time.monotonic() + self.startup_timeout_s
        seen_server = False
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise MilvusServerError(
                    f"{LAUNCHER} exited with {self._proc.returncode} while starting; "
                    f"logs under {self.data_dir}:\n{self.log_tail()}"
                )
            servers = [p for p in group_members(self._proc.pid) if p != self._proc.pid]
            if servers:
                seen_server = True
            elif seen_server:
                raise MilvusServerError(
                    f"'milvus run standalone' died while starting; logs under {self.data_dir}:"
                    f"\n{self.log_tail()}"
                )
            if seen_server and self._answers():
                return
            time.sleep(0.5)
        raise MilvusServerError(
            f"the Milvus server on {self.uri} did not answer within {self.startup_timeout_s:.0f}s;"
            f" logs under {self.data_dir}:\n{self.log_tail()}"
        )

    def _answers(self) -> bool:
        """The proxy lists collections (its coordinators are up), not just accepts TCP."""
        try:
            client = MilvusClient(uri=self.uri, timeout=2)
        except (MilvusException, OSError):
            return False
        try:
            client.list_collections(timeout=5)
        except (MilvusException, OSError):
            return False
        finally:
            with contextlib.suppress(Exception):
                client.close()
        return True

    def stop(self) -> None:
        """SIGTERM to the launcher's whole group, wait, then SIGKILL: no process is left."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pgid = proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        if not self._wait_gone(proc, self.stop_timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            if not self._wait_gone(proc, 10.0):
                raise MilvusServerError(
                    f"Milvus server group {pgid} survived SIGKILL: {group_members(pgid)}"
                )

    @staticmethod
    def _wait_gone(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the launcher
            if not group_members(proc.pid):
                return True
            time.sleep(0.1)
        return False
