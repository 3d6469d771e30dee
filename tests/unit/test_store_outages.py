"""An unreachable Milvus server or Neo4j is an outage (``StoreUnavailable``): the stage that
meets it pauses instead of dead-lettering its backlog. Real clients against a closed port."""

from __future__ import annotations

import socket

import grpc
import pytest
from pymilvus.exceptions import MilvusException

from memstream.sinks.graph.neo4j import Neo4jGraphStore
from memstream.sinks.ports import StoreUnavailable
from memstream.sinks.vector.errors import store_error
from memstream.sinks.vector.milvus import MilvusVectorStore
from memstream.streams.runtime.stage import is_outage


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_milvus_server_that_refuses_connections_is_an_outage() -> None:
    store = MilvusVectorStore(f"http://127.0.0.1:{closed_port()}", "c", dim=4)
    with pytest.raises(StoreUnavailable) as caught:
        await store.ensure_collection()
    assert is_outage(caught.value)


async def test_neo4j_that_refuses_connections_is_an_outage() -> None:
    graph = Neo4jGraphStore(f"bolt://127.0.0.1:{closed_port()}", "neo4j", "secret", None,
                            connection_acquisition_timeout_s=2, max_transaction_retry_time=0.5)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await graph.get_node("cube", "node")
        assert is_outage(caught.value)
    finally:
        await graph.close()


def test_a_connection_lost_mid_call_is_an_outage_a_refused_request_is_not() -> None:
    """What pymilvus raises after its own retries when the server went away mid-stream (the
    gRPC status as the code), next to an error about the request itself."""
    lost = MilvusException(grpc.StatusCode.UNAVAILABLE, "[upsert] Retry run out of 75 retry "
                           "times, message=failed to connect to all addresses")
    bad = MilvusException(1100, "invalid parameter: dim mismatch")
    assert isinstance(store_error("milvus upsert", lost), StoreUnavailable)
    assert is_outage(store_error("milvus upsert", lost))
    assert not isinstance(store_error("milvus upsert", bad), StoreUnavailable)
    assert not is_outage(store_error("milvus upsert", bad))
