"""The Kafka headers every published record carries: trace context and signature.

Client and workers publish through this one function, so a record's headers never depend
on who sent it: the W3C trace context of the span that produced it (``tracing``)
and, when this process signs, the signature of its user and cube (``security.signing``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel

from memstream.kafka import tracing
from memstream.security.signing import Signer


def headers_for(event: BaseModel, value: bytes, signer: Signer | None,
                trace: Sequence[tuple[str, bytes]] | None = None) -> list[tuple[str, bytes]]:
    """Headers for ``value`` (``event`` encoded). ``trace``: the context to carry (default:
    the current span's)."""
    headers = describe(event)
    headers.extend(tracing.inject() if trace is None else trace)
    user_id, cube_id = getattr(event, "user_id", None), getattr(event, "cube_id", None)
    if signer is not None and isinstance(user_id, str) and isinstance(cube_id, str):
        headers.append(signer.sign(user_id, cube_id, value))
    return headers


CONTENT_TYPE = b"application/json"
SOURCE = b"memstream"


def describe(event: BaseModel) -> list[tuple[str, bytes]]:
    """The headers that say what ``event`` is (CloudEvents' Kafka binding, binary mode)."""
    if isinstance(event, _Named):  # raw bytes re-published: only what is known of them
        return [("content-type", CONTENT_TYPE), ("ce_specversion", b"1.0")]
    name = type(event).__name__
    version = getattr(event, "schema_version", 1)
    headers = [("content-type", CONTENT_TYPE), ("ce_specversion", b"1.0")]
    event_id = getattr(event, "event_id", None)
    if isinstance(event_id, str):
        headers.append(("ce_id", event_id.encode()))
    headers += [("ce_type", f"memstream.{name}.v{version}".encode()), ("ce_source", SOURCE)]
    return headers


def headers_for_payload(value: bytes, signer: Signer | None,
                        fallback: BaseModel) -> list[tuple[str, bytes]]:
    """Headers for raw bytes re-published as they are (a dead letter re-driven): signed for
    the user and cube the payload itself names, else ``fallback``'s."""
    try:
        data = json.loads(value)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("user_id"), str) \
            and isinstance(data.get("cube_id"), str):
        headers = headers_for(_Named(user_id=data["user_id"], cube_id=data["cube_id"]), value,
                              signer)
        if isinstance(data.get("event_id"), str):  # the payload's own id, not _Named's
            headers.insert(2, ("ce_id", data["event_id"].encode()))
        return headers
    return headers_for(fallback, value, signer)


class _Named(BaseModel):
    user_id: str
    cube_id: str
