"""An unreachable Milvus server is an outage (``StoreUnavailable``): the stage that meets it
pauses instead of dead-lettering its backlog. A real client against a closed port."""

from __future__ import annotations

import socket

import pytest

from memstream.sinks.ports import StoreUnavailable
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
