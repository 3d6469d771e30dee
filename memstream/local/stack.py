"""The embedded services a laptop run needs: a Kafka-protocol broker and FalkorDB.

A configured bootstrap server or graph URI always wins; only what is missing is
started, under ``settings.data_dir``. A detached service comes back on the port it had
before (recorded in its data dir), so after a crash the clients still running (a worker)
reconnect by themselves; a free loopback port is used only when that one is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from memstream.kafka.admin import ensure_topics
from memstream.local.broker import (
    LocalBroker,
    create_broker,
    last_port,
    port_in_use,
    resolve_bootstrap,
    running_broker,
)
from memstream.local.broker import recorded_pid as broker_pid
from memstream.local.broker_snapshot import Restored
from memstream.local.falkordb import FalkorDBServer
from memstream.local.processes import pid_alive
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.local.stack")


# How long a restarted service may take to answer (replaying its log after a crash).
RESTART_WAIT_S = 120.0


def _reusable(port: int | None) -> int | None:
    """``port`` if nothing listens there now, else None (a free port will be picked)."""
    if port is not None and port_in_use(port):
        log.warning("port %d of the previous run is taken by another process; using a new "
                    "port (running workers must be restarted: `memstream up` does it)", port)
        return None
    return port


async def until_launched(starting: asyncio.Task[Any], launched: asyncio.Event) -> None:
    """Return once ``launched`` is set or ``starting`` has ended; a start that failed
    raises here."""
    waiting = asyncio.create_task(launched.wait())
    try:
        await asyncio.wait({starting, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if starting.done():
        starting.result()


@dataclass
class EmbeddedStack:
    """Broker + graph server for one data dir; ``start()`` returns once both answer.

    With ``wait_graph=False`` it returns once the graph server is launched (its address
    known), while FalkorDB may still be loading its data: the caller does other start-up
    work meanwhile (a worker loads its vector store) and awaits ``graph_ready()`` before
    it uses the graph. ``launched`` is set at that same point.
    """

    settings: Settings
    bootstrap: str = field(default="", init=False)
    graph_uri: str = field(default="", init=False)
    broker: LocalBroker | None = field(default=None, init=False)
    falkordb: FalkorDBServer | None = field(default=None, init=False)
    # The broker's data file was missing or damaged and its last good copy was put back.
    restored: Restored | None = field(default=None, init=False)
    # Called before a detached broker is (re)started: a client still running from before
    # must be gone by then (see ``memstream up``).
    before_broker_start: Callable[[], Awaitable[None]] | None = None
    wait_graph: bool = True
    launched: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _graph_wait: asyncio.Task[str] | None = field(default=None, init=False)

    async def start(self, detached: bool = False) -> None:
        """Reuse what is configured or already running from the data dir; start the rest.

        ``detached`` starts services in their own session so they outlive this process
        (``memstream up``); otherwise they stop with ``stop()`` or when this process dies.
        """
        data = self.settings.data_dir
        data.mkdir(parents=True, exist_ok=True)
        try:
            # The graph first: FalkorDB loads a long history for longest, the broker starts
            # meanwhile.
            if self.settings.graph.backend == "memory":
                self.graph_uri = "memory://"  # in the worker's own process: nothing to start
            elif self.settings.graph.uri:
                self.graph_uri = self.settings.graph.uri
            else:
                await self._launch_graph(detached)
            if detached and not self.settings.kafka.bootstrap_servers:
                self.bootstrap = await self._detached_broker()
            else:
                self.bootstrap, self.broker = await resolve_bootstrap(self.settings,
                                                                      data / "broker")
            self.launched.set()
            await ensure_topics(self.settings, self.bootstrap)
            if self.wait_graph:
                await self.graph_ready()
        except BaseException:
            await self.stop()  # what this call started attached; detached ones stay
            raise
        log.info("embedded stack up: kafka %s, graph %s", self.bootstrap, self.graph_uri)

    async def graph_ready(self) -> str:
        """Wait until the graph server answers (loading a large graph takes a while);
        returns its URI, the one ``graph_uri`` holds from then on."""
        if self._graph_wait is not None:
            self.graph_uri = await self._graph_wait
        return self.graph_uri

    async def _launch_graph(self, detached: bool) -> None:
        """The data dir's FalkorDB, running or still loading, else a new one; returns once
        its process runs (``graph_ready`` waits for it to answer)."""
        directory = self.settings.data_dir / "falkordb"
        if (found := FalkorDBServer.find_launched(directory)) is not None:
            self.graph_uri = found.uri

            async def wait_found() -> str:
                return (await FalkorDBServer.wait_ready(directory, RESTART_WAIT_S)).uri

            self._graph_wait = asyncio.create_task(wait_found())
            return
        server = FalkorDBServer(directory, _reusable(FalkorDBServer.last_port(directory)),
                                startup_timeout_s=RESTART_WAIT_S)
        if not detached:
            self.falkordb = server  # stopped with this stack, even mid-start
        starting = asyncio.create_task(server.start(detached=detached))
        await until_launched(starting, server.launched)
        self.graph_uri = server.uri
        self._graph_wait = starting

    async def _detached_broker(self) -> str:
        """The broker of the data dir: the running one (waiting while it replays its log
        after a restart), else a new one on its previous port."""
        directory = self.settings.data_dir / "broker"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESTART_WAIT_S
        while True:
            if (bootstrap := await running_broker(directory)) is not None:
                return bootstrap
            pid = broker_pid(directory)
            if pid is None or not pid_alive(pid) or loop.time() > deadline:
                break
            await asyncio.sleep(0.2)  # alive but not answering yet
        if self.before_broker_start is not None:
            await self.before_broker_start()
        broker = create_broker(self.settings.kafka.embedded_broker, directory,
                               _reusable(last_port(directory)))
        bootstrap = await broker.start(detached=True)
        self.restored = broker.restored
        return bootstrap

    async def stop(self) -> None:
        waiting, self._graph_wait = self._graph_wait, None
        if waiting is not None and not waiting.done():
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting
        if self.falkordb is not None:
            await self.falkordb.stop()
            self.falkordb = None
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None

    async def __aenter__(self) -> EmbeddedStack:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
