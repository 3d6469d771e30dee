"""Which Milvus failures are outages: a stage pauses on those instead of dead-lettering.

pymilvus reports a lost or refused connection as a ``MilvusException`` whose code is the
gRPC status (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``) after its own retries, as a
``ConnectError``/``MilvusUnavailableException``, or (for codes it does not retry) as the raw
``grpc.RpcError``. Milvus Lite runs the same server as a local child process, so a crash
of that process looks the same.
"""

from __future__ import annotations

import grpc
from pymilvus.exceptions import ConnectError, MilvusException, MilvusUnavailableException

from memstream.sinks.ports import StoreError, StoreUnavailable

OUTAGE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                          grpc.StatusCode.CANCELLED})
OUTAGE_TEXT = ("connection refused", "failed to connect", "socket closed", "unavailable",
               "retry timeout", "retry run out", "deadline exceeded", "connection reset")


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says the server cannot be reached."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectError | MilvusUnavailableException | ConnectionError):
            return True
        if isinstance(current, grpc.RpcError) and current.code() in OUTAGE_CODES:
            return True
        if isinstance(current, MilvusException):
            if current.code in OUTAGE_CODES:
                return True
            if any(text in str(current.message).lower() for text in OUTAGE_TEXT):
                return True
        current = current.__cause__ or current.__context__
    return False


def store_error(what: str, exc: BaseException) -> StoreError:
    """A ``StoreUnavailable`` for an outage, a ``StoreError`` otherwise."""
    message = exc.message if isinstance(exc, MilvusException) else str(exc)
    if is_outage(exc):
        return StoreUnavailable(f"{what}: Milvus unreachable: {message}")
    return StoreError(f"{what}: {message}")
