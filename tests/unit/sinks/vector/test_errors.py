"""Milvus errors as store errors (sinks/vector/errors.py): a connection lost mid-call is an
outage, a refused request is not."""

from __future__ import annotations

import grpc
from pymilvus.exceptions import MilvusException

from memstream.sinks.ports import StoreUnavailable
from memstream.sinks.vector.errors import store_error
from memstream.streams.runtime.stage import is_outage


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
