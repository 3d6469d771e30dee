"""An unreachable Neo4j is an outage (``StoreUnavailable``): the stage that meets it pauses
instead of dead-lettering its backlog. A real driver against a closed port."""

from __future__ import annotations

import socket

import pytest

from memstream.sinks.graph.neo4j import Neo4jGraphStore
from memstream.sinks.ports import StoreUnavailable
from memstream.streams.runtime.stage import is_outage


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_neo4j_that_refuses_connections_is_an_outage() -> None:
    graph = Neo4jGraphStore(f"bolt://127.0.0.1:{closed_port()}", "neo4j", "secret", None,
                            connection_acquisition_timeout_s=2, max_transaction_retry_time=0.5)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await graph.get_node("cube", "node")
        assert is_outage(caught.value)
    finally:
        await graph.close()
