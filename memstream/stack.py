"""The embedded services a laptop run needs: a Kafka-protocol broker and FalkorDB.

A configured bootstrap server or graph URI always wins; only what is missing is
started, under ``settings.data_dir``, on free loopback ports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import TracebackType

from sinks.local import FalkorDBServer
from topics.admin import ensure_topics
from topics.broker import LocalBroker, create_broker, resolve_bootstrap, running_broker
from topics.settings import Settings

log = logging.getLogger("memstream.stack")


@dataclass
class EmbeddedStack:
    """Broker + graph server for one data dir; ``start()`` returns once both answer."""

    settings: Settings
    bootstrap: str = field(default="", init=False)
    graph_uri: str = field(default="", init=False)
    broker: LocalBroker | None = field(default=None, init=False)
    falkordb: FalkorDBServer | None = field(default=None, init=False)

    async def start(self, detached: bool = False) -> None:
        """Reuse what is configured or already running from the data dir; start the rest.

        ``detached`` starts services in their own session so they outlive this process
        (``memstream up``); otherwise they stop with ``stop()`` or when this process dies.
        """
        data = self.settings.data_dir
        data.mkdir(parents=True, exist_ok=True)
        if detached and not self.settings.kafka.bootstrap_servers:
            self.bootstrap = await running_broker(data / "broker") or await create_broker(
                self.settings.kafka.embedded_broker, data / "broker").start(detached=True)
        else:
            self.bootstrap, self.broker = await resolve_bootstrap(self.settings, data / "broker")
        if self.settings.graph.uri:
            self.graph_uri = self.settings.graph.uri
        elif (running := await FalkorDBServer.find_running(data / "falkordb")) is not None:
            self.graph_uri = running.uri
        else:
            server = FalkorDBServer(data / "falkordb")
            self.graph_uri = await server.start(detached=detached)
            self.falkordb = None if detached else server
        await ensure_topics(self.settings, self.bootstrap)
        log.info("embedded stack up: kafka %s, graph %s", self.bootstrap, self.graph_uri)

    async def stop(self) -> None:
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
